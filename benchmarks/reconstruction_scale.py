"""NNLS at scale: 10⁷ cells with an identity-Kron strategy, 10⁶ with a hierarchical Kron,
in memory and chunked on a 2-worker Dask LocalCluster.

Synthetic skewed data: Zipf(1.5) counts (capped at 10⁴) in 20% of the cells,
zeros elsewhere; Laplace noise of scale sensitivity/ε with ε = 1 (numpy's
floating-point Laplace: a benchmark, not a release). Every solve runs to a
relative KKT residual of ``--tolerance`` (default 1e-6). The identity case
also imposes the known total (the projection onto the scaled simplex).

Printed per case: iterations, reached residual, wall time, peak memory
allocated during the solve (tracemalloc; numpy reports into it) and the
process peak RSS so far; for the chunked runs the largest difference from the
in-memory estimate, relative to the largest estimated count.

The chunked runs solve the same two problems on a 2-worker LocalCluster
(processes, one thread each), the measurements split into ``--chunks`` blocks
along the first axis (default 2: one per worker). The hierarchical case (no
total) runs many iterations per scheduler round trip
(:mod:`dpmm.reconstruct.chunked_loop`); peak RSS is then also printed for each
worker process.

A third case is the release's: the hierarchical strategy with the least-squares total
(``total="estimated"``). Its chunked run is compared with the driver loop that used to
serve any total (:func:`~dpmm.reconstruct.projected_gradient.minimize_nonnegative_quadratic`
on the Dask arrays: a scheduler round trip per step and per projection pass), in the
same run; ``--max-iterations`` caps every solve so the two are timed on equal work.

Usage:
    python benchmarks/reconstruction_scale.py [--quick] [--tolerance 1e-6] [--max-iterations N]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from dpmm.linalg import Hierarchical, Identity, Kron, Matrix
from dpmm.reconstruct import Estimate, nnls

EPSILON = 1.0


def skewed_counts(rng: np.random.Generator, cells: int) -> np.ndarray:
    counts = np.minimum(rng.zipf(1.5, cells), 10_000).astype(np.float64)
    counts[rng.random(cells) >= 0.2] = 0.0
    return counts


def problem(A: Matrix, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = skewed_counts(rng, A.shape[1])
    y = A @ x + rng.laplace(0.0, A.sensitivity(1) / EPSILON, A.shape[0])
    return x, y


def timed(solve: Callable[[], Estimate]) -> tuple[Estimate, float, float]:
    tracemalloc.start()
    started = time.perf_counter()
    estimate = solve()
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return estimate, seconds, peak


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_rss_mb() -> float:
    """Peak RSS of this process, in MB (run on each worker through ``client.run``).

    ``ru_maxrss`` survives fork and exec, so a worker would report at least the driver's
    peak at spawn time; the memory map's high-water mark (VmHWM) starts afresh at exec.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def row(
    case: str,
    where: str,
    estimate: Estimate,
    seconds: float,
    peak: float,
    workers: str = "",
    diff: str = "",
) -> str:
    return (
        f"| {case} | {where} | {estimate.iterations} | {estimate.residual:.1e} | "
        f"{estimate.converged} | {seconds:.2f} | {peak:.0f} | {rss_mb():.0f} | {workers} | "
        f"{diff} |"
    )


def driver_loop(A: Kron, tensor: Any, tolerance: float, limit: int | None) -> Estimate:
    """The chunked NNLS with the least-squares total as it ran before the batched graph
    served totals: the in-memory loop on the Dask arrays, every step from the driver."""
    from dpmm.reconstruct.chunked import ChunkedKron, _factor_gram, chunked_least_squares
    from dpmm.reconstruct.gram import largest_gram_eigenvalue
    from dpmm.reconstruct.projected_gradient import minimize_nonnegative_quadratic, scalars

    linear = ChunkedKron(A).apply_adjoint(tensor).persist()
    start = chunked_least_squares(A, tensor).persist()
    (total,) = scalars(start.sum())
    solution = minimize_nonnegative_quadratic(
        ChunkedKron(Kron([_factor_gram(f) for f in A.factors])).apply,
        linear,
        start,
        largest_gram_eigenvalue(A),
        total=max(total, 0.0),
        tolerance=tolerance,
        max_iterations=limit,
    )
    return Estimate(
        solution.x, "nnls", None, None, solution.iterations, solution.residual, solution.converged
    )


