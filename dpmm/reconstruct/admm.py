"""ADMM for ``min ½ xᵀH x − bᵀx`` over ``x ≥ 0`` (and ``Σx = T``) with a Kronecker ``H``.

The accelerated projected gradient of :mod:`~dpmm.reconstruct.projected_gradient`
needs about 2,500 products with H whatever the size (the conditioning of a Kronecker
Gram grows with every factor). When ``H = ⊗ G_i`` and every factor is small enough for
a dense eigendecomposition ``G_i = Q_i Λ_i Q_iᵀ``, the system ``(H + ρI) x = v`` has an
exact solution at the price of two products with the factors' eigenbases:
``x = (⊗Q_i) [(⊗Q_iᵀ) v / (λ + ρ)]``, ``λ`` the Kronecker product of the ``Λ_i``.
That makes ADMM on the split ``x = z, z ≥ 0`` cheap (Boyd et al., *Distributed
Optimization and Statistical Learning via ADMM*, §4.2; the step-size rule is OSQP's,
Stellato et al. 2020):

* x-step: ``(H + ρI) x + μ1 = b + ρ(z − u)``, with the multiplier μ of ``Σx = T``
  when a total is known (one more solve, ``(H + ρI)⁻¹1``, per value of ρ);
* over-relaxation ``x̂ = αx + (1 − α)z`` with α = :data:`RELAXATION`;
* z-step ``z = max(x̂ + u, 0)``, and ``u += x̂ − z``.

ρ starts at the geometric mean of the spectrum's extremes (zeros ignored) and is
rebalanced at every check by OSQP's rule, ``ρ ← ρ·sqrt(primal / dual)`` of the
normalized residuals, only when that moves it by more than :data:`RHO_CHANGE`.

Stopping rule: the same relative KKT residual as projected gradient
(:func:`~dpmm.reconstruct.projected_gradient.kkt_residual`), at the projection of z
onto the feasible set, every
:data:`~dpmm.reconstruct.projected_gradient.CHECK_EVERY` iterations; that point is
what is returned, so the estimate is always feasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from dpmm.linalg import Dense, Kron, Matrix, Weighted
from dpmm.reconstruct.projected_gradient import (
    CHECK_EVERY,
    DEFAULT_MAX_ITERATIONS,
    Solution,
    kkt_residual,
    project,
)

__all__ = [
    "EIGEN_FACTOR_LIMIT",
    "KronSpectrum",
    "balance_norms",
    "balance_terms",
    "inner",
    "kron_spectrum",
    "minimize_kron_quadratic",
    "multiplier",
    "outer",
    "rebalanced_rho",
]

#: ADMM runs when every factor of the Kronecker Gram has at most this many columns: an
#: eigenbasis product costs ``n·Σ n_i`` (dense ``Q_i``), where projected gradient's
#: structured Hessian costs about ``n`` per factor, so large factors would make each
#: iteration dearer than ADMM saves (measured on factors of 21-100 only:
#: benchmarks/kron_nnls.py, benchmarks/integer_tables.py; 512 is not tuned).
EIGEN_FACTOR_LIMIT = 512
#: Over-relaxation α (Boyd et al. recommend 1.5-1.8).
RELAXATION = 1.6
#: ρ is changed only when the rule moves it by more than this factor (either way).
RHO_CHANGE = 5.0
#: Eigenvalues at most this share of the largest are zeros (rounding leaves them near ε).
ZERO_EIGENVALUE = 1e-12


@dataclass(frozen=True, eq=False)
class KronSpectrum:
    """``H = (⊗Q_i) diag(λ) (⊗Q_i)ᵀ``: a Kronecker Gram by its factors' eigendecompositions.

    Attributes:
        weight: The Gram's scalar weight.
        factor_values: Each factor's eigenvalues ``Λ_i``.
        factor_vectors: Each factor's eigenvectors ``Q_i`` (dense, one per column).
    """

    weight: float
    factor_values: tuple[np.ndarray, ...]
    factor_vectors: tuple[np.ndarray, ...]

    @cached_property
    def values(self) -> np.ndarray:
        """λ = weight · ⊗Λ_i, in Kronecker order."""
        return outer([self.weight * self.factor_values[0], *self.factor_values[1:]])

    @cached_property
    def basis(self) -> Kron:
        """``⊗Q_i``."""
        return Kron([Dense(vectors) for vectors in self.factor_vectors])

    @cached_property
    def rotated_ones(self) -> np.ndarray:
        """``q = (⊗Q_i)ᵀ1 = ⊗(Q_iᵀ1)``: where the total's multiplier acts."""
        return outer([vectors.sum(axis=0) for vectors in self.factor_vectors])

    def to_eigen(self, v: np.ndarray) -> np.ndarray:
        """``(⊗Q_i)ᵀ v``."""
        return np.asarray(self.basis.T @ v, dtype=np.float64)

    def from_eigen(self, w: np.ndarray) -> np.ndarray:
        """``(⊗Q_i) w``."""
        return np.asarray(self.basis @ w, dtype=np.float64)

    def hessian(self, v: np.ndarray) -> np.ndarray:
        """``H v``."""
        return self.from_eigen(self.values * self.to_eigen(v))

    def initial_rho(self) -> float:
        """The geometric mean of the largest eigenvalue and the smallest non-zero one,
        from the factors' (λ is never formed for this); a factor's eigenvalue is zero at
        most :data:`ZERO_EIGENVALUE` of its largest."""
        largest, smallest = abs(self.weight), abs(self.weight)
        for values in self.factor_values:
            top = float(values.max(initial=0.0))
            if top <= 0:
                return 1.0
            largest *= top
            smallest *= float(values[values > ZERO_EIGENVALUE * top].min())
        return math.sqrt(smallest * largest) if largest > 0 else 1.0


