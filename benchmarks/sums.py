"""Seed 003's experiment on randhie: relative error of sum algorithms with and without truncation.

Data: ``/work/shared/data/randhie/randhie.csv``; one record per person (``zper``), its value
the person's income summed over the years observed (``dpmm.sums.person_totals``), so one
person changes one bucket count by 1. Buckets ``(800(i−1), 800 i]``, i = 1…1000 (seed 003);
workloads Q1, Q2, Q3 of 1000, 100 and 10 evenly spaced prefix sums.

For each workload, ε and ρ, every trial draws one SVT and one Recursive threshold shared by
the batch algorithms (seed 003's Algorithm 9); SQM draws one per query. Each algorithm ×
truncation (SVT, Recursive, NoTrunc) is answered once per trial, and scored with and without
isotonic regression by the relative error ``|ŷ − y| / max(y, δ)``, δ = 100.

Reported: the mean relative error over trials and queries, and "p5"/"p95": each query's
5th / 95th percentile over trials (seed 003's shaded band), averaged over queries.

Noise: ``FastInsecureNoise`` (numpy float Laplace) — benchmark only, NOT private; the library
default is the exact discrete Laplace. Identity is the baseline (seed 003: the best baseline).

Usage:
    python benchmarks/sums.py            # the full setting: 100 trials, ε ∈ {0.01, 0.1, 1}
    python benchmarks/sums.py --quick    # smoke run (< 1 minute)
"""

from __future__ import annotations

import argparse
import resource
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dpmm.reconstruct import isotonic
from dpmm.sums import (
    ALGORITHMS,
    FastInsecureNoise,
    TreeChooser,
    Truncation,
    measure_batch,
    person_totals,
    prefix_sum_workload,
    single_query_mode,
    vectorize,
)

DATA = Path("/work/shared/data/randhie/randhie.csv")
DELTA = 100.0
TRUNCATIONS = ("svt", "recursive", "none")
LABELS = {"svt": "SVT", "recursive": "Recursive", "none": "NoTrunc"}


