"""Projected L-BFGS for box bounds, vectorized in NumPy for templates with ~10⁶ parameters.

SciPy's L-BFGS-B spends O(N) scalar work per call of its update step: on a p-Identity
fit over 4,096 cells (10⁶ parameters) that was ~0.36 s per iteration against 0.05 s for
the loss and gradient. Fitted p-Identity strategies are sparse (~95 % of Θ sits at its
lower bound 0), so here every quasi-Newton step works on the free variables alone:

* free: not at a bound with the gradient pushing outward;
* the direction is the two-loop recursion over the last ``memory`` pairs ``(s, y)``
  restricted to the free variables (a pair whose restricted curvature ``sᵀy`` is not
  positive is skipped);
* the step follows the projected path ``clip(x + t d)`` from ``t = 1`` and halves ``t``
  until it decreases the loss by the Armijo rule along that path.

It stops, as :func:`scipy.optimize.minimize` does with ``ftol``, once an iteration's
relative decrease ``(f_k − f_{k+1}) / max(|f_k|, |f_{k+1}|, 1)`` is at most
``relative_tolerance``, and checks the selection's time budget every iteration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from dpmm.strategy.time_budget import check_time

__all__ = ["minimize_bounded"]

#: Pairs ``(s, y)`` kept, as SciPy's default ``maxcor``.
MEMORY = 10

#: Armijo's sufficient-decrease fraction (the usual 10⁻⁴).
ARMIJO = 1e-4

#: Halvings of the step before an iteration gives up (then the search stops).
MAX_BACKTRACKS = 30


def _direction(
    gradient: np.ndarray, pairs: deque[tuple[np.ndarray, np.ndarray]], free: np.ndarray
) -> np.ndarray:
    """``−H g`` on the ``free`` indices by the two-loop recursion (L-BFGS), O(memory · free)."""
    q = gradient[free]
    kept = []
    for s, y in pairs:
        s_free, y_free = s[free], y[free]
        curvature = float(s_free @ y_free)
        if curvature > 0.0:
            kept.append((s_free, y_free, 1.0 / curvature))
    alphas = []
    for s_free, y_free, rho in reversed(kept):
        alpha = rho * float(s_free @ q)
        q -= alpha * y_free
        alphas.append(alpha)
    if kept:
        s_free, y_free, rho = kept[-1]
        q *= 1.0 / (rho * float(y_free @ y_free))  # γ = sᵀy / yᵀy: the initial scaling
    for (s_free, y_free, rho), alpha in zip(kept, reversed(alphas), strict=True):
        beta = rho * float(y_free @ q)
        q += (alpha - beta) * s_free
    q *= -1.0
    return q


def minimize_bounded(
    loss_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]],
    start: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    max_iterations: int,
    relative_tolerance: float,
    memory: int = MEMORY,
) -> tuple[np.ndarray, float]:
    """Minimize a smooth loss over the box ``lower ≤ x ≤ upper``: the end point and its loss.

    Args:
        loss_and_grad: The loss and its gradient at a point.
        start: The starting point (clipped into the box).
        lower: Lower bounds (may be ``-inf``).
        upper: Upper bounds (may be ``inf``).
        max_iterations: Most iterations (each one or more evaluations).
        relative_tolerance: Stop once an iteration decreases the loss by at most this
            fraction of ``max(|loss|, 1)``.
        memory: Pairs ``(s, y)`` the quasi-Newton approximation keeps.

    Raises:
        OutOfTimeError: the selection's time budget ran out.

    Example:
        >>> def loss_and_grad(x):
        ...     return float(((x - [1.0, -1.0]) ** 2).sum()), 2 * (x - [1.0, -1.0])
        >>> x, loss = minimize_bounded(
        ...     loss_and_grad, np.ones(2), np.zeros(2), np.full(2, np.inf),
        ...     max_iterations=50, relative_tolerance=1e-12)
        >>> x.round(8).tolist(), round(loss, 8)
        ([1.0, 0.0], 1.0)
    """
    x = np.clip(np.asarray(start, dtype=np.float64), lower, upper)
    loss, gradient = loss_and_grad(x)
    pairs: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=memory)
    for _ in range(max_iterations):
        check_time()
        # Free: not held at a bound by a gradient pushing outward. Everything but the new
        # gradient's difference works on these indices only (a few % of Θ at the optimum).
        held = (x <= lower) & (gradient > 0.0)
        held |= (x >= upper) & (gradient < 0.0)
        free = np.flatnonzero(~held)
        if free.size == 0:
            break
        free_x, free_lower, free_upper = x[free], lower[free], upper[free]
        free_gradient = gradient[free]
        direction = _direction(gradient, pairs, free)
        slope = float(free_gradient @ direction)
        if not slope < 0.0:  # the approximation went bad: restart from steepest descent
            pairs.clear()
            direction = -free_gradient
            slope = float(free_gradient @ direction)
            if not slope < 0.0:
                break  # the projected gradient vanishes: a stationary point
        # Without curvature information yet, a first step of unit length (as SciPy takes).
        step = 1.0 if pairs else min(1.0, 1.0 / float(np.sqrt(-slope)))
        for _ in range(MAX_BACKTRACKS):
            moved = np.clip(free_x + step * direction, free_lower, free_upper)
            moved -= free_x
            trial = x.copy()
            trial[free] += moved
            trial_loss, trial_gradient = loss_and_grad(trial)
            if trial_loss <= loss + ARMIJO * float(free_gradient @ moved):
                break
            step *= 0.5
        else:
            break  # no decrease along the projected path: x is as good as it gets
        decrease = loss - trial_loss
        y = trial_gradient - gradient
        if float(moved @ y[free]) > np.finfo(float).eps * float(y @ y):
            s = np.zeros_like(x)
            s[free] = moved
            pairs.append((s, y))
        x, loss, gradient = trial, trial_loss, trial_gradient
        if decrease <= relative_tolerance * max(abs(loss + decrease), abs(loss), 1.0):
            break
    return x, float(loss)
