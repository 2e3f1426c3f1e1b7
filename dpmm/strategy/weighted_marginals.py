"""HDMM's OPT_M: the best weights θ_a ≥ 0 on marginal tables, computed in the marginal algebra.

The strategy ``A = [θ_a · M_a]_a`` has Gram ``Σ_a θ_a² C(a)`` whose eigenvalue on
``E_b`` is ``λ_A(b) = Σ_{a ⊇ b} θ_a² Π_{i∉a} n_i`` (multiplicity
``Π_{i∈b}(n_i − 1)``, see :mod:`dpmm.linalg.marginals`). Every marginal has unit
column 1-norm and 2-norm, so the sensitivity is ``Σ_a θ_a`` (1-norm) or
``√(Σ_a θ_a²)`` (2-norm), and for a workload whose Gram is in the algebra

    ``loss(θ) = sensitivity(θ)² · Σ_b mult(b) λ_W(b) / λ_A(b)``

is the expected total squared error up to the privacy constant. With all sets
of k attributes as the ``2^k`` positions of a vector, ``λ_A`` is a superset-sum
(zeta) transform of ``c_a = θ_a² Π_{i∉a} n_i`` and the gradient a subset-sum
transform of ``−mult·λ_W/λ_A²``: O(2^k · k) per evaluation.

Which sets: every subset of the attributes the workload reads. That is enough:
an attribute i that no workload query separates (i ∉ any workload set) has
λ_W(b) = 0 for every b ∋ i, and moving θ_a to ``a ∖ {i}`` (merging with an
existing weight as ``√(θ_a² + θ_{a∖i}²)``) multiplies c_a by n_i ≥ 1 on every b
that matters while the 1- and 2-norm sensitivities do not grow. Sets *beyond*
the workload's own down-closure can help (one 3-way table can beat three 2-way
ones on binary attributes), so no smaller family is provably sufficient in
general.

Support: the loss is a barrier — it is +∞ when λ_A(b) = 0 for a b with
λ_W(b) > 0 — and every accepted L-BFGS-B step decreases it from a supported
start, so the optimizer cannot leave the support. Weights are kept above a
tiny floor so trial points stay finite, and the final strategy is checked
(:func:`_supported`) against the algebra's own zero threshold before it is kept.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize

from dpmm.errors import TooLargeError, UnsupportedQueryError
from dpmm.linalg import Marginals, Matrix
from dpmm.linalg.marginals import EIGEN_TOLERANCE, SUBSET_WORK_LIMIT
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.marginal_designs import packing_starts
from dpmm.strategy.marginal_optimal import workload_marginals
from dpmm.strategy.restarts import restart_generator
from dpmm.strategy.template import check_count, check_norm, optimize_template

__all__ = [
    "MarginalWeightsTemplate",
    "optimize_marginal_weights",
    "select_marginal_weights",
]

#: Most attributes the workload may read: the template has one weight per subset of them,
#: and the strategy's Gram pseudo-inverse sums 3^k subset terms, within the marginals
#: algebra's bound (:data:`~dpmm.linalg.marginals.SUBSET_WORK_LIMIT`; 14 attributes).
MAX_ATTRIBUTES = int(math.log(SUBSET_WORK_LIMIT, 3))

#: Lower bound of every weight, relative to the random starts' scale (U[0, 1]): keeps every
#: λ_A(b) > 0 at L-BFGS-B's trial points, far below any weight that matters.
WEIGHT_FLOOR = 1e-12

#: Weights below this fraction of the largest are dropped from the returned strategy.
DROP_FRACTION = 1e-9

#: L-BFGS-B iterations per start (each O(2^k · k)). Large lattices stop on the relative
#: decrease within a few hundred; small ones (all 3-way of [10]^8: 256 weights) need more
#: than 500 to reach HDMM's error, and are cheap.
MAX_ITERATIONS = 2000

#: Safety margin over the algebra's zero threshold when checking the support.
SUPPORT_MARGIN = 100.0


def _mask_sums(values: np.ndarray, bits: int, *, supersets: bool) -> np.ndarray:
    """``out[b] = Σ_{a ⊇ b} values[a]`` (supersets) or ``Σ_{a ⊆ b} values[a]``: O(2^bits · bits)."""
    out = values.copy()
    into, source = (0, 1) if supersets else (1, 0)
    for i in range(bits):
        view = out.reshape(-1, 2, 1 << i)
        view[:, into, :] += view[:, source, :]
    return out


def _per_mask_product(sizes: np.ndarray, inside: bool) -> np.ndarray:
    """``Π_{i ∈ a} sizes_i`` (inside) or ``Π_{i ∉ a} sizes_i`` for every mask a."""
    out = np.ones(1 << len(sizes))
    for i, size in enumerate(sizes):
        view = out.reshape(-1, 2, 1 << i)
        view[:, 1 if inside else 0, :] *= size
    return out


class MarginalWeightsTemplate:
    """OPT_M's parameters: one weight per subset of the workload's attributes (bit masks)."""

    def __init__(self, shape: tuple[int, ...], coefficients: dict[int, float], norm: int) -> None:
        self.shape = shape
        self.norm = norm
        # The attributes some workload set reads (size-1 attributes separate nothing).
        self.attributes = [
            i for i in range(len(shape)) if shape[i] > 1 and any(a >> i & 1 for a in coefficients)
        ]
        bits = len(self.attributes)
        if bits > MAX_ATTRIBUTES:
            raise TooLargeError(
                f"Weighted marginals over {bits} attributes need 2^{bits} weights; "
                f"at most {MAX_ATTRIBUTES} attributes are supported"
            )
        self.bits = bits
        sizes = np.array([shape[i] for i in self.attributes], dtype=np.float64)
        elsewhere = math.prod(n for i, n in enumerate(shape) if i not in self.attributes)
        self.outside = _per_mask_product(sizes, inside=False) * elsewhere
        self.multiplicity = _per_mask_product(sizes - 1, inside=True)
        workload = np.zeros(1 << bits)
        for mask, u in coefficients.items():
            workload[self.compress(mask)] += u * self.outside[self.compress(mask)]
        eigen = _mask_sums(workload, bits, supersets=True)  # λ_W(b)
        self.needed = (eigen > EIGEN_TOLERANCE * eigen.max(initial=0.0)) & (self.multiplicity > 0)
        if not self.needed.any():
            raise UnsupportedQueryError("The workload has no non-zero query to answer")
        self.demand = np.where(self.needed, self.multiplicity * eigen, 0.0)  # mult(b) λ_W(b)

    def compress(self, mask: int) -> int:
        """A domain attribute mask as a position among the template's attributes."""
        return sum(1 << k for k, i in enumerate(self.attributes) if mask >> i & 1)

    def expand(self, position: int) -> tuple[int, ...]:
        """The domain attributes of a template position."""
        return tuple(i for k, i in enumerate(self.attributes) if position >> k & 1)

    def bounds(self) -> scipy.optimize.Bounds:
        size = 1 << self.bits
        return scipy.optimize.Bounds(np.full(size, WEIGHT_FLOOR), np.full(size, np.inf))

    def initial(self, rng: np.random.Generator) -> np.ndarray:
        return np.maximum(rng.uniform(size=1 << self.bits), WEIGHT_FLOOR)

    def eigenvalues(self, weights: np.ndarray) -> np.ndarray:
        """``λ_A(b)`` for every mask b: O(2^k · k)."""
        return _mask_sums(weights**2 * self.outside, self.bits, supersets=True)

    def sensitivity_squared(self, weights: np.ndarray) -> float:
        return float(weights.sum() ** 2 if self.norm == 1 else weights @ weights)

    def loss_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        eigen = self.eigenvalues(params)
        if np.any(eigen[self.needed] <= 0):
            return np.inf, np.zeros_like(params)
        safe = np.where(self.needed, eigen, 1.0)
        trace = float((self.demand / safe).sum())
        sensitivity_squared = self.sensitivity_squared(params)
        # ∂trace/∂c_a = Σ_{b ⊆ a} −demand_b/λ_b², and ∂c_a/∂θ_a = 2 θ_a Π_{i∉a} n_i.
        subsets = _mask_sums(-self.demand / safe**2, self.bits, supersets=False)
        d_trace = subsets * 2 * params * self.outside
        d_sensitivity = 2 * params.sum() * np.ones_like(params) if self.norm == 1 else 2 * params
        return sensitivity_squared * trace, sensitivity_squared * d_trace + trace * d_sensitivity