def relative_errors(noisy: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Seed 003's relative error per query."""
    return np.abs(noisy - truth) / np.maximum(truth, DELTA)


def run_setting(workload, counts, chooser, epsilon, rho, trials, rng):
    """errors[(algorithm, truncation, iso)] = array (trials, queries)."""
    truth = workload.true_answers(counts).astype(np.float64)
    noise = FastInsecureNoise(rng)
    specs = {method: Truncation(method, rho=rho) for method in TRUNCATIONS}
    errors: dict[tuple[str, str, bool], list[np.ndarray]] = {}

    def record(algorithm, method, values):
        for iso in (False, True):
            fitted = isotonic(values) if iso else values
            errors.setdefault((algorithm, method, iso), []).append(relative_errors(fitted, truth))

    for _ in range(trials):
        for method, spec in specs.items():
            first, second = spec.split(epsilon)
            theta = spec.select(counts, workload.bounds, first, noise=noise)
            for algorithm in ALGORITHMS[1:]:
                values = measure_batch(
                    algorithm, workload, counts, theta, second, noise=noise, chooser=chooser
                )[0]
                record(algorithm, method, values)
            record(
                "sqm",
                method,
                single_query_mode(workload, counts, epsilon, spec, noise=noise).values,
            )
    return {key: np.array(value) for key, value in errors.items()}


def summarize(errors: np.ndarray) -> tuple[float, float, float]:
    """Mean over everything; per-query 5th/95th percentiles over trials, averaged."""
    low, high = np.percentile(errors, [5, 95], axis=0)
    return float(errors.mean()), float(low.mean()), float(high.mean())


def cell(stats: tuple[float, float, float]) -> str:
    return f"{stats[0]:.3g} [{stats[1]:.2g}, {stats[2]:.2g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 trials, ε = 0.01, Q2/Q3")
    parser.add_argument("--epsilons", default="0.01,0.1,1")
    parser.add_argument("--rhos", default="0.1,0.5")
    parser.add_argument("--queries", default="1000,100,10")
    parser.add_argument("--seed", type=int, default=2026, help="numpy seed of the benchmark noise")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.epsilons, args.queries = min(args.trials, 5), "0.01", "100,10"
    epsilons = [Fraction(e) for e in args.epsilons.split(",")]
    rhos = [Fraction(r) for r in args.rhos.split(",")]
    rng = np.random.default_rng(args.seed)

    frame = pd.read_csv(DATA, usecols=["zper", "income"])
    values = person_totals(frame["income"].to_numpy(), frame["zper"].to_numpy())
    print(
        f"randhie: {len(frame):,} person-years, {values.size:,} persons; "
        f"person income total: median {np.median(values):,.0f}, max {values.max():,.0f}"
    )
    print(
        f"trials={args.trials}, δ={DELTA:g}, SVT r=0.998 c=1.2 s=50000, "
        "Recursive θ=50000 β=2ρε/5 μ=0.5; noise: fast_insecure_laplace (benchmark only)\n"
    )
    started = time.perf_counter()
    summary: list[tuple] = []
    for queries in [int(q) for q in args.queries.split(",")]:
        workload = prefix_sum_workload(width=800, buckets=1000, queries=queries)
        counts = vectorize(values, workload.bounds)
        tick = time.perf_counter()
        chooser = TreeChooser(workload)
        print(
            f"Q with {queries} queries: tree tables built in {time.perf_counter() - tick:.1f} s\n"
        )
        for epsilon in epsilons:
            for rho in rhos:
                tick = time.perf_counter()
                errors = run_setting(workload, counts, chooser, epsilon, rho, args.trials, rng)
                seconds = time.perf_counter() - tick
                print(
                    f"### {queries} queries, ε = {float(epsilon):g}, ρ = {float(rho):g} "
                    f"({seconds:.1f} s): mean rel. error [p5, p95]\n"
                )
                head = [
                    f"{LABELS[m]}{' +iso' if iso else ''}" for m in TRUNCATIONS for iso in (0, 1)
                ]
                print("| algorithm | " + " | ".join(head) + " |")
                print("|---" * (len(head) + 1) + "|")
                for algorithm in ALGORITHMS:
                    stats = {
                        (m, iso): summarize(errors[(algorithm, m, iso)])
                        for m in TRUNCATIONS
                        for iso in (False, True)
                    }
                    row = [cell(stats[(m, iso)]) for m in TRUNCATIONS for iso in (False, True)]
                    print(f"| {algorithm} | " + " | ".join(row) + " |")
                    summary.append((queries, float(epsilon), float(rho), algorithm, stats))
                print()
    findings(summary)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\ntotal {time.perf_counter() - started:.0f} s, peak RSS {peak:.0f} MiB")


def findings(summary: list[tuple]) -> None:
    """Seed 003's three findings, checked on every setting (means with isotonic off)."""
    settings = sorted({(q, e, r) for q, e, r, _, _ in summary}, key=lambda s: (-s[0], s[1], s[2]))
    print("### Findings per setting (mean rel. error, no isotonic unless stated)\n")
    print(
        "| queries | ε | ρ | truncation helps (best trunc < NoTrunc) | best algorithm "
        "(any trunc) | TaMM / Identity (SVT) | SQM SVT: mean, p5 without → with iso |"
    )
    print("|---|---|---|---|---|---|---|")
    for setting in settings:
        rows = {alg: stats for q, e, r, alg, stats in summary if (q, e, r) == setting}
        helped = [
            alg
            for alg, s in rows.items()
            if min(s[("svt", False)][0], s[("recursive", False)][0]) < s[("none", False)][0]
        ]
        best = min(
            ((s[(m, False)][0], alg, m) for alg, s in rows.items() for m in TRUNCATIONS),
        )
        ratio = rows["tamm"][("svt", False)][0] / rows["identity"][("svt", False)][0]
        sqm_off, sqm_on = rows["sqm"][("svt", False)], rows["sqm"][("svt", True)]
        print(
            f"| {setting[0]} | {setting[1]:g} | {setting[2]:g} | {len(helped)}/5 "
            f"({', '.join(sorted(helped))}) | {best[1]} {LABELS[best[2]]} ({best[0]:.3g}) | "
            f"{ratio:.2f} | {sqm_off[0]:.3g}, {sqm_off[1]:.2g} → {sqm_on[0]:.3g}, "
            f"{sqm_on[1]:.2g} |"
        )


if __name__ == "__main__":
    main()
