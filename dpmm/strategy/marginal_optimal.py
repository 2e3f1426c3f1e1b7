"""The optimal Gaussian strategy for a union of marginals, in closed form (ResidualPlanner).

For a workload of marginals ``a`` with weights ``w_a``, ``WᵀW`` has eigenvalue
``λ(S) = Σ_{a⊇S} w_a² Π_{i∉a} n_i`` on the projection ``E_S`` of the marginal
algebra. Measuring residuals ``x_S^{1/2} R_S`` (see :mod:`dpmm.linalg.residuals`; a
residual block strategy of scalar blocks) gives ``AᵀA = Σ_S x_S (Π_{i∉S} n_i) E_S`` and
squared sensitivity ``Σ_S p_S x_S`` with ``p_S = Π_{i∈S}(1 − 1/n_i)``. With
``m_S = Π_{i∈S}(n_i − 1)`` and ``c_S = λ(S) m_S / Π_{i∉S} n_i``:

the sum of variances (at unit noise) is ``Σ_S c_S / x_S``; under ``Σ p_S x_S = 1``
Cauchy–Schwarz gives the optimum ``(Σ_S √(c_S p_S))²`` at ``x_S ∝ √(c_S / p_S)``.
ResidualPlanner proves no matrix-mechanism strategy does better. Everything runs on the
down-closure of the workload's sets, never on the domain.

The largest cell variance (optionally weighted per marginal) is minimized by the residual
method, whose scalar blocks on a union of marginals are these residuals:
``residual_strategy(W, privacy, loss="max_variance")`` (:mod:`dpmm.strategy.residual`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import TooLargeError, UnsupportedQueryError
from dpmm.linalg import Identity, Marginal, Marginals, MarginalsGram, Matrix, Ones, VStack
from dpmm.linalg.kron import kron_terms
from dpmm.linalg.marginals import _submasks
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import DomainSizes
from dpmm.privacy import PrivacyParameter

__all__ = [
    "MarginalOptimum",
    "cell_variances",
    "check_gaussian",
    "marginal_optimal",
    "marginal_projection",
    "marginal_strategies_bound",
    "sum_variance_optimum",
    "workload_marginals",
]


@dataclass(frozen=True)
class MarginalOptimum:
    """A residual strategy's squared weights at sensitivity 1, and its certified objective.

    Attributes:
        shape: the domain's attribute sizes.
        squared_weights: ``{S: x_S}`` with ``Σ_S p_S x_S = 1``.
        objective: the sum of cell variances at unit noise variance.
        lower_bound: the optimum ``(Σ_S √(c_S p_S))²`` (``objective`` up to rounding).
    """

    shape: tuple[int, ...]
    squared_weights: dict[int, float]
    objective: float
    lower_bound: float

    def strategy(self) -> ResidualBlockStrategy:
        """The residual strategy with scalar blocks (weights) ``√x_S``."""
        return ResidualBlockStrategy(
            self.shape, {s: math.sqrt(x) for s, x in self.squared_weights.items()}
        )


def marginal_strategies_bound(W: Matrix, privacy: PrivacyParameter) -> float | None:
    """A floor under the error on W of every strategy in the marginal algebra (the
    ``marginals``, ``hdmm_marginals`` and ``marginal_optimal`` candidates), or None where W
    cannot be projected onto the algebra.

    Such a strategy's ``(AᵀA)⁺`` lies in the algebra, so ``trace(WᵀW (AᵀA)⁺)`` is
    ``trace(P (AᵀA)⁺)`` with P the projection of ``WᵀW`` onto the algebra (HDMM's marginals
    approximation): its error on W is its error on a workload of Gram P, at least that
    workload's SVD bound ``v₁ (Σ_b mult(b) √λ_b(P))² / n``. P is positive semi-definite (a
    conditional expectation of ``WᵀW``), its eigenvalues the algebra's closed form. Unlike
    W's own SVD bound, which no strategy beats, this one can exceed the error of a strategy
    outside the algebra (a hierarchy on range queries): then none of these candidates can
    win, and the selection skips them.
    """
    try:
        shape, coefficients = workload_marginals(W, repeated_totals=True, approximate=True)
    except (UnsupportedQueryError, TooLargeError):
        return None
    projected = MarginalsGram(shape, coefficients)
    roots = math.fsum(
        projected.multiplicity(mask) * math.sqrt(max(value, 0.0))
        for mask, value in projected.eigenvalues().items()
    )
    return privacy.noise_variance(1.0) * roots**2 / math.prod(shape)


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


def check_gaussian(privacy: PrivacyParameter, method: str) -> None:
    """Raise UnsupportedQueryError unless ``privacy`` is Gaussian (ρ-zCDP), as ``method`` needs."""
    if privacy.norm != 2:
        raise UnsupportedQueryError(
            f"The {method} method needs Gaussian noise (rho-zCDP); it does not apply to "
            f"{privacy.noise} noise"
        )


def marginal_optimal(W: Matrix, privacy: PrivacyParameter) -> ResidualBlockStrategy:
    """The residual strategy of least total squared error for a union of marginals.

    The strategy has L2 sensitivity 1, so measuring it at ρ-zCDP adds noise of
    variance ``1/(2ρ)`` per answer; the strategy itself does not depend on ρ.

    Args:
        W: a union of marginals (see :func:`workload_marginals`).
        privacy: must be Gaussian (ρ-zCDP).

    Raises:
        UnsupportedQueryError: pure ε-DP, or W is not a union of marginals.

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
    return sum_variance_optimum(*workload_marginals(W)).strategy()


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