def outer(parts: list[np.ndarray]) -> np.ndarray:
    """The Kronecker product of vectors, flat (``np.kron`` of them all, in one pass).

    Example:
        >>> outer([np.array([1.0, 2.0]), np.array([1.0, 10.0])]).tolist()
        [1.0, 10.0, 2.0, 20.0]
    """
    result = np.asarray(parts[0], dtype=np.float64)
    for part in parts[1:]:
        result = np.multiply.outer(result, part)
    return result.reshape(-1)


def kron_spectrum(gram: Matrix) -> KronSpectrum | None:
    """The :class:`KronSpectrum` of a Gram that is a (weighted) Kronecker product of
    factors of at most :data:`EIGEN_FACTOR_LIMIT` columns; None for any other Gram.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> spectrum = kron_spectrum(Kron([Prefix(3), Prefix(2)]).gram())
        >>> v = np.arange(6.0)
        >>> bool(np.allclose(spectrum.hessian(v), Kron([Prefix(3), Prefix(2)]).gram() @ v))
        True
    """
    weight = 1.0
    while isinstance(gram, Weighted):
        weight, gram = weight * gram.weight, gram.base
    if type(gram) is not Kron or any(f.shape[1] > EIGEN_FACTOR_LIMIT for f in gram.factors):
        return None
    pairs = gram._per_distinct_factor(lambda factor: factor.eigh())
    values = tuple(np.asarray(v, dtype=np.float64) for v, _ in pairs)
    # Each basis is applied as a dense array (BLAS), whatever type eigh returned.
    vectors = tuple(np.asarray(q.dense(), dtype=np.float64) for _, q in pairs)
    return KronSpectrum(float(weight), values, vectors)


def minimize_kron_quadratic(
    spectrum: KronSpectrum,
    linear: np.ndarray,
    start: np.ndarray,
    lipschitz: float,
    *,
    total: float | None,
    tolerance: float,
    max_iterations: int | None,
) -> Solution:
    """Minimize ``½ xᵀH x − bᵀx`` over ``x ≥ 0`` (and ``Σx = total`` when given) by ADMM.

    The arguments are those of
    :func:`~dpmm.reconstruct.projected_gradient.minimize_nonnegative_quadratic`, with H
    given by its spectrum; ``lipschitz`` only scales the stopping rule (the same as
    projected gradient's), and ``max_iterations`` counts ADMM iterations (two eigenbasis
    products each, and two more per check).
    """
    limit = DEFAULT_MAX_ITERATIONS if max_iterations is None else int(max_iterations)
    b = np.asarray(linear, dtype=np.float64)
    scale = float(np.linalg.norm(b)) or 1.0

    def residual_at(point: np.ndarray) -> float:
        return kkt_residual(point, spectrum.hessian(point) - b, lipschitz, total, scale)

    z = np.asarray(project(np.asarray(start, dtype=np.float64), total))
    residual = residual_at(z)
    if residual <= tolerance or limit <= 0:
        return Solution(z, 0, residual, residual <= tolerance)
    state = _State(spectrum, b, total, spectrum.initial_rho(), z)
    iteration = 0
    while True:
        iteration += 1
        state.step()
        if iteration % CHECK_EVERY and iteration < limit:
            continue
        candidate = np.asarray(project(state.z, total))
        residual = residual_at(candidate)
        if residual <= tolerance or iteration >= limit:
            return Solution(candidate, iteration, residual, residual <= tolerance)
        state.rebalance()


