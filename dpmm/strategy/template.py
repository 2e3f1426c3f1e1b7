"""One optimizer for every parametrized strategy template (HDMM's OPT_0, OPT_M, ...).

A template only says what its parameters are (a start drawn at random, bounds)
and how to compute its loss with the gradient; :func:`optimize_template` runs
L-BFGS-B (SciPy) from several starts and keeps the best point it has seen. From
:data:`LARGE_PROBLEM` parameters up, :func:`descend` runs the vectorized projected
L-BFGS of :mod:`dpmm.strategy.projected_lbfgs` instead, whose iterations cost a small
fraction of SciPy's there.
The loss of a template is the expected total squared error of its strategy up
to the privacy constant, so "best" is directly "least error".
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.optimize

from dpmm.blas_threads import pool_limit, search_threads
from dpmm.errors import ArgumentError, DpmmError
from dpmm.strategy.projected_lbfgs import minimize_bounded
from dpmm.strategy.restarts import restart_generator
from dpmm.strategy.time_budget import check_time

__all__ = [
    "Template",
    "TemplateResult",
    "check_count",
    "check_norm",
    "descend",
    "optimize_template",
]

#: Most L-BFGS-B iterations per start; the templates here converge well before it.
MAX_ITERATIONS = 2000

#: L-BFGS-B's relative-decrease stopping rule: below this, more iterations change the
#: error in its fourth significant digit at most.
RELATIVE_TOLERANCE = 1e-10

#: Parameters from which :func:`descend` leaves SciPy's L-BFGS-B for the projected L-BFGS.
#: On the p-Identity fit of Prefix+AllRange(4096) (10⁶ parameters, loss+gradient 47 ms of
#: CPU) an iteration cost 170 ms of CPU with SciPy and 67 ms with the projected L-BFGS,
#: which also ended lower from the same starts (whole fit: TSE 1.711e11 against 1.733e11).
#: From 3·10⁴ (OPT_0 from 693 cells) it also wins with its side-by-side starts and large-fit
#: schedule: 3 seeds on Prefix+AllRange(1000) (62,000 parameters) 1.8 s and mean loss
#: 0.18129 against SciPy's 3.4 s and 0.18222, and the anchors allrange_1024 / prefix_1024
#: 0.991 / 0.980 of HDMM in 3.3 / 3.0 s against 0.994 / 0.988 in 4.9 / 5.3 s; at 16,384
#: (512 cells) the two tie, and below SciPy is faster (0.26 s against 0.43 s at 256 cells).
LARGE_PROBLEM = 30_000


class Template(Protocol):
    """A strategy family ``A(params)``: its parameter bounds, a random start, its loss."""

    def bounds(self) -> scipy.optimize.Bounds:
        """Lower and upper bounds of every parameter."""
        ...

    def initial(self, rng: np.random.Generator) -> np.ndarray:
        """A random starting point within the bounds."""
        ...

    def loss_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        """The loss (error up to the privacy constant) at ``params`` and its gradient."""
        ...


@dataclass(frozen=True)
class TemplateResult:
    """The best parameters found and their loss."""

    params: np.ndarray
    loss: float


def check_count(value: object, what: str) -> int:
    """Validate a count such as the number of random restarts (an integer ≥ 1)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ArgumentError(f"{what} must be an integer ≥ 1, got {value!r}")
    return int(value)


def check_norm(norm: object) -> int:
    """Validate a template's sensitivity norm: 1 (Laplace) or 2 (Gaussian)."""
    if norm not in (1, 2) or isinstance(norm, bool):
        raise ArgumentError(f"The strategy's sensitivity norm must be 1 or 2, got {norm!r}")
    return int(norm)


def _checking_time(
    loss_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]],
) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """``loss_and_grad`` that first checks the selection's time budget (every evaluation)."""

    def checked(params: np.ndarray) -> tuple[float, np.ndarray]:
        check_time()
        return loss_and_grad(params)

    return checked


def descend(template: Template, start: np.ndarray, iterations: int) -> tuple[np.ndarray, float]:
    """L-BFGS-B with bounds from ``start`` for at most ``iterations``: the end point, its loss.

    From :data:`LARGE_PROBLEM` parameters up the projected L-BFGS
    (:func:`~dpmm.strategy.projected_lbfgs.minimize_bounded`) runs instead of SciPy's.
    """
    bounds = template.bounds()
    if np.size(start) >= LARGE_PROBLEM:
        with pool_limit(1):
            return minimize_bounded(
                template.loss_and_grad,
                start,
                bounds.lb,
                bounds.ub,
                max_iterations=iterations,
                relative_tolerance=RELATIVE_TOLERANCE,
            )
    # One BLAS thread: thousands of small products, which threads only slow down.
    with pool_limit(1):
        result = scipy.optimize.minimize(
            _checking_time(template.loss_and_grad),
            start,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={
                "maxiter": iterations,
                "maxfun": 2 * iterations,
                "ftol": RELATIVE_TOLERANCE,
                "gtol": 0.0,
            },
        )
    end = np.clip(result.x, bounds.lb, bounds.ub)
    return end, float(template.loss_and_grad(end)[0])


