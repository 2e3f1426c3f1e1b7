"""The integer form of a residual block strategy: blocks ``Q_S H_S``, read from marginal tables.

A residual block strategy (:class:`~dpmm.linalg.residual_general.ResidualBlockStrategy`)
measures ``L_S R_S x = L_S D_S m_S`` per attribute set S, with ``m_S`` the S-marginal
table and ``D_S`` a Kronecker product of Helmert matrices. Helmert rows are irrational,
but ``D_S = diag(1/√c) H_S`` with INTEGER rows ``H_S`` (per attribute
``h_k = (1, …, 1, −k, 0, …)``, k = 1 … n − 1, of squared norm ``k(k+1)``;
``c_r = Π_{i∈S} k_i(k_i + 1)``). Rounded to a grid, ``L_S diag(1/√c)`` becomes an integer
matrix ``Q_S``, and the strategy to measure is ``B = [Q_S H_S]``: an integer matrix whose
answers come from the marginal tables alone, in exact int64 arithmetic, and whose column
norms (the sensitivity) are exact integers. ``B / scale`` is the quantized strategy that
reconstruction uses (:meth:`HelmertBlocks.divided`).

Column norms are found exactly by visiting every cell on domains of at most
:data:`~dpmm.linalg.residual_general.EXACT_CELLS` cells (the same limit the real strategy's
sensitivity uses); beyond that the norms are the bound ``Σ_S max_{j_S} ‖(Q_S H_S)[:, j_S]‖``,
never below the largest column's, so noise calibrated to it never spends more than asked.

Example:
    >>> B = HelmertBlocks((2, 3), {0b01: np.array([3]), 0b10: np.array([[2, 0], [1, 1]])})
    >>> B.shape, B.dense().astype(int).tolist()[0]          # 3 · (x₀· − x₁·)
    ((3, 6), [3, 3, 3, -3, -3, -3])
    >>> B.table_answers({(0,): np.array([4, 2]), (1,): np.array([1, 2, 3])}).tolist()
    [6, -2, -4]
    >>> l1, l2_squared, _ = B.integer_column_norms()
    >>> l2_squared.tolist()              # 3² + the column norms of [[2, -2, 0], [2, 0, -2]]
    [17, 13, 13, 17, 13, 13]
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from functools import reduce

import numpy as np

from dpmm.errors import DomainError, TooLargeError
from dpmm.linalg.base import Matrix
from dpmm.linalg.marginals import _shape_of, mask_members
from dpmm.linalg.residual_general import EXACT_CELLS, ResidualBlockStrategy

__all__ = [
    "MAX_BLOCK_ENTRIES",
    "HelmertBlocks",
    "checked_table",
    "helmert_norms",
    "helmert_row_norms",
    "integer_helmert",
]

#: Most entries of one block's integer matrix ``Q_S H_S`` (rows × cells of S) visited.
MAX_BLOCK_ENTRIES = 1 << 26
#: Integers (counts times entries, sums of squares) must stay below this to be exact in int64.
INT_LIMIT = 2**62


def helmert_norms(n: int) -> np.ndarray:
    """``k(k+1)`` for k = 1 … n − 1: the squared norms of the integer Helmert rows.

    Example:
        >>> helmert_norms(4).tolist()
        [2, 6, 12]
    """
    k = np.arange(1, n, dtype=np.int64)
    return k * (k + 1)


def integer_helmert(table: np.ndarray, axis: int) -> np.ndarray:
    """``H`` along ``axis`` (length n → n − 1): row k is ``x_0 + … + x_{k−1} − k x_k``.

    Example:
        >>> integer_helmert(np.array([3, 1, 2]), 0).tolist()
        [2, 0]
    """
    moved = np.moveaxis(table, axis, -1)
    k = np.arange(1, moved.shape[-1], dtype=moved.dtype)
    result = np.cumsum(moved, axis=-1)[..., :-1] - k * moved[..., 1:]
    return np.moveaxis(result, -1, axis)


def helmert_row_norms(sizes: Sequence[int]) -> np.ndarray:
    """``c_r = Π_{i∈S} k_i(k_i + 1)`` for each integer Helmert row of a set (C order)."""
    return reduce(
        lambda acc, n: np.multiply.outer(acc, helmert_norms(n)).reshape(-1),
        sizes,
        np.ones(1, dtype=np.int64),
    )


def _row_peaks(sizes: Sequence[int]) -> np.ndarray:
    """``max_j |H_S[r, j]| = Π k_i`` for each row (float64, only used for bounds)."""
    peaks = np.ones(1)
    for n in sizes:
        peaks = np.multiply.outer(peaks, np.arange(1, n, dtype=np.float64)).reshape(-1)
    return peaks


def _integer_helmert_rows(sizes: Sequence[int]) -> np.ndarray:
    """The dense int64 ``H_S`` (rank × cells of S) for a set with these attribute sizes."""
    parts = [integer_helmert(np.eye(n, dtype=np.int64), 0) for n in sizes]
    return reduce(np.kron, parts, np.ones((1, 1), dtype=np.int64))


class HelmertBlocks(Matrix):
    """The integer strategy ``[Q_S H_S]`` stacked over attribute sets S, in the given order.

    Args:
        shape: the domain's attribute sizes.
        integers: ``{attribute mask: Q_S}``, int64: a ``(rows, rank)`` matrix, or a
            ``(rank,)`` vector for a diagonal block (``Q_S = diag(vector)``), with
            ``rank = Π_{i∈S}(n_i − 1)`` columns: the integer Helmert rows of S in C order
            over S's attributes in ascending order.

    Raises:
        DomainError: a mask is not a set of the domain's attributes, a block is not an
            int64 array of the set's rank, or a set has no rows.
    """

    def __init__(self, shape: Sequence[int], integers: Mapping[int, np.ndarray]) -> None:
        self.domain_shape = _shape_of(shape)
        full = (1 << len(self.domain_shape)) - 1
        self.integers: dict[int, np.ndarray] = {}
        for mask, block in integers.items():
            if not isinstance(mask, int | np.integer) or mask < 0 or mask & ~full:
                raise DomainError(f"Residual set {mask!r} is not a bit mask of the domain")
            rank = math.prod(self.domain_shape[i] - 1 for i in mask_members(int(mask)))
            Q = np.asarray(block)
            if Q.dtype != np.int64 or Q.ndim not in (1, 2) or Q.shape[-1] != rank or not rank:
                raise DomainError(
                    f"the integer block of residual set {mask} must be an int64 vector or "
                    f"matrix with {rank} columns, got {Q.dtype} of shape {Q.shape}"
                )
            self.integers[int(mask)] = Q
        self.sets: tuple[int, ...] = tuple(self.integers)
        rows = [self.rows(mask) for mask in self.sets]
        self.offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        super().__init__((int(self.offsets[-1]), math.prod(self.domain_shape)))

    def rows(self, mask: int) -> int:
        """How many answers block ``mask`` has."""
        return int(self.integers[mask].shape[0])

    def sizes(self, mask: int) -> list[int]:
        """The sizes of the attributes of set ``mask``, in ascending attribute order."""
        return [self.domain_shape[i] for i in mask_members(mask)]

    def helmert_norms(self, mask: int) -> np.ndarray:
        """``c_r = Π_{i∈S} k_i(k_i + 1)`` for each integer Helmert row of ``mask`` (int64)."""
        return helmert_row_norms(self.sizes(mask))

    def normalized(self, mask: int) -> np.ndarray:
        """``G_S = Q_S diag(√c)`` (float): block S's answers are ``G_S R_S x``.

        A vector for a diagonal block (the diagonal), else a ``(rows, rank)`` matrix.
        """
        root = np.sqrt(self.helmert_norms(mask).astype(np.float64))
        Q = self.integers[mask].astype(np.float64)
        return Q * root if Q.ndim == 1 else Q * root[None, :]

    def divided(self, scale: int) -> ResidualBlockStrategy:
        """``B / scale`` as a residual block strategy: blocks ``G_S / scale`` on ``R_S``."""
        # A vector stays a diagonal block, a matrix a dense one: signs and rows kept.
        blocks = {mask: self.normalized(mask) / scale for mask in self.sets}
        return ResidualBlockStrategy(self.domain_shape, blocks)

    def table_sets(self) -> list[tuple[int, ...]]:
        """The marginal tables the answers are computed from, one per set, in block order."""
        return [tuple(mask_members(mask)) for mask in self.sets]

    # -- the real matrix, for small domains: through the residual stack --------------------
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.divided(1)._matmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.divided(1)._rmatmat(Y)

    # -- exact integer facts ---------------------------------------------------------------
    def _block_columns(self, mask: int) -> tuple[np.ndarray, np.ndarray]:
        """``(‖(Q_S H_S)[:, j]‖₁, ‖(Q_S H_S)[:, j]‖₂²)`` for every cell j of S, exact int64.

        Raises:
            TooLargeError: the block is too large to visit, or a norm overflows int64.
        """
        sizes = self.sizes(mask)
        Q = self.integers[mask]
        cells = math.prod(sizes)
        if Q.shape[0] * cells > MAX_BLOCK_ENTRIES:
            raise TooLargeError(
                f"the integer block of residual set {mask} has {Q.shape[0] * cells:,} entries, "
                f"more than the {MAX_BLOCK_ENTRIES:,} its sensitivity may visit"
            )
        H = _integer_helmert_rows(sizes)
        absolute = np.abs(Q).astype(np.float64)
        if Q.ndim == 1:
            peak = float((absolute * _row_peaks(sizes)).max())
        else:
            peak = float((absolute @ np.abs(H).astype(np.float64)).max())
        if peak >= INT_LIMIT:
            raise TooLargeError(f"the integer block of residual set {mask} overflows int64")
        QH = Q[:, None] * H if Q.ndim == 1 else Q @ H
        l1 = np.abs(QH).sum(axis=0)
        if peak * peak * QH.shape[0] < INT_LIMIT:
            return l1, np.einsum("rj,rj->j", QH, QH)
        exact = QH.astype(object)
        return l1, _int64((exact * exact).sum(axis=0).tolist())

    def integer_column_norms(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(column L1 norms, column sums of squares, entry bound)``, exact int64.

        One value per cell on domains of at most ``EXACT_CELLS`` cells; above, one value,
        the bound ``Σ_S max_{j_S}`` (see the module docstring). The entry bound is the
        largest growth of an answer per record, ``max_r Σ_t |Q_S[r, t]| · Π k_i``.

        Raises:
            TooLargeError: a block is too large to visit, or a norm overflows int64.
        """
        shape = self.domain_shape
        per_set: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        distinct: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # symmetric domains repeat
        for mask in self.sets:
            Q = self.integers[mask]
            key = (tuple(self.sizes(mask)), Q.shape, Q.tobytes())
            if key not in distinct:
                distinct[key] = self._block_columns(mask)
            per_set[mask] = distinct[key]
        bounds = [sum(int(c[which].max()) for c in per_set.values()) for which in (0, 1)]
        l1_bound, l2_bound = _int64(bounds)  # the sums fit, so every partial sum does
        growth = max((self._growth(mask) for mask in self.sets), default=1)
        if math.prod(shape) > EXACT_CELLS:
            return _int64([int(l1_bound)]), _int64([int(l2_bound)]), growth
        totals = []
        for which in (0, 1):
            total = np.zeros(shape, dtype=np.int64)
            for mask, columns in per_set.items():
                broadcast = [shape[i] if mask >> i & 1 else 1 for i in range(len(shape))]
                total = total + columns[which].reshape(broadcast)
            totals.append(total.reshape(-1))
        return totals[0], totals[1], growth

    def _growth(self, mask: int) -> int:
        peaks = _row_peaks(self.sizes(mask))
        absolute = np.abs(self.integers[mask]).astype(np.float64)
        worst = float((absolute * peaks if absolute.ndim == 1 else absolute @ peaks).max())
        return math.ceil(worst)

    def table_answers(self, tables: Mapping[tuple[int, ...], np.ndarray]) -> np.ndarray:
        """The exact int64 answers ``Q_S H_S m_S`` of every block, in block order.

        Args:
            tables: ``{sorted attribute positions: integer table}``, one per set.

        Raises:
            DomainError: a table is missing, of the wrong shape or type, or negative, or
                the tables disagree on the number of records.
            TooLargeError: an answer could overflow int64.
        """
        checked = {mask: checked_table(tables, mask, tuple(self.sizes(mask))) for mask in self.sets}
        totals = {int(table.sum()) for table in checked.values()}
        if len(totals) > 1:
            raise DomainError("the marginal tables disagree on the number of records")
        records = totals.pop() if totals else 0
        pieces = []
        for mask in self.sets:
            table = checked[mask]
            for axis in range(table.ndim):
                table = integer_helmert(table, axis)
            values = table.reshape(-1)  # |entry r| ≤ records · Π k_i
            if self._growth(mask) * records >= INT_LIMIT:
                raise TooLargeError(
                    f"the answers of residual set {mask} on {records:,} records could overflow "
                    "int64; quantize with fewer bits"
                )
            Q = self.integers[mask]
            pieces.append(Q * values if Q.ndim == 1 else Q @ values)
        if not pieces:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(pieces).astype(np.int64, copy=False)

    def marginal_tables(self, x: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
        """The tables :meth:`table_answers` reads, summed from a data vector over the domain."""
        cube = np.asarray(x).reshape(self.domain_shape)
        dims = len(self.domain_shape)
        return {
            attrs: cube.sum(axis=tuple(i for i in range(dims) if i not in attrs))
            for attrs in self.table_sets()
        }

    def digest(self) -> str:
        """sha256 of the domain, the sets in order and every integer block: the identity."""
        hashed = hashlib.sha256(f"HelmertBlocks;{list(self.domain_shape)};".encode())
        for mask in self.sets:
            Q = self.integers[mask]
            hashed.update(f"{mask}:{list(Q.shape)};".encode())
            hashed.update(Q.astype("<i8").tobytes())
        return hashed.hexdigest()

    def __repr__(self) -> str:
        dense = sum(Q.ndim == 2 for Q in self.integers.values())
        return (
            f"HelmertBlocks({len(self.sets)} residual sets, {dense} dense, "
            f"over {self.domain_shape})"
        )


def checked_table(
    tables: Mapping[tuple[int, ...], np.ndarray], mask: int, sizes: tuple[int, ...]
) -> np.ndarray:
    """The counted table of attribute set ``mask`` as int64.

    Raises:
        DomainError: it is missing, not integers of shape ``sizes``, or negative.
    """
    attrs = tuple(mask_members(mask))
    table = tables.get(attrs)
    if table is None:
        raise DomainError(f"the marginal table on attributes {list(attrs)} was not counted")
    table = np.asarray(table)
    if table.shape != sizes or not np.issubdtype(table.dtype, np.integer):
        raise DomainError(
            f"the marginal table on attributes {list(attrs)} must be integers of shape {sizes}"
        )
    if table.size and table.min() < 0:
        raise DomainError(f"the marginal table on attributes {list(attrs)} is negative")
    return table.astype(np.int64, copy=False)


def _int64(values: Sequence[int]) -> np.ndarray:
    if values and max(values) >= INT_LIMIT:
        raise TooLargeError("the column norms of an integer residual strategy overflow int64")
    return np.asarray(values, dtype=np.int64)