def rebalanced_rho(
    rho: float, primal: float, primal_scale: float, dual: float, dual_scale: float
) -> float:
    """OSQP's ρ for the residual norms of the last step: ``ρ·sqrt((primal / primal_scale) /
    (dual / dual_scale))`` when that moves ρ by more than :data:`RHO_CHANGE`, else ρ.

    Example:
        >>> rebalanced_rho(1.0, primal=100.0, primal_scale=1.0, dual=1.0, dual_scale=1.0)
        10.0
        >>> rebalanced_rho(1.0, primal=4.0, primal_scale=1.0, dual=1.0, dual_scale=1.0)
        1.0
    """
    if min(primal, primal_scale, dual, dual_scale) <= 0:
        return rho
    proposed = rho * math.sqrt((primal / primal_scale) / (dual / dual_scale))
    changed = proposed > RHO_CHANGE * rho or proposed * RHO_CHANGE < rho
    return proposed if changed else rho


def multiplier(rotated: float, weight: float, total: float | None) -> float:
    """μ of ``Σx = total`` in the x-step, from ``qᵀw`` and ``Σ q²/(λ + ρ)`` (``q = Qᵀ1``,
    ``w = Qᵀ rhs/(λ + ρ)``): ``1ᵀQ(w − μ q/(λ + ρ)) = total``; 0 without a total."""
    return 0.0 if total is None else (rotated - total) / weight


class _State:
    """One ADMM run's iterates (x, z, the scaled dual u) and ρ, in memory."""

    def __init__(
        self, spectrum: KronSpectrum, b: np.ndarray, total: float | None, rho: float, z: Any
    ) -> None:
        self.spectrum, self.b, self.total, self.rho = spectrum, b, total, rho
        self.z = z
        self.u = np.zeros_like(z)
        self.x = z
        # q = Qᵀ1: the total's multiplier acts in the eigenbasis, so it costs no solve.
        self.ones = spectrum.rotated_ones if total is not None else None

    def step(self) -> None:
        self.rhs = self.b + self.rho * (self.z - self.u)
        shifted = self.spectrum.values + self.rho
        w = self.spectrum.to_eigen(self.rhs) / shifted
        self.multiplier = 0.0
        if self.ones is not None:
            direction = self.ones / shifted
            self.multiplier = multiplier(
                inner(self.ones, w), inner(self.ones, direction), self.total
            )
            w -= self.multiplier * direction
        x = self.spectrum.from_eigen(w)
        relaxed = RELAXATION * x + (1.0 - RELAXATION) * self.z
        self.x = x
        self.z = np.maximum(relaxed + self.u, 0.0)
        self.u = self.u + relaxed - self.z

    def rebalance(self) -> None:
        """:func:`rebalanced_rho` on the last step's primal ``x − z`` and dual
        ``Hx − b + μ1 + ρu`` residuals, each relative to the largest of its terms."""
        norms = balance_norms(self.x, self.z, self.u, self.rhs, self.b, self.rho, self.multiplier)
        rho = rebalanced_rho(self.rho, *balance_terms(norms, self.rho))
        self.u = self.u * (self.rho / rho)  # the unscaled dual ρu is kept
        self.rho = rho


def balance_norms(
    x: np.ndarray,
    z: np.ndarray,
    u: np.ndarray,
    rhs: np.ndarray,
    b: np.ndarray,
    rho: float,
    mu: float,
) -> np.ndarray:
    """The squared norms OSQP's rule reads (of a vector or of one block of it, to be added):
    ``x − z``, ``x``, ``z``, the dual residual, ``Hx``, ``b`` and ``u``. From the x-step,
    ``Hx + μ1 = rhs − ρx``: no product with H is needed."""
    moved = rhs - rho * x
    parts = [x - z, x, z, moved - b + rho * u, moved - mu, b, u]
    return np.array([inner(p, p) for p in parts])


def inner(a: np.ndarray, b: np.ndarray) -> float:
    """``aᵀb`` by an elementwise product and a sum: a BLAS dot of a long vector waits on
    its threads (5 ms for 10⁴ values on a loaded 2-core machine)."""
    return float(np.sum(a * b))


def balance_terms(squared: np.ndarray, rho: float) -> tuple[float, float, float, float]:
    """``(primal, primal_scale, dual, dual_scale)`` of :func:`rebalanced_rho` from the
    summed :func:`balance_norms`."""
    primal, x, z, dual, hx, b, u = np.sqrt(squared)
    return float(primal), float(max(x, z)), float(dual), float(max(hx, b, rho * u))
