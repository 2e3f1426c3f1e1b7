"""Vector form of a numeric attribute: buckets, the prefix-sum workload ``W·D`` and truncation.

A numeric attribute is split into ``n`` buckets ``(u_{i−1}, u_i]`` with integer upper bounds
``u_i``. The data become a count vector ``x`` (people per bucket) and every bucket gets the
weight ``u_i`` (seed 003, section 2), so the sum of the values of the people up to bucket ``e``
is ``(W D x)_q = Σ_{j ≤ e} u_j x_j``. Truncation at ``θ`` replaces ``D`` by
``T = diag(min(u_j, θ))``: one person then changes ``W T x`` by at most ``θ`` per query.

Person-level privacy: a record is one person. :func:`person_totals` sums each person's
values over their rows (for randhie, income over the years they were observed), so a person
occupies exactly one bucket: adding or removing a person changes one count by 1 and each
prefix sum by at most its bucket weight (``min(u, θ)`` after truncation).

Example:
    >>> workload = prefix_sum_workload(width=10, buckets=4, queries=2)
    >>> workload.bounds.tolist(), workload.ends.tolist()
    ([10, 20, 30, 40], [1, 3])
    >>> x = vectorize(np.array([3.0, 12.5, 40.0]), workload.bounds)
    >>> x.tolist(), workload.true_answers(x).tolist()
    ([1, 1, 0, 1], [30, 70])
    >>> workload.truncated_weights(25).tolist()
    [10, 20, 25, 25]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dpmm.errors import ArgumentError
from dpmm.linalg import Matrix, Product, RangeQueries, Sparse

__all__ = [
    "PrefixSumWorkload",
    "person_totals",
    "prefix_sum_workload",
    "vectorize",
]


@dataclass(frozen=True, eq=False)
class PrefixSumWorkload:
    """Prefix sums over buckets: query ``q`` sums the weights of buckets ``0 … ends[q]``.

    Attributes:
        bounds: The buckets' integer upper bounds ``u_1 < … < u_n`` (the weights ``D``).
        ends: Increasing bucket indices, one per query (the last bucket each query covers).
    """

    bounds: np.ndarray
    ends: np.ndarray

    def __post_init__(self) -> None:
        bounds = np.asarray(self.bounds)
        ends = np.asarray(self.ends)
        if bounds.ndim != 1 or bounds.size == 0 or not np.issubdtype(bounds.dtype, np.integer):
            raise ArgumentError("Bucket upper bounds must be a non-empty vector of integers.")
        if bounds[0] <= 0 or np.any(np.diff(bounds) <= 0):
            raise ArgumentError("Bucket upper bounds must be positive and strictly increasing.")
        if ends.ndim != 1 or ends.size == 0 or not np.issubdtype(ends.dtype, np.integer):
            raise ArgumentError(
                "Prefix-sum query ends must be a non-empty vector of bucket indices."
            )
        if ends[0] < 0 or ends[-1] >= bounds.size or np.any(np.diff(ends) <= 0):
            raise ArgumentError(
                f"Prefix-sum query ends must increase strictly within 0…{bounds.size - 1}."
            )
        object.__setattr__(self, "bounds", bounds.astype(np.int64))
        object.__setattr__(self, "ends", ends.astype(np.int64))

    @property
    def size(self) -> int:
        """The number of buckets ``n``."""
        return int(self.bounds.size)

    @property
    def queries(self) -> int:
        """The number of prefix-sum queries ``p``."""
        return int(self.ends.size)

    @property
    def matrix(self) -> Matrix:
        """The 0/1 workload ``W`` (p × n) as an implicit range-query matrix."""
        return RangeQueries(self.size, np.column_stack([np.zeros_like(self.ends), self.ends]))

    def truncated_weights(self, theta: int | None) -> np.ndarray:
        """The diagonal of ``T``: ``min(u_j, θ)``; ``D`` itself when ``θ`` is ``None``."""
        if theta is None:
            return self.bounds.copy()
        if int(theta) != theta or theta < 1:
            raise ArgumentError(
                f"A truncation threshold must be a positive integer, got {theta!r}."
            )
        return np.minimum(self.bounds, int(theta))

    def weighted(self, weights: np.ndarray) -> Matrix:
        """The weighted workload ``W·diag(weights)`` (``W D`` or ``W T``) as a product."""
        return Product([self.matrix, Sparse(sp.diags_array(np.asarray(weights, dtype=float)))])

    def answer(self, vector: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``W diag(weights) vector`` by one cumulative sum (weights default to ``D``)."""
        scaled = np.asarray(vector) * (self.bounds if weights is None else weights)
        return np.cumsum(scaled, axis=-1)[..., self.ends]

    def true_answers(self, counts: np.ndarray) -> np.ndarray:
        """The exact answers ``W D x`` (integers) the released answers estimate."""
        return self.answer(np.asarray(counts, dtype=np.int64))

    def queries_per_bucket(self) -> np.ndarray:
        """How many queries read each bucket: the column sums of ``W``."""
        covered = np.zeros(self.size + 1, dtype=np.int64)
        np.add.at(covered, 0, self.queries)
        np.add.at(covered, self.ends + 1, -1)
        return np.cumsum(covered)[: self.size]

    def sensitivity(self, weights: np.ndarray) -> int:
        """L1 sensitivity of ``W diag(weights)``: ``max_j weights_j · #queries reading j``."""
        return int(np.max(np.asarray(weights, dtype=np.int64) * self.queries_per_bucket()))


