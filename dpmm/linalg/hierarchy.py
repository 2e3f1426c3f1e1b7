"""Tree-structured strategies over one ordered attribute: hierarchical and Haar wavelet.

``Hierarchical(n, b)`` counts every node of a b-ary tree whose leaves are the n
cells (Hay et al.; seed 000's strategy H). ``Haar(n)`` is the unweighted Haar
wavelet (seed 000's strategy Y): the total, then for every dyadic block the
left half minus the right half. Both are stored sparse: O(n log n) non-zeros.

A hierarchical strategy's Gram and its inverse apply in O(n · depth), never densely
(:class:`TreeGram`, :class:`TreeGramInverse`). For a tree whose nodes count nested
intervals and whose leaves are single cells, ``HᵀH = Σ_v 1_v 1_vᵀ``. Peeling the root's
rank-one term off the block-diagonal Gram of its subtrees (Sherman–Morrison) and
recursing gives

    ``(HᵀH)⁻¹ = I − Σ_{internal v} q_v q_vᵀ / (1 + t_v)``

where, bottom-up, a leaf has ``a = [1]`` and ``s = 1``; an internal node v with
children c has ``q_v = [a_c]_c`` (on v's interval), ``t_v = Σ_c s_c``, and
passes up ``a_v = q_v / (1 + t_v)`` and ``s_v = t_v / (1 + t_v)``. So the
inverse applies in O(n · depth) per column, its diagonal costs the same, and
``trace(X (HᵀH)⁻¹) = trace(X) − Σ_v q_vᵀ X[v, v] q_v / (1 + t_v)`` costs
O(Σ_v |v|²) = O(n²) — instead of an O(n³) inversion per candidate tree.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from dpmm.errors import TooLargeError
from dpmm.linalg.base import DENSE_LIMIT, Matrix, Symmetric, check_dense_size
from dpmm.linalg.combinators import Product, Sparse

__all__ = [
    "Haar",
    "Hierarchical",
    "TreeGram",
    "TreeGramInverse",
    "split_interval",
    "tree_intervals",
]


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


def _tree_levels(n: int, branching: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The nodes of a b-ary tree over n cells, depth by depth: their low and high ends.

    Each depth is split at once: the nodes that split into the same number of children
    share one vectorized :func:`numpy.linspace`, which gives the cuts a node-by-node
    :func:`split_interval` gives, bit for bit (at 65,536 cells the node-by-node split
    took most of a tree's 1.5 s). Within a depth the nodes are disjoint, in order.
    """
    if n < 1:
        raise ValueError(f"A tree needs at least one cell, got n={n}")
    if branching < 2:
        raise ValueError(f"A tree's branching factor must be at least 2, got {branching}")
    _check_tree_size(n, branching)
    levels = []
    lows, highs = np.array([0]), np.array([n])
    while lows.size:
        levels.append((lows, highs))
        sizes = highs - lows
        parts = np.minimum(branching, sizes)
        child_lows, child_highs = [], []
        for count in np.unique(parts[sizes > 1]):
            chosen = (parts == count) & (sizes > 1)
            cuts = np.linspace(lows[chosen], highs[chosen], count + 1, axis=1).round()
            cuts = cuts.astype(np.int64)
            child_lows.append(cuts[:, :-1].ravel())
            child_highs.append(cuts[:, 1:].ravel())
        if not child_lows:
            break
        lows, highs = np.concatenate(child_lows), np.concatenate(child_highs)
        keep = highs > lows
        order = np.argsort(lows[keep], kind="stable")
        lows, highs = lows[keep][order], highs[keep][order]
    return levels


def tree_intervals(n: int, branching: int) -> list[tuple[int, int]]:
    """The half-open intervals of a b-ary tree over n cells, breadth first, root first.

    Every node splits its interval into ``branching`` children as evenly as
    possible (children of size zero are dropped); leaves are single cells.

    Example:
        >>> tree_intervals(4, 2)
        [(0, 4), (0, 2), (2, 4), (0, 1), (1, 2), (2, 3), (3, 4)]
    """
    return [
        (int(low), int(high))
        for lows, highs in _tree_levels(n, branching)
        for low, high in zip(lows, highs, strict=True)
    ]


def _interval_matrix(n: int, levels: list[tuple[np.ndarray, np.ndarray]]) -> sp.csr_array:
    lows = np.concatenate([level[0] for level in levels])
    lengths = np.concatenate([level[1] - level[0] for level in levels])
    rows = np.repeat(np.arange(lows.size), lengths)
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(lengths.sum()) - np.repeat(starts - lows, lengths)
    return sp.csr_array((np.ones(cols.size), (rows, cols)), shape=(lows.size, n))


