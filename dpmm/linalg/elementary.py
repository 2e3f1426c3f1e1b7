"""One-dimensional query matrices: identity, totals, prefixes and ranges.

Each applies itself in O(n) or O(m) per column through cumulative sums, and
knows its Gram matrix and column norms in closed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from dpmm.linalg.base import (
    DENSE_LIMIT,
    IntegerNorms,
    Matrix,
    Symmetric,
    _check_norm,
    check_dense_size,
)
from dpmm.linalg.combinators import Dense, Sparse, Weighted

__all__ = [
    "AllRange",
    "ClosedFormGram",
    "Identity",
    "Ones",
    "Prefix",
    "RangeQueries",
    "semiseparable_product",
]


def _count_norms(counts: np.ndarray, p: float) -> np.ndarray:
    """Column p-norms of a 0/1 matrix whose column j has ``counts[j]`` ones."""
    p = _check_norm(p)
    counts = np.asarray(counts, dtype=np.float64)
    if p == np.inf:
        return (counts > 0).astype(np.float64)
    return counts ** (1.0 / p)


class _ZeroOne:
    """A mixin for a 0/1 matrix, whose column norms follow from its ``coverage()``: the
    number of ones in each column."""

    def column_norms(self, p: float = 1) -> np.ndarray:
        return _count_norms(self.coverage(), p)

    def _integer_column_norms(self) -> IntegerNorms:
        counts = np.asarray(self.coverage(), dtype=np.int64)
        return counts, counts, 1


def _tridiagonal(diagonal: np.ndarray, off: float) -> sp.csr_array:
    n = diagonal.size
    return sp.diags_array([np.full(n - 1, off), diagonal, np.full(n - 1, off)], offsets=[-1, 0, 1])


#: Largest closed-form Prefix Gram built (entries, 2 GiB): n = 16,384 and below.
PREFIX_GRAM_LIMIT = 2**28


def semiseparable_product(
    lower: np.ndarray, upper: np.ndarray, X: np.ndarray, axis: int = 0
) -> np.ndarray:
    """``G X`` along ``axis`` for the symmetric ``G_st = lower[min(s, t)] · upper[max(s, t)]``.

    Entry s of ``G x`` is ``upper[s] Σ_{t ≤ s} lower[t] x_t + lower[s] Σ_{t > s} upper[t] x_t``:
    two cumulative sums, O(n) per vector instead of O(n²). ``axis=-1`` computes ``X G`` for
    rows X (fastest on a C-ordered array: no transposed copy).

    Example:
        >>> lower, upper = np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])
        >>> G = np.minimum.outer(lower, lower) * upper[np.maximum.outer([0, 1, 2], [0, 1, 2])]
        >>> X = np.arange(6.0).reshape(3, 2)
        >>> bool(np.allclose(semiseparable_product(lower, upper, X), G @ X))
        True
    """
    X = np.moveaxis(np.asarray(X, dtype=np.float64), axis, -1)
    # The sums run in place along the last axis, contiguous in memory (C order, whatever
    # X's): on a 256 × 4096 block 8 ms against 13 ms with temporaries and 25 ms from
    # Fortran order.
    result = np.empty(X.shape)
    np.multiply(X, lower, out=result)
    np.cumsum(result, axis=-1, out=result)
    result *= upper
    # Σ_{t > s} by a reversed sum, not total − prefix: the short tails keep full precision.
    tail = np.empty((*X.shape[:-1], X.shape[-1] - 1))
    np.multiply(X[..., :0:-1], upper[:0:-1], out=tail)
    np.cumsum(tail, axis=-1, out=tail)
    tail *= lower[-2::-1]
    result[..., :-1] += tail[..., ::-1]
    return np.moveaxis(result, -1, axis)


class ClosedFormGram(Symmetric, Dense):
    """A Gram matrix with a known sparse inverse and known eigenvalues (prefix, all-range).

    The Gram is semiseparable, ``G_st = lower[min(s, t)] · upper[max(s, t)]`` with
    ``generators = (lower, upper)``: it applies itself in O(n) per column by
    :func:`semiseparable_product`, and its trace, diagonal and entry sum cost O(n). Its
    dense array is formed only when read (up to :data:`PREFIX_GRAM_LIMIT` entries), so
    a Gram over 65,536 cells costs 1 MiB until something needs it densely.
    """

    def __init__(
        self,
        inverse: sp.sparray,
        eigenvalues: np.ndarray,
        generators: tuple[np.ndarray, np.ndarray],
    ) -> None:
        n = generators[0].size
        Matrix.__init__(self, (n, n), full_column_rank=True)
        self.inverse = sp.csr_array(inverse)
        self.eigenvalues = np.sort(eigenvalues)[::-1]
        self.generators = generators

    @cached_property
    def array(self) -> np.ndarray:  # type: ignore[override]
        """The dense Gram, formed on first read."""
        n = self.shape[0]
        check_dense_size(n, n, f"the dense Gram of {n:,} cells", limit=PREFIX_GRAM_LIMIT)
        lower, upper = self.generators
        index = np.arange(n)
        return lower[np.minimum.outer(index, index)] * upper[np.maximum.outer(index, index)]

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return semiseparable_product(*self.generators, X)

    def diagonal(self) -> np.ndarray:
        lower, upper = self.generators
        return lower * upper

    def entry_sum(self) -> float:
        return float(semiseparable_product(*self.generators, np.ones((self.shape[0], 1))).sum())

    def gram(self) -> Matrix:
        return Matrix.gram(self)  # Dense's would form the array beyond DENSE_LIMIT

    def column_norms(self, p: float = 1) -> np.ndarray:
        if self.size <= DENSE_LIMIT:
            return Dense.column_norms(self, p)
        return Matrix.column_norms(self, p)

    def pinv(self) -> Sparse:
        return Sparse(self.inverse, full_column_rank=True)

    def singular_values(self) -> np.ndarray:
        return self.eigenvalues.copy()  # symmetric positive definite: σ = λ


class Identity(Symmetric, _ZeroOne, Matrix):
    """The n × n identity: one query per cell."""

    closed_form_gram_pinv = True

    def __init__(self, n: int) -> None:
        super().__init__((n, n), full_column_rank=True)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.array(X, dtype=np.float64, copy=True)

    def entry_sum(self) -> float:
        return float(self.shape[0])

    def _dense(self) -> np.ndarray:
        return np.eye(self.shape[0])

    def gram(self) -> Identity:
        return self

    def pinv(self) -> Identity:
        return self

    def coverage(self) -> np.ndarray:
        return np.ones(self.shape[1], dtype=np.int64)

    def uniform_column_norm(self, p: float = 1) -> float | None:
        _check_norm(p)
        return 1.0 if self.shape[1] else 0.0

    def diagonal(self) -> np.ndarray:
        return np.ones(self.shape[0])

    def trace(self) -> float:
        return float(self.shape[0])

    def _trace_dot(self, other: Matrix) -> float:
        return other.trace()

    def eigh(self) -> tuple[np.ndarray, Matrix]:
        return np.ones(self.shape[0]), self

    def singular_values(self) -> np.ndarray:
        return np.ones(self.shape[0])

    def nuclear_norm(self) -> float:
        return float(self.shape[0])

    def __repr__(self) -> str:
        return f"Identity({self.shape[0]})"


class Ones(_ZeroOne, Matrix):
    """The m × n matrix of ones; ``Ones(1, n)`` is the total query."""

    closed_form_gram_pinv = True

    def __init__(self, rows: int, cols: int) -> None:
        super().__init__((rows, cols))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.repeat(X.sum(axis=0, keepdims=True), self.shape[0], axis=0)

    def _adjoint(self) -> Ones:
        return Ones(self.shape[1], self.shape[0])

    def _dense(self) -> np.ndarray:
        return np.ones(self.shape)

    def gram(self) -> Matrix:
        n = self.shape[1]
        return Weighted(float(self.shape[0]), Ones(n, n))

    def pinv(self) -> Matrix:
        rows, cols = self.shape
        if rows == 0 or cols == 0:
            return Ones(cols, rows)
        return Weighted(1.0 / (rows * cols), Ones(cols, rows))

    def row_space_projector(self) -> Matrix:
        """The projector onto span{1}, ``J / n`` (zero without rows): no dense pinv of an
        n × n Gram, which took half a minute of OPT_⊗'s sweeps at n = 4,096."""
        rows, cols = self.shape
        return Weighted(1.0 / cols if rows and cols else 0.0, Ones(cols, cols))

    def coverage(self) -> np.ndarray:
        return np.full(self.shape[1], self.shape[0], dtype=np.int64)

    def uniform_column_norm(self, p: float = 1) -> float | None:
        return float(_count_norms(np.array([self.shape[0]]), p)[0])

    def diagonal(self) -> np.ndarray:
        return np.ones(min(self.shape))

    def trace(self) -> float:
        return float(min(self.shape))

    def _trace_dot(self, other: Matrix) -> float:
        return other.entry_sum()  # trace(1 1ᵀ other) = 1ᵀ other 1

    def entry_sum(self) -> float:
        return float(self.shape[0] * self.shape[1])

    def singular_values(self) -> np.ndarray:
        values = np.zeros(min(self.shape))
        if values.size:
            values[0] = np.sqrt(self.shape[0] * self.shape[1])
        return values

    def __repr__(self) -> str:
        return f"Total({self.shape[1]})" if self.shape[0] == 1 else super().__repr__()


