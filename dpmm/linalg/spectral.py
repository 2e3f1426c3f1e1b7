"""Spectral quantities of structured matrices: nuclear norms and row-space projectors.

The nuclear norm ``Σ σᵢ(W)`` drives the SVD lower bound. For a union of
Kronecker products ``W = [w_k ⊗_i W_ki]`` (a census table set) neither Gram
is a Kron, but ``WᵀW = Σ_k w_k² ⊗_i G_ki`` with small factor Grams ``G_ki``:

* where every ``G_ki`` of one attribute i commutes (totals, identities and
  their stacks do), one orthonormal basis diagonalizes them all, and in it
  ``WᵀW`` splits into one block per basis vector j: the union over the other
  attributes with weights ``w_k² d_kj`` (terms with ``d_kj = 0`` drop out);
* what no attribute splits further is solved through the smaller dense Gram:
  the row Gram ``W Wᵀ`` (one small Kron block per pair of products) or ``WᵀW``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import reduce

import numpy as np
import scipy.linalg

from dpmm.errors import TooLargeError, UnsupportedQueryError
from dpmm.linalg.base import (
    DENSE_LIMIT,
    PINV_TOLERANCE,
    Matrix,
    check_dense_size,
    singular_values_of_gram,
)
from dpmm.linalg.combinators import Dense, VStack, Weighted
from dpmm.linalg.elementary import Identity
from dpmm.linalg.kron import Kron
from dpmm.linalg.marginals import Marginals, MarginalsGram

__all__ = [
    "joint_eigenbasis",
    "nuclear_norm",
    "row_gram",
    "row_space_projector",
    "thin_svd",
]


def thin_svd(array: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``U, σ, Vᵀ`` of a dense array (``full_matrices=False``), robust to LAPACK's gesdd.

    The divide-and-conquer driver (gesdd, SciPy's default) occasionally reports "SVD did
    not converge" on matrices that QR-iteration (gesvd) factors without trouble, as an LRM
    iterate did; gesvd is then used.

    Example:
        >>> U, s, Vt = thin_svd(np.array([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]]))
        >>> s.tolist()
        [4.0, 3.0]
    """
    try:
        return scipy.linalg.svd(array, full_matrices=False)
    except np.linalg.LinAlgError:
        return scipy.linalg.svd(array, full_matrices=False, lapack_driver="gesvd")


def nuclear_norm(W: Matrix, dense_limit: int = DENSE_LIMIT) -> float:
    """``Σ σᵢ(W)``, through whichever of W's structures makes it cheap.

    Where no structure applies, a dense Gram of at most ``dense_limit`` entries is
    decomposed; above it :class:`TooLargeError` is raised.

    Example:
        >>> from dpmm.linalg import Identity, Prefix, VStack
        >>> round(nuclear_norm(VStack([Identity(3), Identity(3)])), 6)
        4.242641
    """
    if isinstance(W, Weighted):
        return abs(W.weight) * nuclear_norm(W.base, dense_limit)
    if isinstance(W, VStack) and not isinstance(W, Marginals):
        gram = W.gram()
        if isinstance(gram, MarginalsGram):  # a union of marginals: closed form
            return gram.eigen_sum(np.sqrt)
        terms = _union_terms(W)
        if terms is not None:
            return _union_nuclear_norm(terms, {}, dense_limit)
        return _dense_nuclear_norm(W, dense_limit)
    return W.nuclear_norm()


#: A weighted Kronecker product: (squared weight, factors).
_Term = tuple[float, tuple[Matrix, ...]]

#: Below this many rows (or cells) a block goes straight to the dense path (well under 1 s).
_DENSE_ENOUGH = 1024

#: Relative tolerance for commuting Grams and for equal eigenvalues.
COMMUTE_TOLERANCE = 1e-9

#: Columns of a commutator checked before the whole of it is formed.
COMMUTE_PROBES = 8

