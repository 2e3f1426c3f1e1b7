"""Least squares, NNLS and ``auto`` on real data: the error of the requested answers and the
coverage of their ±2 s.e. intervals, through the release's own code.

Each setting is a real histogram, a workload, ε (pure DP) and the strategy ``auto``
selects for them. Each trial is one simulated release: exact discrete Laplace noise
(``measure_strategy``, seeded here: a benchmark, not a release), then
:func:`dpmm.reconstruct.choice.solve_answers` — what ``dpmm release`` runs on the vector —
for ``least_squares``, ``nnls`` and ``auto``, with the bootstrap of the release (100
replicates). Plain NNLS (no total constraint) is shown for reference, by its error only.

Data: DPBench HEPTH (dense) and NETTRACE (sparse), 4,096 bins aggregated to 256 (``--bins``:
1,024 takes about 10× as long per release); Adult's
age × hours-per-week (dense, 8,415 cells) and capital-gain × capital-loss (sparse, 10,000
cells). Printed per setting: mean squared error per query of each solver, each one's ratio
to least squares, the share of trials where ``auto`` took NNLS, and coverage — the share
of all answers over all trials within ±2 of their reported standard errors (least squares:
exact; NNLS+T: bootstrap; auto: whichever it reported).

Rows run in ``--workers`` processes (one per core; each row is one process's work).

Usage:
    python benchmarks/answers.py [--trials 200] [--only 1d|2d] [--bins 256] [--seed 1]
                                 [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

import numpy as np
import pyarrow.csv

from dpmm.linalg import AllRange, Kron, Matrix, Prefix
from dpmm.measure.measurement import measure_strategy
from dpmm.measure.quantize import measurable
from dpmm.privacy import PureDP
from dpmm.reconstruct import nnls
from dpmm.reconstruct.choice import auto_choice, solve_answers
from dpmm.strategy import optimize

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
EPSILONS = (0.1, 1.0)
SOLVERS = ("least_squares", "nnls", "auto")


def dpbench(name: str, n: int = 256) -> np.ndarray:
    counts = np.load(DATA / "dpbench_1d" / f"{name}.n4096.npy", allow_pickle=False)
    return counts.reshape(n, -1).sum(axis=1).astype(np.int64)


def adult_grid(first: str, second: str) -> tuple[np.ndarray, tuple[int, int]]:
    sizes = json.loads((DATA / "adult" / "adult-domain.json").read_text())
    table = pyarrow.csv.read_csv(DATA / "adult" / "adult.csv")
    shape = (sizes[first], sizes[second])
    cells = table[first].to_numpy() * shape[1] + table[second].to_numpy()
    return np.bincount(cells, minlength=shape[0] * shape[1]).astype(np.int64), shape


def settings(only: str | None, bins: int) -> Iterator[tuple[str, np.ndarray, str, Matrix]]:
    if only in (None, "1d"):
        for name in ("HEPTH", "NETTRACE"):
            x = dpbench(name, bins)
            yield name, x, "prefix", Prefix(x.size)
            yield name, x, "all ranges", AllRange(x.size)
    if only in (None, "2d"):
        for first, second in (("age", "hours-per-week"), ("capital-gain", "capital-loss")):
            x, (a, b) = adult_grid(first, second)
            yield f"{first} × {second}", x, "prefix ⊗ prefix", Kron([Prefix(a), Prefix(b)])


def run(name: str, x: np.ndarray, label: str, W: Matrix, eps: float, trials: int, seed: int):
    started = time.perf_counter()
    privacy = PureDP(eps)
    A = optimize(W, "auto", privacy)
    truth = np.asarray(W @ x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    squared = {key: 0.0 for key in (*SOLVERS, "plain_nnls")}
    covered = dict.fromkeys(SOLVERS, 0)
    picked = 0
    quantized = measurable(A)
    for _ in range(trials):
        measured = measure_strategy(quantized, x, privacy, rng=rng)
        A_q, y, std = measured.strategy, measured.answers, measured.noise_std
        least = solve_answers(A_q, y, std, [W], "least_squares", measured.simulate)
        clipped = solve_answers(
            A_q, y, std, [W], "nnls", lambda centre, m=measured: m.simulate(centre, rng)
        )
        auto = auto_choice(least, clipped)  # what solve_answers(..., "auto") returns
        for method, solved in zip(SOLVERS, (least, clipped, auto), strict=True):
            miss = solved.values[0] - truth
            squared[method] += float(np.mean(miss**2))
            covered[method] += int(np.sum(np.abs(miss) <= 2 * solved.standard_errors[0]))
            picked += method == "auto" and solved.method == "nnls"
        plain = np.asarray(W @ nnls(A_q, y, noise_std=std).x) - truth
        squared["plain_nnls"] += float(np.mean(plain**2))
    mse = {key: value / trials for key, value in squared.items()}
    coverage = {key: value / (trials * truth.size) for key, value in covered.items()}
    ls = mse["least_squares"]
    return (
        f"| {name} | {label} | {eps} | {mse['least_squares']:.4g} | {mse['plain_nnls'] / ls:.2f} "
        f"| {mse['nnls'] / ls:.2f} | {mse['auto'] / ls:.2f} | {picked / trials:.0%} "
        f"| {coverage['least_squares']:.3f} | {coverage['nnls']:.3f} | {coverage['auto']:.3f} "
        f"| {time.perf_counter() - started:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--only", choices=("1d", "2d"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bins", type=int, default=256, help="1-D bins (divides 4,096)")
    parser.add_argument("--workers", type=int, default=1, help="rows run at once")
    args = parser.parse_args()
    print(
        f"Mean squared error per query (MSE) over {args.trials} simulated releases per row; "
        "NNLS, NNLS+T (constrained to the least-squares total, the release's NNLS) and auto "
        "as ratios to least squares (LS); coverage of ±2 s.e.\n"
    )
    print(
        "| data | workload | ε | LS MSE | NNLS / LS | NNLS+T / LS | auto / LS | auto took NNLS "
        "| LS coverage | NNLS+T coverage | auto coverage | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [(*setting, eps) for setting in settings(args.only, args.bins) for eps in EPSILONS]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for line in pool.map(_row, rows, repeat(args.trials), repeat(args.seed)):
            print(line, flush=True)


def _row(row: tuple, trials: int, seed: int) -> str:
    name, x, label, W, eps = row
    return run(name, x, label, W, eps, trials, seed)


if __name__ == "__main__":
    main()
