"""The eigen-design weight program, solved through its dual with a certified gap.

With eigenvalues ``λ ≥ 0`` of the workload Gram and a non-negative matrix ``M``
(``Q∘Q`` for the 2-norm with ``x = u``, ``|Q|`` for the 1-norm with ``x = √u``),
the strategy ``diag(√u) Qᵀ`` has sensitivity ``max_j (M x)_j^{1/a}`` and the
expected error (at unit noise constant) is

    ``F(x) = (Σ_i λ_i / x_i^a) · max_j (M x)_j^a``,   ``a = 1`` (L2) or ``a = 2`` (L1).

F is scale invariant; ``min F`` is the convex program ``min Σ λ/x^a s.t. Mx ≤ 1``.
For any distribution ``p`` over columns, ``max_j (Mx)_j ≥ pᵀMx = qᵀx`` with
``q = Mᵀp``, and Hölder's inequality gives the lower bound

    ``F(x) ≥ S(p)^{a+1} / (Σp)^a``,   ``S(p) = Σ_i λ_i^{1/(a+1)} q_i^{a/(a+1)}``,

attained by ``x(p)_i = (λ_i / q_i)^{1/(a+1)}``, for which ``F(x(p)) = S · (max Mx)^a``.
So every iterate carries a primal value and a dual bound, and their ratio
``(Σp · max(Mx) / S)^a`` is the certified gap. The dual is maximized by the
multiplicative update ``p ← p ∘ (Mx · Σp / S)^δ`` (its fixed points are the KKT
points: ``(Mx)_j`` equal to the maximum wherever ``p_j > 0``), with the step
exponent ``δ`` grown after an ascent and halved (from the last accepted point)
after a descent.

The same iteration runs on numpy tensors and on Dask tensors chunked along the
first axis (``M = ⊗M_i``: each product is one :func:`kron_apply`). Dask keeps
at most six domain-sized vectors alive: the accepted ``p`` and ``Mx``, the best
primal ``x``, and one candidate's ``p``, ``x`` and ``Mx``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg.eigen_strategy import is_dask, kron_apply
from dpmm.reconstruct.projected_gradient import scalars
from dpmm.strategy.time_budget import check_time

__all__ = [
    "KronEigenvalues",
    "WeightSolution",
    "solve_weights",
]

#: Relative duality gap at which the solver stops by default.
DEFAULT_TOLERANCE = 1e-4
#: Largest step exponent the multiplicative update uses.
MAX_STEP = 8.0
#: Growth of the step exponent after an accepted step.
STEP_GROWTH = 1.2


@dataclass(frozen=True)
class KronEigenvalues:
    """``λ = Σ_k c_k ⊗_i parts[k][i]``: Gram eigenvalues of a union of Kron products."""

    coefficients: tuple[float, ...]
    parts: tuple[tuple[np.ndarray, ...], ...]

    def tensor(self, chunks: int | None = None) -> Any:
        """λ as a tensor; a Dask tensor chunked along the first axis when ``chunks`` is given."""
        if chunks is None:
            vectors: list[Sequence[Any]] = [list(parts) for parts in self.parts]
        else:
            import dask.array as da

            vectors = [[da.from_array(parts[0], chunks=chunks), *parts[1:]] for parts in self.parts]
        total = None
        for coefficient, parts in zip(self.coefficients, vectors, strict=True):
            term = coefficient * _outer(parts)
            total = term if total is None else total + term
        return total


def _outer(parts: Sequence[Any]) -> Any:
    """``⊗ parts`` as a tensor by broadcasting (works for a Dask first part)."""
    dims = len(parts)
    result = None
    for axis, part in enumerate(parts):
        shaped = part.reshape([-1 if k == axis else 1 for k in range(dims)])
        result = shaped if result is None else result * shaped
    return result


@dataclass(frozen=True)
class WeightSolution:
    """The solver's answer: weights ``x`` (tensor) scaled to ``max(Mx) = 1``, and its certificate.

    ``objective`` is ``F(x)`` (the expected error at unit noise constant) and
    ``dual_bound`` a proven lower bound on ``min F``; ``gap = objective / dual_bound − 1``.
    """

    weights: Any
    dual: Any
    objective: float
    dual_bound: float
    iterations: int

    @property
    def gap(self) -> float:
        """The certified relative gap to the optimum."""
        return self.objective / self.dual_bound - 1.0 if self.dual_bound > 0 else math.inf


def _persist(*arrays: Any) -> tuple[Any, ...]:
    if any(is_dask(a) for a in arrays):
        import dask

        return dask.persist(*arrays)
    return arrays


def _candidate(root: Any, matrices: Sequence[np.ndarray], p: Any, power: int) -> tuple[Any, Any]:
    """``x(p)`` and ``Mx(p)`` (lazy for Dask)."""
    q = kron_apply([m.T for m in matrices], p)
    positive = root > 0
    # x_i = (λ_i / q_i)^{1/(a+1)} = root_i / q_i^{1/(a+1)}; q > 0 wherever p > 0.
    x = np.where(positive, root / np.where(positive, q, 1.0) ** (1.0 / (power + 1)), 0.0)
    return x, kron_apply(matrices, x)


def solve_weights(
    eigenvalues: Any,
    matrices: Sequence[np.ndarray],
    power: int,
    *,
    start: Any = None,
    tol: float = DEFAULT_TOLERANCE,
    max_iter: int = 2000,
) -> WeightSolution:
    """Minimize ``F(x) = Σ λ/x^a · max(Mx)^a`` over ``x ≥ 0`` (``M = ⊗ matrices``).

    Args:
        eigenvalues: λ as a tensor of the domain's shape (numpy, or Dask chunked on axis 0:
            then every iterate is a Dask tensor with the same chunks).
        matrices: the non-negative factors ``M_i`` (``Q_i∘Q_i`` or ``|Q_i|``).
        power: ``a``: 1 for 2-norm sensitivity (``x = u``), 2 for 1-norm (``x = √u``).
        start: a positive dual tensor to start from (default uniform).
        tol: stop once the certified relative gap is at most ``tol``.
        max_iter: most dual updates.

    Example:
        >>> import numpy as np
        >>> q = np.linalg.qr(np.array([[2.0, 1.0], [1.0, 3.0]]))[0]
        >>> sol = solve_weights(np.array([9.0, 1.0]), [q * q], 1, tol=1e-9)
        >>> sol.gap <= 1e-9
        True
    """
    if power not in (1, 2):
        raise DpmmError(f"The weight program's power must be 1 (L2) or 2 (L1), got {power}")
    if tol < 0 or max_iter < 1:
        raise DpmmError(f"Need tol ≥ 0 and max_iter ≥ 1, got tol={tol}, max_iter={max_iter}")
    dims = tuple(m.shape[1] for m in matrices)
    if tuple(eigenvalues.shape) != dims:
        raise DpmmError(f"Eigenvalues of shape {eigenvalues.shape} for factors of sizes {dims}")
    (peak_lambda,) = scalars(eigenvalues.max())
    if peak_lambda <= 0:
        raise DpmmError("The workload has no non-zero eigenvalue: there is nothing to measure")
    # Eigenvalues below rounding of the largest are zero: measuring them would waste budget.
    eigenvalues = np.where(eigenvalues > peak_lambda * 1e-12, eigenvalues, 0.0)
    root = eigenvalues ** (1.0 / (power + 1))
    if start is None:
        p = np.ones_like(eigenvalues) / math.prod(dims)
    else:
        p = start / scalars(start.sum())[0]
    (root,) = _persist(root)

    step = 1.0
    accepted: tuple[Any, Any, float, float, float] | None = None  # p, Mx, S, Σp, dual value
    best_x, best_primal, best_dual, best_p = None, math.inf, 0.0, p
    iterations = 0
    while True:
        check_time()
        x, mx = _candidate(root, matrices, p, power)
        p, x, mx = _persist(p, x, mx)
        s, peak, mass = scalars((p * mx).sum(), mx.max(), p.sum())
        dual = s ** (power + 1) / mass**power
        primal = s * peak**power  # F(x(p)): Σ λ/x^a = S for x = x(p)
        if primal < best_primal:
            best_x, best_primal = x / peak, primal
        if dual > best_dual:
            best_dual, best_p = dual, p
        if best_primal <= best_dual * (1 + tol) or iterations >= max_iter:
            break
        iterations += 1
        if accepted is not None and dual < accepted[4] * (1 - 1e-13):
            step /= 2  # the last step overshot: retry from the accepted point, shorter
        else:
            accepted = (p, mx, s, mass, dual)
            step = min(step * STEP_GROWTH, MAX_STEP)
        base_p, base_mx, base_s, base_mass, _ = accepted
        p = base_p * (base_mx * (base_mass / base_s)) ** step
    (best_x,) = _persist(best_x)
    return WeightSolution(best_x, best_p, best_primal, best_dual, iterations)
