"""Seed 002's domain-size experiment: average squared error per query of LRM and baselines.

Workloads WDiscrete, WRange, WRelated (m = 256, s = ⌈0.2 · min(m, n)⌉ — the seed's
bold default for s did not survive in its text), pure ε = 0.1 Laplace. Errors are
``dpmm.error.expected_error(W, A, privacy) / m`` (exact, least squares); the LRM row
also prints the seed's own measure (Lemma 1's ``2 Δ² ‖B‖_F² / ε² / m`` of the relaxed
decomposition, whose answers carry a further bias ≤ ‖W − BL‖_F² ‖x‖²) and ‖W − BL‖_F.

    .venv/bin/python benchmarks/lrm.py --quick
    .venv/bin/python benchmarks/lrm.py --sizes 128 256 512
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dpmm.error import expected_error
from dpmm.errors import ConfigError, DpmmError
from dpmm.linalg import Dense, Matrix
from dpmm.privacy import PureDP
from dpmm.strategy import optimize
from dpmm.strategy.lrm import complete_row_space, lrm_decomposition
from dpmm.strategy.lrm_solver import least_squares_scale
from dpmm.workload.lrm_workloads import wdiscrete, wrange, wrelated

BASELINES = ["identity", "workload", "wavelet", "hierarchical", "eigen", "hdmm"]
SIZES = [128, 256, 512, 1024, 2048, 4096, 8192]


def _workload(kind: str, m: int, n: int, rng: np.random.Generator) -> Matrix:
    if kind == "WDiscrete":
        return wdiscrete(m, n, rng)
    if kind == "WRange":
        return wrange(m, n, rng)
    return wrelated(m, n, math.ceil(0.2 * min(m, n)), rng)


def _lrm(W: Matrix, privacy: PureDP, iterations: int, rng: np.random.Generator):
    start = time.perf_counter()
    decomposition = lrm_decomposition(W, privacy, max_iterations=iterations, rng=rng)
    dense = W.dense()
    candidates = [
        complete_row_space(dense, decomposition.L, privacy.norm),
        complete_row_space(dense, decomposition.start, privacy.norm),
    ]
    strategy = min(candidates, key=lambda A: least_squares_scale(dense, A))
    seconds = time.perf_counter() - start

    return Dense(strategy), seconds, decomposition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--quick", action="store_true", help="n = 128 only, 10 LRM rounds")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=60, help="LRM rounds (Algorithm 1)")
    parser.add_argument("--seed", type=int, default=2012)
    args = parser.parse_args()
    sizes = [128] if args.quick else args.sizes
    iterations = 10 if args.quick else args.iterations
    privacy = PureDP("0.1")
    m = args.queries
    rng = np.random.default_rng(args.seed)
    methods = ["lrm", *BASELINES]
    print(f"Average squared error per query (expected_error / m), m = {m}, ε = 0.1, Laplace")
    print("(selection seconds in brackets)\n")
    for kind in ("WDiscrete", "WRange", "WRelated"):
        print(f"### {kind}\n")
        print("| n | " + " | ".join(methods) + " | LRM seed measure | ‖W−BL‖_F | LRM rows |")
        print("|---" * (len(methods) + 4) + "|")
        for n in sizes:
            W = _workload(kind, m, n, rng)
            cells = []
            A, seconds, decomposition = _lrm(W, privacy, iterations, rng)
            try:
                cells.append(f"{expected_error(W, A, privacy) / m:.4g} ({seconds:.1f}s)")
            except DpmmError as error:
                cells.append(f"{type(error).__name__} ({seconds:.1f}s)")
            for name in BASELINES:
                start = time.perf_counter()
                try:
                    strategy = optimize(W, name, privacy)
                except ConfigError:
                    cells.append("n/a")
                    continue
                except DpmmError as error:
                    cells.append(type(error).__name__)
                    continue
                took = time.perf_counter() - start
                try:
                    cells.append(f"{expected_error(W, strategy, privacy) / m:.4g} ({took:.1f}s)")
                except DpmmError as error:
                    cells.append(f"{type(error).__name__} ({took:.1f}s)")
            seed = decomposition.variance_error(privacy) / m
            print(
                f"| {n} | " + " | ".join(cells) + f" | {seed:.4g} | {decomposition.residual:.3g}"
                f" | {A.shape[0]} |",
                flush=True,
            )
        print()


if __name__ == "__main__":
    main()
