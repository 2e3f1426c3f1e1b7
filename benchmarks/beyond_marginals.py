"""The residual method against QuerySmasher's and ResidualPlanner's published numbers.

Every row of ``../shared/anchors/querysmasher.md``: dpmm's sum of query variances
(ρ = 1 zCDP, Gaussian noise, least squares) for ``optimize(W, "residual")``, the
anchor's value and their ratio, the selection time (median of 3) and the peak RSS
of a fresh subprocess per row. Plain-marginal rows also show ResidualPlanner's
closed-form optimum (:func:`sum_variance_optimum`) from the same run, which the
residual method must equal.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/beyond_marginals.py``
(``--rows 0,4`` for some rows; ``--row K`` runs one row and prints JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from dpmm.error import expected_error
from dpmm.linalg import AllRange, Identity, Kron, Matrix, Ones, Prefix, VStack
from dpmm.privacy import ZCDP
from dpmm.strategy import optimize
from dpmm.strategy.marginal_optimal import sum_variance_optimum
from dpmm.strategy.residual import residual_optimum

RHO = ZCDP(1)

#: Largest number of Kron terms whose sum-var is also computed through expected_error.
CHECK_TERMS = 2_000


@dataclass(frozen=True)
class Row:
    name: str
    shape: tuple[int, ...]
    sizes: tuple[int, ...]  # sizes of the attribute sets in the workload
    query: str  # "identity", "prefix" or "range"
    qs_sumvar: float
    qs_seconds: str
    qs_rss_gb: str
    rp_sumvar: float | None = None  # ResidualPlanner's published optimum (marginals)


ROWS = [
    Row(
        "[10]×8 all 2-way marginals",
        (10,) * 8,
        (2,),
        "identity",
        30_351.2,
        "0.4–1.8",
        "0.35",
        30_351.2,
    ),
    Row(
        "[10]×8 all 3-way marginals",
        (10,) * 8,
        (3,),
        "identity",
        1_091_233,
        "1.5–14.6",
        "0.37",
        1_091_233,
    ),
    Row(
        "[2]×15 all 3-way marginals",
        (2,) * 15,
        (3,),
        "identity",
        62_250.8,
        "3.8–31.7",
        "0.37",
        62_250.8,
    ),
    Row(
        "[9,16,7,15,6,5,2,2,42,41] all 3-way",
        (9, 16, 7, 15, 6, 5, 2, 2, 42, 41),
        (3,),
        "identity",
        5_724_163,
        "66",
        "0.43",
        5_724_163,
    ),
    Row("[10]×8 all 2-way prefix", (10,) * 8, (2,), "prefix", 92_684.5, "1.0–15.3", "0.37"),
    Row("[10]×8 all 2-way range", (10,) * 8, (2,), "range", 3_578_941, "1.1–9.6", "0.37"),
    Row(
        "[10]×20 all 1–3-way marginals",
        (10,) * 20,
        (1, 2, 3),
        "identity",
        4.19924e8,
        "12.3",
        "0.73",
    ),
    Row(
        "[10]×20 all ≤3-way (incl. total)",
        (10,) * 20,
        (0, 1, 2, 3),
        "identity",
        4.19930e8,
        "—",
        "—",
        4.19930e8,
    ),
    Row(
        "[10]×50 all 1–3-way marginals", (10,) * 50, (1, 2, 3), "identity", 1.13450e11, "124", "7.7"
    ),
    Row(
        "[10]×60 all 1–3-way marginals",
        (10,) * 60,
        (1, 2, 3),
        "identity",
        3.42051e11,
        "180",
        "13.3",
    ),
]


def build(row: Row) -> Matrix:
    """The workload: one Kron product per attribute set, totals elsewhere."""
    makers = {"identity": Identity, "prefix": Prefix, "range": AllRange}
    factors = {n: makers[row.query](n) for n in set(row.shape)}
    totals = {n: Ones(1, n) for n in set(row.shape)}
    d = len(row.shape)
    terms = [
        Kron([factors[n] if i in chosen else totals[n] for i, n in enumerate(row.shape)])
        for k in row.sizes
        for chosen in itertools.combinations(range(d), k)
    ]
    return VStack(terms)


def run_row(index: int, repeats: int) -> dict:
    row = ROWS[index]
    W = build(row)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        A = optimize(W, "residual", RHO)
        seconds.append(time.perf_counter() - start)
    optimum = residual_optimum(W)
    sumvar = optimum.objective * RHO.noise_variance(1.0)
    result = {
        "queries": W.shape[0],
        "sumvar": sumvar,
        "sensitivity": A.sensitivity(2),
        "seconds": statistics.median(seconds),
        "solved": optimum.solved,
    }
    if len(W.blocks) <= CHECK_TERMS:  # the library's independent trace path
        result["expected_error"] = expected_error(W, A, RHO)
    if row.query == "identity":
        sets = {
            sum(1 << i for i in chosen): 1.0
            for k in row.sizes
            for chosen in itertools.combinations(range(len(row.shape)), k)
        }
        closed = sum_variance_optimum(row.shape, sets)
        result["rp_closed_form"] = closed.objective * RHO.noise_variance(1.0)
    result["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return result


def _format(value: float) -> str:
    return f"{value:,.1f}" if value < 1e7 else f"{value:.6e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--row", type=int, help="run one row and print JSON")
    parser.add_argument("--rows", default=",".join(str(i) for i in range(len(ROWS))))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    if args.row is not None:
        print(json.dumps(run_row(args.row, args.repeats)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(
        "| workload | #queries | dpmm sum-var | QS sum-var | dpmm/QS | RP closed form "
        "(same run) | dpmm select s (median of 3) | QS select s | dpmm peak RSS GB | "
        "QS peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for index in (int(i) for i in args.rows.split(",")):
        row = ROWS[index]
        command = [sys.executable, __file__, "--row", str(index), "--repeats", str(args.repeats)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=args.timeout, check=True
            )
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as failure:
            reason = "timeout" if isinstance(failure, subprocess.TimeoutExpired) else "failed"
            print(
                f"| {row.name} | — | {reason} | {_format(row.qs_sumvar)} | — | — | — | "
                f"{row.qs_seconds} | — | {row.qs_rss_gb} |"
            )
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        closed = result.get("rp_closed_form")
        closed_text = "—" if closed is None else _format(closed)
        print(
            f"| {row.name} | {result['queries']:,} | {_format(result['sumvar'])} | "
            f"{_format(row.qs_sumvar)} | {result['sumvar'] / row.qs_sumvar:.5f} | {closed_text} | "
            f"{result['seconds']:.2f} | {row.qs_seconds} | {result['rss_gb']:.2f} | "
            f"{row.qs_rss_gb} |",
            flush=True,
        )
        checks = [f"sensitivity {result['sensitivity']:.15g}"]
        if "expected_error" in result:
            checks.append(f"expected_error {result['expected_error']:.10g}")
        if closed is not None:
            checks.append(
                f"|dpmm − RP closed form| / RP = {abs(result['sumvar'] / closed - 1):.1e}"
            )
        if row.rp_sumvar is not None:
            checks.append(f"RP published {row.rp_sumvar:.6g}")
        notes.append(f"* {row.name}: " + "; ".join(checks))
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
