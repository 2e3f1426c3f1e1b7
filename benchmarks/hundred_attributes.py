"""[10]×d, all ≤3-way marginals: select, measure and reconstruct end to end, vs ResidualPlanner.

Phases (each d runs in a fresh child process so that its peak RSS is its own):

* select: ``marginal_optimal`` (the closed-form sum-of-variances optimum) on the
  ``Marginals`` workload (building the workload object is timed separately);
* measure: the marginal tables of every measured set counted from the synthetic records in
  one pass (``count_marginals``), then (the "noise" phase) the strategy put on the finest
  integer grid it can be measured exactly on (``measurable``: integer residual blocks
  ``[Q_S H_S]``), its exact integer answers from the tables and exact discrete Gaussian
  noise (in-memory ``measure``, OS CSPRNG unless ``--noise-seed``);
* reconstruct: every workload marginal's least-squares table and cell variances
  (``BlockEstimate`` and ``iter_block_marginals``, a batch of tables at a time); the squared
  error against the true tables is summed on the side (its time is not counted).

Each phase reports wall and CPU seconds (CPU of all threads): on a shared machine the CPU
time is the steadier number. Peak RSS is ``ru_maxrss`` of the child process.

The anchor is ResidualPlanner's own run on this kind of machine
(``../shared/anchors/residualplanner.md``): sum-var, phase seconds, peak RSS.

Usage:
    .venv/bin/python benchmarks/hundred_attributes.py --attributes 100 --records 10000
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import io
import itertools
import math
import multiprocessing
import pstats
import resource
import statistics
import time

import numpy as np

from dpmm.linalg import Marginals
from dpmm.measure import count_marginals, measurable, measure
from dpmm.privacy import ZCDP
from dpmm.reconstruct import BlockEstimate, iter_block_marginals
from dpmm.strategy.marginal_optimal import cell_variances, marginal_optimal

#: ResidualPlanner's numbers for [10]×d, all ≤3-way, ρ = 1, 10,000 records (the anchor).
ANCHOR = {
    20: {"sum_var": 4.19930e8, "select": 0.55, "measure": 4.2, "reconstruct": 1.4, "rss": 0.474},
    50: {"sum_var": 1.13450e11, "select": 9.2, "measure": 64, "reconstruct": 27, "rss": 1.2},
    100: {"sum_var": 7.45615e12, "select": 84, "measure": 1007, "reconstruct": 375, "rss": 8.6},
}
SIZE = 10
RECORD_CHUNK = 1 << 14


def synthetic_records(count: int, d: int, seed: int) -> np.ndarray:
    """Records with some structure: each attribute copies its left neighbour w.p. 1/2."""
    rng = np.random.default_rng(seed)
    records = rng.integers(0, SIZE, size=(count, d), dtype=np.int64)
    copy = rng.random((count, d)) < 0.5
    for j in range(1, d):
        records[:, j] = np.where(copy[:, j], records[:, j - 1], records[:, j])
    return records


class Clock:
    """Wall and CPU seconds (all threads) since the last lap: the machine may be shared."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        lap = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return lap


