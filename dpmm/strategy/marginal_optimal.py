"""The optimal Gaussian strategy for a union of marginals, in closed form (ResidualPlanner).

For a workload of marginals ``a`` with weights ``w_a``, ``WᵀW`` has eigenvalue
``λ(S) = Σ_{a⊇S} w_a² Π_{i∉a} n_i`` on the projection ``E_S`` of the marginal
algebra. Measuring residuals ``x_S^{1/2} R_S`` (see :mod:`dpmm.linalg.residuals`; a
residual block strategy of scalar blocks) gives ``AᵀA = Σ_S x_S (Π_{i∉S} n_i) E_S`` and
squared sensitivity ``Σ_S p_S x_S`` with ``p_S = Π_{i∈S}(1 − 1/n_i)``. With
``m_S = Π_{i∈S}(n_i − 1)`` and ``c_S = λ(S) m_S / Π_{i∉S} n_i``:

* **sum of variances** (at unit noise): ``Σ_S c_S / x_S``; under ``Σ p_S x_S = 1``
  Cauchy–Schwarz gives the optimum ``(Σ_S √(c_S p_S))²`` at ``x_S ∝ √(c_S / p_S)``.
  ResidualPlanner proves no matrix-mechanism strategy does better.
* **max variance**: every cell of marginal a has variance
  ``var_a(x) = w_a² Σ_{S⊆a} K_{aS} / x_S`` with ``K_{aS} = p_S / (Π_{i∈a∖S} n_i)²``.
  Minimizing ``max_a var_a`` under the same constraint is convex; by minimax its
  dual is ``max_{μ ∈ simplex} (Σ_S √(p_S g_S(μ)))²`` with ``g = Kᵀμ``, and for
  each μ the best x is ``x_S ∝ √(g_S / p_S)``. We ascend the dual with
  multiplicative updates ``μ_a ← μ_a · var_a / h²`` (a fixed point is exactly the
  KKT condition) and stop when the primal (max variance of x(μ)) and the dual
  bound agree to a relative gap.

Everything runs on the down-closure of the workload's sets, never on the domain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpmm.errors import ArgumentError, DpmmError, TooLargeError, UnsupportedQueryError
from dpmm.linalg import Identity, Marginal, Marginals, Matrix, Ones, VStack
from dpmm.linalg.kron import kron_terms
from dpmm.linalg.marginals import _submasks, members_mask
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import DomainSizes
from dpmm.privacy import PrivacyParameter

__all__ = [
    "MarginalOptimum",
    "cell_variances",
    "check_gaussian",
    "marginal_optimal",
    "marginal_projection",
    "max_variance_optimum",
    "max_variance_split",
    "sum_variance_optimum",
    "workload_marginals",
]

OBJECTIVES = ("sum_variance", "max_variance")

#: Relative duality gap at which the max-variance solver stops.
GAP_TOLERANCE = 1e-7

#: Most dual ascent steps of the max-variance solver.
MAX_ITERATIONS = 20_000


@dataclass(frozen=True)
class MarginalOptimum:
    """A residual strategy's squared weights at sensitivity 1, and its certified objective.

    Attributes:
        shape: the domain's attribute sizes.
        squared_weights: ``{S: x_S}`` with ``Σ_S p_S x_S = 1``.
        objective: the objective at unit noise variance (sum or max of cell variances).
        lower_bound: a certified lower bound on the optimum (equal to ``objective`` in
            closed form; the dual value for the max-variance solver).
        iterations: dual ascent steps taken (0 for the closed form).
    """

    shape: tuple[int, ...]
    squared_weights: dict[int, float]
    objective: float
    lower_bound: float
    iterations: int = 0

    def strategy(self) -> ResidualBlockStrategy:
        """The residual strategy with scalar blocks (weights) ``√x_S``."""
        return ResidualBlockStrategy(
            self.shape, {s: math.sqrt(x) for s, x in self.squared_weights.items()}
        )


def workload_marginals(
    W: Matrix, *, repeated_totals: bool = False, approximate: bool = False
) -> tuple[tuple[int, ...], dict[int, float]]:
    """W as ``(attribute sizes, {mask: u_a})`` with ``WᵀW = Σ_a u_a C(a)``.

    ``u_a`` is the squared weight of marginal a, summed over its repeats. Accepts
    :class:`Marginals`, :class:`Marginal`, or a (weighted) stack of Kron products whose
    factors are ``Identity(n)``, the ``1 × n`` total ``Ones(1, n)``, or a stack of those
    (``[Identity; Total]``): the factors whose Gram is ``α I + β J``.

    Args:
        W: the workload.
        repeated_totals: also accept ``m × n`` Ones factors (m copies of the total: they
            multiply ``u_a`` by m).
        approximate: accept any union of Kron products, each other factor replaced by the
            closest Gram in the algebra (:func:`marginal_projection`): HDMM's marginals
            approximation, whose strategies are then judged by their error on W itself.

    Raises:
        UnsupportedQueryError: W has another query (and ``approximate`` is False).
        TooLargeError: with ``approximate``, a product has so many factors outside the
            algebra that its expansion would exceed :data:`MAX_EXPANDED_SETS` sets.

    Example:
        >>> from dpmm.linalg import Kron, VStack
        >>> workload_marginals(VStack([Kron([Identity(2), Ones(1, 3)]), Marginal((2, 3), [1])]))
        ((2, 3), {1: 1.0, 2: 1.0})
        >>> workload_marginals(Kron([VStack([Identity(2), Ones(1, 2)]), Identity(3)]))
        ((2, 3), {3: 1.0, 2: 1.0})
    """
    if isinstance(W, Marginals):
        return W.domain_shape, {mask: w * w for mask, w in W.weights.items()}
    if isinstance(W, Marginal):
        return W.domain_shape, {W.mask: 1.0}
    terms = kron_terms(W)
    shape = tuple(int(factor.shape[1]) for factor in terms[0].factors)
    squared: dict[int, float] = {}
    for term in terms:
        parts = {0: term.weight**2}  # the product's expansion so far: {mask: coefficient}
        for i, factor in enumerate(term.factors):
            inside, outside = _algebra_gram(factor, repeated_totals, approximate, W)
            expanded: dict[int, float] = {}
            for mask, coefficient in parts.items():
                if inside:
                    expanded[mask | 1 << i] = coefficient * inside
                if outside:
                    expanded[mask] = expanded.get(mask, 0.0) + coefficient * outside
            if len(expanded) > MAX_EXPANDED_SETS:
                raise TooLargeError(
                    f"The marginals approximation of {W!r} expands one product into more "
                    f"than {MAX_EXPANDED_SETS:,} marginal tables"
                )
            parts = expanded
        for mask, coefficient in parts.items():
            squared[mask] = squared.get(mask, 0.0) + coefficient
    return shape, squared


#: Most marginal tables one product of a workload may expand into under the marginals
#: approximation (2^16: sixteen factors outside the algebra).
MAX_EXPANDED_SETS = 1 << 16


def _algebra_gram(
    factor: Matrix, repeated_totals: bool, approximate: bool, W: Matrix
) -> tuple[float, float]:
    """``(α, β)`` with ``factorᵀfactor = α I + β J``, exactly or (``approximate``) closest."""
    if isinstance(factor, Identity):
        return 1.0, 0.0
    if isinstance(factor, Ones) and (repeated_totals or factor.shape[0] == 1):
        return 0.0, float(factor.shape[0])  # (1_m 1ᵀ)ᵀ(1_m 1ᵀ) = m J
    if isinstance(factor, VStack) and all(isinstance(b, Identity | Ones) for b in factor.blocks):
        grams = [_algebra_gram(block, True, False, W) for block in factor.blocks]
        return sum(g[0] for g in grams), sum(g[1] for g in grams)
    if approximate:
        return marginal_projection(factor)
    raise UnsupportedQueryError(
        f"{W!r} is not a union of marginals: it has the factor {factor!r} (only "
        f"identities and {'' if repeated_totals else '1×n '}totals are marginals)"
    )


def marginal_projection(factor: Matrix) -> tuple[float, float]:
    """``(α, β)`` of the Gram ``α I + β J`` closest to ``G = factorᵀfactor`` (Frobenius).

    HDMM's marginals approximation (McKenna et al., PVLDB 2018, §6.2): with ``t = tr G``
    and ``s = 1ᵀG1`` over n columns, ``α = (n t − s) / (n (n − 1))`` and
    ``β = (s − t) / (n (n − 1))``; both are ≥ 0 for a PSD G (``s ≤ n λ_max ≤ n t``), and
    ``α = 0`` only for ``G = β J``, so a strategy that answers the projection answers G.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> [round(v, 6) for v in marginal_projection(Prefix(3))]   # Gram [[3,2,1],[2,2,1],[1,1,1]]
        [0.666667, 1.333333]
    """
    n = factor.shape[1]
    gram = factor.gram()
    trace, total = float(gram.trace()), float(gram.entry_sum())
    if n == 1:
        return trace, 0.0
    inside = max(0.0, (n * trace - total) / (n * (n - 1)))
    outside = max(0.0, (total - trace) / (n * (n - 1)))
    return inside, outside


def _down_closure(workload: Mapping[int, float], sizes: DomainSizes) -> list[int]:
    """Every subset of a workload set whose projection E_S is not zero."""
    closure: set[int] = set()
    for mask in workload:
        if mask not in closure:
            closure.update(_submasks(mask))
    return sorted(s for s in closure if sizes.multiplicity(s))


def sum_variance_optimum(shape: Sequence[int], workload: Mapping[int, float]) -> MarginalOptimum:
    """The closed-form optimum of the summed cell variances (unit noise, sensitivity 1).

    Args:
        shape: attribute sizes.
        workload: ``{mask: squared weight}`` of the marginals.

    Example:
        >>> opt = sum_variance_optimum((2, 2), {0b11: 1.0})   # one 2×2 table
        >>> round(opt.objective, 12)   # (Σ_S √(c_S p_S))² with c_S = m_S, p_S = m_S / 2^|S|
        4.0
    """
    sizes = DomainSizes(shape)
    # c_S / m_S = Σ_{a⊇S} w_a² / Π_{i∈a∖S} n_i = Π_{i∈S} n_i · Σ_{a⊇S} w_a² / Π_{i∈a} n_i.
    reach: dict[int, float] = {}
    for a, squared in workload.items():
        if squared == 0:
            continue
        share = squared / sizes.inside(a)
        for s in _submasks(a):
            reach[s] = reach.get(s, 0.0) + share
    coefficient = {s: v * sizes.inside(s) for s, v in reach.items() if sizes.multiplicity(s)}
    support = [s for s, v in coefficient.items() if v > 0]
    if not support:
        raise UnsupportedQueryError("marginal_optimal needs a workload with a non-zero query")
    c = np.array([coefficient[s] * sizes.multiplicity(s) for s in support])
    p = np.array([sizes.column_norm_squared(s) for s in support])
    root = np.sqrt(c * p)
    total = float(root.sum())
    squared_weights = np.sqrt(c / p) / total
    # Rounding: rescale so that Σ p x = 1 holds to the last bit we can get.
    squared_weights /= math.fsum(p * squared_weights)
    return MarginalOptimum(
        tuple(shape),
        dict(zip(support, squared_weights.tolist(), strict=True)),
        objective=float(np.dot(c, 1.0 / squared_weights)),
        lower_bound=total**2,
    )


def _variance_matrix(
    shape: Sequence[int], workload: Mapping[int, float], closure: list[int]
) -> sp.csr_array:
    """``K[a, S] = w_a² p_S / (Π_{i∈a∖S} n_i)²``: cell variance of marginal a per unit 1/x_S."""
    sizes = DomainSizes(shape)
    column = {s: j for j, s in enumerate(closure)}
    rows, cols, values = [], [], []
    for row, (a, squared) in enumerate(workload.items()):
        inside_a = sizes.inside(a)
        for s in _submasks(a):
            if s in column:
                ratio = inside_a // sizes.inside(s)
                rows.append(row)
                cols.append(column[s])
                values.append(squared * sizes.column_norm_squared(s) / ratio**2)
    return sp.csr_array((values, (rows, cols)), shape=(len(workload), len(closure)))


def max_variance_split(
    K: Any, costs: np.ndarray, *, tolerance: float, max_iterations: int, accept: float
) -> tuple[np.ndarray, float, float, int]:
    """Shares x minimizing ``max_q Σ_S K_qS / x_S`` under ``Σ_S costs_S x_S = 1``, by dual ascent.

    The dual is ``max_{μ ∈ simplex} (Σ_S √(costs_S g_S))²`` with ``g = Kᵀμ``; for each μ
    the best x is ``x_S ∝ √(g_S / costs_S)``, and ``μ_q ← μ_q · var_q / h²`` keeps μ on the
    simplex with the KKT conditions as fixed points. K may be dense or sparse. The ascent
    stops at a relative primal–dual gap of ``tolerance``.

    Returns:
        The best x found, its max variance (primal), the best dual bound, and the steps taken.

    Raises:
        DpmmError: the gap is still above ``accept`` after ``max_iterations`` steps.
    """
    Kt = K.T.tocsr() if hasattr(K, "tocsr") else K.T
    mu = np.full(K.shape[0], 1.0 / K.shape[0])
    best_x, best_primal, best_dual = np.full(K.shape[1], np.nan), math.inf, 0.0
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        g = Kt @ mu  # O(nnz(K)) per step
        root = np.sqrt(costs * g)
        h = float(root.sum())
        best_dual = max(best_dual, h * h)
        x = np.sqrt(g / costs) / h
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
    return best_x, best_primal, best_dual, iterations


def max_variance_optimum(
    shape: Sequence[int],
    workload: Mapping[int, float],
    *,
    tolerance: float = GAP_TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> MarginalOptimum:
    """Minimize the largest cell variance (each marginal's scaled by its squared weight).

    Args:
        shape: attribute sizes.
        workload: ``{mask: squared weight}``; marginals of weight 0 are ignored.
        tolerance: stop at this relative gap between primal and dual values.
        max_iterations: most dual ascent steps.

    Raises:
        DpmmError: the gap is still above ``tolerance`` after ``max_iterations``.
    """
    sizes = DomainSizes(shape)
    workload = {a: w for a, w in workload.items() if w > 0}
    closure = _down_closure(workload, sizes)
    if not closure:
        raise UnsupportedQueryError("marginal_optimal needs a workload with a non-zero query")
    K = _variance_matrix(shape, workload, closure)
    p = np.array([sizes.column_norm_squared(s) for s in closure])
    best_x, _, best_dual, iterations = max_variance_split(
        K, p, tolerance=tolerance, max_iterations=max_iterations, accept=tolerance
    )
    best_x = best_x / math.fsum(p * best_x)
    return MarginalOptimum(
        tuple(shape),
        dict(zip(closure, best_x.tolist(), strict=True)),
        objective=float((K @ (1.0 / best_x)).max()),
        lower_bound=best_dual,
        iterations=iterations,
    )


def check_gaussian(privacy: PrivacyParameter, method: str) -> None:
    """Raise UnsupportedQueryError unless ``privacy`` is Gaussian (ρ-zCDP), as ``method`` needs."""
    if privacy.norm != 2:
        raise UnsupportedQueryError(
            f"The {method} method needs Gaussian noise (rho-zCDP); it does not apply to "
            f"{privacy.noise} noise"
        )


def _merge_weights(
    shape: Sequence[int],
    workload: dict[int, float],
    weights: Mapping[int, float] | Mapping[tuple[int, ...], float] | None,
) -> dict[int, float]:
    if weights is None:
        return workload
    scaled = dict(workload)
    for key, weight in weights.items():
        mask = key if isinstance(key, int) else members_mask(key)
        if mask not in workload:
            raise ArgumentError(f"weights names the attribute set {key!r}, which W does not hold")
        if not np.isfinite(weight) or weight < 0:
            raise ArgumentError(f"weights[{key!r}] must be a non-negative number, got {weight!r}")
        scaled[mask] = workload[mask] * float(weight)
    return scaled


def marginal_optimal(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    objective: str = "sum_variance",
    weights: Mapping[int, float] | Mapping[tuple[int, ...], float] | None = None,
) -> ResidualBlockStrategy:
    """The optimal residual strategy for a union of marginals under Gaussian noise.

    The strategy has L2 sensitivity 1, so measuring it at ρ-zCDP adds noise of
    variance ``1/(2ρ)`` per answer; the strategy itself does not depend on ρ.

    Args:
        W: a union of marginals (see :func:`workload_marginals`).
        privacy: must be Gaussian (ρ-zCDP).
        objective: ``"sum_variance"`` (total squared error, closed form) or
            ``"max_variance"`` (largest per-cell variance, convex solver).
        weights: importance per marginal (attribute mask or tuple of positions),
            multiplying its cells' variances in the objective; 1 when omitted.

    Raises:
        UnsupportedQueryError: pure ε-DP.
        ArgumentError: an unknown objective, or weights naming another set.
        UnsupportedQueryError: W is not a union of marginals.

    Example:
        >>> from dpmm.privacy import ZCDP
        >>> from dpmm.error import expected_error
        >>> from itertools import combinations
        >>> W = Marginals((10,) * 8, {pair: 1.0 for pair in combinations(range(8), 2)})
        >>> A = marginal_optimal(W, ZCDP(1))
        >>> round(A.sensitivity(2), 12), round(expected_error(W, A, ZCDP(1)), 1)
        (1.0, 30351.2)
    """
    check_gaussian(privacy, "marginal_optimal")
    if objective not in OBJECTIVES:
        raise ArgumentError(
            f"Unknown marginal_optimal objective {objective!r} (expected one of: "
            f"{', '.join(OBJECTIVES)})"
        )
    shape, workload = workload_marginals(W)
    workload = _merge_weights(shape, workload, weights)
    if objective == "sum_variance":
        return sum_variance_optimum(shape, workload).strategy()
    return max_variance_optimum(shape, workload).strategy()


def cell_variances(
    W: Matrix, A: ResidualBlockStrategy, privacy: PrivacyParameter
) -> dict[int, float]:
    """``{mask: variance of every cell}`` for W's marginals answered from A by least squares.

    The per-marginal form of :func:`dpmm.error.per_query_variance` for a strategy of scalar
    blocks (:func:`marginal_optimal`'s): O(2^k) per k-way marginal, never one entry per
    cell (10⁸ cells at 100 attributes).

    Raises:
        UnsupportedQueryError: W is not a union of marginals over A's domain, or A has a
            block that is not a scalar.

    Example:
        >>> from dpmm.privacy import ZCDP
        >>> W = Marginals((2, 3), {(0,): 1.0, (0, 1): 1.0})
        >>> variances = cell_variances(W, marginal_optimal(W, ZCDP(1)), ZCDP(1))
        >>> sorted(variances) == [0b01, 0b11]
        True
    """
    shape, workload = workload_marginals(W)
    if shape != A.domain_shape:
        raise UnsupportedQueryError(
            f"Workload {W!r} is over {shape} but strategy {A!r} is over {A.domain_shape}"
        )
    if any(isinstance(block, np.ndarray) for block in A.blocks.values()):
        raise UnsupportedQueryError(f"cell_variances needs scalar residual blocks, not {A!r}")
    scale = privacy.noise_variance(A.sensitivity(privacy.norm))
    sizes = DomainSizes(shape)
    return {
        mask: scale * squared * _marginal_variance(A.blocks, sizes, mask)
        for mask, squared in workload.items()
    }


def _marginal_variance(weights: Mapping[int, float], sizes: DomainSizes, mask: int) -> float:
    """Variance of one cell of marginal ``mask`` under unit noise and least squares.

    Every cell has ``Σ_{S⊆mask} Π_{i∈S}(1 − 1/n_i) / (Π_{i∈mask∖S} n_i² · w_S²)``;
    infinite if a needed residual has weight zero. O(2^|mask|), independent of the domain.
    """
    total = 0.0
    for subset in _submasks(mask):
        if not sizes.multiplicity(subset):
            continue
        weight = weights.get(subset, 0.0)
        if not weight:
            return math.inf
        ratio = sizes.inside(mask) // sizes.inside(subset)
        total += sizes.column_norm_squared(subset) / (ratio**2 * weight**2)
    return total