class Hierarchical(Sparse):
    """Counts of every node of a ``branching``-ary tree over n cells (root to leaves)."""

    closed_form_gram_pinv = True

    def __init__(self, n: int, branching: int = 2) -> None:
        super().__init__(_interval_matrix(n, _tree_levels(n, branching)), full_column_rank=True)
        self.branching = branching

    def gram(self) -> Sparse:
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
        # Every pair of cells shares the total's row: the Gram is dense, n² stored entries.
        n = self.shape[1]
        check_dense_size(n, n, f"the Gram of the wavelet over {n:,} cells")
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


@dataclass(frozen=True)
class _Correction:
    """One rank-one term ``coefficient · q qᵀ`` on the cells ``[low, low + len(q))``."""

    low: int
    q: np.ndarray
    coefficient: float


def _corrections(n: int, branching: int) -> list[_Correction]:
    """The tree's rank-one terms, children before parents (the module's recursion), built
    depth by depth from the deepest: at a depth, every internal node's ``q`` is its
    children's ``a`` on its cells, and ``t`` the sum of their ``s``, in child order."""
    levels = _tree_levels(n, branching)
    depths = []  # per depth: its internal nodes' (low, high, q, coefficient)
    a = np.ones(n)  # on every cell, the ``a`` of the node below whose subtree it lies
    below_lows, below_s = np.arange(n), np.ones(n)  # the children candidates (leaves first)
    for lows, highs in reversed(levels):
        internal = highs - lows > 1
        s = np.ones(lows.size)  # leaves: s = 1
        if internal.any():
            low, high = lows[internal], highs[internal]
            first = np.searchsorted(below_lows, low)
            count = np.searchsorted(below_lows, high) - first
            t = np.zeros(low.size)
            for j in range(int(count.max())):
                t += np.where(j < count, below_s[np.minimum(first + j, below_s.size - 1)], 0.0)
            sizes = high - low
            cells = np.repeat(low - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
            q = a[cells]
            coefficient = 1.0 / (1.0 + t)
            depths.append((low, high, np.split(q, np.cumsum(sizes)[:-1]), coefficient))
            a[cells] = q / np.repeat(1.0 + t, sizes)
            s[internal] = t / (1.0 + t)
        # Cells this depth does not cover keep their leaf's a = 1 and sit below no node here.
        below_lows, below_s = lows, s
    nodes = [
        (int(high), -depth, _Correction(int(low), vector, float(c)))
        for depth, (lows, highs, vectors, coefficients) in enumerate(reversed(depths))
        for low, high, vector, c in zip(lows, highs, vectors, coefficients, strict=True)
    ]
    nodes.sort(key=lambda node: node[:2])  # post-order: by right end, deeper first
    return [correction for _, _, correction in nodes]


class TreeGram(Symmetric, Matrix):
    """``HᵀH`` for a :class:`Hierarchical` H (applied as ``Hᵀ(H X)``: it is dense, H is not)."""

    def __init__(self, tree: Hierarchical) -> None:
        super().__init__((tree.shape[1], tree.shape[1]), full_column_rank=True)
        self.tree = tree

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.tree.matrix.T @ (self.tree.matrix @ X))

    def _dense(self) -> np.ndarray:
        return (self.tree.matrix.T @ self.tree.matrix).toarray()

    def diagonal(self) -> np.ndarray:
        return self.tree.column_norms(2) ** 2

    def pinv(self) -> TreeGramInverse:
        return TreeGramInverse(self)

    def __repr__(self) -> str:
        return f"{self.tree!r}ᵀ{self.tree!r}"


