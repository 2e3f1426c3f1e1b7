"""Residual block strategies end to end from 2-way tables, against QuerySmasher's numbers.

The prefix and range rows of ``../shared/anchors/querysmasher.md``: [10]×8, every pair of
attributes with prefix (or all range) queries on both (one Kron product per pair, totals
elsewhere), ρ = 1 zCDP. Each row runs in a fresh child process:

* select: ``optimize(W, "residual", ZCDP(1))`` (a ``ResidualBlockStrategy``);
* count: the marginal tables of every measured set from 100,000 synthetic records in one
  pass (``count_marginals``);
* measure: quantize the blocks to integer residual blocks ``[Q_S H_S]`` (``quantize``,
  ``--bits`` significant bits), exact integer answers from the tables, exact sensitivity
  (or its bound above ``EXACT_CELLS`` cells) and discrete Gaussian noise (in-memory
  ``measure``, OS CSPRNG);
* reconstruct: every workload answer and its exact variance (``BlockEstimate`` and
  ``block_workload_answers``).

Phase times are medians over ``--repeats`` runs; each phase's peak traced memory
(tracemalloc, one extra run) and the child's peak RSS are shown. Sum-vars: the exact sum of
per-query variances of the measured, quantized strategy (with its rounded σ² and its
sensitivity bound), the selected strategy's theoretical sum-var, and QuerySmasher's. The
empirical sum of squared errors over ``--trials`` independent measurements is compared with
the exact sum-var (its expectation); true answers come from the 2-way tables directly.
QuerySmasher measures 100,000 records in 0.02–1.2 s from the full dense count vector
(10⁸ cells here); this never builds it.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/residual_blocks.py``
(``--row K`` runs one row in this process and prints JSON).
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
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpmm.linalg import AllRange, Kron, Matrix, Ones, Prefix, VStack
from dpmm.linalg.marginals import mask_members
from dpmm.measure import DEFAULT_BITS, MeasurementRecord, QuantizedStrategy, measure, quantize
from dpmm.measure.exact import analyze_strategy
from dpmm.measure.tables import count_marginals
from dpmm.privacy import ZCDP
from dpmm.reconstruct.residual_blocks import BlockEstimate, block_workload_answers
from dpmm.strategy import optimize
from dpmm.strategy.residual import residual_optimum

RHO = ZCDP(1)
SIZE, D = 10, 8
RECORD_CHUNK = 1 << 14


@dataclass(frozen=True)
class Row:
    name: str
    query: str
    qs_sumvar: float
    rp_plus_sumvar: float


ROWS = [
    Row("[10]×8 all 2-way prefix", "prefix", 92_684.5, 105_379),
    Row("[10]×8 all 2-way range", "range", 3_578_941, 3_701_068),
]


def build(query: str) -> tuple[Matrix, list[tuple[int, int]], np.ndarray]:
    """The workload, its pairs in term order and the dense per-attribute query matrix."""
    factor = Prefix(SIZE) if query == "prefix" else AllRange(SIZE)
    total = Ones(1, SIZE)
    pairs = list(itertools.combinations(range(D), 2))
    W = VStack([Kron([factor if i in pair else total for i in range(D)]) for pair in pairs])
    return W, pairs, factor.dense()


def synthetic_records(count: int, seed: int) -> np.ndarray:
    """Records with structure: each attribute copies its left neighbour w.p. 1/2."""
    rng = np.random.default_rng(seed)
    records = rng.integers(0, SIZE, size=(count, D), dtype=np.int64)
    copy = rng.random((count, D)) < 0.5
    for j in range(1, D):
        records[:, j] = np.where(copy[:, j], records[:, j - 1], records[:, j])
    return records


def true_answers(counts, pairs: list[tuple[int, int]], Q: np.ndarray) -> np.ndarray:
    """``W x`` from the 2-way tables: ``Q m_ij Qᵀ`` per pair, C order (independent path)."""
    return np.concatenate([(Q @ counts.tables[pair] @ Q.T).reshape(-1) for pair in pairs])


def timed(function: Callable[[], object], repeats: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def traced(function: Callable[[], object]) -> float:
    """Peak traced memory (MB) of one call."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    function()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def estimate(quantized: QuantizedStrategy, record: MeasurementRecord) -> BlockEstimate:
    """The least-squares estimate of a measurement of integer residual blocks."""
    return BlockEstimate(quantized.integer, record.values, record.noise_variance())


