"""Tree-structured strategies over one ordered attribute: hierarchical and Haar wavelet.

``Hierarchical(n, b)`` counts every node of a b-ary tree whose leaves are the n
cells (Hay et al.; seed 000's strategy H). ``Haar(n)`` is the unweighted Haar
wavelet (seed 000's strategy Y): the total, then for every dyadic block the
left half minus the right half. Both are stored sparse: O(n log n) non-zeros.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp

from dpmm.errors import TooLargeError
from dpmm.linalg.base import DENSE_LIMIT
from dpmm.linalg.combinators import Product, Sparse

__all__ = ["Haar", "Hierarchical", "split_interval", "tree_intervals"]


def split_interval(low: int, high: int, branching: int) -> list[tuple[int, int]]:
    """The children of the tree node ``[low, high)``: up to ``branching`` near-equal parts.

    Example:
        >>> split_interval(0, 5, 2)
        [(0, 2), (2, 5)]
    """
    if high - low <= 1:
        return []
    cuts = np.linspace(low, high, min(branching, high - low) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts) if b > a]


def _check_tree_size(n: int, branching: int) -> None:
    """Refuse, before building it, a tree whose stored entries (n per level) exceed the
    limit of what is materialized (:data:`~dpmm.linalg.base.DENSE_LIMIT`)."""
    levels, width = 1, 1
    while width < n:
        width *= branching
        levels += 1
    if n * levels > DENSE_LIMIT:
        raise TooLargeError(
            f"Refusing to build a {branching}-ary tree over {n:,} cells: its {n * levels:.3g} "
            f"stored entries exceed the limit of {DENSE_LIMIT:,}"
        )


def tree_intervals(n: int, branching: int) -> list[tuple[int, int]]:
    """The half-open intervals of a b-ary tree over n cells, breadth first, root first.

    Every node splits its interval into ``branching`` children as evenly as
    possible (children of size zero are dropped); leaves are single cells.

    Example:
        >>> tree_intervals(4, 2)
        [(0, 4), (0, 2), (2, 4), (0, 1), (1, 2), (2, 3), (3, 4)]
    """
    if n < 1:
        raise ValueError(f"A tree needs at least one cell, got n={n}")
    if branching < 2:
        raise ValueError(f"A tree's branching factor must be at least 2, got {branching}")
    _check_tree_size(n, branching)
    level = [(0, n)]
    nodes: list[tuple[int, int]] = []
    while level:
        nodes.extend(level)
        level = [child for low, high in level for child in split_interval(low, high, branching)]
    return nodes


def _interval_matrix(n: int, intervals: list[tuple[int, int]]) -> sp.csr_array:
    lengths = np.array([high - low for low, high in intervals])
    rows = np.repeat(np.arange(len(intervals)), lengths)
    cols = np.concatenate([np.arange(low, high) for low, high in intervals])
    return sp.csr_array((np.ones(cols.size), (rows, cols)), shape=(len(intervals), n))


class Hierarchical(Sparse):
    """Counts of every node of a ``branching``-ary tree over n cells (root to leaves)."""

    closed_form_gram_pinv = True

    def __init__(self, n: int, branching: int = 2) -> None:
        super().__init__(_interval_matrix(n, tree_intervals(n, branching)), full_column_rank=True)
        self.branching = branching

    def gram(self) -> Sparse:
        from dpmm.linalg.tree_gram import TreeGram

        return TreeGram(self)

    def __repr__(self) -> str:
        return f"Hierarchical({self.shape[1]}, b={self.branching})"


class Haar(Sparse):
    """The unweighted Haar wavelet over n cells (columns of the next power of two)."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"A wavelet needs at least one cell, got n={n}")
        width = 1 << (n - 1).bit_length()
        _check_tree_size(width, 2)
        rows, cols, values = [np.zeros(n, dtype=int)], [np.arange(n)], [np.ones(n)]
        row = 1
        block = width
        while block > 1:
            half = block // 2
            for start in range(0, width, block):
                if start >= n:
                    break
                left = np.arange(start, min(start + half, n))
                right = np.arange(start + half, min(start + block, n))
                rows.append(np.full(left.size + right.size, row))
                cols.append(np.concatenate([left, right]))
                values.append(np.concatenate([np.ones(left.size), -np.ones(right.size)]))
                row += 1
            block = half
        matrix = sp.csr_array(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
            shape=(row, n),
        )
        super().__init__(matrix, full_column_rank=True)

    def gram(self) -> Sparse:
        gram = self.matrix.T @ self.matrix
        squared_norms = (self.matrix.multiply(self.matrix)).sum(axis=1)
        if self.shape[0] == self.shape[1] and (self.matrix @ self.matrix.T).nnz == self.shape[0]:
            return _OrthogonalRowsGram(gram, self, np.asarray(squared_norms).reshape(-1))
        return Sparse(gram, full_column_rank=True)

    def gram_pinv(self) -> Product | None:
        gram = self.gram()
        return gram.pinv() if isinstance(gram, _OrthogonalRowsGram) else None

    def __repr__(self) -> str:
        return f"Haar({self.shape[1]})"


class _OrthogonalRowsGram(Sparse):
    """``YᵀY`` of a square Y with orthogonal rows (``Y Yᵀ = D``): ``(YᵀY)⁻¹ = Yᵀ D⁻² Y``.

    The Haar wavelet over a power of two is such a Y; its inverse Gram is then a
    product of sparse factors instead of an O(n³) dense inversion.
    """

    def __init__(self, gram: sp.sparray, rows: Sparse, squared_norms: np.ndarray) -> None:
        super().__init__(gram, full_column_rank=True)
        self.rows = rows
        self.squared_norms = squared_norms

    def pinv(self) -> Product:
        scale = Sparse(sp.diags_array(1.0 / self.squared_norms**2), full_column_rank=True)
        return Product([self.rows.T, scale, self.rows])