class TreeGramInverse(Symmetric, Matrix):
    """``(HᵀH)⁻¹ = I − Σ_v q_v q_vᵀ / (1 + t_v)`` for a hierarchical H (symmetric)."""

    def __init__(self, gram: TreeGram) -> None:
        n = gram.shape[0]
        super().__init__((n, n), full_column_rank=True)
        self.gram_matrix = gram
        self.corrections = _corrections(n, gram.tree.branching)

    @cached_property
    def _stacked(self) -> tuple[sp.csr_array, sp.csr_array, np.ndarray]:
        """``(Q, Qᵀ, c)``: the corrections' vectors as the columns of one sparse ``n × v``
        matrix (n · depth entries) and their coefficients, so ``Σ_v c_v q_v q_vᵀ = Q C Qᵀ``."""
        rows = np.concatenate([np.arange(c.low, c.low + c.q.size) for c in self.corrections])
        columns = np.repeat(np.arange(len(self.corrections)), [c.q.size for c in self.corrections])
        values = np.concatenate([c.q for c in self.corrections])
        Q = sp.csr_array((values, (rows, columns)), shape=(self.shape[0], len(self.corrections)))
        coefficients = np.array([c.coefficient for c in self.corrections])
        return Q, sp.csr_array(Q.T), coefficients

    # O(k · n · depth) for k columns, in two sparse products: one Python loop over the
    # nodes took 1 s for 4,096 columns of a 4,096-cell tree.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if not self.corrections:  # one cell: the identity
            return X.copy()
        Q, Q_transposed, coefficients = self._stacked
        return X - Q @ (coefficients[:, None] * (Q_transposed @ X))

    def pinv(self) -> TreeGram:
        return self.gram_matrix

    @cached_property
    def _by_length(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The corrections grouped by the length m of their interval: per group the first
        cells (k), the vectors as rows of a ``k × m`` array and the coefficients (k). A
        b-ary tree has at most two lengths per level, so a group's work is whole-array."""
        groups: dict[int, list[_Correction]] = {}
        for c in self.corrections:
            groups.setdefault(c.q.size, []).append(c)
        return [
            (
                np.array([c.low for c in group]),
                np.stack([c.q for c in group]),
                np.array([c.coefficient for c in group]),
            )
            for group in groups.values()
        ]

    def diagonal(self) -> np.ndarray:
        diagonal = np.ones(self.shape[0])
        for lows, Q, coefficients in self._by_length:
            cells = lows[:, None] + np.arange(Q.shape[1])
            np.subtract.at(diagonal, cells, coefficients[:, None] * Q**2)
        return diagonal

    def prefix_variances(self) -> np.ndarray:
        """``diag(P M Pᵀ)`` for the prefix matrix P and ``M = (HᵀH)⁻¹``, in O(n · depth).

        Prefix k's variance is ``(k + 1) − Σ_v c_v S_v(k)²`` with ``S_v(k)`` the sum of
        ``q_v`` over v's cells up to k: a cumulative sum inside v, its total after v.
        """
        n = self.shape[0]
        # Each variance is a small difference of sums near k: they accumulate in extended
        # precision (in float64, 5·10⁻⁹ off the trace's error at 2¹⁸ cells; now 10⁻¹¹).
        variances = np.arange(1, n + 1, dtype=np.longdouble)
        after = np.zeros(n + 1, dtype=np.longdouble)
        for lows, Q, coefficients in self._by_length:
            sums = np.cumsum(Q, axis=1)
            cells = lows[:, None] + np.arange(Q.shape[1])
            variances -= np.bincount(
                cells.ravel(), weights=(coefficients[:, None] * sums**2).ravel(), minlength=n
            )
            after += np.bincount(
                lows + Q.shape[1], weights=coefficients * sums[:, -1] ** 2, minlength=n + 1
            )
        return (variances - np.cumsum(after)[:n]).astype(np.float64)

    def _trace_dot(self, other: Matrix) -> float | object:
        n = self.shape[0]
        if other.shape != (n, n):
            return NotImplemented
        generators = getattr(other, "generators", None)
        if generators is not None:
            return self._semiseparable_trace(*generators)
        if n * n > DENSE_LIMIT:
            return NotImplemented
        dense = other.dense()
        total = float(np.trace(dense))
        for c in self.corrections:
            block = slice(c.low, c.low + c.q.size)
            total -= c.coefficient * float(c.q @ dense[block, block] @ c.q)
        return total

    def _semiseparable_trace(self, lower: np.ndarray, upper: np.ndarray) -> float:
        """``trace(G M)`` for ``G_st = lower[min(s, t)] · upper[max(s, t)]``, in O(n · depth).

        ``trace(G) − Σ_v c_v q_vᵀ G_vv q_v``, and on v's cells
        ``qᵀ G q = 2 Σ_s q_s upper_s L_s − Σ_s q_s² lower_s upper_s`` with
        ``L_s = Σ_{t ≤ s} lower_t q_t``: one cumulative sum per node, not its block of G.
        """
        total = float(np.dot(lower, upper))
        for lows, Q, coefficients in self._by_length:
            cells = lows[:, None] + np.arange(Q.shape[1])
            low, up = lower[cells], upper[cells]
            running = np.cumsum(low * Q, axis=1)
            forms = 2.0 * np.einsum("km,km->k", Q * up, running)
            forms -= np.einsum("km,km->k", Q * Q, low * up)
            total -= float(coefficients @ forms)
        return total

    def __repr__(self) -> str:
        return f"({self.gram_matrix.tree!r}ᵀ{self.gram_matrix.tree!r})⁻¹"