def prefix_sum_workload(width: int, buckets: int, queries: int) -> PrefixSumWorkload:
    """Seed 003's workloads: ``buckets`` buckets of ``width``, ``queries`` evenly spaced prefixes.

    With ``width=800, buckets=1000`` and ``queries`` 1000, 100, 10 these are ``Q1``, ``Q2``,
    ``Q3`` (query ``i`` of ``Q2`` is the prefix up to ``σ_{10 i} = 8000 i``).

    Raises:
        ArgumentError: a non-positive size, or ``queries`` does not divide ``buckets``.
    """
    if min(width, buckets, queries) < 1 or buckets % queries:
        raise ArgumentError(
            f"Need positive width and counts with queries dividing buckets; got width={width}, "
            f"buckets={buckets}, queries={queries}."
        )
    step = buckets // queries
    bounds = width * np.arange(1, buckets + 1, dtype=np.int64)
    return PrefixSumWorkload(bounds, np.arange(step - 1, buckets, step, dtype=np.int64))


def person_totals(values: np.ndarray, persons: np.ndarray) -> np.ndarray:
    """Each person's total over their rows: one record per person (person-level privacy).

    Args:
        values: One non-negative number per row.
        persons: The person identifier of each row (same length).

    Returns:
        The per-person sums, in the order of the sorted identifiers.

    Raises:
        ArgumentError: lengths differ, or a value is negative or not finite.

    Example:
        >>> person_totals(np.array([1.0, 2.0, 5.0]), np.array([7, 9, 7])).tolist()
        [6.0, 2.0]
    """
    values = np.asarray(values, dtype=np.float64)
    persons = np.asarray(persons)
    if values.shape != persons.shape or values.ndim != 1:
        raise ArgumentError("Values and person identifiers must be vectors of the same length.")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ArgumentError("Summed values must be finite and non-negative.")
    _, index = np.unique(persons, return_inverse=True)
    return np.bincount(index, weights=values)


def vectorize(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Counts per bucket ``(u_{i−1}, u_i]`` (the first bucket also holds 0): the vector ``x``.

    Raises:
        ArgumentError: a value is negative, not finite or above the last upper bound (the
            domain is public; values outside it are an input error, not something to clip
            silently).
    """
    values = np.asarray(values, dtype=np.float64)
    bounds = np.asarray(bounds)
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ArgumentError("Values must be finite and non-negative to be bucketed.")
    if values.size and values.max() > bounds[-1]:
        raise ArgumentError(
            f"A value {values.max():g} lies above the last bucket bound {int(bounds[-1])}."
        )
    index = np.searchsorted(bounds, values, side="left")
    return np.bincount(index, minlength=bounds.size).astype(np.int64)
