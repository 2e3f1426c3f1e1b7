"""Sub-workloads on the residual subspaces, and the optimal measurement of each.

A Kron term ``w ⊗_i W_i`` splits per attribute as ``W_i = a_i 1ᵀ + B_i D_i``
(:func:`dpmm.linalg.residual_general.split_factor`), so on the subspace of the
attribute set S it reads ``R_S x`` through ``V_S = w ⊗_{i∈S} B_i ⊗_{i∉S} a_i``.
Summed over the terms, the sub-workload Gram of S is

    ``Ĝ_S = Σ_terms w² Π_{i∉S} ‖a_i‖² · ⊗_{i∈S} B_iᵀB_i``.

When every factor on S has ``B_iᵀB_i = c_i I`` (identities), ``Ĝ_S`` is a multiple
of the identity, and by symmetry the best measurement of the subspace is the
plain residual (ResidualPlanner's case). Otherwise we solve, on the
``K = Π_{i∈S}(n_i − 1)``-dimensional subspace,

    ``min tr(Ĝ_S M⁻¹)  subject to  diag(D_SᵀM D_S) ≤ 1``   (``D_S = ⊗ D_i``),

the matrix mechanism restricted to the subspace (the constraint is the squared
column norm of each cell of S). Its Lagrange dual, for weights λ on the simplex
over the cells and ``H = D_S Λ D_Sᵀ``, is ``max_λ (tr (H^{1/2} Ĝ H^{1/2})^{1/2})²``;
for fixed λ the best M is ``H^{-1/2} (H^{1/2} Ĝ H^{1/2})^{1/2} H^{-1/2}`` scaled so
``Σ λ_x diag_x = 1``. At the optimum every cell with λ_x > 0 has diagonal 1, which
gives the multiplicative update ``λ_x ← λ_x diag_x^STEP`` (renormalized); each step
certifies a lower bound (the dual value) and an upper bound (the primal point
scaled to ``max diag = 1``).

A sub-workload may leave directions of the subspace unread (a predicate's null
space): ``Ĝ_S = U Λ Uᵀ`` with rank r < K. The problem is then solved on the r read
directions alone (``Ĝ → Λ``, ``D_S → UᵀD_S``, still with orthonormal rows), and
the block is the wide ``L = N^{1/2} Uᵀ``: the unread directions get no budget at
all, not a small share. Nothing is lost: with ``X = H^{1/2}Ĝ^{1/2}`` the dual
value ``tr (XᵀX)^{1/2} = tr (XXᵀ)^{1/2}`` is the same on the r read directions,
so the restricted optimum is the optimum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dpmm.errors import DpmmError, TooLargeError
from dpmm.linalg.kron import kron_rows
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residual_general import FactorSplit, read_sets
from dpmm.strategy.time_budget import check_time

__all__ = ["SubspaceOptimum", "SubspaceWorkload", "solve_subspace", "subspace_workloads"]

#: Largest subspace dimension solved densely (one K × K eigendecomposition per step).
MAX_DIMENSION = 1024

#: Certified relative gap (primal / dual − 1) at which the subspace solver stops.
GAP = 1e-8

#: Exponent of the multiplicative update (3 converges in ~10 steps on prefix and range).
STEP = 3.0

#: Certified gap below which a solve that ran out of steps is still accepted.
ACCEPT = 1e-5

#: Most steps of the subspace solver.
MAX_STEPS = 1000


@dataclass
class SubspaceWorkload:
    """The sub-workload Gram of one residual set, as a sum of weighted Kron products.

    Attributes:
        mask: the attribute set S.
        scalar: the coefficient c of ``Ĝ_S = c I`` when every term is of that kind.
        terms: ``(coefficient, per-member residual Grams)`` of the other terms.
    """

    mask: int
    scalar: float = 0.0
    terms: list[tuple[float, tuple[np.ndarray, ...]]] = field(default_factory=list)

    @property
    def is_scalar(self) -> bool:
        """Whether ``Ĝ_S`` is a multiple of the identity."""
        return not self.terms

    def dense(self, dimension: int) -> np.ndarray:
        """``Ĝ_S`` as a dense ``K × K`` array."""
        if dimension > MAX_DIMENSION:
            raise TooLargeError(
                f"Residual set {self.mask} spans {dimension:,} dimensions; the residual "
                f"method solves sub-workloads of at most {MAX_DIMENSION:,} densely"
            )
        gram = self.scalar * np.eye(dimension)
        for coefficient, grams in self.terms:
            gram += coefficient * kron_rows(grams)
        return gram


def subspace_workloads(
    terms: Sequence[tuple[float, Sequence[FactorSplit]]],
) -> dict[int, SubspaceWorkload]:
    """``{S: Ĝ_S}`` for a union of Kron terms, each given as ``(weight², factor splits)``.

    Example:
        >>> from dpmm.linalg import Identity, Ones
        >>> from dpmm.linalg.residual_general import split_factor
        >>> one = [split_factor(Identity(2)), split_factor(Ones(1, 3))]
        >>> sorted((m, round(g.scalar, 6)) for m, g in subspace_workloads([(1.0, one)]).items())
        [(0, 0.5), (1, 1.0)]
    """
    result: dict[int, SubspaceWorkload] = {}
    grams: dict[int, np.ndarray] = {}
    for squared, splits in terms:
        if squared == 0:
            continue
        # Total queries (a = [1], B = 0) change nothing: only the other attributes count.
        totals = {i: split.total_squared for i, split in enumerate(splits) if not split.is_total}
        for mask in read_sets(splits):
            members = mask_members(mask)
            outside = squared * math.prod(t for i, t in totals.items() if not mask >> i & 1)
            entry = result.setdefault(mask, SubspaceWorkload(mask))
            if all(splits[i].scalar is not None for i in members):
                entry.scalar += outside * math.prod(splits[i].scalar for i in members)
            else:
                pieces = []
                for i in members:
                    key = id(splits[i])
                    if key not in grams:
                        grams[key] = splits[i].residual_gram
                    pieces.append(grams[key])
                entry.terms.append((outside, tuple(pieces)))
    return {m: g for m, g in result.items() if g.scalar > 0 or g.terms}


@dataclass(frozen=True)
class SubspaceOptimum:
    """A measurement ``M = LᵀL`` of one subspace with ``max diag(D_SᵀM D_S) = 1``.

    Attributes:
        factor: L (``r × K``, full row rank r = the rank of the sub-workload Gram): the
            strategy block. Its rows span exactly the directions the sub-workload reads.
        error: ``tr(Ĝ M⁺)``.
        lower_bound: the best dual value (no M with the same constraint does better).
    """

    factor: np.ndarray
    error: float
    lower_bound: float

    @property
    def gram(self) -> np.ndarray:
        """``M = LᵀL`` (``K × K``, of rank r)."""
        return self.factor.T @ self.factor


def _eigh_psd(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(vectors, √values, 1/√values)`` of a symmetric PSD matrix; 0 where a value is
    below the rounding level (so the inverse root is a pseudo-inverse root)."""
    values, vectors = np.linalg.eigh(matrix)
    floor = values[-1] * matrix.shape[0] * np.finfo(float).eps
    kept = values > floor
    root = np.sqrt(np.where(kept, values, 0.0))
    inverse = np.divide(1.0, root, out=np.zeros_like(root), where=kept)
    return vectors, root, inverse