def peak_rss_gb() -> float:
    """Peak resident set size of this process (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def run(d: int, records: int, rho: int, noise_seed: int | None, profile: bool) -> dict:
    """One end-to-end run at d attributes: ``{phase: (wall s, CPU s)}`` and the accuracy."""
    privacy = ZCDP(rho)
    shape = (SIZE,) * d
    queries = [c for k in range(4) for c in itertools.combinations(range(d), k)]
    result: dict[str, object] = {"d": d, "marginals": len(queries)}
    result["cells"] = sum(SIZE ** len(c) for c in queries)
    data = synthetic_records(records, d, seed=0)

    clock = Clock()
    W = Marginals(shape, {c: 1.0 for c in queries})
    result["workload"] = clock.lap()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    A = marginal_optimal(W, privacy)
    if profiler:
        profiler.disable()
    result["select"] = clock.lap()
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        result["profile"] = text.getvalue()
        clock.lap()

    sets = [tuple(i for i in range(d) if mask >> i & 1) for mask in A.blocks]
    chunks = (data[i : i + RECORD_CHUNK] for i in range(0, records, RECORD_CHUNK))
    counts = count_marginals(chunks, shape, sets)
    result["count"] = clock.lap()
    rng = None if noise_seed is None else np.random.default_rng(noise_seed)
    quantized = measurable(A)
    record = measure(quantized, counts, privacy, rng=rng)
    result["noise"] = clock.lap()
    result["rho"] = record.sensitivity / (2 * record.sigma2)  # the cost of the noise drawn
    result["scale_bits"] = quantized.scale.bit_length() - 1
    result["rows"] = record.values.size

    sum_var, squared_error, side_wall, side_cpu = 0.0, 0.0, 0.0, 0.0
    estimate = BlockEstimate(quantized.integer, record.values, record.noise_variance())
    for item in iter_block_marginals(estimate, queries):
        side = Clock()
        truth = counts.tables[item.attrs]
        squared_error += float(((item.values - truth) ** 2).sum())
        sum_var += float(item.variances.sum())
        wall, cpu = side.lap()
        side_wall, side_cpu = side_wall + wall, side_cpu + cpu
    wall, cpu = clock.lap()
    result["reconstruct"] = (wall - side_wall, cpu - side_cpu)
    result["sum_var"] = sum_var
    result["squared_error"] = squared_error
    variances = cell_variances(W, A, privacy)
    result["strategy_sum_var"] = math.fsum(
        v * SIZE ** mask.bit_count() for mask, v in variances.items()
    )
    result["rss"] = peak_rss_gb()
    return result


def _in_child(*args: object) -> dict:
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(run, *args).result()


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attributes", type=int, nargs="+", default=[8, 20, 50, 100])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rho", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="median of this many runs")
    parser.add_argument("--noise-seed", type=int, default=None, help="test generator seed")
    parser.add_argument("--profile-select", action="store_true")
    args = parser.parse_args()

    phases = ("workload", "select", "count", "noise")
    rows = []
    for d in args.attributes:
        runs = [
            _in_child(d, args.records, args.rho, args.noise_seed, args.profile_select)
            for _ in range(args.repeats)
        ]
        row = dict(runs[0])
        for key in (*phases, "reconstruct"):
            row[key] = tuple(statistics.median(r[key][j] for r in runs) for j in (0, 1))
        row["measure"] = tuple(row["count"][j] + row["noise"][j] for j in (0, 1))
        row["total"] = tuple(
            row["select"][j] + row["measure"][j] + row["reconstruct"][j] for j in (0, 1)
        )
        row["rss"] = max(r["rss"] for r in runs)
        rows.append(row)
        if "profile" in row:
            print(f"select profile at d = {d} (top by own time):\n{row['profile']}")

    print(
        f"\n[10]×d, all ≤3-way marginals, ρ = {args.rho}, {args.records:,} records, median of "
        f"{args.repeats} run(s). Seconds as wall / CPU (all threads; the machine is shared); "
        "measure = count + noise (quantize, exact answers, noise). RP = ResidualPlanner "
        "(anchor, wall s).\n"
    )
    print(
        "| d | marginals | cells | workload s | select s | count s | noise s | measure s "
        "| reconstruct s | total s | peak RSS GB | RP select / measure / reconstruct s "
        "| RP total s | RP RSS GB |"
    )
    print("|---" * 14 + "|")
    for r in rows:
        a = ANCHOR.get(r["d"])
        rp = f"{a['select']} / {a['measure']} / {a['reconstruct']}" if a else "—"
        rp_total = _fmt(a["select"] + a["measure"] + a["reconstruct"]) if a else "—"
        times = " | ".join(
            f"{r[k][0]:.2f} / {r[k][1]:.2f}" for k in (*phases, "measure", "reconstruct", "total")
        )
        print(
            f"| {r['d']} | {r['marginals']:,} | {r['cells']:,} | {times} | {r['rss']:.2f} "
            f"| {rp} | {rp_total} | {a['rss'] if a else '—'} |"
        )
    print(
        "\n| d | residual rows | quantization scale | exact ρ spent (≤ ρ) | sum-var "
        "(ours) | sum-var (cell_variances) | RP sum-var | ours / RP | empirical sq. error "
        "| error / sum-var |"
    )
    print("|---" * 10 + "|")
    for r in rows:
        a = ANCHOR.get(r["d"])
        slack = args.rho - r["rho"]  # exact Fraction, never negative
        spent = f"ρ − {float(slack):.3g}" if slack else "ρ exactly"
        anchor_var = f"{a['sum_var']:.6g}" if a else "—"
        ratio = f"{r['sum_var'] / a['sum_var']:.6f}" if a else "—"
        print(
            f"| {r['d']} | {r['rows']:,} | 2^{r['scale_bits']} | {spent} | {r['sum_var']:.6g} "
            f"| {r['strategy_sum_var']:.6g} | {anchor_var} | {ratio} "
            f"| {r['squared_error']:.6g} | {r['squared_error'] / r['sum_var']:.4f} |"
        )


if __name__ == "__main__":
    main()