class Prefix(_ZeroOne, Matrix):
    """The n prefix queries ``x[0] + … + x[i]`` (lower-triangular ones)."""

    closed_form_gram_pinv = True

    def __init__(self, n: int) -> None:
        super().__init__((n, n), full_column_rank=True)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.cumsum(X, axis=0)

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return np.cumsum(X[::-1], axis=0)[::-1]

    def _dense(self) -> np.ndarray:
        return np.tril(np.ones(self.shape))

    def gram(self) -> ClosedFormGram:
        # PᵀP has entries n − max(s, t); its inverse is D Dᵀ for the difference matrix D = P⁻¹.
        n = self.shape[0]
        index = np.arange(n)
        diagonal = np.full(n, 2.0)
        diagonal[0] = 1.0
        return ClosedFormGram(
            _tridiagonal(diagonal, -1.0),
            self.singular_values() ** 2,
            (np.ones(n), n - index.astype(np.float64)),
        )

    def singular_values(self) -> np.ndarray:
        # P⁻¹ = D has DᵀD = tridiag(−1, 2, −1) with last diagonal entry 1, whose eigenvalues
        # are 4 sin²((2k − 1)π / (2(2n + 1))), k = 1 … n.
        n = self.shape[0]
        k = np.arange(1, n + 1)
        return 1.0 / (2.0 * np.sin((2 * k - 1) * np.pi / (2 * (2 * n + 1))))

    def coverage(self) -> np.ndarray:
        n = self.shape[1]
        return n - np.arange(n, dtype=np.int64)

    def __repr__(self) -> str:
        return f"Prefix({self.shape[0]})"