def _descend_each(
    template: Template, starts: Sequence[np.ndarray], iterations: int
) -> list[tuple[np.ndarray, float]]:
    """:func:`descend` from every start, in order; large fits several at once.

    A large fit's iterations are NumPy and LAPACK calls on ~10⁶ numbers, which release
    the GIL, on one BLAS thread each: its starts run side by side in
    :func:`~dpmm.blas_threads.search_threads` threads, so a fit uses the cores the process
    owns. Each start's descent is deterministic, so the
    results do not depend on how many run at once.
    """
    workers = min(len(starts), search_threads())
    if workers <= 1 or np.size(starts[0]) < LARGE_PROBLEM:
        return [descend(template, start, iterations) for start in starts]
    # One BLAS thread around the pool too: the descents' own limits then restore 1, not the
    # stage's count, whichever ends first.
    with pool_limit(1), ThreadPoolExecutor(workers) as pool:
        # Each thread runs in a copy of this context: the selection's time budget holds there.
        futures = [
            pool.submit(contextvars.copy_context().run, descend, template, start, iterations)
            for start in starts
        ]
        return [future.result() for future in futures]


def optimize_template(
    template: Template,
    *,
    restarts: int = 3,
    rng: np.random.Generator | None = None,
    starts: Sequence[np.ndarray] = (),
    max_iterations: int = MAX_ITERATIONS,
    then_iterations: int = 0,
) -> TemplateResult:
    """Minimize ``template``'s loss by L-BFGS-B from ``restarts`` random starts (and ``starts``).

    Every start and every end point is a candidate, so the result is never worse
    than the best start given. With ``then_iterations``, the best end point (a large
    fit's best :func:`~dpmm.blas_threads.search_threads` end points, side by side, at no
    more wall time than one) continues for that many more iterations: the first pass
    screens the starts.

    Args:
        template: The strategy family.
        restarts: Random starts drawn with ``template.initial(rng)``.
        rng: The random generator (a fresh OS-seeded one when None).
        starts: Extra fixed starting points (e.g. a known good strategy).
        max_iterations: Most L-BFGS-B iterations per start.
        then_iterations: Most iterations of the best end points' continuation.

    Raises:
        ArgumentError: ``restarts`` is not a positive integer.
        DpmmError: no start gives a finite loss.

    Example:
        >>> class Quadratic:
        ...     def bounds(self):
        ...         return scipy.optimize.Bounds(np.zeros(2), np.full(2, np.inf))
        ...     def initial(self, rng):
        ...         return rng.uniform(size=2)
        ...     def loss_and_grad(self, x):
        ...         return float(((x - [1.0, -1.0]) ** 2).sum()), 2 * (x - [1.0, -1.0])
        >>> result = optimize_template(Quadratic(), rng=np.random.default_rng())
        >>> result.params.round(6).tolist(), round(result.loss, 6)
        ([1.0, 0.0], 1.0)
    """
    restarts = check_count(restarts, "The number of restarts")
    rng = restart_generator(rng)
    points = [np.asarray(start, dtype=np.float64) for start in starts]
    points += [template.initial(rng) for _ in range(restarts)]
    best_params: np.ndarray | None = None
    best_loss = np.inf
    finite = []
    for start in points:
        start_loss, _ = template.loss_and_grad(start)
        if start_loss < best_loss:
            best_params, best_loss = start.copy(), start_loss
        if np.isfinite(start_loss):
            finite.append(start)
    ends = _descend_each(template, finite, max_iterations)
    if then_iterations > 0 and ends:
        ranked = sorted(ends, key=lambda end: end[1])
        kept = search_threads() if np.size(ranked[0][0]) >= LARGE_PROBLEM else 1
        best_ends = [end for end, _ in ranked[:kept]]
        ends += _descend_each(template, best_ends, then_iterations)
    for end, end_loss in ends:
        if end_loss < best_loss:
            best_params, best_loss = end, end_loss
    if best_params is None or not np.isfinite(best_loss):
        raise DpmmError("No starting point of the strategy template gives a finite error")
    return TemplateResult(best_params, float(best_loss))
