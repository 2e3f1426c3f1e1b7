"""The optimized workload factorization mechanism: projected gradient descent (seed 004, §3.2, §4).

The search is over ε-LDP strategies ``Q`` (m × n) written with one auxiliary vector
``z`` (one entry per output): every column of ``Q`` lies between ``z`` and ``e^ε z`` and
sums to 1. The objective is ``L(Q) = tr[(QᵀD⁻¹Q)⁻¹ WᵀW]`` (average-case variance up to
the constants ``1/n`` and ``−‖W‖_F²``). Each iteration:

1. ``R = Q − α ∇L(Q)`` (gradient step on Q);
2. ``z ← z − β ∂L(Π_z(R))/∂z``, the chain rule through the projection (β = α/n: z
   collects the gradient of all n columns and must move slowly);
3. ``Q ← Π_z(R)``, the column-wise projection onto ``{q : z ≤ q ≤ e^ε z, Σq = 1}``,
   which is ``clip(r + λ, z, e^ε z)`` with the scalar λ making the column sum 1.

A step whose loss is not finite or higher is rejected and retried at half the step size
(the loss blows up at the boundary where ``QᵀD⁻¹Q`` turns singular, so small enough
steps stay feasible). The initial step size is chosen by a short search over a grid, as
the paper does; ``Q`` starts as the projection of a uniform random matrix.

Example:
    >>> import numpy as np
    >>> from dpmm.local.mechanism import check_ldp
    >>> rng = np.random.default_rng()
    >>> result = optimize_strategy(np.eye(4), 1.0, iterations=20, rng=rng, search_iterations=2)
    >>> check_ldp(result.Q, 1.0)
    >>> result.Q.shape, bool(result.history[-1] < result.history[0])
    ((16, 4), True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.local.mechanism import as_dense_workload
from dpmm.strategy.restarts import restart_generator

__all__ = [
    "OptimizedStrategy",
    "loss_and_gradient",
    "optimize_strategy",
    "project_columns",
]

#: Initial step sizes tried (relative to 1 / (m · max |∇L|), so they are scale free).
STEP_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
#: Iterations each grid step size runs before the best one is kept.
SEARCH_ITERATIONS = 15
#: Step halvings tried before a block (Q or z) gives up for one iteration.
BACKTRACKS = 12
#: Largest relative step (1 moves the largest-gradient entry by 1/m).
MAX_STEP = 10.0


@dataclass(frozen=True, eq=False)
class OptimizedStrategy:
    """An optimized ε-LDP strategy and how it was found.

    Attributes:
        Q: The strategy (m × n, column-stochastic, ε-LDP).
        z: The row lower bounds it was projected with (``z ≤ Q[:, u] ≤ e^ε z``).
        epsilon: The privacy budget.
        loss: Final objective ``tr[(QᵀD⁻¹Q)⁻¹ WᵀW]``.
        history: Objective after each accepted iteration.
        seconds: Wall time of the whole optimization (search included).
        iterations: Iterations of the main run.
    """

    Q: np.ndarray
    z: np.ndarray
    epsilon: float
    loss: float
    history: list[float] = field(repr=False)
    seconds: float
    iterations: int


def project_columns(
    R: np.ndarray, z: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Project every column of ``R`` onto ``{q : z ≤ q ≤ e^ε z, Σ q = 1}`` (Algorithm 1).

    ``Σ clip(r + λ, a, b)`` is piecewise linear and non-decreasing in λ with breakpoints
    ``a − r`` and ``b − r``; safeguarded Newton finds every column's λ in a few O(m) passes.

    Returns:
        ``(Q, lower, upper)``: the projection and boolean masks of the entries clipped
        to the lower and upper bound (the rest moved freely with λ).

    Example:
        >>> import numpy as np
        >>> Q, _, _ = project_columns(np.array([[5.0], [0.0]]), np.array([0.25, 0.25]), 1.0)
        >>> np.round(Q.ravel(), 4)
        array([0.6796, 0.3204])
    """
    low = z[:, None]
    high = math.exp(epsilon) * low
    if z.sum() > 1.0 + 1e-12 or high.sum() < 1.0 - 1e-12:
        raise ArgumentError("The row bounds z admit no probability column (need Σz ≤ 1 ≤ e^ε Σz).")
    # λ lies between the values that put every entry on its lower / upper bound.
    left = (low - R).min(axis=0)
    right = (high - R).max(axis=0)
    lam = 0.5 * (left + right)
    for _ in range(100):
        # Safeguarded Newton on the piecewise-linear column sum: the slope is the number of
        # free entries, so Newton lands exactly once the active set is right.
        shifted = R + lam[None, :]
        excess = np.clip(shifted, low, high).sum(axis=0) - 1.0
        done = np.abs(excess) <= 4 * np.finfo(np.float64).eps
        if done.all():
            break
        right = np.where(excess > 0, lam, right)
        left = np.where(excess < 0, lam, left)
        free = ((shifted > low) & (shifted < high)).sum(axis=0)
        newton = lam - np.divide(excess, free, out=np.zeros_like(lam), where=free > 0)
        inside = (free > 0) & (newton > left) & (newton < right)
        lam = np.where(done, lam, np.where(inside, newton, 0.5 * (left + right)))
    shifted = R + lam[None, :]
    Q = np.clip(shifted, low, high)
    return Q, shifted <= low, shifted >= high


