"""Accelerated projected gradient for ``min ½ xᵀH x − bᵀx`` over ``x ≥ 0`` (and ``Σx = T``).

This is the engine behind :func:`~dpmm.reconstruct.nnls` and
:func:`~dpmm.reconstruct.workload_nnls`. It is FISTA (Beck & Teboulle) with
the gradient-based adaptive restart of O'Donoghue & Candès: momentum is reset
whenever the step and the momentum disagree, which keeps the accelerated rate
on the strongly convex pieces that non-negativity exposes.

Every operation is elementwise arithmetic, a sum, or a call of ``hessian``, so
the same loop runs on numpy vectors and on chunked Dask arrays; the only
values pulled to the driver are a few scalars per iteration.

Stopping rule: the gradient mapping ``G(x) = L (x − Π(x − ∇f(x)/L))`` is zero
exactly at a KKT point; the solver stops when ``‖G(x)‖ ≤ tolerance · ‖b‖``
(``b = ∇f(0)`` up to sign sets the problem's scale), checked every few
iterations and at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmm.reconstruct.simplex_threshold import threshold

__all__ = [
    "Solution",
    "kkt_residual",
    "minimize_nonnegative_quadratic",
    "project",
    "scalars",
    "settle",
]

#: Iterations between two checks of the stopping rule (each check costs one extra H x).
CHECK_EVERY = 10

#: Iteration limit when the caller gives none.
DEFAULT_MAX_ITERATIONS = 20_000


def scalars(*values: Any) -> list[float]:
    """The values as Python floats, computing Dask scalars together in one pass."""
    if any(hasattr(value, "dask") for value in values):
        import dask

        values = dask.compute(*values)
    return [float(value) for value in values]


def settle(array: Any) -> Any:
    """Materialize a Dask array on the cluster (so graphs do not grow across iterations)."""
    return array.persist() if hasattr(array, "dask") else array


def project(v: Any, total: float | None) -> Any:
    """The Euclidean projection of v onto ``{x ≥ 0}``, or onto ``{x ≥ 0, Σx = total}``.

    The second is ``max(v − τ, 0)``, its threshold τ found exactly in a fixed few passes
    (:mod:`~dpmm.reconstruct.simplex_threshold`), over a Dask array's blocks where they are.

    Example:
        >>> project(np.array([3.0, -1.0, 1.0]), total=None)
        array([3., 0., 1.])
        >>> project(np.array([3.0, -1.0, 1.0]), total=2.0)
        array([2., 0., 0.])
    """
    if total is None:
        return np.maximum(v, 0.0)
    if hasattr(v, "dask"):
        v = settle(v)  # every pass reads v: compute it once, not once per pass
        blocks = v.to_delayed().ravel().tolist()
    else:
        blocks = [np.asarray(v)]
    return np.maximum(v - threshold(blocks, total), 0.0)


def kkt_residual(
    x: Any, gradient: Any, lipschitz: float, total: float | None, scale: float
) -> float:
    """The stopping rule's relative residual ``L ‖x − Π(x − ∇f(x)/L)‖ / scale`` at ``x``.

    Zero exactly at a KKT point; O(n): one projection of a gradient step. Every NNLS
    solver stops on it, so their results are comparable.
    """
    (value,) = scalars(_norm(x - project(x - (1.0 / lipschitz) * gradient, total)))
    return value * lipschitz / scale


@dataclass(frozen=True)
class Solution:
    """Result of :func:`minimize_nonnegative_quadratic`."""

    x: Any
    iterations: int
    residual: float
    converged: bool


def minimize_nonnegative_quadratic(
    hessian: Callable[[Any], Any],
    linear: Any,
    start: Any,
    lipschitz: float,
    *,
    total: float | None,
    tolerance: float,
    max_iterations: int | None,
) -> Solution:
    """Minimize ``½ xᵀH x − bᵀx`` over ``x ≥ 0`` (and ``Σx = total`` when given).

    Args:
        hessian: ``v ↦ H v`` for a symmetric positive semi-definite H.
        linear: The vector b.
        start: Warm start (projected onto the feasible set first).
        lipschitz: An upper bound on the largest eigenvalue of H (the step is its inverse).
        total: The known total, or ``None``.
        tolerance: Relative gradient-mapping residual to stop at.
        max_iterations: Iteration limit (``None``: :data:`DEFAULT_MAX_ITERATIONS`).
    """
    limit = DEFAULT_MAX_ITERATIONS if max_iterations is None else int(max_iterations)
    step = 1.0 / lipschitz
    (scale,) = scalars(_norm(linear))
    scale = scale if scale > 0 else 1.0

    def residual_at(x: Any, gradient: Any) -> float:
        return kkt_residual(x, gradient, lipschitz, total, scale)

    x = settle(project(start, total))
    gradient = settle(hessian(x) - linear)
    residual = residual_at(x, gradient)
    if residual <= tolerance:
        return Solution(x, 0, residual, True)
    z, z_gradient, momentum = x, gradient, 1.0
    iteration = 0
    while iteration < limit:
        iteration += 1
        if z_gradient is None:
            z_gradient = hessian(z) - linear
        x_new = settle(project(z - step * z_gradient, total))
        next_momentum = (1.0 + math.sqrt(1.0 + 4.0 * momentum * momentum)) / 2.0
        (disagreement,) = scalars(((z - x_new) * (x_new - x)).sum())
        if disagreement > 0:  # momentum points uphill: restart from the new point
            z, next_momentum = x_new, 1.0
        else:
            z = settle(x_new + ((momentum - 1.0) / next_momentum) * (x_new - x))
        x, momentum, z_gradient = x_new, next_momentum, None
        if iteration % CHECK_EVERY == 0 or iteration == limit:
            gradient = settle(hessian(x) - linear)
            if z is x:
                z_gradient = gradient
            residual = residual_at(x, gradient)
            if residual <= tolerance:
                return Solution(x, iteration, residual, True)
    return Solution(x, iteration, residual, residual <= tolerance)


def _norm(v: Any) -> Any:
    return ((v * v).sum()) ** 0.5
