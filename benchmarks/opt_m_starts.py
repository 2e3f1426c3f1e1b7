"""OPT_M's packing starts: every packing descended, against those that begin below the
workload's own tables (what :func:`~dpmm.strategy.weighted_marginals.optimize_marginal_weights`
does), on the same workloads in the same run.

A packing puts unit weight on larger tables that each hold several workload tables
(:mod:`dpmm.strategy.marginal_designs`). OPT_M descends the best few of each block size,
but only those whose loss at the start is below that of the workload's own tables, and it
gives a block size up after a few packings that all begin above it. "every packing" here
is the rule before that: the best few of each size, whatever their loss. Each row runs
``--runs`` optimizations with fresh OS-seeded starts per variant (three random restarts,
as ``auto`` runs it) and prints the median and least loss (the expected total squared
error under ε = 1 over 2, as the template computes it) and the median CPU seconds::

    python benchmarks/opt_m_starts.py --runs 5

Workloads: all 3-way tables of [10]^8 (where a packing, S(3, 4, 8), wins), the 2-way
tables of HDMM's Adult-like domain, of the 14 Adult attributes and of 12 binary
attributes, the 3-way tables of 8 Adult attributes and of [4]^10, and the Adult accuracy
targets' workload (``config/examples/adult-targets.yaml``: marginals and age CDFs by sex,
through HDMM's marginals approximation).

On the 2-core development host, other work paused, ``--runs 5`` printed (the medians;
the least losses are left out here)::

    workload                  every: median  below: median  ratio  every: CPU s  below: CPU s  ratio
    ------------------------  -------------  -------------  -----  ------------  ------------  -----
    3-way of [10]^8              8.9337e+07     8.9337e+07  1.000          0.14          0.08   0.58
    2-way of Adult-like          6.5185e+06     6.5513e+06  1.005          0.24          0.14   0.60
    2-way of Adult (14)          3.9365e+08     3.9461e+08  1.002          1.51          0.86   0.57
    3-way of Adult (first 8)     8.1374e+08     8.1883e+08  1.006          0.14          0.10   0.67
    2-way of 12 binary                64025          64025  1.000          1.39          1.28   0.92
    3-way of [4]^10              1.6912e+07     1.6776e+07  0.992          0.34          0.33   0.98
    Adult accuracy targets       5.1954e+05     5.2367e+05  1.008          1.05          0.58   0.55

The medians agree within the spread of the random restarts (±1 %); the packings left
out began 1.9-12 times above the workload's tables and never ended best.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from contention import print_table

import dpmm.strategy.weighted_marginals as weighted_marginals
from dpmm.config import load_config
from dpmm.linalg import Marginals, Matrix
from dpmm.workload import stack

ROOT = Path(__file__).resolve().parent.parent
ADULT = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)
ADULT_LIKE = (9, 16, 7, 15, 6, 5, 2, 2, 42, 41)


def _all_k_way(shape: tuple[int, ...], k: int) -> Marginals:
    return Marginals(shape, {s: 1.0 for s in itertools.combinations(range(len(shape)), k)})


def _adult_targets() -> Matrix:
    return stack(load_config(ROOT / "config" / "examples" / "adult-targets.yaml").workload)


WORKLOADS: dict[str, Callable[[], Matrix]] = {
    "3-way of [10]^8": lambda: _all_k_way((10,) * 8, 3),
    "2-way of Adult-like": lambda: _all_k_way(ADULT_LIKE, 2),
    "2-way of Adult (14)": lambda: _all_k_way(ADULT, 2),
    "3-way of Adult (first 8)": lambda: _all_k_way(ADULT[:8], 3),
    "2-way of 12 binary": lambda: _all_k_way((2,) * 12, 2),
    "3-way of [4]^10": lambda: _all_k_way((4,) * 10, 3),
    "Adult accuracy targets": _adult_targets,
}


def _every_packing(*args, **kwargs):  # the rule before: no bar
    kwargs.pop("below", None)
    return _packing_starts(*args, **kwargs)


_packing_starts = weighted_marginals.packing_starts


def _runs(W: Matrix, runs: int, every: bool) -> tuple[list[float], list[float]]:
    weighted_marginals.packing_starts = _every_packing if every else _packing_starts
    try:
        losses, seconds = [], []
        for _ in range(runs):
            started = time.process_time()
            _, loss = weighted_marginals.optimize_marginal_weights(W, norm=1)
            seconds.append(time.process_time() - started)
            losses.append(loss)
        return losses, seconds
    finally:
        weighted_marginals.packing_starts = _packing_starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="optimizations per variant")
    parser.add_argument("--rows", nargs="*", help="only these workloads (names as printed)")
    args = parser.parse_args()
    header = (
        "workload",
        "every: median",
        "least",
        "CPU s",
        "below: median",
        "least",
        "CPU s",
        "loss ratio",
        "CPU ratio",
    )
    rows = []
    for name, build in WORKLOADS.items():
        if args.rows and name not in args.rows:
            continue
        W = build()
        every, every_s = _runs(W, args.runs, every=True)
        below, below_s = _runs(W, args.runs, every=False)
        rows.append(
            (
                name,
                f"{statistics.median(every):.5g}",
                f"{min(every):.5g}",
                f"{statistics.median(every_s):.2f}",
                f"{statistics.median(below):.5g}",
                f"{min(below):.5g}",
                f"{statistics.median(below_s):.2f}",
                f"{statistics.median(below) / statistics.median(every):.3f}",
                f"{statistics.median(below_s) / statistics.median(every_s):.2f}",
            )
        )
        print(f"{name}: done", flush=True)
    print()
    print_table(header, rows)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
