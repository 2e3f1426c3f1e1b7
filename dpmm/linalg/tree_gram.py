"""The Gram of a hierarchical strategy and its inverse in O(n · depth), never densely.

For a tree whose nodes count nested intervals and whose leaves are single
cells, ``HᵀH = Σ_v 1_v 1_vᵀ``. Peeling the root's rank-one term off the
block-diagonal Gram of its subtrees (Sherman–Morrison) and recursing gives

    ``(HᵀH)⁻¹ = I − Σ_{internal v} q_v q_vᵀ / (1 + t_v)``

where, bottom-up, a leaf has ``a = [1]`` and ``s = 1``; an internal node v with
children c has ``q_v = [a_c]_c`` (on v's interval), ``t_v = Σ_c s_c``, and
passes up ``a_v = q_v / (1 + t_v)`` and ``s_v = t_v / (1 + t_v)``. So the
inverse applies in O(n · depth) per column, its diagonal costs the same, and
``trace(X (HᵀH)⁻¹) = trace(X) − Σ_v q_vᵀ X[v, v] q_v / (1 + t_v)`` costs
O(Σ_v |v|²) = O(n²) — instead of an O(n³) inversion per candidate tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmm.linalg.base import DENSE_LIMIT, Matrix, Symmetric
from dpmm.linalg.hierarchy import Hierarchical, split_interval

__all__ = ["TreeGram", "TreeGramInverse"]


@dataclass(frozen=True)
class _Correction:
    """One rank-one term ``coefficient · q qᵀ`` on the cells ``[low, low + len(q))``."""

    low: int
    q: np.ndarray
    coefficient: float


def _corrections(n: int, branching: int) -> list[_Correction]:
    corrections: list[_Correction] = []

    def visit(low: int, high: int) -> tuple[np.ndarray, float]:
        children = split_interval(low, high, branching)
        if not children:
            return np.ones(1), 1.0
        parts = [visit(a, b) for a, b in children]
        q = np.concatenate([a for a, _ in parts])
        t = sum(s for _, s in parts)
        corrections.append(_Correction(low, q, 1.0 / (1.0 + t)))
        return q / (1.0 + t), t / (1.0 + t)

    visit(0, n)
    return corrections


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

    # O(k · n · depth) for k columns.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        result = np.array(X, dtype=np.float64, copy=True)
        for c in self.corrections:
            block = slice(c.low, c.low + c.q.size)
            result[block] -= np.outer(c.q, c.coefficient * (c.q @ X[block]))
        return result

    def pinv(self) -> TreeGram:
        return self.gram_matrix

    def diagonal(self) -> np.ndarray:
        diagonal = np.ones(self.shape[0])
        for c in self.corrections:
            diagonal[c.low : c.low + c.q.size] -= c.coefficient * c.q**2
        return diagonal

    def _trace_dot(self, other: Matrix) -> float | object:
        n = self.shape[0]
        if other.shape != (n, n) or n * n > DENSE_LIMIT:
            return NotImplemented
        dense = other.dense()
        total = float(np.trace(dense))
        for c in self.corrections:
            block = slice(c.low, c.low + c.q.size)
            total -= c.coefficient * float(c.q @ dense[block, block] @ c.q)
        return total

    def __repr__(self) -> str:
        return f"({self.gram_matrix.tree!r}ᵀ{self.gram_matrix.tree!r})⁻¹"
