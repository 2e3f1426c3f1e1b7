"""NNLS on Kronecker strategies: ADMM (:mod:`dpmm.reconstruct.admm`) against accelerated
projected gradient (:mod:`dpmm.reconstruct.projected_gradient`), in memory and on a
2-worker Dask LocalCluster.

The strategy is ``AllRange ⊗ Prefix ⊗ Prefix`` over a cube of about ``--sizes`` cells;
the data are Zipf(1.5) counts (capped at 10⁴) in 20 % of the cells, Laplace noise of
scale sensitivity/ε with ε = 1 (numpy's floating-point Laplace: a benchmark, not a
release). Both solvers start from the least-squares estimate and stop on the same
relative KKT residual (``--tolerance``, default 1e-6) or after ``--max-iterations``;
with ``total`` they are held to the least-squares total (the release's ``estimated``).

Printed per run, one table: iterations, products with H (projected gradient) or with
an eigenbasis ``⊗Q_i`` or its transpose (ADMM: two per iteration and two per check),
the final KKT residual, wall and CPU seconds (the driver's, plus the workers' on the
cluster), the driver's scheduler round trips on the cluster (persists), and projected
gradient's time over ADMM's. On the cluster the measurements are split into two blocks
along the first axis (one per worker process, one thread each); the cluster's products
are counted from its iterations and checks.

Measured here (2026-11-27, 2 cores shared with other test suites and benchmarks, load
average 4-15, seed 2026). With the solves inside :func:`~dpmm.blas_threads.blas_limit`,
as a release's reconstruction runs them (``--sizes 1e5 --cluster-sizes
--max-iterations 1000``)::

    where     cells total    solver             iter. prod. KKT res. wall s  CPU s
    memory   99,452 none     projected gradient  1000   1100  6.1e-03    7.7    5.1
    memory   99,452 none     ADMM                1000   2202  1.2e-05    4.6    3.0
    memory   99,452 LS total projected gradient  1000   1100  3.8e-04   11.1    7.4
    memory   99,452 LS total ADMM                1000   2202  9.9e-05    5.7    3.7

and at 10⁶ cells (``--sizes 1e6 --cluster-sizes --max-iterations 300``), where after
300 iterations ADMM is no closer than projected gradient (cheaper per iteration only)::

    memory 1,000,000 none     projected gradient   300    330  9.5e-01   50.3   23.5
    memory 1,000,000 none     ADMM                 300    662  1.0e+00   20.9   16.8
    memory 1,000,000 LS total projected gradient   300    330  1.6e-03   32.0   28.3
    memory 1,000,000 LS total ADMM                 300    662  2.2e-03   21.6   19.5

An earlier run left numpy's 2 OpenBLAS threads on the loaded machine (``--sizes 1e4 1e5
--max-iterations 5000``, then ``--sizes --cluster-sizes 1e5 --max-iterations 400``);
its busy-waiting threads made an eigenbasis product 10× dearer (66 ms of CPU against
5.5 ms with one thread, at 10⁵ cells), hence ADMM's CPU seconds at 10⁵ cells here::

    where     cells total    solver             iter. prod. KKT res. wall s  CPU s trips
    memory   10,164 none     projected gradient  5000   5498  4.2e-05   15.5    3.1
    memory   10,164 none     ADMM                5000  11002  8.0e-06    7.0    1.3
    memory   10,164 LS total projected gradient  5000   5500  5.4e-06   30.7    5.8
    memory   10,164 LS total ADMM                5000  11002  3.2e-06   10.7    2.1
    memory   99,452 none     projected gradient  5000   5500  4.5e-04  131.3   25.7
    memory   99,452 none     ADMM                5000  11002  5.7e-06  878.6  251.2
    memory   99,452 LS total projected gradient  5000   5500  1.9e-05  104.9   40.2
    memory   99,452 LS total ADMM                5000  11002  1.6e-05  380.5  204.2
    cluster  99,452 none     projected gradient   400    441  2.7e-02   15.2   11.4   12
    cluster  99,452 none     ADMM                 400    882  2.4e-05   34.1   26.0   12
    cluster  99,452 LS total projected gradient   400    441  1.1e-03   49.1   35.2   12
    cluster  99,452 LS total ADMM                 400    882  2.4e-04   33.4   33.4   12

Neither solver reached 1e-6 within the limits. After as many iterations ADMM's residual
is 4-500× lower, and on the cluster it runs in as many round trips as projected
gradient (12 persists for 400 iterations).

Usage:
    python benchmarks/kron_nnls.py [--sizes 1e4 1e5 1e6] [--cluster-sizes 1e5 1e6]
        [--tolerance 1e-6] [--max-iterations 5000]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dpmm.blas_threads import blas_limit
from dpmm.linalg import AllRange, Kron, Prefix
from dpmm.reconstruct import chunked, chunked_loop, least_squares
from dpmm.reconstruct.admm import KronSpectrum, kron_spectrum, minimize_kron_quadratic
from dpmm.reconstruct.gram import largest_gram_eigenvalue
from dpmm.reconstruct.nnls import nnls_setup
from dpmm.reconstruct.projected_gradient import (
    CHECK_EVERY,
    Solution,
    minimize_nonnegative_quadratic,
)
from dpmm.reconstruct.protocol import resolve_total

EPSILON = 1.0


def strategy(cells: float) -> Kron:
    """``AllRange(a) ⊗ Prefix(b) ⊗ Prefix(b)`` with ``a·b² ≈ cells`` and ``a ≈ b``."""
    side = max(2, round(cells ** (1 / 3)))
    first = max(2, round(cells / side**2))
    return Kron([AllRange(first), Prefix(side), Prefix(side)])


def measurements(A: Kron, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.minimum(rng.zipf(1.5, A.shape[1]), 10_000).astype(np.float64)
    x[rng.random(A.shape[1]) >= 0.2] = 0.0
    return A @ x + rng.laplace(0.0, A.sensitivity(1) / EPSILON, A.shape[0])


class _Counted:
    """A :class:`KronSpectrum` that counts its eigenbasis products."""

    def __init__(self, spectrum: KronSpectrum) -> None:
        self.spectrum, self.products = spectrum, 0
        self.values, self.rotated_ones = spectrum.values, spectrum.rotated_ones

    def initial_rho(self) -> float:
        return self.spectrum.initial_rho()

    def to_eigen(self, v: np.ndarray) -> np.ndarray:
        self.products += 1
        return self.spectrum.to_eigen(v)

    def from_eigen(self, w: np.ndarray) -> np.ndarray:
        self.products += 1
        return self.spectrum.from_eigen(w)

    def hessian(self, v: np.ndarray) -> np.ndarray:
        return self.from_eigen(self.spectrum.values * self.to_eigen(v))


@dataclasses.dataclass
class Row:
    where: str
    cells: int
    total: str
    solver: str
    iterations: int
    products: int
    residual: float
    wall: float
    cpu: float
    round_trips: int | None = None


def _timed(run: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    with blas_limit():  # the BLAS threads a release's reconstruction gets
        result = run(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def in_memory(cells: float, tolerance: float, limit: int, seed: int) -> list[Row]:
    A = strategy(cells)
    y = measurements(A, seed)
    setup = nnls_setup(A)
    linear = np.asarray(A.T @ y, dtype=np.float64)
    start = least_squares(A, y).x
    rows = []
    for total in (None, "estimated"):
        known = resolve_total(total, float(start.sum()))
        calls = [0]

        def hessian(v: np.ndarray, calls: list[int] = calls) -> np.ndarray:
            calls[0] += 1
            return setup.gram @ v

        common = {"total": known, "tolerance": tolerance, "max_iterations": limit}
        solution, wall, cpu = _timed(
            minimize_nonnegative_quadratic, hessian, linear, start, setup.lipschitz, **common
        )
        rows.append(_row("memory", A, total, "projected gradient", solution, calls[0], wall, cpu))
        counted = _Counted(setup.spectrum)
        solution, wall, cpu = _timed(
            minimize_kron_quadratic, counted, linear, start, setup.lipschitz, **common
        )
        rows.append(_row("memory", A, total, "ADMM", solution, counted.products, wall, cpu))
    return rows


def _row(where, A, total, solver, solution: Solution, products, wall, cpu, trips=None) -> Row:
    name = "none" if total is None else "LS total"
    return Row(
        where,
        A.shape[1],
        name,
        solver,
        solution.iterations,
        products,
        solution.residual,
        wall,
        cpu,
        trips,
    )


def _worker_cpu() -> float:
    return time.process_time()


def on_cluster(client, cells: float, tolerance: float, limit: int, seed: int) -> list[Row]:
    import dask.array as da

    A = strategy(cells)
    y = measurements(A, seed)
    shape = tuple(f.shape[0] for f in A.factors)
    tensor = da.from_array(y.reshape(shape), chunks=(-(-shape[0] // 2), *shape[1:]))
    tensor = tensor.persist()
    operator = chunked.ChunkedKron(A)
    linear = operator.apply_adjoint(tensor).persist()
    start = chunked.chunked_least_squares(A, tensor).persist()
    grams = [chunked._factor_gram(f) for f in A.factors]
    spectrum = kron_spectrum(Kron(grams))
    lipschitz = largest_gram_eigenvalue(A)
    rows = []
    trips = [0]
    original = chunked_loop._Tasks.persist

    def counted(self, *args):
        trips[0] += 1
        return original(self, *args)

    chunked_loop._Tasks.persist = counted
    try:
        for total in (None, "estimated"):
            (estimated,) = [float(start.sum().compute())]
            known = resolve_total(total, estimated)
            for solver, used in (("projected gradient", None), ("ADMM", spectrum)):
                trips[0] = 0
                before = sum(client.run(_worker_cpu).values())
                solution, wall, cpu = _timed(
                    chunked._solve_on_blocks,
                    *(grams, used, linear, start, lipschitz, known, tolerance, limit),
                )
                solution.x.sum().compute()  # the blocks exist
                cpu += sum(client.run(_worker_cpu).values()) - before
                checks = 1 + math.ceil(solution.iterations / CHECK_EVERY)
                products = (
                    solution.iterations + checks
                    if used is None
                    else 2 * solution.iterations + 2 * checks
                )
                rows.append(
                    _row("cluster", A, total, solver, solution, products, wall, cpu, trips[0])
                )
    finally:
        chunked_loop._Tasks.persist = original
    return rows


def report(rows: list[Row], title: str) -> None:
    print(f"\n{title}")
    print(
        f"{'where':<8}{'cells':>10} {'total':<9}{'solver':<20}{'iter.':>7}{'products':>9}"
        f"{'KKT res.':>10}{'wall s':>9}{'CPU s':>9}{'trips':>7}{'PG/ADMM':>9}"
    )
    for row in rows:
        ratio = ""
        if row.solver == "ADMM":
            baseline = next(
                r
                for r in rows
                if r.solver != "ADMM"
                and (r.where, r.cells, r.total) == (row.where, row.cells, row.total)
            )
            ratio = f"{baseline.wall / row.wall:.1f}×"
        trips = "" if row.round_trips is None else str(row.round_trips)
        print(
            f"{row.where:<8}{row.cells:>10,} {row.total:<9}{row.solver:<20}{row.iterations:>7}"
            f"{row.products:>9}{row.residual:>10.1e}{row.wall:>9.1f}{row.cpu:>9.1f}"
            f"{trips:>7}{ratio:>9}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[1e4, 1e5, 1e6])
    parser.add_argument("--cluster-sizes", type=float, nargs="*", default=[1e5, 1e6])
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--max-iterations", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    rows = []
    for cells in args.sizes:
        rows += in_memory(cells, args.tolerance, args.max_iterations, args.seed)
    if rows:
        report(rows, f"in memory, tolerance {args.tolerance:g}, limit {args.max_iterations}")
    if args.cluster_sizes:
        from dask.distributed import Client, LocalCluster

        rows = []
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
            Client(cluster) as client,
        ):
            for cells in args.cluster_sizes:
                rows += on_cluster(client, cells, args.tolerance, args.max_iterations, args.seed)
        report(rows, "2-worker LocalCluster (processes), two blocks along the first axis")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
