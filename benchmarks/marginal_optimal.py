"""The marginal-optimal strategy against ResidualPlanner's published optimum and two baselines.

For every row of ``../shared/anchors/residualplanner.md`` (except the RP+ rows)
this prints dpmm's exact total squared error of the selected strategy at
ρ = 1 (``expected_error``, i.e. trace(WᵀW (AᵀA)⁺) / 2 at sensitivity 1), its
ratio to ResidualPlanner's sum-var, and in the same run the two baselines:
*marg-uniform* (every workload marginal measured with equal weight, no
post-processing: Σ cells × σ² with σ² = #marginals / 2) and *marg+LS* (the same
measurements, least squares: ``expected_error(W, W_uniform, ZCDP(1))``).
Selection time is the median of 3 runs; each row runs in its own process so
that its peak RSS (``resource.getrusage``) is its own.

Usage::

    .venv/bin/python benchmarks/marginal_optimal.py            # every row
    .venv/bin/python benchmarks/marginal_optimal.py --quick    # rows under 10⁷ cells
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dpmm.error import expected_error
from dpmm.linalg import Marginals
from dpmm.privacy import ZCDP
from dpmm.strategy.marginal_optimal import marginal_optimal

ADULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "adult"

#: name → (shape source, marginal sizes, RP sum-var, RP marg-uniform, RP marg+LS)
ROWS: dict[str, tuple[object, tuple[int, ...], float, float, float]] = {
    "[10]×8, all 2-way": ((10,) * 8, (2,), 30_351.2, 39_200, 32_774),
    "[10]×8, all 3-way": ((10,) * 8, (3,), 1_091_233, 1_568_000, 1_208_620),
    "[2]×15, all 2-way": ((2,) * 15, (2,), 3_671.04, 22_050, 6_352.5),
    "[2]×15, all 3-way": ((2,) * 15, (3,), 62_250.8, 828_100, 131_040),
    "Adult, all 2-way": ("adult", (2,), 2_994_835, 6_740_233.5, 6_422_734.5),
    "Adult, all 3-way": ("adult", (3,), 1.15516e9, 3.80281e9, 3.51325e9),
    "[10]×20, all ≤3-way": ((10,) * 20, (0, 1, 2, 3), 4.19930e8, 7.8304e8, 5.71899e8),
    "[10]×50, all ≤3-way": ((10,) * 50, (0, 1, 2, 3), 1.13450e11, 2.05869e11, 1.50183e11),
    "[10]×100, all ≤3-way": ((10,) * 100, (0, 1, 2, 3), 7.45615e12, 1.35232e13, 9.86175e12),
}
QUICK = [name for name in ROWS if "≤3-way" not in name or "×20" in name]


def _shape(source: object) -> tuple[int, ...]:
    if source == "adult":
        domain = json.loads((ADULT / "adult-domain.json").read_text())
        return tuple(int(n) for n in domain.values())
    return tuple(source)  # type: ignore[arg-type]


def _run_row(name: str) -> dict[str, float]:
    source, sizes, *_ = ROWS[name]
    shape = _shape(source)
    privacy = ZCDP(1)
    sets = {c: 1.0 for k in sizes for c in itertools.combinations(range(len(shape)), k)}
    start = time.perf_counter()
    W = Marginals(shape, sets)
    build = time.perf_counter() - start
    times = []
    for _ in range(3):
        start = time.perf_counter()
        A = marginal_optimal(W, privacy)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    error = expected_error(W, A, privacy)
    error_time = time.perf_counter() - start
    # W has unit weights: it is the marg-uniform strategy itself.
    uniform_ls = expected_error(W, W, privacy)
    uniform = W.shape[0] * privacy.noise_variance(W.sensitivity(2))
    return {
        "marginals": len(sets),
        "cells": W.shape[0],
        "sum_var": error,
        "sensitivity": A.sensitivity(2),
        "uniform": uniform,
        "uniform_ls": uniform_ls,
        "select": statistics.median(times),
        "error_time": error_time,
        "build": build,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 50- and 100-attribute rows")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one row, JSON out (child process)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(_run_row(args.row)))
        return
    names = QUICK if args.quick else list(ROWS)
    print(
        "| workload | #marginals | #cells | dpmm sum-var | RP sum-var | ratio | "
        "marg-uniform | marg+LS | RP marg+LS | select s | error s | build W s | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        output = subprocess.run(
            [sys.executable, __file__, "--row", name], check=True, capture_output=True, text=True
        ).stdout
        row = json.loads(output.strip().splitlines()[-1])
        _, _, rp, _, rp_ls = ROWS[name]
        print(
            f"| {name} | {row['marginals']:,} | {row['cells']:,} | {row['sum_var']:.6g} | "
            f"{rp:.6g} | {row['sum_var'] / rp:.6f} | {row['uniform']:.6g} | "
            f"{row['uniform_ls']:.6g} | {rp_ls:.6g} | {row['select']:.3f} | "
            f"{row['error_time']:.2f} | {row['build']:.2f} | {row['peak_mb']:.0f} MB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
