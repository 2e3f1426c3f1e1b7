"""The six workloads of the local-DP experiments (seed 004, §6.1), as dense matrices.

Histogram, Prefix and All Range are over a 1-d domain of n cells. All Marginals,
3-Way Marginals and Parity are over the binary domain ``{0,1}^d`` with ``n = 2^d``; cell
u holds the attribute bits of u (attribute i is bit d−1−i, so cell order is row-major).

Example:
    >>> [build_workload(name, 8).shape for name in WORKLOADS]
    [(8, 8), (8, 8), (36, 8), (27, 8), (8, 8), (7, 8)]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from itertools import combinations

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.linalg import AllRange, Identity, Marginals, Prefix

__all__ = [
    "WORKLOADS",
    "all_marginals",
    "all_range",
    "build_workload",
    "histogram",
    "k_way_marginals",
    "parity",
    "prefix",
    "subset_bits",
]


#: These workloads are dense by definition: no cap on their size (``Matrix.dense`` has one).
_NO_LIMIT = sys.maxsize


def histogram(n: int) -> np.ndarray:
    """One count per cell: the identity."""
    return Identity(n).dense(limit=_NO_LIMIT)


def prefix(n: int) -> np.ndarray:
    """The empirical CDF: query i counts cells 0..i."""
    return Prefix(n).dense(limit=_NO_LIMIT)


def all_range(n: int) -> np.ndarray:
    """Every interval ``[a, b]``, ``0 ≤ a ≤ b < n`` (n(n+1)/2 queries)."""
    return AllRange(n).dense(limit=_NO_LIMIT)


def _dimensions(n: int) -> int:
    d = int(n).bit_length() - 1
    if n < 2 or 1 << d != n:
        raise ArgumentError(f"Binary-domain workloads need n a power of two ≥ 2, got {n}.")
    return d


def subset_bits(n: int) -> np.ndarray:
    """``bits[u, i]``: attribute i of cell u (n × d, 0/1)."""
    d = _dimensions(n)
    return (np.arange(n)[:, None] >> (d - 1 - np.arange(d))[None, :]) & 1


def _marginals(n: int, subsets: list[tuple[int, ...]]) -> np.ndarray:
    """The marginals on ``subsets`` of ``{0,1}^d`` stacked in order (``()`` is the total)."""
    return Marginals((2,) * _dimensions(n), dict.fromkeys(subsets, 1.0)).dense(limit=_NO_LIMIT)


def all_marginals(n: int) -> np.ndarray:
    """Every marginal over every attribute subset (3^d queries, the empty one is the total)."""
    d = _dimensions(n)
    return _marginals(n, [s for k in range(d + 1) for s in combinations(range(d), k)])


def k_way_marginals(n: int, k: int = 3) -> np.ndarray:
    """Every marginal over exactly k attributes (C(d, k) · 2^k queries)."""
    d = _dimensions(n)
    if not 1 <= k <= d:
        raise ArgumentError(f"k-way marginals need 1 ≤ k ≤ d = {d}, got k = {k}.")
    return _marginals(n, list(combinations(range(d), k)))


def parity(n: int, k: int = 3) -> np.ndarray:
    """``(−1)^⟨S, x⟩`` for every attribute subset S with ``1 ≤ |S| ≤ k``."""
    d = _dimensions(n)
    bits = subset_bits(n)
    rows = [
        (-1.0) ** bits[:, list(s)].sum(axis=1)
        for size in range(1, min(k, d) + 1)
        for s in combinations(range(d), size)
    ]
    return np.vstack(rows)


#: Workload builders by the names used in the experiments.
WORKLOADS: dict[str, Callable[[int], np.ndarray]] = {
    "Histogram": histogram,
    "Prefix": prefix,
    "AllRange": all_range,
    "AllMarginals": all_marginals,
    "3WayMarginals": k_way_marginals,
    "Parity": parity,
}


def build_workload(name: str, n: int) -> np.ndarray:
    """The named workload over n cells.

    Raises:
        ArgumentError: an unknown name, or n not a power of two for a binary-domain workload.
    """
    if name not in WORKLOADS:
        raise ArgumentError(f"Unknown workload {name!r}; choose one of {sorted(WORKLOADS)}.")
    return WORKLOADS[name](n)
