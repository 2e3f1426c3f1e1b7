"""Local DP: dpmm's mechanism against the authors' optimizer and every baseline (seed 004, §6).

Table 1 (Figure 1's setting), one row per workload, n and ε: the per-user worst-case
variance ``max_u z_u`` (lower is better; multiply by N for N users) of the strategy
``optimize_strategy`` returns and which mechanism that is (``optimized``, or the baseline
that beat it); the lower bound of ``dpmm.local.bounds``; the authors' optimized worst case
and the ratio (``../shared/anchors/ldp.md``: the authors' code on this kind of machine,
one optimizer call, m = 4n); dpmm's optimized strategy alone; the best baseline by name
and value; dpmm's wall time for the whole call (optimization and the comparison with
every baseline) against the authors' optimizer time; iterations; and for reference the
matrix mechanism run per user with Laplace noise (ε-LDP, continuous reports, so it has
no strategy matrix and is not a candidate; its variance scales as 1/ε², computed once
per workload).

The baselines are those of ``dpmm.local.baselines.baseline_strategies``: randomized
response; Hadamard response and hierarchical (branching 4) with the best block count
B ∈ {1, 2, 4, …}; Fourier with the best order k (binary domains only).

Table 2 (§6.5): worst-case / average-case variance of the optimized strategies.
Table 3 (§6.4): median seconds of one optimizer iteration (objective, gradient and
projection) for the identity workload against n (m = 4n), with peak RSS.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_dp.py [--sizes 64 256]
[--iterations 1000] [--quick]``; ``--sizes 512`` runs the paper's largest setting (no
anchor numbers: the authors' optimizer was not run there).
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time

import numpy as np

from dpmm.local.baselines import per_user_matrix_mechanism_variance
from dpmm.local.bounds import worst_case_lower_bound
from dpmm.local.mechanism import check_ldp, per_user_variance
from dpmm.local.optimize import Objective, optimize_strategy, project_columns
from dpmm.local.workloads import WORKLOADS, build_workload

ANCHOR_EPSILONS = (0.5, 1.0, 2.0, 4.0)
#: The anchor's (Optimized worst, opt time s) by (workload, n), one pair per ε above.
ANCHOR = {
    ("Histogram", 64): ((1018, 4.5), (260, 4.5), (53.11, 2.8), (3.863, 3.0)),
    ("Prefix", 64): ((2955, 2.9), (714.4, 2.9), (177.2, 2.8), (41.17, 2.8)),
    ("AllRange", 64): ((1.336e05, 2.9), (3.341e04, 2.8), (7525, 2.9), (1120, 2.8)),
    ("AllMarginals", 64): ((4.11e04, 2.9), (1.019e04, 2.9), (2298, 2.8), (216.4, 2.8)),
    ("3WayMarginals", 64): ((1.194e04, 2.8), (3072, 2.9), (715.1, 2.9), (68.62, 2.7)),
    ("Parity", 64): ((3.434e04, 2.9), (8739, 2.8), (2007, 3.1), (161, 2.8)),
    ("Histogram", 256): ((4236, 35.4), (1038, 30.4), (210.4, 30.1), (24.1, 28.7)),
    ("Prefix", 256): ((2.183e04, 32.7), (4910, 30.6), (1093, 30.0), (276.4, 29.4)),
    ("AllRange", 256): ((3.843e06, 39.7), (9.445e05, 38.7), (2.027e05, 37.8), (3.366e04, 36.5)),
    ("AllMarginals", 256): ((6.241e05, 32.0), (1.605e05, 32.0), (3.665e04, 29.7), (4201, 29.3)),
    ("3WayMarginals", 256): ((6.92e04, 33.9), (1.804e04, 30.4), (4296, 34.1), (606.3, 30.8)),
    ("Parity", 256): ((1.861e05, 32.4), (5.042e04, 33.4), (1.309e04, 34.2), (1638, 31.1)),
}


def fmt(value: float | None) -> str:
    """Four significant digits, or a dash."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.4g}"


def anchor(name: str, n: int, eps: float) -> tuple[float | None, float | None]:
    """The authors' (worst case, seconds) for this cell, or Nones."""
    if (name, n) not in ANCHOR or eps not in ANCHOR_EPSILONS:
        return None, None
    return ANCHOR[(name, n)][ANCHOR_EPSILONS.index(eps)]