def run_row(index: int, repeats: int, records: int, trials: int, bits: int) -> dict:
    row = ROWS[index]
    W, pairs, Q = build(row.query)
    result: dict[str, object] = {"queries": W.shape[0]}
    result["select"], A = timed(lambda: optimize(W, "residual", RHO), repeats)
    result["select_mb"] = traced(lambda: optimize(W, "residual", RHO))
    optimum = residual_optimum(W)
    result["strategy_sumvar"] = optimum.objective * RHO.noise_variance(1.0)

    data = synthetic_records(records, seed=0)
    sets = [tuple(mask_members(mask)) for mask in A.blocks]

    def count():
        chunks = (data[i : i + RECORD_CHUNK] for i in range(0, records, RECORD_CHUNK))
        return count_marginals(chunks, (SIZE,) * D, sets)

    result["count"], counts = timed(count, repeats)
    result["count_mb"] = traced(count)

    def measured() -> tuple[QuantizedStrategy, MeasurementRecord]:
        quantized = quantize(A, bits=bits)
        return quantized, measure(quantized, counts, RHO)

    result["measure"], (quantized, record) = timed(measured, repeats)
    result["measure_mb"] = traced(measured)

    def reconstruct():
        return block_workload_answers(estimate(quantized, record), W)

    result["reconstruct"], answers = timed(reconstruct, repeats)
    result["reconstruct_mb"] = traced(reconstruct)
    rho = record.sensitivity / (2 * record.sigma2)  # the cost of the noise drawn
    exact = analyze_strategy(quantized.integer)
    result["rows"] = int(record.values.size)
    result["scale_bits"] = quantized.scale.bit_length() - 1
    result["rho"] = float(rho)
    result["rho_exact"] = str(rho)
    result["sensitivity_exact"] = exact.column_l2_squared.size == quantized.integer.shape[1]
    result["exact_sumvar"] = float(answers.variances.sum())

    truth = true_answers(counts, pairs, Q)
    errors = []
    for _ in range(trials):
        noisy = measure(quantized, counts, RHO)
        errors.append(
            float(
                ((block_workload_answers(estimate(quantized, noisy), W).values - truth) ** 2).sum()
            )
        )
    result["sse"] = errors
    result["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", type=int, help="run one row here and print JSON")
    parser.add_argument("--rows", default=",".join(str(i) for i in range(len(ROWS))))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--bits", type=int, default=DEFAULT_BITS, help="quantization bits")
    args = parser.parse_args()
    if args.row is not None:
        print(json.dumps(run_row(args.row, args.repeats, args.records, args.trials, args.bits)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(
        f"{args.records:,} records, ρ = 1 zCDP, quantized at {args.bits} bits; times are "
        f"medians of {args.repeats}, MB = peak traced memory of the phase\n"
    )
    print(
        "| workload | #queries | select s (MB) | count s (MB) | measure s (MB) | "
        "reconstruct s (MB) | QS measure s | peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for index in (int(i) for i in args.rows.split(",")):
        row = ROWS[index]
        command = [
            sys.executable,
            __file__,
            "--row",
            str(index),
            "--repeats",
            str(args.repeats),
            "--records",
            str(args.records),
            "--trials",
            str(args.trials),
            "--bits",
            str(args.bits),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=args.timeout, check=True
            )
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as failure:
            print(f"| {row.name} | failed: {type(failure).__name__} | | | | | 0.02–1.2 | |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        results.append((row, r))
        print(
            f"| {row.name} | {r['queries']:,} | {r['select']:.2f} ({r['select_mb']:.0f}) | "
            f"{r['count']:.3f} ({r['count_mb']:.1f}) | {r['measure']:.3f} "
            f"({r['measure_mb']:.1f}) | {r['reconstruct']:.3f} ({r['reconstruct_mb']:.1f}) | "
            f"0.02–1.2 | {r['rss_gb']:.2f} |",
            flush=True,
        )
    print()
    print(
        "| workload | exact sum-var (quantized, measured) | strategy sum-var | QS sum-var | "
        "exact / strategy − 1 | exact / QS | RP+ sum-var | mean SSE over trials | "
        "SSE / exact sum-var |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row, r in results:
        sse = statistics.fmean(r["sse"])
        print(
            f"| {row.name} | {r['exact_sumvar']:,.1f} | {r['strategy_sumvar']:,.1f} | "
            f"{row.qs_sumvar:,.1f} | {r['exact_sumvar'] / r['strategy_sumvar'] - 1:.2e} | "
            f"{r['exact_sumvar'] / row.qs_sumvar:.5f} | {row.rp_plus_sumvar:,} | "
            f"{sse:,.0f} ({len(r['sse'])}) | {sse / r['exact_sumvar']:.3f} |"
        )
    print()
    for row, r in results:
        print(
            f"* {row.name}: {r['rows']:,} measured rows, grid 2^-{r['scale_bits']}, "
            f"ρ spent {r['rho']:.9f} (exact rational {r['rho_exact']}), sensitivity "
            f"{'exact' if r['sensitivity_exact'] else 'upper bound Σ_S max'}; SSE per trial "
            + ", ".join(f"{e:,.0f}" for e in r["sse"])
        )


if __name__ == "__main__":
    main()