#: Largest attribute whose factor Grams are tried for a joint diagonalization (the try
#: costs one dense eigendecomposition of that size).
_SPLIT_LIMIT = 512


def _union_terms(W: VStack) -> list[_Term] | None:
    terms: list[_Term] = []
    for block in W.blocks:
        weight, base = (block.weight, block.base) if isinstance(block, Weighted) else (1.0, block)
        if not isinstance(base, Kron):
            return None
        terms.append((weight * weight, tuple(base.factors)))
    sizes = {tuple(f.shape[1] for f in factors) for _, factors in terms}
    return terms if len(sizes) == 1 else None


def _merge(terms: list[_Term]) -> list[_Term]:
    """Identical products add up: ``w₁² G + w₂² G = (w₁² + w₂²) G``."""
    merged: dict[tuple[int, ...], _Term] = {}
    for squared, factors in terms:
        key = tuple(id(f) for f in factors)
        previous = merged.get(key, (0.0, factors))[0]
        merged[key] = (previous + squared, factors)
    return list(merged.values())


def _commutator_defect(first: np.ndarray, second: np.ndarray, limit: float) -> float:
    """The largest entry of ``|first·second − second·first|``, or one above ``limit``.

    A few columns of the commutator come first, O(n²) each: Grams that do not commute show
    it in nearly every column, and the two full products took 2 s at n = 4,096.
    """
    n = first.shape[0]
    probe = np.unique(np.linspace(0, n - 1, min(n, COMMUTE_PROBES)).astype(int))
    for columns in (probe, slice(None)):
        commutator = first @ second[:, columns] - second @ first[:, columns]
        defect = float(np.abs(commutator).max(initial=0.0))
        if defect > limit:
            break
    return defect


def joint_eigenbasis(grams: Sequence[np.ndarray]) -> np.ndarray:
    """An orthonormal basis diagonalizing every (symmetric, pairwise commuting) Gram.

    The first Gram's eigenspaces are refined by each next Gram in turn, so repeated
    eigenvalues (identities, totals) never mix distinct joint eigenspaces.

    Raises:
        UnsupportedQueryError: two Grams do not commute (to :data:`COMMUTE_TOLERANCE`).

    Example:
        >>> q = joint_eigenbasis([np.ones((3, 3)), np.eye(3)])
        >>> bool(np.allclose(q.T @ np.ones((3, 3)) @ q, np.diag([0.0, 0.0, 3.0])))
        True
    """
    n = grams[0].shape[0]
    scales = [max(np.abs(g).max(initial=0.0), 1e-300) for g in grams]
    for a in range(len(grams)):
        for b in range(a + 1, len(grams)):
            limit = COMMUTE_TOLERANCE * n * scales[a] * scales[b]
            defect = _commutator_defect(grams[a], grams[b], limit)
            if defect > limit:
                raise UnsupportedQueryError(
                    f"Per attribute, the workload's Grams must commute; two of size {n} do not "
                    f"(relative defect {defect / (scales[a] * scales[b]):.2g})"
                )
    basis = np.eye(n)
    groups = [np.arange(n)]
    for gram, scale in zip(grams, scales, strict=True):
        refined = []
        for group in groups:
            if group.size == 1:
                refined.append(group)
                continue
            block = basis[:, group]
            values, rotation = scipy.linalg.eigh(block.T @ gram @ block, driver="evd")
            basis[:, group] = block @ rotation
            # The next Gram refines each group of eigenvalues equal up to the tolerance.
            breaks = np.flatnonzero(np.diff(values) > COMMUTE_TOLERANCE * n * scale) + 1
            refined.extend(group[part] for part in np.split(np.arange(values.size), breaks))
        groups = refined
    return basis


def _union_nuclear_norm(terms: list[_Term], memo: dict[tuple, float], dense_limit: int) -> float:
    terms = _merge(terms)
    key = tuple(sorted((round(s, 9), tuple(id(f) for f in fs)) for s, fs in terms))
    if key in memo:
        return memo[key]
    if not terms[0][1]:  # no attribute left: W is a column of weights
        result = float(np.sqrt(sum(squared for squared, _ in terms)))
    else:
        result = _split_or_solve(terms, memo, dense_limit)
    memo[key] = result
    return result


