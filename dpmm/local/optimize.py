"""The optimized workload factorization mechanism: projected gradient descent (seed 004, §3.2, §4).

The search is over ε-LDP strategies ``Q`` (m × n) written with one auxiliary vector
``z`` (one entry per output): every column of ``Q`` lies between ``z`` and ``e^ε z`` and
sums to 1. The objective is ``L(Q) = tr[(QᵀD⁻¹Q)⁻¹ WᵀW]`` (average-case variance up to
the constants ``1/n`` and ``−‖W‖_F²``). Two blocks descend in turn:

1. Q: ``Q ← Π_z(Q − α ∇L(Q))``, where ``Π_z`` is the column-wise projection onto
   ``{q : z ≤ q ≤ e^ε z, Σq = 1}``, ``clip(r + λ, z, e^ε z)`` with one scalar λ per
   column making it sum to 1 (Algorithm 1, for all columns at once);
2. z, every :data:`Z_EVERY` iterations: ``z ← z − β ∂L(Π_z(R))/∂z``, the chain rule
   through the projection (entries on a bound follow z, free ones follow λ).

A step whose loss is not finite or higher is rejected and retried at half the step size
(the loss blows up at the boundary where ``QᵀD⁻¹Q`` turns singular, so small enough
steps stay feasible); after a success the next step starts 1.2 times larger. The run
stops after ``iterations`` iterations, or earlier once the loss has improved by less than
``tolerance`` (relative) over the last :data:`PATIENCE` iterations.

Cost per evaluation ``O(m n² + n² r)`` with r the rank of WᵀW (factored once); the
projection of all n columns is a few vectorized O(m n) passes, warm-started at λ = 0
because every step starts from a feasible Q. Below n = :data:`THREADED_SIZE` the
optimizer runs on one BLAS thread, from it on on the threads
:func:`~dpmm.blas_threads.blas_limit` allows.

:func:`optimize_strategy` then compares the optimized strategy with every baseline of
:func:`~dpmm.local.baselines.baseline_strategies` on the worst-case variance and returns
the best, so a user never gets a mechanism worse than a known one (randomized response
wins at ε = 4 on Histogram and Parity, Fourier at ε = 0.5 on Parity).

Example:
    >>> import numpy as np
    >>> from dpmm.local.mechanism import check_ldp
    >>> rng = np.random.default_rng()
    >>> result = optimize_strategy(np.eye(4), 1.0, iterations=20, rng=rng)
    >>> check_ldp(result.Q, 1.0)
    >>> result.Q.shape[1], bool(result.history[-1] < result.history[0])
    (4, True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg.blas import dsyrk
from scipy.linalg.lapack import dpotrf, dtrtrs

from dpmm.blas_threads import blas_limit, pool_limit
from dpmm.errors import ArgumentError, UnsupportedQueryError
from dpmm.local.baselines import baseline_strategies
from dpmm.local.mechanism import as_dense_workload, per_user_variance_from_gram
from dpmm.strategy.restarts import restart_generator

__all__ = [
    "Objective",
    "OptimizedStrategy",
    "loss_and_gradient",
    "optimize_strategy",
    "project_columns",
]

#: Newton passes of the projection before the columns still open get their exact λ from
#: their sorted breakpoints (most columns are done in two or three).
NEWTON_PASSES = 5
#: Initial relative step (1 moves the largest-gradient entry by 1/m).
INITIAL_STEP = 1.0
#: Step halvings tried before a block (Q or z) gives up for one iteration.
BACKTRACKS = 12
#: Factor a step grows by after it was accepted.
GROWTH = 1.2
#: Largest move of any entry of Q in one step, before the projection. The Q step has no
#: other cap: a cap relative to the first gradient (10/m) held most runs to a tenth of
#: the step they could take and so to 5-10 times the iterations.
MAX_MOVE = 1.0
#: Largest z step, relative to 1 / (m n · max |∇L| at the start).
MAX_STEP = 10.0
#: The z step runs every this many iterations: it costs as much as a Q step (one
#: projection, one evaluation) and gains a few percent of what the Q steps gain.
Z_EVERY = 3
#: Iterations over which the loss must improve by ``tolerance`` for the run to go on.
PATIENCE = 20
#: Default relative improvement over :data:`PATIENCE` iterations that keeps the run going.
TOLERANCE = 1e-3
#: Below this domain size the optimizer runs on one BLAS thread: many small products,
#: which threads only slow down (on a 2-core machine with one other busy process, two
#: OpenBLAS threads made a whole run at n = 64 twenty times slower: 73 s against 3 s).
#: From it on, :func:`~dpmm.blas_threads.blas_limit` sizes the pools from the free cores
#: (there one evaluation at n = 512 took 64 ms on one thread and 400 ms on two).
THREADED_SIZE = 512


@dataclass(frozen=True, eq=False)
class OptimizedStrategy:
    """The ε-LDP strategy :func:`optimize_strategy` chose, and how it was found.

    The optimized strategy competes with every baseline of
    :func:`~dpmm.local.baselines.baseline_strategies` on the worst-case per-user variance
    ``max_u z_u``; ``Q`` is the winner's, so it is never worse than any of them.

    Attributes:
        Q: The strategy (m × n, column-stochastic, ε-LDP).
        z: The row lower bounds (``z ≤ Q[:, u] ≤ e^ε z``).
        epsilon: The privacy budget.
        loss: Objective ``tr[(QᵀD⁻¹Q)⁺ WᵀW]`` of Q.
        history: Objective of the optimized strategy after each accepted iteration.
        seconds: Wall time of the whole call (optimization and comparison).
        iterations: Iterations the optimizer ran.
        mechanism: ``"optimized"`` or the name of the baseline that beat it.
        worst_case: ``max_u z_u`` of Q (per user; the chosen candidate's entry below).
        candidates: ``max_u z_u`` of every candidate by name, ``inf`` for a baseline whose
            reports cannot answer the workload without bias.
    """

    Q: np.ndarray
    z: np.ndarray
    epsilon: float
    loss: float
    history: list[float] = field(repr=False)
    seconds: float
    iterations: int
    mechanism: str
    worst_case: float
    candidates: dict[str, float] = field(repr=False)


@dataclass(frozen=True, eq=False)
class Objective:
    """``L(Q) = tr[(QᵀD⁻¹Q)⁻¹ WᵀW]`` for one workload, with ``WᵀW = B Bᵀ`` factored once.

    Attributes:
        factor: B (n × r, r the numerical rank of WᵀW; Fortran order for LAPACK).
    """

    factor: np.ndarray

    @classmethod
    def from_gram(cls, gram_W: np.ndarray) -> Objective:
        """Factor ``WᵀW`` by its eigendecomposition; rounding-level eigenvalues count as 0."""
        gram_W = np.asarray(gram_W, dtype=np.float64)
        values, vectors = np.linalg.eigh(gram_W)
        cutoff = gram_W.shape[0] * np.finfo(np.float64).eps * max(values.max(), 0.0)
        keep = values > cutoff
        factor = np.asfortranarray(vectors[:, keep] * np.sqrt(values[keep]))
        return cls(factor=factor)

    def evaluate(self, Q: np.ndarray) -> tuple[float, np.ndarray | None]:
        """``(L, ∇L)`` at Q, or ``(inf, None)`` where ``QᵀD⁻¹Q`` is singular.

        With ``X = QᵀD⁻¹Q = UᵀU`` (Cholesky), ``Z = X⁻¹B``, ``M = Z Zᵀ = X⁻¹ WᵀW X⁻¹`` and
        ``P = D⁻¹Q``: ``L = ‖U⁻ᵀB‖_F²``, ``∇L = −2 P M + h 1ᵀ`` where
        ``h_o = Σ_u (P M)[o,u] P[o,u]`` (the dependence of D on Q). Cost O(m n² + n² r):
        one SYRK, one Cholesky, two triangular solves with r right-hand sides, and the
        m × n × n product P M (as ``(P Z) Zᵀ`` when WᵀW has rank below n/2).
        """
        totals = Q.sum(axis=1)
        if not totals.min() > 0:
            return math.inf, None
        root = np.sqrt(totals)
        S = Q / root[:, None]  # X = SᵀS
        gram = dsyrk(1.0, S.T)  # upper triangle of SᵀS; S.T is Fortran-ordered, no copy
        upper, info = dpotrf(gram, lower=0, overwrite_a=1)
        if info != 0:
            return math.inf, None
        half, info = dtrtrs(upper, self.factor, lower=0, trans=1)  # U⁻ᵀ B
        if info != 0:
            return math.inf, None
        loss = float(np.einsum("ij,ij->", half, half))
        if not math.isfinite(loss) or loss <= 0:
            return math.inf, None
        solved, _ = dtrtrs(upper, half, lower=0, trans=0, overwrite_b=1)  # Z = X⁻¹ B
        P = S / root[:, None]
        n, rank = solved.shape
        PM = (P @ solved) @ solved.T if 2 * rank < n else P @ (solved @ solved.T)
        h = np.einsum("ou,ou->o", PM, P)
        PM *= -2.0
        PM += h[:, None]
        return loss, PM


def loss_and_gradient(gram_W: np.ndarray, Q: np.ndarray) -> tuple[float, np.ndarray]:
    """``L(Q) = tr[X⁻¹ WᵀW]`` with ``X = QᵀD⁻¹Q``, and its gradient; ``(inf, 0)`` if X is singular.

    One-off form of :meth:`Objective.evaluate` (which see); the optimizer factors WᵀW once.
    """
    loss, gradient = Objective.from_gram(gram_W).evaluate(np.asarray(Q, dtype=np.float64))
    return loss, np.zeros_like(Q) if gradient is None else gradient


def _check_bounds(z: np.ndarray, epsilon: float) -> None:
    if z.sum() > 1.0 + 1e-12 or math.exp(epsilon) * z.sum() < 1.0 - 1e-12:
        raise ArgumentError("The row bounds z admit no probability column (need Σz ≤ 1 ≤ e^ε Σz).")


def _breakpoint_lambda(R: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The exact λ of every column of R, from its sorted breakpoints (O(m log m) a column).

    ``f(λ) = Σ clip(r + λ, a, b)`` equals Σa below every breakpoint and changes slope by +1
    at each ``a − r`` and by −1 at each ``b − r``: its values at the sorted breakpoints
    are a cumulative sum, and λ interpolates linearly inside the segment where f crosses 1.
    """
    m = R.shape[0]
    points = np.concatenate([low - R, high - R], axis=0)
    order = np.argsort(points, axis=0)
    points = np.take_along_axis(points, order, axis=0)
    slope = np.cumsum(np.where(order < m, 1.0, -1.0), axis=0)  # on (points[i], points[i+1])
    values = np.empty_like(points)
    values[0] = low.sum()
    np.cumsum(slope[:-1] * np.diff(points, axis=0), axis=0, out=values[1:])
    values[1:] += values[0]
    above = values >= 1.0
    # f rises to Σb ≥ 1 at the last point (short of it only by the cumulative sum's rounding)
    crossing = np.where(above[-1], np.argmax(above, axis=0), points.shape[0] - 1)
    columns = np.arange(R.shape[1])
    segment = np.maximum(crossing - 1, 0)
    gap = 1.0 - values[segment, columns]
    rise = slope[segment, columns]
    lam = points[segment, columns] + np.divide(gap, rise, out=np.zeros_like(gap), where=rise > 0)
    return np.where(crossing == 0, points[0], lam)


def _project(R: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``clip(R + λ, low, high)`` with one λ per column making every column sum to 1.

    ``Σ clip(r + λ, a, b)`` is piecewise linear and non-decreasing in λ with slope the
    number of free entries. Newton from λ = 0 (exact when R is already a feasible Q,
    close after a small step) lands exactly once the free set is right; after
    :data:`NEWTON_PASSES` vectorized passes over the whole matrix the columns still open
    get their exact λ from their sorted breakpoints, and one more pass confirms it.
    """
    m, n = R.shape
    lam = np.zeros(n)
    left = np.full(n, -np.inf)  # λ known to give a column sum below 1
    right = np.full(n, np.inf)  # … and above 1
    shifted = R  # R + λ at λ = 0
    clipped = np.empty_like(R)
    # The column sum of m terms r + λ is exact to about m ulps of λ: closer is rounding.
    ulps = 2.0 * m * np.finfo(np.float64).eps
    for passes in range(NEWTON_PASSES + 4):
        np.maximum(shifted, low, out=clipped)
        np.minimum(clipped, high, out=clipped)
        excess = clipped.sum(axis=0) - 1.0
        done = np.abs(excess) <= ulps * np.maximum(1.0, np.abs(lam))
        if done.all():
            break
        if passes == NEWTON_PASSES:
            open_columns = np.flatnonzero(~done)
            lam[open_columns] = _breakpoint_lambda(R[:, open_columns], low, high)
        else:
            # Newton, kept inside the bracket of λ the passes so far have found (halfway to
            # its end where it would leave it); a column with every entry on a bound has no
            # slope and waits for the breakpoints.
            right = np.where(excess > 0, lam, right)
            left = np.where(excess < 0, lam, left)
            free = np.count_nonzero(clipped == shifted, axis=0)
            newton = lam - np.divide(excess, free, out=np.zeros(n), where=free > 0)
            newton = np.where(newton <= left, 0.5 * (lam + left), newton)
            newton = np.where(newton >= right, 0.5 * (lam + right), newton)
            lam = np.where(done | (free == 0), lam, newton)
        shifted = np.add(R, lam, out=shifted if shifted is not R else None)
    return clipped


def project_columns(
    R: np.ndarray, z: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Project every column of ``R`` onto ``{q : z ≤ q ≤ e^ε z, Σ q = 1}`` (Algorithm 1).

    The solution is ``clip(r + λ, z, e^ε z)`` with λ found per column by safeguarded
    Newton on the piecewise-linear column sum, all columns at once.

    Returns:
        ``(Q, lower, upper)``: the projection and boolean masks of the entries clipped
        to the lower and upper bound (the rest moved freely with λ).

    Example:
        >>> import numpy as np
        >>> Q, _, _ = project_columns(np.array([[5.0], [0.0]]), np.array([0.25, 0.25]), 1.0)
        >>> np.round(Q.ravel(), 4)
        array([0.6796, 0.3204])
    """
    R = np.asarray(R, dtype=np.float64)
    _check_bounds(z, epsilon)
    low = z[:, None]
    high = math.exp(epsilon) * low
    Q = _project(R, low, high)
    return Q, np.less_equal(Q, low), np.greater_equal(Q, high)


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
    objective: Objective,
    Q: np.ndarray,
    z: np.ndarray,
    epsilon: float,
    iterations: int,
    tolerance: float,
) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
    """Run projected gradient descent; returns ``(Q, z, loss, history)``.

    Q and z are updated in turn, each with its own backtracking step: the projection is
    not differentiable where entries sit exactly on their bounds, so a joint step can
    ascend however small it is; alternating keeps every accepted step a descent step.
    z moves every :data:`Z_EVERY` iterations, and whenever the Q step fails.
    """
    n = Q.shape[1]
    scale_e = math.exp(epsilon)
    loss, G = objective.evaluate(Q)
    if G is None:
        raise ArgumentError("The starting strategy has a singular QᵀD⁻¹Q.")
    history = [loss]
    scale = 1.0 / (Q.shape[0] * max(np.abs(G).max(), 1e-300))
    step, z_step = INITIAL_STEP * scale, INITIAL_STEP / n  # z collects all n columns
    for iteration in range(iterations):
        moved = False
        low = z[:, None]
        high = scale_e * low
        # No entry moves by more than MAX_MOVE: larger steps only saturate bounds, and R's
        # entries would grow so large that r + λ loses the digits of Q.
        step = min(step, MAX_MOVE / max(np.abs(G).max(), 1e-300))
        for attempt in range(BACKTRACKS):
            trial = step * 0.5**attempt
            Q_new = _project(Q - trial * G, low, high)
            loss_new, G_new = objective.evaluate(Q_new)
            if loss_new <= loss:
                Q, loss, G, moved = Q_new, loss_new, G_new, True
                step = trial * GROWTH
                break
        if iteration % Z_EVERY == 0 or not moved:
            lower, upper = _active_sets(Q, z, high, G)
            gradient_z = _z_gradient(G, lower, upper, epsilon)
            for attempt in range(BACKTRACKS):
                trial = z_step * 0.5**attempt
                z_new = _feasible_z(z - trial * scale * gradient_z, epsilon)
                low_new = z_new[:, None]
                Q_new = _project(
                    _follow_bounds(Q, z_new - z, lower, upper, epsilon), low_new, scale_e * low_new
                )
                loss_new, G_new = objective.evaluate(Q_new)
                if loss_new <= loss:
                    Q, z, loss, G, moved = Q_new, z_new, loss_new, G_new, True
                    z_step = min(trial * GROWTH, MAX_STEP / n)
                    break
            else:
                z_step = trial  # start small next time: z is often at a kink
        if not moved:
            break  # neither block can descend at any step size: a (local) minimum
        history.append(loss)
        if len(history) > PATIENCE and loss > (1.0 - tolerance) * history[-1 - PATIENCE]:
            break
    return Q, z, loss, history


def _worst_case(gram_W: np.ndarray, Q: np.ndarray) -> float:
    try:
        return float(per_user_variance_from_gram(gram_W, Q).max())
    except UnsupportedQueryError:
        return math.inf


#: Random starts drawn before giving up on one whose ``QᵀD⁻¹Q`` is not singular.
START_DRAWS = 20


def _start(
    objective: Objective, generator: np.random.Generator, z: np.ndarray, epsilon: float
) -> np.ndarray:
    """The projection of a uniform random matrix whose ``QᵀD⁻¹Q`` is invertible: with few
    outputs (m = 7 for n = 5 at ε = 1) about one draw in 40 clips to a singular one, and
    is drawn again."""
    n = objective.factor.shape[0]
    for _ in range(START_DRAWS):
        Q, _, _ = project_columns(generator.uniform(size=(z.size, n)), z, epsilon)
        if objective.evaluate(Q)[1] is not None:
            return Q
    return Q  # _descend names the singular start


def optimize_strategy(
    W: object,
    epsilon: float,
    *,
    outputs: int | None = None,
    iterations: int = 1000,
    tolerance: float = TOLERANCE,
    baselines: bool = True,
    rng: np.random.Generator | None = None,
) -> OptimizedStrategy:
    """The best ε-LDP strategy for workload ``W``: optimized (Algorithm 2) or a baseline.

    The optimizer starts from a random strategy. Starting from the best baseline instead
    (the paper's other option) ended at the same or a worse optimum on most of the
    anchor's settings: a baseline is often close to a stationary point of the average-case
    objective (randomized response at ε = 4 stops within a few iterations). So the
    baselines compete with the result instead, on the worst-case variance, and the
    result records every candidate's.

    Args:
        W: The workload (p × n dense array or dpmm ``Matrix``).
        epsilon: The LDP budget ε > 0.
        outputs: Number of outputs m of the optimized strategy (default 4n, the paper's).
        iterations: Most gradient iterations.
        tolerance: Stop once the loss improved by less than this fraction over the last
            :data:`PATIENCE` iterations (0 runs every iteration).
        baselines: Compare with :func:`~dpmm.local.baselines.baseline_strategies` and
            return the best (False: always the optimized strategy).
        rng: Random generator for the initialization; a fresh OS-seeded one when None.

    Raises:
        ArgumentError: ε, m, the iteration count or the tolerance is invalid.
    """
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ArgumentError(f"ε must be a positive finite number, got {epsilon!r}.")
    W = as_dense_workload(W)
    n = W.shape[1]
    m = 4 * n if outputs is None else int(outputs)
    if m < n or iterations < 0 or not tolerance >= 0:
        raise ArgumentError(
            f"Need at least n = {n} outputs, iterations ≥ 0 and tolerance ≥ 0, got {m}, "
            f"{iterations}, {tolerance}."
        )
    generator = restart_generator(rng)
    started = time.perf_counter()
    with pool_limit(1) if n < THREADED_SIZE else blas_limit():
        gram_W = W.T @ W
        objective = Objective.from_gram(gram_W)
        # Start strictly inside the feasible z range: Σz = (1 + e^{-ε}) / 2.
        z0 = np.full(m, (1.0 + math.exp(-epsilon)) / (2.0 * m))
        Q0 = _start(objective, generator, z0, epsilon)
        Q, z, loss, history = _descend(objective, Q0, z0, epsilon, iterations, tolerance)
        candidates = {"optimized": _worst_case(gram_W, Q)}
        strategies = {"optimized": Q}
        if baselines:
            strategies.update(baseline_strategies(n, epsilon))
            for name, strategy in strategies.items():
                if name not in candidates:
                    candidates[name] = _worst_case(gram_W, strategy)
        chosen = min(candidates, key=candidates.__getitem__)  # ties keep "optimized"
        if chosen != "optimized":
            Q = strategies[chosen]
            z = Q.min(axis=1)
            loss = float(per_user_variance_from_gram(gram_W, Q).sum() + np.trace(gram_W))
    return OptimizedStrategy(
        Q=Q,
        z=z,
        epsilon=float(epsilon),
        loss=loss,
        history=history,
        seconds=time.perf_counter() - started,
        iterations=len(history) - 1,
        mechanism=chosen,
        worst_case=candidates[chosen],
        candidates=candidates,
    )
