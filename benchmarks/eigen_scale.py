"""Eigen-design: error against the SVD bound, and per-cell weights on Dask at 10⁶–10⁸ cells.

Table 1 (Gaussian, ρ = 1): the eigen-design of 1-D and Kron workloads — its exact
expected error (``dpmm.error.expected_error``), the ratio to the SVD bound (the
floor for any strategy) and to Identity (the named baseline), the certified gap
of the weight solver, the median selection time over ``--repeat`` runs, and the
ratio reached after completing each factor (``eigen_design(..., complete=True)``).

Table 2 (Gaussian, ρ = 1): per-cell (non-separable) weights, optimized block-wise
on chunked Dask arrays (threaded scheduler, 10 chunks), for the union
``W = [Prefix ⊗ I ⊗ …; I ⊗ Prefix ⊗ …; …]`` (each attribute's prefixes against every
cell of the others; its Gram eigenvalues are a sum of Kron vectors, so per-cell weights
beat Kron weights). Each size runs once in a fresh process (its peak RSS is
``ru_maxrss``); the solver is warm-started from the separable dual and capped at
``--max-iter`` updates, and its certified gap is printed. The error columns are the
solver's objective times the noise constant; the separable column is the baseline.

Usage:
    python benchmarks/eigen_scale.py [--repeat 3] [--max-iter 20] [--sizes 6,7,8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

SHAPES = {6: (100, 100, 100), 7: (1000, 100, 100), 8: (100, 100, 100, 100)}


def _workload(name: str):
    from dpmm.linalg import AllRange, Identity, Kron, Prefix

    return {
        "AllRange(1024)": lambda: AllRange(1024),
        "Prefix(1024)": lambda: Prefix(1024),
        "AllRange(64)⊗AllRange(64)": lambda: Kron([AllRange(64), AllRange(64)]),
        "AllRange(256)⊗AllRange(256)": lambda: Kron([AllRange(256), AllRange(256)]),
        "Prefix(256)⊗Identity(256)": lambda: Kron([Prefix(256), Identity(256)]),
    }[name]()


def _prefix_union(shape: tuple[int, ...]):
    from dpmm.linalg import Identity, Kron, Prefix, VStack

    return VStack(
        [
            Kron([Prefix(n) if i == j else Identity(n) for j, n in enumerate(shape)])
            for i in range(len(shape))
        ]
    )


def small_case(name: str, repeat: int) -> dict:
    from dpmm.error import expected_error, identity_error, svd_bound
    from dpmm.privacy import ZCDP
    from dpmm.strategy.eigen import eigen_design, solve_eigen_design

    privacy = ZCDP(1)
    times = []
    for _ in range(repeat):
        W = _workload(name)  # fresh matrices: no cached Grams between runs
        start = time.perf_counter()
        design = solve_eigen_design(W, privacy)
        times.append(time.perf_counter() - start)
    error = expected_error(W, design.strategy, privacy)
    completed = expected_error(W, eigen_design(W, privacy, complete=True), privacy)
    return {
        "completed": completed / svd_bound(W, privacy),
        "error": error,
        "svd": error / svd_bound(W, privacy),
        "identity": error / identity_error(W, privacy),
        "gap": design.objective / design.dual_bound - 1,
        "seconds": statistics.median(times),
    }


def large_case(exponent: int, max_iter: int, queue: mp.Queue) -> None:
    import dask

    from dpmm.error import expected_error
    from dpmm.privacy import ZCDP
    from dpmm.strategy.eigen import solve_eigen_design

    dask.config.set(scheduler="threads")
    shape = SHAPES[exponent]
    cells = 10**exponent
    privacy = ZCDP(1)
    W = _prefix_union(shape)
    start = time.perf_counter()
    separable = solve_eigen_design(W, privacy, separable=True)
    separable_seconds = time.perf_counter() - start
    start = time.perf_counter()
    full = solve_eigen_design(
        W, privacy, separable=False, chunk_cells=cells // 10, max_iter=max_iter
    )
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    exact = expected_error(W, full.strategy, privacy)
    error_seconds = time.perf_counter() - start
    constant = privacy.noise_variance(1.0)
    queue.put(
        {
            "shape": "×".join(map(str, shape)),
            "cells": cells,
            "seconds": seconds,
            "separable_seconds": separable_seconds,
            "error_seconds": error_seconds,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "error": full.objective * constant,
            "exact": exact,
            "separable": separable.objective * constant,
            "bound": full.dual_bound * constant,
            "iterations": full.iterations,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-iter", type=int, default=20)
    parser.add_argument("--sizes", default="6,7,8")
    parser.add_argument("--skip-small", action="store_true")
    args = parser.parse_args()

    if not args.skip_small:
        print(
            "| workload (Gaussian ρ=1) | eigen error | / SVD bound | / Identity | gap | time s "
            "| completed / SVD bound |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name in (
            "AllRange(1024)",
            "Prefix(1024)",
            "AllRange(64)⊗AllRange(64)",
            "AllRange(256)⊗AllRange(256)",
            "Prefix(256)⊗Identity(256)",
        ):
            row = small_case(name, args.repeat)
            print(
                f"| {name} | {row['error']:.6g} | {row['svd']:.4f} | {row['identity']:.4f} "
                f"| {row['gap']:.1e} | {row['seconds']:.3f} | {row['completed']:.4f} |",
                flush=True,
            )
        print()

    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes:
        return
    print(
        "| prefix union, cells | shape | per-cell time s | peak RSS MB | iterations "
        "| per-cell error | separable error | per-cell / separable | dual bound "
        "| exact error (check) | error eval s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    context = mp.get_context("spawn")
    for exponent in sizes:
        queue = context.Queue()
        process = context.Process(target=large_case, args=(exponent, args.max_iter, queue))
        process.start()
        row = queue.get()
        process.join()
        print(
            f"| 10^{exponent} | {row['shape']} | {row['seconds']:.1f} | {row['rss_mb']:.0f} "
            f"| {row['iterations']} | {row['error']:.6g} | {row['separable']:.6g} "
            f"| {row['error'] / row['separable']:.4f} | {row['bound']:.6g} "
            f"| {row['exact']:.6g} | {row['error_seconds']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