def solve_subspace(gram: np.ndarray, basis: np.ndarray) -> SubspaceOptimum:
    """``min tr(gram M⁺)`` over PSD M reading every direction of ``gram``, with
    ``diag(basisᵀ M basis) ≤ 1``; M reads no other direction.

    Args:
        gram: the sub-workload Gram ``Ĝ_S`` (``K × K``, symmetric PSD, not zero).
        basis: ``D_S`` (``K × N``, orthonormal rows): column x maps cell x into the subspace.

    Raises:
        DpmmError: the gap is still above :data:`ACCEPT` after :data:`MAX_STEPS` steps.

    Example:
        >>> from dpmm.linalg.residuals import helmert
        >>> D = helmert(3)
        >>> opt = solve_subspace(np.eye(2), D)   # identity: M = I / (1 − 1/3)
        >>> np.allclose(opt.gram, 1.5 * np.eye(2)), round(opt.error, 9)
        (True, 1.333333333)
        >>> opt = solve_subspace(np.diag([1.0, 0.0]), D)   # one direction is never read
        >>> opt.factor.shape, round(opt.error, 9)
        ((1, 2), 0.5)
    """
    if float(np.trace(gram)) <= 0:
        raise DpmmError("A residual sub-workload has a zero Gram; nothing to measure")
    vectors, root, _ = _eigh_psd(gram)  # the directions read: above the rounding level
    directions, values = vectors[:, root > 0], root[root > 0] ** 2
    reduced = directions.T @ basis  # r × N, orthonormal rows
    cells = basis.shape[1]
    weights = np.full(cells, 1.0 / cells)
    best_dual, best = 0.0, None
    for _ in range(MAX_STEPS):
        check_time()
        vectors, root_h, inverse_h = _eigh_psd((reduced * weights) @ reduced.T)
        half = (vectors * root_h) @ vectors.T
        inverse_half = (vectors * inverse_h) @ vectors.T
        inner, root_inner, _ = _eigh_psd((half * values) @ half)
        scale = float(root_inner.sum())
        # Σ λ_x diag_x = 1
        candidate = inverse_half @ ((inner * root_inner) @ inner.T) @ inverse_half / scale
        candidate = (candidate + candidate.T) / 2
        diagonal = np.sum(reduced * (candidate @ reduced), axis=0)
        best_dual = max(best_dual, scale * scale)
        peak = float(diagonal.max())
        primal = scale * scale * peak
        if best is None or primal < best[1]:
            best = (candidate / peak, primal)
        if best[1] <= scale * scale * (1 + GAP):
            break
        weights = weights * diagonal**STEP
        weights /= weights.sum()
    if best[1] > best_dual * (1 + ACCEPT):
        raise DpmmError(
            f"The residual sub-workload solver did not reach a relative gap of {GAP:g} in "
            f"{MAX_STEPS} steps (gap {best[1] / best_dual - 1:.3g})"
        )
    matrix, _ = best
    vectors, root, _ = _eigh_psd(matrix)
    factor = ((vectors * root) @ vectors.T) @ directions.T  # N^{1/2} Uᵀ
    error = float(np.sum(values * np.diag(np.linalg.inv(matrix))))
    return SubspaceOptimum(factor, error, best_dual)
