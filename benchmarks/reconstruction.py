"""NNLS solver speed on a DPBench histogram: dpmm's against SciPy's.

One NNLS problem (NETTRACE, hierarchical strategy over all ranges, ε = 0.1) solved by
dpmm's ``nnls`` (accelerated projected gradient on the implicit strategy), by
``scipy.optimize.nnls`` on the dense strategy, and by L-BFGS-B with bounds on the
implicit strategy (same warm start as dpmm). Medians of ``--repeat`` runs; peak memory
allocated during the solve (tracemalloc, which numpy reports into). Dense NNLS runs on
n = 1024 (bins aggregated by 4) unless ``--dense-full``; dpmm and L-BFGS-B run at both
sizes. Which solver a release uses, and how its answers' errors and error bars compare, is
``benchmarks/answers.py``.

Usage:
    python benchmarks/reconstruction.py [--repeat 3] [--quick] [--dense-full]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.optimize

from dpmm.linalg import AllRange, Matrix
from dpmm.privacy import PureDP
from dpmm.reconstruct import least_squares, nnls
from dpmm.strategy import optimize

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "dpbench_1d"
TOLERANCE = 1e-6


def load(name: str, n: int) -> np.ndarray:
    counts = np.load(DATA / f"{name}.n4096.npy").astype(np.float64)
    return counts.reshape(n, -1).sum(axis=1)  # aggregate adjacent bins when n < 4096


def kkt_residual(A: Matrix, y: np.ndarray, x: np.ndarray) -> float:
    """‖x − max(x − ∇f/L, 0)‖·L / ‖Aᵀy‖, the stopping rule dpmm uses (L = ‖A‖₂²)."""
    from dpmm.reconstruct.gram import largest_gram_eigenvalue

    L = largest_gram_eigenvalue(A)
    gradient = A.T @ (A @ x - y)
    return float(np.linalg.norm(x - np.maximum(x - gradient / L, 0)) * L / np.linalg.norm(A.T @ y))


def lbfgsb(A: Matrix, y: np.ndarray, tolerance: float) -> np.ndarray:
    start = np.maximum(least_squares(A, y).x, 0.0)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        residual = A @ x - y
        return 0.5 * float(residual @ residual), A.T @ residual

    scale = float(np.linalg.norm(A.T @ y))
    result = scipy.optimize.minimize(
        objective,
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * A.shape[1],
        options={
            "maxiter": 20000,
            "maxfun": 40000,
            "ftol": 1e-16,
            "gtol": tolerance * scale / A.shape[1],
        },
    )
    return result.x


def measure(solve: Callable[[], np.ndarray], repeat: int) -> tuple[float, float, np.ndarray]:
    times, peaks = [], []
    for _ in range(repeat):
        tracemalloc.start()
        started = time.perf_counter()
        x = solve()
        times.append(time.perf_counter() - started)
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return statistics.median(times), max(peaks), x


def speed_table(sizes: list[int], dense_sizes: set[int], repeat: int, seed: int) -> list[str]:
    rows = [
        f"### NNLS solvers on NETTRACE, hierarchical strategy, ε = 0.1 (median of {repeat})",
        "",
        "| n | solver | time (s) | peak alloc (MB) | ½‖Ax−y‖² | rel. KKT residual |",
        "|---|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(seed)
    for n in sizes:
        x = load("NETTRACE", n)
        A = optimize(AllRange(n), "hierarchical", PureDP(0.1))
        y = A @ x + rng.laplace(0.0, A.sensitivity(1) / 0.1, A.shape[0])
        solvers: dict[str, Callable[[], np.ndarray]] = {
            "dpmm nnls (implicit)": lambda A=A, y=y: nnls(A, y, tolerance=TOLERANCE).x,
            "L-BFGS-B bounds (implicit)": lambda A=A, y=y: lbfgsb(A, y, TOLERANCE),
        }
        if n in dense_sizes:
            dense = A.dense()
            solvers["scipy.optimize.nnls (dense)"] = lambda dense=dense, y=y, n=n: (
                scipy.optimize.nnls(dense, y, maxiter=50 * n)[0]
            )
        for label, solve in solvers.items():
            seconds, peak, solution = measure(solve, repeat)
            objective = 0.5 * float(np.sum((A @ solution - y) ** 2))
            rows.append(
                f"| {n} | {label} | {seconds:.3f} | {peak:.1f} | {objective:.6e} | "
                f"{kkt_residual(A, y, solution):.1e} |"
            )
        if n not in dense_sizes:
            rows.append(f"| {n} | scipy.optimize.nnls (dense) | skipped (use --dense-full) | | | |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="n = 1024, 1 repeat")
    parser.add_argument("--dense-full", action="store_true", help="dense NNLS at n = 4096 too")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    sizes = [1024] if args.quick else [1024, 4096]
    dense_sizes = {1024, 4096} if args.dense_full else {1024}
    print("\n".join(speed_table(sizes, dense_sizes, repeat, args.seed)))


if __name__ == "__main__":
    main()
