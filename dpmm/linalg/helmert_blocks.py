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
A diagonal block's column norms are ``|H_S|ᵀ|Q_S|`` and ``(H_S∘H_S)ᵀ Q_S²``, found by
cumulative sums (:func:`helmert_transpose`) in O(cells of S), never as a dense matrix; sets
sharing one integer block (a symmetric domain) are visited once.

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

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from functools import reduce

import numpy as np

from dpmm.errors import DomainError, TooLargeError
from dpmm.linalg.base import INT_LIMIT, IntegerNorms, Matrix
from dpmm.linalg.kron import kron_rows
from dpmm.linalg.marginals import _shape_of, cell_sums, mask_members
from dpmm.linalg.residual_general import EXACT_CELLS, ResidualBlockStrategy
from dpmm.linalg.residuals import HelmertEntries, helmert_norms, helmert_transpose, integer_helmert

__all__ = [
    "MAX_BLOCK_ENTRIES",
    "HelmertBlocks",
    "HelmertEntries",
    "checked_table",
    "helmert_norms",
    "helmert_row_norms",
    "helmert_transpose",
    "integer_helmert",
]

#: Most entries of one dense block's integer matrix ``Q_S H_S`` (rows × cells of S) visited.
MAX_BLOCK_ENTRIES = 1 << 26
#: Cells of equal-shaped marginal tables turned into answers per batch (bounds temporaries).
BATCH_CELLS = 1 << 22


