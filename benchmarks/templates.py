"""HDMM's OPT_0 (p-Identity) and OPT_M (weighted marginals) templates against HDMM's figures.

For each workload of ``../shared/anchors/hdmm.md`` that HDMM answers with OPT_0
or OPT_M, and for all 0–3-way marginals of the 14-attribute Adult domain, this
prints dpmm's expected total squared error under pure ε = 1 Laplace noise
(``dpmm.error.expected_error(W, A, PureDP(1))``), its ratio to HDMM's TSE
(goal ≤ 1.00), to measuring the workload's own tables (marginal rows), the
wall time of one best-of-3-restarts optimization (HDMM's "opt s" is for one
restart; wall and CPU seconds) and the peak resident memory of the fresh process
each row runs in (``resource.getrusage``; the interpreter and numpy alone take
about 60 MB of it).

Usage:
    python benchmarks/templates.py [--quick] [--seed 0] [--rows allrange_256,...]

``--quick`` skips allrange_4096 (minutes per restart).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import numpy as np

from dpmm.error import expected_error
from dpmm.linalg import AllRange, Marginals, Matrix, Prefix
from dpmm.privacy import PureDP
from dpmm.strategy.pidentity import optimize_pidentity
from dpmm.strategy.weighted_marginals import optimize_marginal_weights

ADULT_DOMAIN = Path(__file__).resolve().parents[1] / ".." / "shared/data/adult/adult-domain.json"


def _marginals(sizes: list[int], ks: range) -> Marginals:
    sets = [s for k in ks for s in combinations(range(len(sizes)), k)]
    return Marginals(sizes, dict.fromkeys(sets, 1.0))


def _adult() -> Marginals:
    sizes = list(json.loads(ADULT_DOMAIN.read_text()).values())
    return _marginals(sizes, range(4))


# name → (workload, template, HDMM's TSE, HDMM's time for one restart in s)
ROWS: dict[str, tuple[Callable[[], Matrix], str, float | None, float | None]] = {
    "allrange_256": (lambda: AllRange(256), "OPT_0", 2.15102e06, 0.52),
    "allrange_1024": (lambda: AllRange(1024), "OPT_0", 6.47459e07, 18.53),
    "allrange_4096": (lambda: AllRange(4096), "OPT_0", 1.735e09, 1027.50),
    "prefix_1024": (lambda: Prefix(1024), "OPT_0", 94977.5, 18.88),
    "marg2_ten8": (lambda: _marginals([10] * 8, range(2, 3)), "OPT_M", 3.72015e06, 0.38),
    "marg3_ten8": (lambda: _marginals([10] * 8, range(3, 4)), "OPT_M", 2.40412e08, 0.83),
    "marg2_adultlike": (
        lambda: _marginals([9, 16, 7, 15, 6, 5, 2, 2, 42, 41], range(2, 3)),
        "OPT_M",
        1.38106e07,
        5.97,
    ),
    "marg2_bin15": (lambda: _marginals([2] * 15, range(2, 3)), "OPT_M", 2.01516e06, 1549.97),
    "adult14_upto3": (_adult, "OPT_M", None, 1777.0),
}


def run_row(name: str, seed: int) -> dict[str, object]:
    build, template, hdmm_tse, hdmm_seconds = ROWS[name]
    W = build()
    privacy = PureDP(1)
    rng = np.random.default_rng(seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    if template == "OPT_0":
        A, _ = optimize_pidentity(W.gram().dense(), norm=privacy.norm, restarts=3, rng=rng)
    else:
        A, _ = optimize_marginal_weights(W, norm=privacy.norm, restarts=3, rng=rng)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    tse = expected_error(W, A, privacy)
    baseline = expected_error(W, W, privacy) if template == "OPT_M" else None
    return {
        "name": name,
        "template": template,
        "tse": tse,
        "hdmm": hdmm_tse,
        "uniform": baseline,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "hdmm_seconds": hdmm_seconds,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_row_in_fresh_process(name: str, seed: int) -> dict[str, object]:
    """One row in a spawned process, so its peak memory is its own."""
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_row, (name, seed))


def _format(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip allrange_4096")
    parser.add_argument("--seed", type=int, default=0, help="seed of the restarts' generator")
    parser.add_argument("--rows", default=None, help="comma-separated row names")
    args = parser.parse_args()
    names = args.rows.split(",") if args.rows else list(ROWS)
    if args.quick:
        names = [name for name in names if name != "allrange_4096"]
    print(
        "| workload | template | dpmm TSE | HDMM TSE | ratio | vs own tables "
        "| dpmm opt s (3 restarts), wall / CPU | HDMM opt s (1 restart) | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        row = run_row_in_fresh_process(name, args.seed)
        ratio = None if row["hdmm"] is None else row["tse"] / row["hdmm"]
        own = None if row["uniform"] is None else row["tse"] / row["uniform"]
        print(
            f"| `{name}` | {row['template']} | {row['tse']:.6g} | {_format(row['hdmm'], '.6g')} "
            f"| {_format(ratio, '.4f')} | {_format(own, '.4f')} "
            f"| {row['seconds']:.2f} / {row['cpu_seconds']:.2f} "
            f"| {_format(row['hdmm_seconds'], '.2f')} | {row['peak_mb']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
