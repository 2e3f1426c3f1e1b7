"""Non-negative consistent marginal tables vs the least-squares tables they start from.

Adult (14 attributes, 48,842 records): every 2-way and 3-way marginal (455 tables,
2.1·10⁷ cells) measured with the optimal residual strategy
(``optimize(W, "marginal_optimal", ZCDP(ρ))``) at several ρ, put on the finest integer grid
it can be measured exactly on (``measurable``) and measured from the counted tables with
exact discrete Gaussian noise (in-memory ``measure``, one seeded generator per trial),
reconstructed by least squares in the marginal algebra (:func:`block_marginals`), then
projected by :func:`nonnegative_tables` with weights ``1 / mean cell variance`` per table.

Printed per ρ, medians over ``--trials`` seeded trials: the mean squared error per cell
against the true tables for least squares (baseline) and non-negative tables, the share of
negative least-squares cells, iterations, the certified relative KKT residual and duality
gap, the largest marginal disagreement of the output, wall time of each step, the peak
memory allocated by the projection (tracemalloc) and the process peak RSS.

A synthetic row ([10]×20, all ≤3-way marginals, 10²⁰ cells; records from a random
chain) shows the projection never builds the data vector.

Usage::

    .venv/bin/python benchmarks/consistent_tables.py [--trials 3] [--rho 0.01 0.1 1]
        [--adult-ways 2 3] [--skip-adult] [--skip-synthetic]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from dpmm.linalg import Marginals
from dpmm.measure import count_marginals, measurable, measure
from dpmm.privacy import ZCDP
from dpmm.reconstruct import BlockEstimate, block_marginals
from dpmm.reconstruct.consistent_tables import consistency_violation, nonnegative_tables
from dpmm.strategy import optimize

ADULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "adult"


def adult() -> tuple[tuple[int, ...], np.ndarray]:
    domain = json.loads((ADULT / "adult-domain.json").read_text())
    records = np.loadtxt(ADULT / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
    return tuple(int(n) for n in domain.values()), records


def chain(rng: np.random.Generator, dims: int, size: int, records: int) -> np.ndarray:
    """Records from a Markov chain over the attributes (correlated, skewed tables)."""
    data = np.empty((records, dims), dtype=np.int64)
    data[:, 0] = rng.integers(size, size=records)
    for i in range(1, dims):
        keep = rng.random(records) < 0.7
        data[:, i] = np.where(keep, data[:, i - 1], rng.zipf(2.0, records) % size)
    return data


def _progress(message: str, since: float) -> float:
    print(f"  {message}: {time.perf_counter() - since:.1f} s", file=sys.stderr, flush=True)
    return time.perf_counter()


def trial(shape, records, queries, rho: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    privacy = ZCDP(rho)
    clock = time.perf_counter()
    W = Marginals(shape, {q: 1.0 for q in queries})
    quantized = measurable(optimize(W, "marginal_optimal", privacy))
    clock = _progress("strategy", clock)
    counts = count_marginals([records], shape, quantized.integer.table_sets() + list(queries))
    clock = _progress("count", clock)
    record = measure(quantized, counts, privacy, rng=rng)
    clock = _progress(f"measure (grid 1/2^{quantized.scale.bit_length() - 1})", clock)
    started = time.perf_counter()
    estimate = BlockEstimate(quantized.integer, record.values, record.noise_variance())
    ls = block_marginals(estimate, queries)
    ls_time = time.perf_counter() - started
    tracemalloc.start()
    started = time.perf_counter()
    weights = {a: 1.0 / float(r.variances.mean()) for a, r in ls.items()}
    out = nonnegative_tables({a: r.values for a, r in ls.items()}, weights=weights)
    nn_time = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    cells = sum(r.values.size for r in ls.values())
    truth = {a: counts.tables[a].astype(np.float64) for a in ls}
    return {
        "cells": cells,
        "ls_mse": sum(float(np.sum((ls[a].values - truth[a]) ** 2)) for a in ls) / cells,
        "nn_mse": sum(float(np.sum((out.tables[a] - truth[a]) ** 2)) for a in ls) / cells,
        "negative": sum(int(np.sum(r.values < 0)) for r in ls.values()) / cells,
        "iterations": out.iterations,
        "kkt": out.kkt_residual,
        "gap": out.gap / out.objective if out.objective else 0.0,
        "violation": consistency_violation(out.tables) / out.total,
        "nn_min": min(float(t.min()) for t in out.tables.values()),
        "ls_time": ls_time,
        "nn_time": nn_time,
        "peak_mb": peak,
    }


def row(name: str, shape, records, queries, rho: float, trials: int) -> None:
    results = [trial(shape, records, queries, rho, seed) for seed in range(trials)]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"| {name} | {rho:g} | {len(queries)} | {int(med('cells')):,} | {math.prod(shape):.3g} | "
        f"{med('ls_mse'):.4g} | {med('nn_mse'):.4g} | {med('nn_mse') / med('ls_mse'):.3f} | "
        f"{100 * med('negative'):.1f}% | {med('iterations'):.0f} | {med('kkt'):.1e} | "
        f"{med('gap'):.1e} | {max(r['violation'] for r in results):.1e} | "
        f"{min(r['nn_min'] for r in results):.1g} | {med('ls_time'):.2f} | "
        f"{med('nn_time'):.2f} | {med('peak_mb'):.0f} MB | {rss:.0f} MB |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rho", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    parser.add_argument("--skip-adult", action="store_true")
    parser.add_argument("--adult-ways", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    print(
        "| data | ρ | tables | cells | domain | LS MSE/cell | NN MSE/cell | NN/LS | "
        "LS cells < 0 | iterations | KKT/total | gap/objective | max disagreement/total | "
        "NN min cell | LS s | NN s | NN peak alloc | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    if not args.skip_adult:
        shape, records = adult()
        ways = sorted(set(args.adult_ways))
        queries = [q for k in ways for q in itertools.combinations(range(len(shape)), k)]
        name = "Adult " + "+".join(map(str, ways)) + "-way"
        for rho in args.rho:
            row(name, shape, records, queries, rho, args.trials)
    if args.skip_synthetic:
        return
    shape = (10,) * 20
    records = chain(np.random.default_rng(99), len(shape), 10, 100_000)
    queries = [q for k in range(4) for q in itertools.combinations(range(len(shape)), k)]
    for rho in args.rho:
        row("[10]×20 ≤3-way (chain, 10⁵ rec.)", shape, records, queries, rho, args.trials)


if __name__ == "__main__":
    main()