def loss_and_gradient(gram_W: np.ndarray, Q: np.ndarray) -> tuple[float, np.ndarray]:
    """``L(Q) = tr[X⁻¹ WᵀW]`` with ``X = QᵀD⁻¹Q``, and its gradient; ``(inf, 0)`` if X is singular.

    With ``M = X⁻¹ WᵀW X⁻¹`` and ``P = D⁻¹Q``: ``∇L = −2 P M + h 1ᵀ`` where
    ``h_o = Σ_u (P M)[o,u] P[o,u]`` (the second term is the dependence of D on Q).
    Cost O(m n² + n³).
    """
    totals = Q.sum(axis=1)
    if totals.min() <= 0:
        return math.inf, np.zeros_like(Q)
    P = Q / totals[:, None]
    X = Q.T @ P
    try:
        factor = np.linalg.cholesky(X)
    except np.linalg.LinAlgError:
        return math.inf, np.zeros_like(Q)
    # X⁻¹ WᵀW from two triangular solves; M = X⁻¹ WᵀW X⁻¹ is symmetric.
    A = _cho_solve(factor, gram_W)
    loss = float(np.trace(A))
    M = _cho_solve(factor, A.T)
    if not math.isfinite(loss) or loss <= 0:
        return math.inf, np.zeros_like(Q)
    PM = P @ M
    h = np.einsum("ou,ou->o", PM, P)
    return loss, -2.0 * PM + h[:, None]


def _cho_solve(factor: np.ndarray, B: np.ndarray) -> np.ndarray:
    from scipy.linalg import solve_triangular

    half = solve_triangular(factor, B, lower=True)
    return solve_triangular(factor.T, half, lower=False)


def _z_gradient(G: np.ndarray, lower: np.ndarray, upper: np.ndarray, epsilon: float) -> np.ndarray:
    """Chain rule of ``L(Π_z(R))`` to z: clipped entries follow z, free ones follow λ(z)."""
    weight = lower + math.exp(epsilon) * upper  # ∂Q[o,u]/∂z_o for clipped entries
    free = ~(lower | upper)
    count = free.sum(axis=0)
    mean_free = np.divide((G * free).sum(axis=0), count, out=np.zeros(G.shape[1]), where=count > 0)
    return (weight * (G - mean_free[None, :])).sum(axis=1)