def scattered(client: Any, y: np.ndarray, shape: tuple[int, ...], blocks: int) -> Any:
    """y as a Dask array split along the first axis, its blocks already on the workers."""
    import dask.array as da

    tensor = y.reshape(shape)
    piece = -(-shape[0] // blocks)
    parts = [tensor[lo : lo + piece] for lo in range(0, shape[0], piece)]
    futures = client.scatter(parts)
    return da.concatenate(
        [da.from_delayed(f, p.shape, dtype=p.dtype) for f, p in zip(futures, parts, strict=True)],
        axis=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="10⁵ and 10⁴ cells")
    parser.add_argument("--chunks", type=int, default=2, help="blocks along the first axis")
    parser.add_argument("--max-iterations", type=int, default=None)
    args = parser.parse_args()
    limit = args.max_iterations
    identity_shape = (20, 25, 200) if args.quick else (200, 250, 200)
    tree_shape = (20, 25, 20) if args.quick else (100, 100, 100)

    cases = [
        ("identity", Kron([Identity(n) for n in identity_shape]), True),
        ("hierarchical", Kron([Hierarchical(n, 4) for n in tree_shape]), False),
        ("hierarchical-total", Kron([Hierarchical(n, 4) for n in tree_shape]), "estimated"),
    ]
    print(f"### NNLS to a relative KKT residual of {args.tolerance:g}, ε = {EPSILON} Laplace noise")
    print()
    print(
        "| case | run | iterations | residual | converged | time (s) | peak alloc (MB) "
        "| peak RSS (MB) | worker peak RSS (MB) | max |Δx| / max x̂ vs in-memory |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    memory_results = {}
    for name, A, with_total in cases:
        x, y = problem(A, args.seed)
        total = float(x.sum()) if with_total is True else with_total or None
        label = f"{name} {'×'.join(str(f.shape[1]) for f in A.factors)} = {A.shape[1]:.0e} cells"
        if with_total:
            label += f", {'least-squares' if isinstance(total, str) else 'known'} total"
        estimate, seconds, peak = timed(
            lambda A=A, y=y, total=total: nnls(
                A, y, total=total, tolerance=args.tolerance, max_iterations=limit
            )
        )
        memory_results[name] = (label, A, y, total, estimate)
        print(row(label, "in memory", estimate, seconds, peak), flush=True)

    from dask.distributed import Client, LocalCluster

    for name in ("identity", "hierarchical", "hierarchical-total"):
        # A fresh cluster per case, so the workers' peak RSS belongs to that case.
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
            Client(cluster) as client,
        ):
            label, A, y, total, reference = memory_results[name]
            shape = tuple(f.shape[0] for f in A.factors)
            tensor = scattered(client, y, shape, args.chunks)
            runs = {
                f"dask 2 workers, {args.chunks} blocks": lambda A=A, tensor=tensor, total=total: (
                    nnls(A, tensor, total=total, tolerance=args.tolerance, max_iterations=limit)
                )
            }
            if name == "hierarchical-total":
                runs["dask, driver loop (before)"] = lambda A=A, tensor=tensor: driver_loop(
                    A, tensor, args.tolerance, limit
                )
            for where, solve in runs.items():
                estimate, seconds, peak = timed(solve)
                chunked = estimate.x.compute().reshape(-1)
                diff = np.abs(chunked - reference.x).max() / max(reference.x.max(), 1e-300)
                workers = " / ".join(f"{v:.0f}" for v in client.run(worker_rss_mb).values())
                line = row(label, where, estimate, seconds, peak, workers, f"{diff:.1e}")
                print(line, flush=True)


if __name__ == "__main__":
    main()