def helmert_row_norms(sizes: Sequence[int]) -> np.ndarray:
    """``c_r = Π_{i∈S} k_i(k_i + 1)`` for each integer Helmert row of a set (C order)."""
    return reduce(np.kron, [helmert_norms(n) for n in sizes], np.ones(1, dtype=np.int64))


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
        valid: set[tuple[int, int]] = set()  # (id of a block, rank): sets may share a block
        for mask, block in integers.items():
            if not isinstance(mask, int | np.integer) or mask < 0 or mask & ~full:
                raise DomainError(f"Residual set {mask!r} is not a bit mask of the domain")
            rank = math.prod(self.domain_shape[i] - 1 for i in mask_members(int(mask)))
            Q = np.asarray(block)
            if (id(Q), rank) not in valid:
                if Q.dtype != np.int64 or Q.ndim not in (1, 2) or Q.shape[-1] != rank or not rank:
                    raise DomainError(
                        f"the integer block of residual set {mask} must be an int64 vector or "
                        f"matrix with {rank} columns, got {Q.dtype} of shape {Q.shape}"
                    )
                valid.add((id(Q), rank))
            self.integers[int(mask)] = Q
        self.sets: tuple[int, ...] = tuple(self.integers)
        self._positions = {mask: t for t, mask in enumerate(self.sets)}
        rows = [Q.shape[0] for Q in self.integers.values()]
        self.offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        super().__init__((int(self.offsets[-1]), math.prod(self.domain_shape)))

    def sizes(self, mask: int) -> list[int]:
        """The sizes of the attributes of set ``mask``, in ascending attribute order."""
        return [self.domain_shape[i] for i in mask_members(mask)]

    def normalized(self, mask: int) -> np.ndarray:
        """``G_S = Q_S diag(√c)`` (float): block S's answers are ``G_S R_S x``.

        A vector for a diagonal block (the diagonal), else a ``(rows, rank)`` matrix.
        """
        root = np.sqrt(helmert_row_norms(self.sizes(mask)).astype(np.float64))
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
    @functools.cached_property
    def _representatives(self) -> dict[int, int]:
        """``{mask: the first mask with the same attribute sizes and integer block}``.

        Symmetric domains repeat one block over many sets (quantization shares the array):
        facts about a block are found once per representative.
        """
        by_identity: dict[tuple, int] = {}
        by_value: dict[tuple, int] = {}
        result = {}
        for mask in self.sets:
            Q = self.integers[mask]
            sizes = tuple(self.sizes(mask))
            representative = by_identity.get((sizes, id(Q)))
            if representative is None:
                key = (sizes, Q.shape, Q.tobytes())
                representative = by_identity[sizes, id(Q)] = by_value.setdefault(key, mask)
            result[mask] = representative
        return result

    def _block_columns(self, mask: int) -> tuple[np.ndarray, np.ndarray]:
        """``(‖(Q_S H_S)[:, j]‖₁, ‖(Q_S H_S)[:, j]‖₂²)`` for every cell j of S, exact int64.

        Raises:
            TooLargeError: a dense block is too large to visit, or a norm overflows int64.
        """
        sizes = self.sizes(mask)
        Q = self.integers[mask]
        if Q.ndim == 1:
            return _diagonal_columns(Q, sizes)
        cells = math.prod(sizes)
        if Q.shape[0] * cells > MAX_BLOCK_ENTRIES:
            raise TooLargeError(
                f"the integer block of residual set {mask} has {Q.shape[0] * cells:,} entries, "
                f"more than the {MAX_BLOCK_ENTRIES:,} its sensitivity may visit"
            )
        H = _integer_helmert_rows(sizes)
        peak = float((np.abs(Q).astype(np.float64) @ np.abs(H).astype(np.float64)).max())
        if peak >= INT_LIMIT:
            raise TooLargeError(f"the integer block of residual set {mask} overflows int64")
        QH = Q @ H
        l1 = np.abs(QH).sum(axis=0)
        if peak * peak * QH.shape[0] < INT_LIMIT:
            return l1, np.einsum("rj,rj->j", QH, QH)
        exact = QH.astype(object)
        return l1, _int64((exact * exact).sum(axis=0).tolist())

    def _integer_column_norms(self) -> IntegerNorms:
        """``(column L1 norms, column sums of squares, entry bound)``, exact int64.

        One value per cell on domains of at most ``EXACT_CELLS`` cells; above, one value,
        the bound ``Σ_S max_{j_S}`` (see the module docstring). The entry bound is the
        largest growth of an answer per record, ``max_r Σ_t |Q_S[r, t]| · Π k_i``.

        Raises:
            TooLargeError: a dense block is too large to visit, or a norm overflows int64.
        """
        shape = self.domain_shape
        representatives = self._representatives
        distinct = dict.fromkeys(representatives.values())
        columns = {mask: self._block_columns(mask) for mask in distinct}
        peaks = {mask: (int(l1.max()), int(l2.max())) for mask, (l1, l2) in columns.items()}
        bounds = [
            sum(peaks[representatives[mask]][which] for mask in self.sets) for which in (0, 1)
        ]
        l1_bound, l2_bound = _int64(bounds)  # the sums fit, so every partial sum does
        growth = max((self._growth(mask) for mask in columns), default=1)
        if math.prod(shape) > EXACT_CELLS:
            return _int64([int(l1_bound)]), _int64([int(l2_bound)]), growth
        l1, l2_squared = (
            cell_sums(shape, [(m, columns[representatives[m]][which]) for m in self.sets], np.int64)
            for which in (0, 1)
        )
        return l1, l2_squared, growth

    def _growth(self, mask: int) -> int:
        # max_j |H_S[r, j]| = Π k_i for each row (float64, only used for bounds)
        peaks = kron_rows([np.arange(1, n, dtype=np.float64) for n in self.sizes(mask)])
        absolute = np.abs(self.integers[mask]).astype(np.float64)
        worst = float((absolute * peaks if absolute.ndim == 1 else absolute @ peaks).max())
        return math.ceil(worst)

    def table_answers(self, tables: Mapping[tuple[int, ...], np.ndarray]) -> np.ndarray:
        """The exact int64 answers ``Q_S H_S m_S`` of every block, in block order.

        Sets with equal attribute sizes are transformed together, a batch of tables at a
        time: O(Σ table sizes · |S| + answers), few Python steps per set.

        Args:
            tables: ``{sorted attribute positions: integer table}``, one per set.

        Raises:
            DomainError: a table is missing, of the wrong shape or type, or negative, or
                the tables disagree on the number of records.
            TooLargeError: an answer could overflow int64.
        """
        answers = np.empty(self.shape[0], dtype=np.int64)
        representatives = self._representatives
        growth: dict[int, int] = {}
        totals: set[int] = set()
        classes: dict[tuple[int, ...], list[int]] = {}  # the sets by their table's shape
        for mask in self.sets:
            classes.setdefault(tuple(self.sizes(mask)), []).append(mask)
        for sizes, masks in classes.items():
            step = max(1, BATCH_CELLS // math.prod(sizes))
            for start in range(0, len(masks), step):
                batch = masks[start : start + step]
                stacked = np.stack([checked_table(tables, mask, sizes) for mask in batch])
                totals.update(np.unique(stacked.reshape(len(batch), -1).sum(axis=1)).tolist())
                records = max(totals)  # equal, or refused below once every table is checked
                for mask in batch:  # |entry r of H_S m_S| ≤ records · Π k_i
                    representative = representatives[mask]
                    if representative not in growth:
                        growth[representative] = self._growth(representative)
                    if growth[representative] * records >= INT_LIMIT:
                        raise TooLargeError(
                            f"the answers of residual set {mask} on this many records could "
                            "overflow int64; quantize with fewer bits"
                        )
                for axis in range(1, stacked.ndim):
                    stacked = integer_helmert(stacked, axis)
                self._multiply(batch, stacked.reshape(len(batch), -1), answers)
        if len(totals) > 1:
            raise DomainError("the marginal tables disagree on the number of records")
        return answers

    def _multiply(self, batch: Sequence[int], helmert: np.ndarray, answers: np.ndarray) -> None:
        """Write ``Q_S (H_S m_S)`` of each set in ``batch`` into its rows of ``answers``."""
        blocks = [self.integers[mask] for mask in batch]
        if all(Q.ndim == 1 for Q in blocks):  # diagonal blocks: one product for the batch
            first = blocks[0]
            Q = first if all(block is first for block in blocks) else np.stack(blocks)
            starts = self.offsets[[self._positions[mask] for mask in batch]]
            answers[starts[:, None] + np.arange(helmert.shape[1])] = Q * helmert
            return
        for mask, Q, values in zip(batch, blocks, helmert, strict=True):
            t = self._positions[mask]
            answers[self.offsets[t] : self.offsets[t + 1]] = (
                Q * values if Q.ndim == 1 else Q @ values
            )

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
            hashed.update(np.ascontiguousarray(Q, dtype="<i8"))  # no copy on little-endian
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


def _transposed(vector: np.ndarray, ranks: Sequence[int], entries: HelmertEntries) -> np.ndarray:
    """``(⊗ Hᵀ) vector`` (or with ``|H|``, ``H∘H``): a set's Helmert rows to its cells."""
    table = vector.reshape(ranks)
    for axis in range(len(ranks)):
        table = helmert_transpose(table, axis, entries)
    return table.reshape(-1)


def _diagonal_columns(Q: np.ndarray, sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Column L1 norms and sums of squares of ``diag(Q) H_S``: ``|H_S|ᵀ|Q|``, ``(H_S∘H_S)ᵀQ²``.

    Raises:
        TooLargeError: a norm overflows int64.
    """
    ranks = [n - 1 for n in sizes]
    magnitude = np.abs(Q)
    # Every entry, and every partial sum on the way (column 0 of each factor is all ones),
    # is at most the largest column's sum of squares (integer products are at least their
    # own magnitude): its float64 value, with room for rounding, says whether int64 holds.
    floats = magnitude.astype(np.float64)
    peak = float(_transposed(floats * floats, ranks, "squared").max())
    if peak * (1 + 1e-9) < INT_LIMIT:
        return (
            _transposed(magnitude, ranks, "absolute"),
            _transposed(magnitude * magnitude, ranks, "squared"),
        )
    exact = magnitude.astype(object)
    l1 = _transposed(exact, ranks, "absolute")
    return _int64(l1.tolist()), _int64(_transposed(exact * exact, ranks, "squared").tolist())


def _int64(values: Sequence[int]) -> np.ndarray:
    if values and max(values) >= INT_LIMIT:
        raise TooLargeError("the column norms of an integer residual strategy overflow int64")
    return np.asarray(values, dtype=np.int64)