def _supported(template: MarginalWeightsTemplate, weights: np.ndarray) -> bool:
    """True when every λ_A(b) the workload needs clears the algebra's zero threshold."""
    eigen = template.eigenvalues(weights)
    threshold = SUPPORT_MARGIN * EIGEN_TOLERANCE * np.abs(eigen).max(initial=0.0)
    return bool(np.all(eigen[template.needed] > threshold))


def optimize_marginal_weights(
    W: Matrix,
    *,
    norm: int,
    restarts: int = 3,
    rng: np.random.Generator | None = None,
) -> tuple[Marginals, float]:
    """OPT_M: non-negative weights on marginal tables minimizing W's expected error, and the loss.

    The unit-weight tables of the workload itself are an extra start, so the
    result is never worse than measuring them uniformly; greedy packings of the
    workload's tables into larger tables that start below it are more
    (:mod:`~dpmm.strategy.marginal_designs`).

    Args:
        W: A union of Kron products. Factors other than Identity and Ones enter through
            HDMM's marginals approximation (:func:`~dpmm.strategy.marginal_optimal.
            marginal_projection`): the loss is then the approximation's, and the
            strategy's exact error on W is what selection compares.
        norm: The sensitivity norm: 1 (Laplace) or 2 (Gaussian).
        restarts: Random starts (weights uniform on [0, 1]); the best end point is kept.
        rng: Random generator for the starts (a fresh OS-seeded one when None).

    Returns:
        The strategy and its loss (its expected total squared error divided by the
        privacy constant).

    Raises:
        ArgumentError: a bad norm or number of restarts.
        UnsupportedQueryError: W has no non-zero query.
        TooLargeError: W reads more than :data:`MAX_ATTRIBUTES` attributes.

    Example:
        >>> W = Marginals((2, 3, 4), {(0, 1): 1.0, (1, 2): 1.0})
        >>> A, loss = optimize_marginal_weights(W, norm=2, rng=np.random.default_rng())
        >>> from dpmm.error import expected_error
        >>> from dpmm.privacy import ZCDP
        >>> bool(abs(expected_error(W, A, ZCDP(0.5)) - loss) < 1e-6 * loss)
        True
    """
    norm = check_norm(norm)
    restarts = check_count(restarts, "The number of restarts")
    shape, coefficients = workload_marginals(W, repeated_totals=True, approximate=True)
    coefficients = {mask: u for mask, u in coefficients.items() if u}
    template = MarginalWeightsTemplate(shape, coefficients, norm)
    uniform = np.full(1 << template.bits, WEIGHT_FLOOR)
    tables = [template.compress(mask) for mask in coefficients]
    uniform[tables] = 1.0
    rng = restart_generator(rng)
    designs = packing_starts(
        tables,
        template.bits,
        rng,
        lambda start: template.loss_and_grad(start)[0],
        floor=WEIGHT_FLOOR,
        below=template.loss_and_grad(uniform)[0],
    )
    result = optimize_template(
        template,
        restarts=restarts,
        rng=rng,
        starts=[uniform, *designs],
        max_iterations=MAX_ITERATIONS,
    )
    weights = result.params
    kept = np.where(weights >= DROP_FRACTION * weights.max(), weights, 0.0)
    if not _supported(template, kept):
        # Never expected (the loss is a barrier); the workload's own tables always support it.
        kept = np.where(uniform > WEIGHT_FLOOR, 1.0, 0.0)
    loss, _ = template.loss_and_grad(kept)
    strategy = Marginals(
        shape, {template.expand(int(k)): float(kept[k]) for k in np.flatnonzero(kept)}
    )
    return strategy, float(loss)


def select_marginal_weights(W: Matrix, privacy: PrivacyParameter) -> Marginals:
    """OPT_M for W (through the marginals approximation) under ``privacy``, three restarts.

    Raises:
        UnsupportedQueryError: W has no non-zero query.
        TooLargeError: W reads more than :data:`MAX_ATTRIBUTES` attributes.
    """
    strategy, _ = optimize_marginal_weights(W, norm=privacy.norm)
    return strategy