class RangeQueries(_ZeroOne, Matrix):
    """An explicit list of inclusive intervals ``[low, high]`` over n cells."""

    def __init__(self, n: int, intervals: Sequence[tuple[int, int]] | np.ndarray) -> None:
        given = np.asarray(intervals)
        if given.size and not (
            np.issubdtype(given.dtype, np.integer)
            or (np.issubdtype(given.dtype, np.floating) and np.all(given == np.round(given)))
        ):
            raise ValueError("Interval bounds must be integer cell indices")
        bounds = given.astype(np.int64).reshape(-1, 2)
        low, high = bounds[:, 0], bounds[:, 1]
        bad = (low < 0) | (high >= n) | (low > high)
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(
                f"Interval {first} = [{low[first]}, {high[first]}] is not within [0, {n - 1}] "
                "with low ≤ high"
            )
        super().__init__((bounds.shape[0], n))
        self.low, self.high = low, high

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        prefix = np.zeros((X.shape[0] + 1, X.shape[1]))
        np.cumsum(X, axis=0, out=prefix[1:])
        return prefix[self.high + 1] - prefix[self.low]

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        n = self.shape[1]
        delta = np.zeros((n + 1, X.shape[1]))
        np.add.at(delta, self.low, X)
        np.add.at(delta, self.high + 1, -X)
        return np.cumsum(delta[:n], axis=0)

    def coverage(self) -> np.ndarray:
        """How many intervals contain each cell: ``Rᵀ 1`` (exact in float64)."""
        return self._rmatmat(np.ones((self.shape[0], 1)))[:, 0].astype(np.int64)

    def __repr__(self) -> str:
        return f"RangeQueries({self.shape[1]}, {self.shape[0]} intervals)"


class AllRange(RangeQueries):
    """All n(n+1)/2 intervals over n cells, ordered by low end then high end."""

    closed_form_gram_pinv = True

    def __init__(self, n: int) -> None:
        low, high = np.triu_indices(n)
        super().__init__(n, np.stack([low, high], axis=1))
        self._full_column_rank = True  # the n single cells are among the intervals

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        # Rows are sorted by (low, high): sum each low-group and each high-group once,
        # O(m k) with no scatter.
        n = self.shape[1]
        starts = np.concatenate([[0], np.cumsum(np.arange(n, 0, -1))[:-1]])
        by_low = np.add.reduceat(X, starts, axis=0) if X.shape[0] else np.zeros((n, X.shape[1]))
        order = np.lexsort((self.low, self.high))
        high_starts = np.concatenate([[0], np.cumsum(np.arange(1, n + 1))[:-1]])
        by_high = np.add.reduceat(X[order], high_starts, axis=0)
        delta = np.zeros((n + 1, X.shape[1]))
        delta[:n] += by_low
        delta[1:] -= by_high
        return np.cumsum(delta[:n], axis=0)

    def gram(self) -> ClosedFormGram:
        # (min(s,t) + 1)(n − max(s,t)) = (n + 1) T⁻¹ for T = tridiag(−1, 2, −1): the Green's
        # function of the discrete Laplacian.
        n = self.shape[1]
        index = np.arange(n, dtype=np.float64)
        inverse = _tridiagonal(np.full(n, 2.0 / (n + 1)), -1.0 / (n + 1))
        return ClosedFormGram(inverse, self.singular_values() ** 2, (index + 1, n - index))

    def singular_values(self) -> np.ndarray:
        # Eigenvalues of (n + 1) T⁻¹: (n + 1) / (4 sin²(kπ / (2(n + 1)))), k = 1 … n.
        n = self.shape[1]
        k = np.arange(1, n + 1)
        return np.sqrt((n + 1) / (4.0 * np.sin(k * np.pi / (2 * (n + 1))) ** 2))

    def coverage(self) -> np.ndarray:
        index = np.arange(self.shape[1], dtype=np.int64)
        return (index + 1) * (self.shape[1] - index)

    def __repr__(self) -> str:
        return f"AllRange({self.shape[1]})"