def _split_or_solve(terms: list[_Term], memo: dict[tuple, float], dense_limit: int) -> float:
    sizes = [f.shape[1] for f in terms[0][1]]
    rows = sum(math.prod(f.shape[0] for f in factors) for _, factors in terms)
    if min(rows, math.prod(sizes)) <= _DENSE_ENOUGH:
        sizes = []  # small enough: one dense eigendecomposition beats any split
    for i, size in enumerate(sizes):
        if size > _SPLIT_LIMIT or len(sizes) == 1:
            continue  # one attribute left: the dense path costs the same as the try
        distinct = {id(fs[i]): fs[i] for _, fs in terms}
        grams = {key: factor.gram().dense() for key, factor in distinct.items()}
        try:
            basis = joint_eigenbasis(list(grams.values()))
        except UnsupportedQueryError:
            continue
        diagonals = {key: np.diagonal(basis.T @ g @ basis) for key, g in grams.items()}
        scale = max(np.abs(d).max(initial=0.0) for d in diagonals.values())
        total = 0.0
        for j in range(size):
            block = [
                (squared * diagonals[id(fs[i])][j], fs[:i] + fs[i + 1 :])
                for squared, fs in terms
                if diagonals[id(fs[i])][j] > 1e-12 * scale
            ]
            if block:
                total += _union_nuclear_norm(block, memo, dense_limit)
        return total
    stacked = VStack([Weighted(float(np.sqrt(s)), Kron(list(fs))) for s, fs in terms])
    return _dense_nuclear_norm(stacked, dense_limit)


def _dense_nuclear_norm(W: VStack, dense_limit: int) -> float:
    rows, cols = W.shape
    if rows <= cols and rows * rows <= dense_limit:
        return float(singular_values_of_gram(row_gram(W)).sum())
    if cols * cols <= dense_limit:
        return float(singular_values_of_gram(W.gram().dense()).sum())
    raise TooLargeError(
        f"The singular values of {W!r} ({rows:,} queries over {cols:,} cells) need a dense "
        f"Gram of {min(rows, cols):,}² entries, over the limit of {dense_limit:,}"
    )


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
    if (
        isinstance(left, Kron)
        and isinstance(right, Kron)
        and [a.shape[1] for a in left.factors] == [b.shape[1] for b in right.factors]
    ):
        parts = [_cross(a, b) for a, b in zip(left.factors, right.factors, strict=True)]
        return reduce(np.kron, parts)
    check_dense_size(left.shape[0], right.shape[0], f"{left!r} @ {right!r}ᵀ")
    return np.asarray(left._matmat(right.T.dense()))


def row_space_projector(A: Matrix) -> Matrix:
    """``(AᵀA)⁺ AᵀA``: the orthogonal projector onto A's row space, kept structured."""
    if A.known_full_column_rank:
        return Identity(A.shape[1])
    if isinstance(A, Weighted):
        return row_space_projector(A.base) if A.weight else Dense(np.zeros(A.shape[::-1]))
    if isinstance(A, Kron):
        return Kron([row_space_projector(factor) for factor in A.factors])
    hook = getattr(A, "row_space_projector", None)
    if hook is not None:  # a type that knows its own row space (eigen strategies)
        return hook()
    gram = A.gram()
    if isinstance(gram, MarginalsGram):  # Σ E_b over the non-zero eigenvalues
        support = dict.fromkeys(gram.eigenvalues(), 1.0)
        return MarginalsGram.from_eigenvalues(gram.domain_shape, support)
    check_dense_size(A.shape[1], A.shape[1], f"the row-space projector of {A!r}")
    dense = gram.dense()
    return Dense(np.linalg.pinv(dense, rcond=PINV_TOLERANCE, hermitian=True) @ dense)
