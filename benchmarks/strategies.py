"""dpmm's strategy selection against the measured anchors, in one table.

For every row of ../shared/anchors/hdmm.md (pure ε = 1, Laplace) and
../shared/anchors/residualplanner.md (ρ = 1 zCDP, Gaussian, sum of cell variances), and
for hdmm.md's 1-D and Kron workloads under Gaussian noise,
``dpmm.strategy.select_strategy(W, "auto", privacy)`` runs every candidate method in a
fresh process, inside :func:`dpmm.blas_threads.blas_limit` as ``dpmm plan`` and the
release select (BLAS threads that fit the cores not busy elsewhere); the table shows the
best method, its exact total squared error, the ratio to the anchor's measured error
(goal ≤ 1.00 for HDMM, ≤ 1.001 for ResidualPlanner) or to the SVD bound (goal ≤ 1.05 for
the Gaussian rows), the ratio to the SVD bound, the time to build the workload, the
whole ``auto`` selection time (wall clock, and the process's CPU time, which a machine
shared with other jobs inflates less) and the best method's own time, the anchor's
selection time, and the process's peak RSS. With ``--repeat N`` every time is the median
of N fresh processes.

``--family`` instead runs dpmm's own workload family (random unions of 1- to
3-way Kron products over 3–15 attributes, 10⁴–10¹⁸ cells; :mod:`kron_unions`)
and compares ``auto`` with each HDMM template and ``residual``, under ε = 1 and
ρ = 1/2 (:mod:`family_table`); there ``--repeat N`` is the number of runs of
each template (best error, median time; default 3).

Usage:
    python benchmarks/strategies.py [--rows NAME ...] [--skip NAME ...] [--repeat N]
        [--json FILE]
    python benchmarks/strategies.py --family [--seed S] [--workloads N] [--repeat N]
        [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anchors import GAUSSIAN_ROWS, HDMM_ROWS, RP_ROWS, AnchorRow
from family_table import print_family_table

ROWS = HDMM_ROWS + GAUSSIAN_ROWS + RP_ROWS


def _run_row(name: str, queue: mp.Queue) -> None:
    from dpmm.blas_threads import blas_limit
    from dpmm.error import svd_bound
    from dpmm.strategy import select_strategy

    row = next(r for r in ROWS if r.name == name)
    start = time.perf_counter()
    W = row.build()
    build_seconds = time.perf_counter() - start
    start, cpu_start = time.perf_counter(), time.process_time()
    with blas_limit():
        selection = select_strategy(W, "auto", row.privacy)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    bound = svd_bound(W, row.privacy)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(
        {
            "row": row.name,
            "method": selection.chosen.method,
            "strategy": repr(selection.strategy)[:80],
            "error": selection.chosen.error,
            "svd_bound": bound,
            "build_seconds": build_seconds,
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "method_seconds": selection.chosen.seconds,
            "peak_mb": peak_mb,
            "candidates": [c.to_dict() for c in selection.candidates],
        }
    )


def _measure_once(row: AnchorRow) -> dict:
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_run_row, args=(row.name, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


TIMES = ("build_seconds", "seconds", "cpu_seconds", "method_seconds", "peak_mb")


def measure(row: AnchorRow, repeat: int = 1) -> dict:
    """One row, in ``repeat`` fresh processes (so peak memory is the row's own); times are
    the medians, the rest is the first run's (selection is deterministic)."""
    runs = [_measure_once(row) for _ in range(repeat)]
    result = dict(runs[0])
    for key in TIMES:
        result[key] = statistics.median(run[key] for run in runs)
    result["runs"] = repeat
    return result


def _goal(row: AnchorRow, result: dict) -> tuple[str, str]:
    if row.svd_floor_target is not None:
        ratio = result["error"] / result["svd_bound"]
        return f"{ratio:.4f} (bound)", "yes" if ratio <= row.svd_floor_target else "NO"
    ratio = result["error"] / row.anchor_error
    limit = 1.001 if row.anchor == "RP" else 1.0
    return f"{ratio:.4f}", "yes" if ratio <= limit else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", help="only these rows (names as in the table)")
    parser.add_argument("--skip", nargs="*", default=[], help="rows to leave out")
    parser.add_argument(
        "--repeat",
        type=int,
        help="fresh processes per row (median; default 1); with --family, runs of each "
        "template (best error, median time; default 3)",
    )
    parser.add_argument("--json", type=Path, help="also write every candidate's figures here")
    parser.add_argument(
        "--family", action="store_true", help="run the Kron-union family instead of the anchors"
    )
    parser.add_argument("--seed", type=int, help="--family: seed of the workloads (default: fresh)")
    parser.add_argument("--workloads", type=int, default=12, help="--family: workloads to draw")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="--family: seconds for auto, and again for the templates, per workload and privacy",
    )
    args = parser.parse_args()
    if args.family:
        print_family_table(args.seed, args.workloads, args.repeat or 3, args.timeout)
        return
    rows = [r for r in ROWS if (not args.rows or r.name in args.rows) and r.name not in args.skip]
    header = (
        "| row | anchor | best method | TSE | ratio to anchor | goal met | ratio to SVD bound "
        "| build s | auto s | auto CPU s | method s | anchor s | peak MB |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    results = []
    for row in rows:
        result = measure(row, args.repeat or 1)
        results.append(result)
        ratio, met = _goal(row, result)
        anchor_seconds = f"{row.anchor_seconds:g}" if row.anchor_seconds else ""
        print(
            f"| {row.name} | {row.anchor} | {result['method']} | {result['error']:.6g} | {ratio} "
            f"| {met} | {result['error'] / result['svd_bound']:.3f} "
            f"| {result['build_seconds']:.2f} | {result['seconds']:.2f} "
            f"| {result['cpu_seconds']:.2f} | {result['method_seconds']:.2f} | {anchor_seconds} "
            f"| {result['peak_mb']:.0f} |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
