"""Running a strategy with real users: exact client sampling, server aggregation and estimates.

The strategy is usually ``optimize_strategy(W, ε).Q``: the best, by worst-case variance,
of the optimized strategy and every baseline for the workload (the returned
:class:`~dpmm.local.optimize.OptimizedStrategy` records the comparison), so a deployment
samples whichever won, randomized response included.

Client: a user of type u reports output o with probability ``Q[o, u]``. Floating-point
probabilities are never sampled directly: :func:`quantize_strategy` turns ``Q`` into
integers ``K`` whose every column sums to ``2^bits``, and certifies with exact integer
arithmetic that ``max_u K[o,u] ≤ e^ε · min_u K[o,u]`` for every row (against a rational
lower bound of e^ε). A user then draws one uniform integer below ``2^bits`` from the OS
CSPRNG and reports the output whose cumulative count range holds it, so the report has
probability exactly ``K[o,u] / 2^bits``. The quantized strategy is the one certified and
the one the server reconstructs with, so estimates stay exactly unbiased.

Server: counts per output (:func:`aggregate`), unbiased workload answers ``V y``
(:func:`estimate_workload`) and optionally WNNLS (:func:`workload_nnls`, seed 004
Appendix A): the non-negative data vector whose workload answers are closest to the
unbiased ones.

Example:
    >>> import numpy as np
    >>> from dpmm.local.mechanism import randomized_response
    >>> strategy = quantize_strategy(randomized_response(4, 1.0), 1.0)
    >>> reports = randomize_users(np.array([0, 1, 1, 3]), strategy)
    >>> int(aggregate(reports, strategy.outputs).sum())
    4
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.optimize import minimize

from dpmm.local.mechanism import LdpViolationError, as_dense_workload, check_ldp, reconstruction
from dpmm.privacy.randomness import RandomSource, as_random_source

__all__ = [
    "QuantizedStrategy",
    "WnnlsResult",
    "aggregate",
    "estimate_workload",
    "exp_lower_bound",
    "quantize_strategy",
    "randomize",
    "randomize_users",
    "workload_nnls",
]

#: Bits of the common denominator: counts stay below 2^62 so int64 sums cannot overflow.
DEFAULT_BITS = 52


def exp_lower_bound(epsilon: float, terms: int = 60) -> Fraction:
    """A rational ``r ≤ e^ε``: a partial sum of the exponential series (all terms ≥ 0).

    Example:
        >>> import math
        >>> float(exp_lower_bound(1.0)) <= math.e
        True
    """
    x = Fraction(epsilon)  # the float ε, exactly
    term, total = Fraction(1), Fraction(1)
    for k in range(1, terms):
        term = term * x / k
        total += term
    return total


@dataclass(frozen=True, eq=False)
class QuantizedStrategy:
    """A strategy whose probabilities are integers over ``2^bits``, certified ε-LDP.

    Attributes:
        counts: ``K`` (m × n int64), every column summing to ``2^bits``.
        bits: The denominator's exponent.
        epsilon: The ε certified exactly on ``counts``.
    """

    counts: np.ndarray
    bits: int
    epsilon: float

    @property
    def outputs(self) -> int:
        """Number of outputs m."""
        return int(self.counts.shape[0])

    @property
    def Q(self) -> np.ndarray:
        """The exact probabilities as floats (exact: counts < 2^53 and a power-of-two divisor)."""
        return self.counts.astype(np.float64) / float(1 << self.bits)


def _round_columns(Q: np.ndarray, total: int) -> np.ndarray:
    """Integers ``≈ Q · total`` with exact column sums (largest remainders round up)."""
    scaled = Q * total
    counts = np.floor(scaled).astype(np.int64)
    missing = total - counts.sum(axis=0)
    order = np.argsort(-(scaled - counts), axis=0)
    for u in range(Q.shape[1]):
        counts[order[: int(missing[u]), u], u] += 1
    return counts


def _certify(counts: np.ndarray, epsilon: float) -> int | None:
    """The first row violating ``max ≤ e^ε min`` in exact arithmetic, or None."""
    bound = exp_lower_bound(epsilon)
    high, low = counts.max(axis=1), counts.min(axis=1)
    for row in range(counts.shape[0]):
        # high / low ≤ p / q  ⟺  high · q ≤ p · low, in Python integers (no rounding).
        if int(high[row]) * bound.denominator > bound.numerator * int(low[row]):
            return row
    return None


def quantize_strategy(Q: np.ndarray, epsilon: float, bits: int = DEFAULT_BITS) -> QuantizedStrategy:
    """Quantize ``Q`` to integers over ``2^bits`` and certify ε-LDP exactly.

    Optimized strategies sit exactly on the ratio bound, where rounding alone could break
    it; each row is first shrunk toward its mean by a tiny factor γ (which lowers every
    ratio), with γ raised until the rounded matrix passes the exact check.

    Raises:
        LdpViolationError: ``Q`` is not ε-LDP to float precision, or no γ ≤ 1e-3 certifies.
    """
    check_ldp(Q, epsilon)
    if not 8 <= bits <= 60:
        raise LdpViolationError(f"bits must be between 8 and 60, got {bits}.")
    Q = np.asarray(Q, dtype=np.float64)
    row_means = Q.mean(axis=1, keepdims=True)
    total = 1 << bits
    for gamma in (0.0, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-3):
        # Mixing with a matrix of identical columns keeps columns stochastic.
        counts = _round_columns((1 - gamma) * Q + gamma * row_means, total)
        if counts.min() >= 0 and _certify(counts, epsilon) is None:
            return QuantizedStrategy(counts=counts, bits=bits, epsilon=float(epsilon))
    raise LdpViolationError(
        f"Could not quantize the strategy to 2^{bits} while keeping every row's ratio ≤ e^ε."
    )


def randomize(
    user_type: int,
    strategy: QuantizedStrategy,
    rng: RandomSource | np.random.Generator | None = None,
) -> int:
    """One user's report: output o with probability exactly ``K[o, u] / 2^bits``.

    Args:
        user_type: The user's true type u (0 ≤ u < n).
        strategy: The certified quantized strategy.
        rng: None for the OS CSPRNG (releases); a ``RandomSource``, or a
            ``numpy.random.Generator`` in tests (when calling many times, wrap it once with
            ``as_random_source``: every wrap reads its own block of bytes).
    """
    n = strategy.counts.shape[1]
    if not 0 <= int(user_type) < n:
        raise LdpViolationError(f"The user type must be in [0, {n}), got {user_type!r}.")
    draw = as_random_source(rng).randbelow(1 << strategy.bits)
    cumulative = np.cumsum(strategy.counts[:, int(user_type)])
    return int(np.searchsorted(cumulative, draw, side="right"))


def randomize_users(
    user_types: np.ndarray,
    strategy: QuantizedStrategy,
    rng: RandomSource | np.random.Generator | None = None,
) -> np.ndarray:
    """Reports of many users at once (the same exact sampling as :func:`randomize`)."""
    types = np.asarray(user_types, dtype=np.int64)
    n = strategy.counts.shape[1]
    if types.size and (types.min() < 0 or types.max() >= n):
        raise LdpViolationError(f"Every user type must be in [0, {n}).")
    draws = as_random_source(rng).uniform_below(1 << strategy.bits, types.size)
    cumulative = np.cumsum(strategy.counts, axis=0)
    reports = np.empty(types.size, dtype=np.int64)
    for u in np.unique(types):
        chosen = types == u
        reports[chosen] = np.searchsorted(cumulative[:, u], draws[chosen], side="right")
    return reports


def aggregate(reports: np.ndarray, outputs: int) -> np.ndarray:
    """Counts per output: ``y[o]`` = number of users who reported o."""
    reports = np.asarray(reports, dtype=np.int64)
    if reports.size and (reports.min() < 0 or reports.max() >= outputs):
        raise LdpViolationError(f"Every report must be an output in [0, {outputs}).")
    return np.bincount(reports, minlength=outputs)


def estimate_workload(W: object, strategy: QuantizedStrategy, counts: np.ndarray) -> np.ndarray:
    """Unbiased workload answers ``V y`` with the optimal reconstruction of the quantized Q."""
    return reconstruction(W, strategy.Q) @ np.asarray(counts, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class WnnlsResult:
    """A non-negative data vector and the WNNLS objective along the way.

    Attributes:
        x: The estimate ``x̃ ≥ 0``.
        answers: ``W x̃``.
        objective: ``‖W x̃ − ŷ‖²`` at the end.
        history: The objective at the start and after each solver iteration.
    """

    x: np.ndarray
    answers: np.ndarray
    objective: float
    history: list[float]


def workload_nnls(W: object, answers: np.ndarray, *, max_iterations: int = 500) -> WnnlsResult:
    """``x̃ = argmin_{x ≥ 0} ‖W x − ŷ‖²`` for unbiased answers ŷ, by L-BFGS-B (Appendix A).

    The solver starts from the least-squares data vector clipped at zero and only accepts
    points that decrease the objective, so the result is never worse than that start.
    """
    W = as_dense_workload(W)
    target = np.asarray(answers, dtype=np.float64)
    gram, linear = W.T @ W, W.T @ target
    offset = float(target @ target)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        gx = gram @ x
        return float(x @ gx - 2 * linear @ x + offset), 2 * (gx - linear)

    start = np.clip(np.linalg.lstsq(W, target, rcond=None)[0], 0, None)
    history = [objective(start)[0]]
    result = minimize(
        objective,
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * W.shape[1],
        callback=lambda x: history.append(objective(x)[0]),
        options={"maxiter": max_iterations},
    )
    x = result.x if result.fun <= history[0] else start
    value = objective(x)[0]
    return WnnlsResult(x=x, answers=W @ x, objective=max(value, 0.0), history=history)