def figure1(sizes, epsilons, iterations, workloads, seed) -> list[tuple[str, int, float, float]]:
    """Print Table 1; returns (workload, n, worst, average) of every optimized strategy."""
    print("## Table 1: per-user worst-case variance (lower is better), Figure 1 setting\n")
    header = [
        "workload", "n", "ε", "dpmm worst", "mechanism", "lower bound", "authors",
        "dpmm/authors", "optimized alone", "best baseline", "baseline worst", "dpmm s",
        "authors s", "time ratio", "iterations", "MM-Lap",
    ]  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    rng = np.random.default_rng(seed)
    collected = []
    misses = []
    for n in sizes:
        for name in workloads:
            W = build_workload(name, n)
            squared_total = float((W**2).sum())
            mm_laplace = per_user_matrix_mechanism_variance(W, 1.0, "laplace")
            for eps in epsilons:
                result = optimize_strategy(W, eps, iterations=iterations, rng=rng)
                check_ldp(result.Q, eps)
                # Re-derive the returned strategy's worst case independently of the optimizer.
                worst = float(per_user_variance(W, result.Q).max())
                if not math.isclose(worst, result.worst_case, rel_tol=1e-6):
                    raise RuntimeError(f"{name} {n} {eps}: recorded {result.worst_case} ≠ {worst}")
                optimized = result.candidates["optimized"]
                average = (result.history[-1] - squared_total) / n
                collected.append((name, n, optimized, average))
                baselines = {k: v for k, v in result.candidates.items() if k != "optimized"}
                best_name = min(baselines, key=baselines.__getitem__)
                authors, authors_seconds = anchor(name, n, eps)
                cells = [
                    name,
                    str(n),
                    f"{eps:g}",
                    fmt(worst),
                    result.mechanism,
                    fmt(worst_case_lower_bound(W, eps)),
                    fmt(authors),
                    f"{worst / authors:.3f}" if authors else "—",
                    fmt(optimized),
                    best_name,
                    fmt(baselines[best_name]),
                    f"{result.seconds:.2f}",
                    fmt(authors_seconds),
                    f"{result.seconds / authors_seconds:.3f}" if authors_seconds else "—",
                    str(result.iterations),
                    fmt(mm_laplace / eps**2),
                ]
                print("| " + " | ".join(cells) + " |", flush=True)
                if authors and (
                    worst > 1.02 * authors
                    or worst > baselines[best_name]
                    or result.seconds > authors_seconds
                ):
                    misses.append(f"{name} n={n} ε={eps:g}")
    print(f"\nCells missing a target (≤ 1.02× authors, ≤ best baseline, ≤ authors' time): "
          f"{', '.join(misses) if misses else 'none'}")  # fmt: skip
    return collected


def scalability(sizes: list[int], repeats: int = 5) -> None:
    """Print Table 3: per-iteration optimizer time against n (identity workload, m = 4n)."""
    print("\n## Table 3: seconds per optimizer iteration (median of", repeats, "), m = 4n\n")
    print("| n | m | variables | s / iteration | peak RSS MB |")
    print("| --- | --- | --- | --- | --- |")
    rng = np.random.default_rng()
    for n in sizes:
        m, eps = 4 * n, 1.0
        objective = Objective.from_gram(np.eye(n))
        z = np.full(m, (1 + math.exp(-eps)) / (2 * m))
        Q, _, _ = project_columns(rng.uniform(size=(m, n)), z, eps)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            _, G = objective.evaluate(Q)
            Q, _, _ = project_columns(Q - 1e-3 / (m * np.abs(G).max()) * G, z, eps)
            times.append(time.perf_counter() - start)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| {n} | {m} | {m * n:,} | {statistics.median(times):.4f} | {rss:.0f} |", flush=True)


def relaxation(collected: list[tuple[str, int, float, float]]) -> None:
    """Print Table 2: worst / average ratios of the optimized strategies."""
    print("\n## Table 2: worst-case / average-case variance of the optimized strategies\n")
    print("| n | strategies | min | median | 90th pct | max | share < 1.1 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in sorted({row[1] for row in collected}):
        ratios = np.array([w / a for _, size, w, a in collected if size == n])
        print(
            f"| {n} | {ratios.size} | {ratios.min():.3f} | {np.median(ratios):.3f} | "
            f"{np.quantile(ratios, 0.9):.3f} | {ratios.max():.3f} | "
            f"{(ratios < 1.1).mean():.0%} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(ANCHOR_EPSILONS))
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--scaling-sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--seed", type=int, default=None, help="optimizer seed (default: OS)")
    parser.add_argument("--quick", action="store_true", help="a smoke run in under a minute")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.epsilons, args.iterations = [16], [1.0, 4.0], 30
        args.workloads, args.scaling_sizes = ["Histogram", "Prefix", "Parity"], [32, 64, 128]
    started = time.perf_counter()
    collected = figure1(args.sizes, args.epsilons, args.iterations, args.workloads, args.seed)
    relaxation(collected)
    scalability(args.scaling_sizes)
    print(f"\nTotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