def _active_sets(
    Q: np.ndarray, z: np.ndarray, high: np.ndarray, G: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Entries on their lower / upper bound; every column keeps at least one free entry.

    A column with every entry on a bound has no λ to absorb a move of z; its entry on the
    upper bound with the largest gradient (the one that most wants to shrink) is freed.
    """
    lower = z[:, None] * (1 + 1e-12) >= Q
    upper = high * (1 - 1e-12) <= Q
    stuck = np.flatnonzero(~(~(lower | upper)).any(axis=0))
    if stuck.size:
        scores = np.where(upper[:, stuck], G[:, stuck], -np.inf)
        pivots = np.argmax(scores, axis=0)
        lower[pivots, stuck] = False
        upper[pivots, stuck] = False
    return lower, upper


def _follow_bounds(
    Q: np.ndarray, dz: np.ndarray, lower: np.ndarray, upper: np.ndarray, epsilon: float
) -> np.ndarray:
    """Move Q with its bounds: clipped entries follow z, free ones shift to keep Σ = 1.

    Re-projecting Q itself onto the new bounds would free entries that sat on a bound
    (its breakpoint coincides with λ), which is not the map the z gradient differentiates.
    """
    moved = (lower + math.exp(epsilon) * upper) * dz[:, None]
    free = ~(lower | upper)
    count = free.sum(axis=0)
    shift = np.divide(-moved.sum(axis=0), count, out=np.zeros(Q.shape[1]), where=count > 0)
    return Q + moved + free * shift[None, :]


def _feasible_z(z: np.ndarray, epsilon: float) -> np.ndarray:
    """Euclidean projection of z onto ``{z ≥ floor, e^{-ε} ≤ Σz ≤ 1}`` (with a small margin).

    The projection is continuous, so a small gradient step moves z only a little; a shift
    ``max(z + τ, floor)`` with τ found by bisection hits the violated sum bound.
    """
    floor = 1e-12 / z.size
    z = np.maximum(z, floor)
    low, high = math.exp(-epsilon) * (1 + 1e-9), 1.0 - 1e-9
    total = z.sum()
    if low <= total <= high:
        return z
    target = high if total > high else low
    left, right = -z.max(), 1.0  # Σ max(z + τ, floor) is below / above target at the ends
    for _ in range(100):
        tau = 0.5 * (left + right)
        if np.maximum(z + tau, floor).sum() > target:
            right = tau
        else:
            left = tau
    return np.maximum(z + 0.5 * (left + right), floor)


def _descend(
    gram_W: np.ndarray,
    Q: np.ndarray,
    z: np.ndarray,
    epsilon: float,
    step: float,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray, float, float, list[float]]:
    """Run projected gradient descent; returns ``(Q, z, loss, final step, history)``.

    Q and z are updated in turn, each with its own backtracking step: the projection is
    not differentiable where entries sit exactly on their bounds, so a joint step can
    ascend however small it is; alternating keeps every accepted step a descent step.
    """
    n = Q.shape[1]
    loss, G = loss_and_gradient(gram_W, Q)
    history = [loss]
    scale = 1.0 / (Q.shape[0] * max(np.abs(G).max(), 1e-300))
    z_step = step / n  # z collects the gradient of all n columns: it moves more slowly
    for _ in range(iterations):
        moved = False
        for attempt in range(BACKTRACKS):
            trial = step * 0.5**attempt
            Q_new, _, _ = project_columns(Q - trial * scale * G, z, epsilon)
            loss_new, G_new = loss_and_gradient(gram_W, Q_new)
            if loss_new <= loss:
                Q, loss, G, moved = Q_new, loss_new, G_new, True
                step = min(trial * 1.2, MAX_STEP)  # cautiously grow the step after a success
                break
        high = math.exp(epsilon) * z[:, None]
        lower, upper = _active_sets(Q, z, high, G)
        gradient_z = _z_gradient(G, lower, upper, epsilon)
        for attempt in range(BACKTRACKS):
            trial = z_step * 0.5**attempt
            z_new = _feasible_z(z - trial * scale * gradient_z, epsilon)
            Q_new, _, _ = project_columns(
                _follow_bounds(Q, z_new - z, lower, upper, epsilon), z_new, epsilon
            )
            loss_new, G_new = loss_and_gradient(gram_W, Q_new)
            if loss_new <= loss:
                Q, z, loss, G, moved = Q_new, z_new, loss_new, G_new, True
                z_step = min(trial * 1.2, MAX_STEP / n)
                break
        else:
            z_step = trial  # start small next time: z is often at a kink
        if not moved:
            break  # neither block can descend at any step size: a (local) minimum
        history.append(loss)
    return Q, z, loss, step, history


def optimize_strategy(
    W: object,
    epsilon: float,
    *,
    outputs: int | None = None,
    iterations: int = 1000,
    rng: np.random.Generator | None = None,
    search_iterations: int = SEARCH_ITERATIONS,
) -> OptimizedStrategy:
    """Optimize an ε-LDP strategy for workload ``W`` (Algorithm 2).

    Args:
        W: The workload (p × n dense array or dpmm ``Matrix``).
        epsilon: The LDP budget ε > 0.
        outputs: Number of outputs m (default 4n, the paper's choice).
        iterations: Gradient iterations of the main run (after the step size search).
        rng: Random generator for the initialization; a fresh OS-seeded one when None.
        search_iterations: Iterations each step size of the initial grid runs.

    Raises:
        ArgumentError: ε, m or the iteration count is invalid.
    """
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ArgumentError(f"ε must be a positive finite number, got {epsilon!r}.")
    W = as_dense_workload(W)
    n = W.shape[1]
    m = 4 * n if outputs is None else int(outputs)
    if m < n or iterations < 0:
        raise ArgumentError(
            f"Need at least n = {n} outputs and iterations ≥ 0, got {m}, {iterations}."
        )
    generator = restart_generator(rng)
    started = time.perf_counter()
    gram_W = W.T @ W
    # Start strictly inside the feasible z range: Σz = (1 + e^{-ε}) / 2.
    z0 = np.full(m, (1.0 + math.exp(-epsilon)) / (2.0 * m))
    Q0, _, _ = project_columns(generator.uniform(size=(m, n)), z0, epsilon)
    trials = [_descend(gram_W, Q0, z0, epsilon, step, search_iterations) for step in STEP_GRID]
    best = min(trials, key=lambda trial: trial[2])
    Q, z, loss, _, history = _descend(gram_W, best[0], best[1], epsilon, best[3], iterations)
    return OptimizedStrategy(
        Q=Q,
        z=z,
        epsilon=float(epsilon),
        loss=loss,
        history=history,
        seconds=time.perf_counter() - started,
        iterations=len(history) - 1,
    )
