"""Time and peak memory of ``expected_error`` and ``svd_bound`` at scale.

Each (workload, strategy, operation) runs in a fresh process, ``--repeat``
times, each time on a freshly built workload and strategy (matrices cache
their Gram and pseudo-inverse, so reusing them would time a cache hit). The
table shows the median wall time of the operation, the most memory it
allocated above what the matrices already held (tracemalloc, which numpy
reports into), the process's peak RSS, and the median strategy-selection time.

Targets (the foundation issue): kron(all_range(1024)^3), 10^9 cells, under 2 s
and 500 MB; all 3-way marginals of Adult (6.4·10^17 cells) under 5 s;
census SF1 under 5 s; a prefix over 2¹⁶ and 2²⁰ cells (against identity) under 2 s.
The reference column gives HDMM's measured figures
(../shared/anchors/hdmm.md, same machine kind) where one exists.

Usage:
    python benchmarks/error_scale.py [--repeat 5] [--json] [--cases prefix]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import pickle
import resource
import statistics
import time
import tracemalloc
from pathlib import Path

ADULT_DOMAIN = Path(__file__).resolve().parents[1] / "config" / "examples" / "adult-domain.json"

CASES = [
    # (case, strategy, target seconds, target MB, HDMM reference)
    ("allrange1024^3", "identity", 2.0, 500, ""),
    ("allrange1024^3", "hierarchical", 2.0, 500, ""),
    ("adult 3-way marginals", "identity", 5.0, None, ""),
    ("adult 3-way marginals", "workload", 5.0, None, ""),
    ("census sf1", "identity", 5.0, None, "identity TSE 3.79971e+07, SVD bound 18159.2"),
    ("census sf1", "hierarchical", 5.0, None, "HDMM OPT_kron TSE 223382 in 0.62 s"),
    ("census sf1", "marginals", 5.0, None, "HDMM OPT_kron TSE 223382 in 0.62 s"),
    ("census sf1", "auto", 5.0, None, "HDMM OPT_kron TSE 223382 in 0.62 s"),
    # One attribute of 2¹⁶ and 2²⁰ cells (an income CDF in fine bins): the baseline is
    # identity; a tree's error comes from closed forms, nothing n × n is formed.
    ("prefix 65536", "identity", 2.0, 100, ""),
    ("prefix 65536", "hierarchical", 2.0, 100, ""),
    ("prefix 65536", "auto", 2.0, 100, ""),
    ("prefix 1048576", "identity", 2.0, 500, ""),
    ("prefix 1048576", "hierarchical", 2.0, 500, ""),
]


def build(case: str, method: str):
    """The workload and the strategy ``method`` selects for it (ε = 1, Laplace)."""
    from dpmm.domain import Domain
    from dpmm.privacy import PureDP
    from dpmm.strategy import optimize
    from dpmm.workload import all_range, census_sf1, kron, marginals, prefix

    if case.startswith("prefix"):
        W = prefix(int(case.split()[1]))
    elif case.startswith("allrange"):
        W = kron([all_range(1024)] * 3)
    elif case.startswith("adult"):
        domain = Domain.from_json(ADULT_DOMAIN)
        W = marginals(domain, k=3)
    else:
        W = census_sf1()
    privacy = PureDP(1)
    started = time.perf_counter()
    A = optimize(W, method, privacy)
    return W, A, privacy, time.perf_counter() - started


def measure(case: str, method: str, operation: str, repeat: int, out) -> None:
    """Child process: time ``operation`` ``repeat`` times, each on freshly built matrices.

    Matrices cache their Gram and pseudo-inverse, so every run gets new ones: the figure is
    the cold cost a plan pays, not a cache hit.
    """
    from dpmm.error import expected_error, svd_bound

    operations = {"expected_error": expected_error, "svd_bound": svd_bound}
    times, peaks, optimize_times, value = [], [], [], None
    for _ in range(repeat):
        W, A, privacy, optimize_seconds = build(case, method)
        optimize_times.append(optimize_seconds)
        # Selection leaves Grams and inverses cached on the matrices; time the cold cost.
        W, A = pickle.loads(pickle.dumps(W)), pickle.loads(pickle.dumps(A))
        arguments = (W, A, privacy) if operation == "expected_error" else (W, privacy)
        # tracemalloc runs only around the operation (it slows every allocation).
        tracemalloc.start()
        started = time.perf_counter()
        value = operations[operation](*arguments)
        times.append(time.perf_counter() - started)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    out.send(
        {
            "case": case,
            "strategy": method,
            "operation": operation,
            "value": value,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "peak_traced_mb": max(peaks) / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "optimize_s": statistics.median(optimize_times),
            "queries": W.shape[0],
            "cells": W.shape[1],
            "strategy_repr": repr(A),
        }
    )


def run_case(case: str, method: str, operation: str, repeat: int) -> dict:
    context = mp.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=measure, args=(case, method, operation, repeat, send))
    process.start()
    result = receive.recv()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    parser.add_argument("--cases", help="only workloads whose name starts with this")
    args = parser.parse_args()

    header = (
        f"{'workload':<22} {'strategy':<13} {'operation':<15} {'value':>12} {'median s':>9} "
        f"{'target s':>8} {'traced MB':>9} {'RSS MB':>7} {'opt s':>6}  reference"
    )
    print(header)
    print("-" * len(header))
    for case, method, target_s, target_mb, reference in CASES:
        if args.cases and not case.startswith(args.cases):
            continue
        for operation in ("expected_error", "svd_bound"):
            row = run_case(case, method, operation, args.repeat)
            if args.json:
                print(json.dumps(row))
                continue
            verdict = "ok" if row["median_s"] <= target_s else "SLOW"
            if target_mb is not None and row["peak_traced_mb"] > target_mb:
                verdict += " MEM"
            print(
                f"{case:<22} {method:<13} {operation:<15} {row['value']:>12.6g} "
                f"{row['median_s']:>9.3f} {target_s:>8.1f} {row['peak_traced_mb']:>9.1f} "
                f"{row['peak_rss_mb']:>7.0f} {row['optimize_s']:>6.2f}  {verdict}  {reference}"
            )


if __name__ == "__main__":
    main()
