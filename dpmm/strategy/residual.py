"""The residual method: optimal measurements per residual subspace, then a budget split.

For a workload that is a union of Kron products of per-attribute query matrices
(identity, total, prefix, ranges, small dense predicates), every query splits
into pieces on the mutually orthogonal residual subspaces of the attribute sets
S (:mod:`dpmm.strategy.residual_subspace`). Measuring ``L_S R_S`` on each
subspace with ``M_S = L_SᵀL_S`` gives, at unit noise, the total variance
``Σ_S tr(Ĝ_S M_S⁻¹)`` and the squared sensitivity ``Σ_S max diag(D_SᵀM_S D_S)``.
Each subspace is solved once at unit sensitivity (error f_S), then scaled by
``x_S`` with ``Σ x_S = 1``:

* **sum of variances** ``Σ_S f_S / x_S``: Cauchy–Schwarz gives the optimum
  ``(Σ_S √f_S)²`` at ``x_S ∝ √f_S``. On plain marginals every ``Ĝ_S`` is a
  multiple of the identity, the subspace optimum is the plain residual, and this
  is ResidualPlanner's closed form exactly.
* **weighted sum**: the same with each Kron term's squared weight multiplied by
  its importance.
* **max variance** over queries ``var_q = Σ_S k_qS / x_S`` (the per-subspace designs
  fixed): convex in x; its dual ``max_μ (Σ_S √(Kᵀμ)_S)²`` is ascended by the
  multiplicative update ``μ_q ← μ_q var_q / h²`` (:func:`max_variance_split`). On a
  union of marginals every block is a plain residual, so this is the max-variance
  optimum of the marginal strategies of :mod:`dpmm.strategy.marginal_optimal`.

Sensitivity is exact (the same for every cell) on blocks whose Gram is a
multiple of the identity; a solved block's diagonal is constant up to the
solver's gap (``GAP``), and the strategy reports the upper bound
``√Σ_S max diag`` (see :meth:`ResidualBlockStrategy.sensitivity`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import ArgumentError, DpmmError, UnsupportedQueryError
from dpmm.linalg import Matrix
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residual_general import (
    Block,
    FactorSplit,
    ResidualBlockStrategy,
    block_gram_pinv,
    read_sets,
    residual_variances,
    subspace_basis,
    term_splits,
)
from dpmm.linalg.residuals import DomainSizes
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.marginal_optimal import check_gaussian
from dpmm.strategy.residual_subspace import SubspaceWorkload, solve_subspace, subspace_workloads
from dpmm.strategy.time_budget import check_time

__all__ = [
    "LOSSES",
    "ResidualOptimum",
    "max_variance_split",
    "residual_optimum",
    "residual_strategy",
]

#: Losses the residual method minimizes.
LOSSES = ("sum_variance", "weighted_sum", "max_variance")

#: Relative duality gap at which the max-variance budget split stops.
MAX_VARIANCE_GAP = 1e-7

#: Most dual ascent steps of the max-variance budget split.
MAX_VARIANCE_STEPS = 20_000

#: Relative gap below which a budget split that ran out of steps is still accepted.
MAX_VARIANCE_ACCEPT = 1e-4


@dataclass(frozen=True)
class ResidualOptimum:
    """Per-set strategy blocks at sensitivity 1 and the objective they reach (unit noise).

    Attributes:
        shape: attribute sizes.
        blocks: ``{S: L_S}`` (a scalar s meaning ``s I``, or a dense matrix of full row
            rank over the directions the set's sub-workload reads).
        objective: the loss at unit noise variance.
        lower_bound: no strategy of this per-subspace form reaches less (sum losses).
        solved: how many distinct dense sub-problems were solved.
    """

    shape: tuple[int, ...]
    blocks: dict[int, Block]
    objective: float
    lower_bound: float
    solved: int

    def strategy(self) -> ResidualBlockStrategy:
        """The stacked strategy ``[L_S R_S]``."""
        return ResidualBlockStrategy(self.shape, self.blocks)


def workload_terms(W: Matrix) -> tuple[tuple[int, ...], list[tuple[float, list[FactorSplit]]]]:
    """W as ``(attribute sizes, [(squared weight, factor splits)])`` (:func:`term_splits`).

    Raises:
        ArgumentError: W is not a dpmm matrix or has a non-finite weight.
    """
    if not isinstance(W, Matrix):
        raise ArgumentError(f"The residual method needs a dpmm Matrix workload, got {type(W)!r}")
    terms = term_splits(W)
    for weight, _ in terms:
        if not math.isfinite(weight):
            raise ArgumentError(f"Workload {W!r} has a non-finite weight {weight!r}")
    return tuple(s.size for s in terms[0][1]), [(w * w, splits) for w, splits in terms]


def _importance(terms: list, weights: Sequence[float] | None, loss: str) -> list:
    if weights is None:
        if loss == "weighted_sum":
            raise ArgumentError("The weighted_sum loss needs weights, one per Kron term of W")
        return terms
    if len(weights) != len(terms):
        raise ArgumentError(f"weights has {len(weights)} entries but W has {len(terms)} Kron terms")
    scaled = []
    for (squared, splits), weight in zip(terms, weights, strict=True):
        if not math.isfinite(weight) or weight < 0:
            raise ArgumentError(f"Each weight must be a non-negative number, got {weight!r}")
        scaled.append((squared * float(weight), splits))
    return scaled


def _solve_all(
    shape: tuple[int, ...], problems: dict[int, SubspaceWorkload]
) -> tuple[dict[int, Block], dict[int, float], dict[int, float], int]:
    """Unit-sensitivity blocks ``L_S`` (scalar, or of full row rank), their errors and lower
    bounds per set."""
    sizes = DomainSizes(shape)
    factors: dict[int, Block] = {}
    errors: dict[int, float] = {}
    bounds: dict[int, float] = {}
    solved: dict[tuple, tuple[np.ndarray, float, float]] = {}
    for mask, problem in problems.items():
        rank = sizes.multiplicity(mask)
        if not rank:
            continue
        if problem.is_scalar:
            # Ĝ = c I: the symmetric optimum M = I / p_S (p_S = Π(1 − 1/n_i)).
            p = sizes.column_norm_squared(mask)
            factors[mask] = 1.0 / math.sqrt(p)
            errors[mask] = bounds[mask] = problem.scalar * rank * p
            continue
        gram = problem.dense(rank)
        trace = float(np.trace(gram))
        members = tuple(shape[i] for i in mask_members(mask))
        key = (members, np.round(gram / trace, 12).tobytes())
        if key not in solved:
            optimum = solve_subspace(gram / trace, subspace_basis(shape, mask))
            solved[key] = (optimum.factor, optimum.error, optimum.lower_bound)
        factor, error, bound = solved[key]
        factors[mask], errors[mask], bounds[mask] = factor, error * trace, bound * trace
    return factors, errors, bounds, len(solved)


def _variance_rows(terms: list, factors: dict[int, Block], order: list[int]) -> np.ndarray:
    """Distinct rows ``k_q`` (per set, unit noise, x = 1) over every query of the workload."""
    column = {m: j for j, m in enumerate(order)}
    inverse = {m: block_gram_pinv(f) for m, f in factors.items()}
    rows = []
    for squared, splits in terms:
        table = np.zeros((math.prod(len(s.a) for s in splits), len(order)))
        for mask in read_sets(splits):
            table[:, column[mask]] = residual_variances(splits, mask, inverse[mask])
        rows.append(np.unique(squared * table, axis=0))
    return np.unique(np.concatenate(rows), axis=0)


def max_variance_split(
    K: np.ndarray, *, tolerance: float, max_iterations: int, accept: float
) -> tuple[np.ndarray, float, float]:
    """Shares x minimizing ``max_q Σ_S K_qS / x_S`` under ``Σ_S x_S = 1``, by dual ascent.

    The dual is ``max_{μ ∈ simplex} (Σ_S √g_S)²`` with ``g = Kᵀμ``; for each μ the best x
    is ``x_S ∝ √g_S``, and ``μ_q ← μ_q · var_q / h²`` keeps μ on the simplex with the KKT
    conditions as fixed points. The ascent stops at a relative primal–dual gap of
    ``tolerance``.

    Returns:
        The best x found, its max variance (primal) and the best dual bound.

    Raises:
        DpmmError: the gap is still above ``accept`` after ``max_iterations`` steps.
    """
    mu = np.full(K.shape[0], 1.0 / K.shape[0])
    best_x, best_primal, best_dual = np.full(K.shape[1], np.nan), math.inf, 0.0
    for _ in range(max_iterations):
        check_time()
        g = K.T @ mu  # O(K.size) per step
        root = np.sqrt(g)
        h = float(root.sum())
        best_dual = max(best_dual, h * h)
        x = root / h
        variances = K @ (1.0 / x)
        primal = float(variances.max())
        if primal < best_primal:
            best_x, best_primal = x, primal
        if best_primal - best_dual <= tolerance * best_primal:
            break
        # Σ_q μ_q var_q = h²: the update keeps μ on the simplex; its fixed points are KKT.
        mu = mu * (variances / (h * h))
        mu /= mu.sum()
    if best_primal - best_dual > accept * best_primal:
        raise DpmmError(
            f"The max-variance split did not reach a relative gap of {accept:g} in "
            f"{max_iterations} steps (gap {(best_primal - best_dual) / best_primal:.3g})"
        )
    return best_x, best_primal, best_dual


def residual_optimum(
    W: Matrix,
    *,
    loss: str = "sum_variance",
    weights: Sequence[float] | None = None,
) -> ResidualOptimum:
    """The residual strategy's blocks at sensitivity 1 for ``W`` and ``loss``.

    Args:
        W: a union of Kron products of per-attribute query matrices, or Marginals.
        loss: ``"sum_variance"``, ``"weighted_sum"`` (needs ``weights``) or ``"max_variance"``.
        weights: importance of each Kron term of W (in :func:`~dpmm.linalg.kron.kron_terms`
            order), multiplying its queries' variances in the loss.

    Raises:
        ArgumentError: unknown loss, bad weights, or W not a matrix.
        UnsupportedQueryError: the workload has no non-zero query.
        TooLargeError: a sub-workload's subspace is too large to solve densely.
    """
    if loss not in LOSSES:
        raise ArgumentError(
            f"Unknown residual loss {loss!r} (expected one of: {', '.join(LOSSES)})"
        )
    shape, terms = workload_terms(W)
    terms = _importance(terms, weights, loss)
    problems = subspace_workloads(terms)
    factors, errors, bounds, solved = _solve_all(shape, problems)
    support = [m for m in factors if errors[m] > 0]
    if not support:
        raise UnsupportedQueryError(f"Workload {W!r} has no non-zero query to answer")
    factors = {m: factors[m] for m in support}
    if loss == "max_variance":
        x, objective, bound = max_variance_split(
            _variance_rows(terms, factors, support),
            tolerance=MAX_VARIANCE_GAP,
            max_iterations=MAX_VARIANCE_STEPS,
            accept=MAX_VARIANCE_ACCEPT,
        )
        shares = dict(zip(support, x.tolist(), strict=True))
    else:
        root = np.sqrt(np.array([errors[m] for m in support]))
        total = math.fsum(root)
        shares = {m: r / total for m, r in zip(support, root.tolist(), strict=True)}
        objective = math.fsum(errors[m] / shares[m] for m in support)
        bound = math.fsum(math.sqrt(bounds[m]) for m in support) ** 2
    # Rounding: the shares must sum to 1 to the last bit we can get (sensitivity exactly 1).
    norm = math.fsum(shares.values())
    shares = {m: s / norm for m, s in shares.items()}
    blocks = {m: math.sqrt(shares[m]) * f for m, f in factors.items()}
    # A solved block may leave some cells' norms below 1 (slack constraints); where the
    # true sensitivity is known to be below 1, scale up to use the whole budget.
    squared = ResidualBlockStrategy(shape, blocks).squared_sensitivity()
    if squared < 1.0:
        scale = 1.0 / math.sqrt(squared)
        blocks = {m: b * scale for m, b in blocks.items()}
        objective *= squared
    return ResidualOptimum(shape, blocks, objective, bound, solved)


def residual_strategy(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    loss: str = "sum_variance",
    weights: Sequence[float] | None = None,
) -> ResidualBlockStrategy:
    """The residual strategy for ``W`` under Gaussian noise, at L2 sensitivity 1.

    Example:
        >>> from itertools import combinations
        >>> from dpmm.error import expected_error
        >>> from dpmm.linalg import Kron, Ones, Prefix, VStack
        >>> from dpmm.privacy import ZCDP
        >>> W = VStack([Kron([Prefix(4), Prefix(4), Ones(1, 4)]),
        ...             Kron([Ones(1, 4), Prefix(4), Prefix(4)])])
        >>> A = residual_strategy(W, ZCDP(1))
        >>> round(A.sensitivity(2), 6), expected_error(W, A, ZCDP(1)) < 0.5 * W.gram().trace()
        (1.0, True)

    Raises:
        UnsupportedQueryError: pure ε-DP (Laplace noise), or a workload without queries.
    """
    check_gaussian(privacy, "residual")
    return residual_optimum(W, loss=loss, weights=weights).strategy()
