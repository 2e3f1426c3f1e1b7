"""An exact exponential mechanism: uniform proposals accepted with probability exp(−γ).

The exponential mechanism (McSherry and Talwar 2007) releases candidate ``i`` with
probability proportional to ``exp(ε · score_i / (2Δ))``, where Δ bounds how much any one
score can change between neighbouring datasets; it is ε-differentially private.

Sampling it with floating-point ``exp`` and a float uniform leaks through rounding, as
floating-point Laplace noise does (Mironov 2012). Here every decision is exact: a candidate
``i`` is drawn uniformly with the CSPRNG's ``randbelow`` and accepted with probability
``exp(−γ_i)``, ``γ_i = ε · (max_score − score_i) / (2Δ)`` an exact ``Fraction``, by
:func:`~dpmm.privacy.samplers.bernoulli_exp` (von Neumann's alternating series in integer
arithmetic). One accepted round outputs ``i`` with probability
``exp(−γ_i) / Σ_j exp(−γ_j)``, which is the exponential mechanism's distribution because the
common factor ``exp(ε · max_score / (2Δ))`` cancels. The best candidate has ``γ = 0`` and is
always accepted, so a round accepts with probability at least ``1/k`` and the expected number
of proposals is at most ``k`` (the number of candidates).

Scores must therefore be exact rationals. :func:`grid_scores` rounds real-valued scores to a
grid of step ``1/grid``; rounding moves each score by at most ``1/(2·grid)``, so the rounded
scores of two neighbouring datasets differ by at most ``Δ + 1/grid``:
:func:`rounded_sensitivity` is the Δ to pass for rounded scores.

Example:
    >>> from fractions import Fraction
    >>> scores = [Fraction(0), Fraction(0), Fraction(10**6)]
    >>> exponential_mechanism(scores, epsilon=1, sensitivity=1)
    2
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from numbers import Rational

import numpy as np

from dpmm.errors import ArgumentError, PrivacyParameterError, describe_value
from dpmm.privacy.params import exact_fraction
from dpmm.privacy.randomness import RandomSource, as_random_source
from dpmm.privacy.samplers import bernoulli_exp

__all__ = [
    "exponential_mechanism",
    "grid_scores",
    "rounded_sensitivity",
]

Rng = RandomSource | np.random.Generator | None


def _exact_scores(scores: Sequence[object]) -> list[Fraction]:
    if isinstance(scores, str | bytes) or not isinstance(scores, Sequence | np.ndarray):
        raise ArgumentError(f"scores must be a sequence of rationals, got {describe_value(scores)}")
    if len(scores) == 0:
        raise ArgumentError("the exponential mechanism needs at least one candidate score")
    exact: list[Fraction] = []
    for score in scores:
        if isinstance(score, bool) or not isinstance(score, Rational | np.integer):
            raise ArgumentError(
                "scores must be exact rationals (int or Fraction; round floats with "
                f"grid_scores first), got {describe_value(score)}"
            )
        exact.append(Fraction(int(score)) if isinstance(score, np.integer) else Fraction(score))
    return exact


def exponential_mechanism(
    scores: Sequence[object], *, epsilon: object, sensitivity: object, rng: Rng = None
) -> int:
    """Index ``i`` drawn with probability ∝ ``exp(ε · scores[i] / (2Δ))``, exactly; ε-DP.

    Args:
        scores: one exact rational score per candidate (int or ``Fraction``).
        epsilon: the privacy parameter ε, a positive rational.
        sensitivity: Δ, a positive rational bound on any score's change between neighbours.
        rng: tests only: a ``numpy.random.Generator`` (or a RandomSource). The default,
            and the only release setting, is the OS CSPRNG.

    Raises:
        ArgumentError: ``scores`` is empty or holds something other than exact rationals.
        PrivacyParameterError: ε or Δ is not a positive rational.
    """
    exact = _exact_scores(scores)
    eps = exact_fraction(epsilon, "epsilon")
    delta = exact_fraction(sensitivity, "sensitivity")
    source = as_random_source(rng)
    top = max(exact)
    factor = eps / (2 * delta)
    while True:
        candidate = source.randbelow(len(exact))
        if bernoulli_exp(factor * (top - exact[candidate]), rng=source):
            return candidate


def grid_scores(values: Sequence[float] | np.ndarray, grid: int) -> list[Fraction]:
    """Real scores rounded to the nearest multiple of ``1/grid``, as exact Fractions.

    Example:
        >>> grid_scores([0.26, 1.0], grid=4)
        [Fraction(1, 4), Fraction(1, 1)]
    """
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ArgumentError(f"grid must be a positive integer, got {describe_value(grid)}")
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not np.all(np.isfinite(array)):
        raise ArgumentError("scores to round must be a 1-D array of finite numbers")
    # np.rint on the scaled float is exact integer arithmetic once below 2**52.
    scaled = np.rint(array * grid)
    if np.abs(scaled).max(initial=0) >= 2**52:
        raise ArgumentError(f"scores times the grid {grid} exceed 2**52; use a coarser grid")
    return [Fraction(int(value), grid) for value in scaled]


def rounded_sensitivity(sensitivity: object, grid: int) -> Fraction:
    """Δ of scores rounded by :func:`grid_scores`: ``Δ + 1/grid`` (each moves ≤ 1/(2·grid)).

    Example:
        >>> rounded_sensitivity(1, grid=1024)
        Fraction(1025, 1024)
    """
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise PrivacyParameterError(f"grid must be a positive integer, got {describe_value(grid)}")
    return exact_fraction(sensitivity, "sensitivity") + Fraction(1, grid)
