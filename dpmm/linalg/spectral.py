"""Spectral quantities of structured matrices: nuclear norms and row-space projectors.

The nuclear norm ``Σ σᵢ(W)`` drives the SVD lower bound. For a union of
Kronecker products (a census table set) neither Gram is a Kron, but the row
Gram ``W Wᵀ`` has one small block per pair of products, each the Kron of
per-attribute products, so it is cheap whenever the union has few queries.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from dpmm.errors import TooLargeError
from dpmm.linalg.base import DENSE_LIMIT, Matrix, check_dense_size, singular_values_of_gram
from dpmm.linalg.combinators import Dense, VStack, Weighted
from dpmm.linalg.elementary import Identity
from dpmm.linalg.kron import Kron
from dpmm.linalg.marginals import Marginals, MarginalsGram

__all__ = ["nuclear_norm", "row_gram", "row_space_projector"]


def nuclear_norm(W: Matrix) -> float:
    """``Σ σᵢ(W)``, through whichever of W's structures makes it cheap.

    Example:
        >>> from dpmm.linalg import Identity, Prefix, VStack
        >>> round(nuclear_norm(VStack([Identity(3), Identity(3)])), 6)
        4.242641
    """
    if isinstance(W, Weighted):
        return abs(W.weight) * nuclear_norm(W.base)
    if isinstance(W, VStack) and not isinstance(W, Marginals):
        gram = W.gram()
        if isinstance(gram, MarginalsGram):  # a union of marginals: closed form
            return gram.eigen_sum(np.sqrt)
        rows, cols = W.shape
        if rows <= cols and rows * rows <= DENSE_LIMIT:
            return float(singular_values_of_gram(row_gram(W)).sum())
        if cols * cols <= DENSE_LIMIT:
            return float(singular_values_of_gram(W.gram().dense()).sum())
        raise TooLargeError(
            f"The singular values of {W!r} ({rows:,} queries over {cols:,} cells) need a dense "
            f"Gram of {min(rows, cols):,}² entries, over the limit of {DENSE_LIMIT:,}"
        )
    return W.nuclear_norm()


def row_gram(W: VStack) -> np.ndarray:
    """The dense ``W Wᵀ`` of a union, block by block (Kron pairs factor by factor)."""
    check_dense_size(W.shape[0], W.shape[0], f"the row Gram of {W!r}")
    offsets = W.offsets
    gram = np.empty((W.shape[0], W.shape[0]))
    for k, left in enumerate(W.blocks):
        for ell in range(k, len(W.blocks)):
            block = _cross(left, W.blocks[ell])
            gram[offsets[k] : offsets[k + 1], offsets[ell] : offsets[ell + 1]] = block
            gram[offsets[ell] : offsets[ell + 1], offsets[k] : offsets[k + 1]] = block.T
    return gram


def _cross(left: Matrix, right: Matrix) -> np.ndarray:
    """The dense ``left @ rightᵀ`` for two blocks with the same columns."""
    if isinstance(left, Weighted):
        return left.weight * _cross(left.base, right)
    if isinstance(right, Weighted):
        return right.weight * _cross(left, right.base)
    if isinstance(left, Kron) and isinstance(right, Kron) and _same_columns(left, right):
        parts = [_cross(a, b) for a, b in zip(left.factors, right.factors, strict=True)]
        return reduce(np.kron, parts)
    check_dense_size(left.shape[0], right.shape[0], f"{left!r} @ {right!r}ᵀ")
    return np.asarray(left._matmat(right.T.dense()))


def _same_columns(left: Kron, right: Kron) -> bool:
    return len(left.factors) == len(right.factors) and all(
        a.shape[1] == b.shape[1] for a, b in zip(left.factors, right.factors, strict=True)
    )


def row_space_projector(A: Matrix) -> Matrix:
    """``(AᵀA)⁺ AᵀA``: the orthogonal projector onto A's row space, kept structured."""
    if A.known_full_column_rank:
        return Identity(A.shape[1])
    if isinstance(A, Weighted):
        return row_space_projector(A.base) if A.weight else Dense(np.zeros(A.shape[::-1]))
    if isinstance(A, Identity):
        return A
    if isinstance(A, Kron):
        return Kron([row_space_projector(factor) for factor in A.factors])
    gram = A.gram()
    if isinstance(gram, MarginalsGram):
        return gram.pinv().dot_algebra(gram)
    check_dense_size(A.shape[1], A.shape[1], f"the row-space projector of {A!r}")
    dense = gram.dense()
    return Dense(np.linalg.pinv(dense, hermitian=True) @ dense)
