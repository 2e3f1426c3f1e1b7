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

__all__ = ["Solution", "minimize_nonnegative_quadratic", "project", "scalars", "settle"]

#: Iterations between two checks of the stopping rule (each check costs one extra H x).
CHECK_EVERY = 10

#: Grid passes and points per pass when bracketing a Dask array's simplex threshold.
BRACKET_ROUNDS = 3
BRACKET_POINTS = 34

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

    The simplex-like case uses Michelot's fixed point: the threshold τ with
    ``Σ max(v − τ, 0) = total`` is found by averaging over the entries still above
    the previous threshold; the set only shrinks, so it ends in at most n passes
    (a handful in practice), each one reduction.

    Example:
        >>> project(np.array([3.0, -1.0, 1.0]), total=None)
        array([3., 0., 1.])
        >>> project(np.array([3.0, -1.0, 1.0]), total=2.0)
        array([2., 0., 0.])
    """
    if total is None:
        return np.maximum(v, 0.0)
    if total == 0:
        return np.zeros_like(v)
    v = settle(v)  # every pass below reads v: compute it once, not once per pass
    count, mass, largest = scalars(v.size, v.sum(), v.max())
    threshold = (mass - total) / count  # τ* lies in [threshold, largest]
    if hasattr(v, "dask"):
        threshold = _bracket(v, total, threshold, largest)
        count, mass = scalars((v > threshold).sum(), np.where(v > threshold, v, 0.0).sum())
        threshold = (mass - total) / count
    while True:
        above = v > threshold
        new_count, new_mass = scalars(above.sum(), np.where(above, v, 0.0).sum())
        threshold = (new_mass - total) / new_count
        if new_count == count:
            return np.maximum(v - threshold, 0.0)
        count = new_count


def _bracket(v: Any, total: float, low: float, high: float) -> float:
    """A threshold at most τ* and close to it, in few passes over a chunked array.

    Michelot's passes can be many on skewed data, and each is a scheduler round trip
    for a Dask array; evaluating ``Σ max(v − τ, 0)`` at a grid of τ in one pass
    narrows ``[low, high]`` by the grid size per pass instead.
    """
    for _ in range(BRACKET_ROUNDS):
        grid = np.linspace(low, high, BRACKET_POINTS)
        masses = _grid_masses(v, grid[1:-1])
        below = [tau for tau, m in zip(grid[1:-1], masses, strict=True) if m >= total]
        above = [tau for tau, m in zip(grid[1:-1], masses, strict=True) if m < total]
        low = max(below, default=low)
        high = min(above, default=high)
    return low


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
        # O(n): one projection of a gradient step.
        (value,) = scalars(_norm(x - project(x - step * gradient, total)))
        return value * lipschitz / scale

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


def _grid_masses(v: Any, grid: np.ndarray) -> list[float]:
    """``Σ max(v − τ, 0)`` for every τ in grid: one task per block, not one graph per τ."""
    import dask

    def masses(block: np.ndarray) -> np.ndarray:
        return np.array([np.maximum(block - tau, 0.0).sum() for tau in grid])

    parts = dask.compute(*[dask.delayed(masses)(b) for b in v.to_delayed().ravel()])
    return [float(m) for m in np.sum(parts, axis=0)]


def _norm(v: Any) -> Any:
    return ((v * v).sum()) ** 0.5
