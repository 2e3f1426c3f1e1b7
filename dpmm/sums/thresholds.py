"""Private truncation thresholds: the Sparse Vector Technique and the recursive mechanism.

Both read the vector form (people per bucket, bucket weights ``u``) and return an integer
threshold ``θ``, or ``None`` when the private answer is "no truncation needed" (``θ`` at or
above the largest bucket weight). Both queries they perturb are integer-valued with an
integer sensitivity, so exact discrete Laplace noise (:class:`~dpmm.sums.noise.ExactNoise`)
gives pure ε-DP; the released ``θ`` is post-processing of those noisy integers.

**SVT** (seed 003, section 3.1 and Algorithm 2). Candidates ``u_i = ⌊s·c^(i−1)⌋`` grow
geometrically. With ``r = a/b`` the kept ratio, query ``i`` is ``q_i = b·f(u_i) − a·N``, where
``f(u)`` counts people whose weight is at most ``u`` and ``N`` counts everyone: it is ``≥ 0``
exactly when ``f(u_i) ≥ r N``, so the data size need not be public. Adding or removing one
person changes ``q_i`` by ``b − a`` or ``−a``: sensitivity ``Δ = max(a, b − a)``. This is
Lyu, Su and Li's Algorithm 1 (threshold noise ``Lap(2Δ/ε)``, query noise ``Lap(4Δ/ε)``,
stop at the first query above the noisy threshold 0), which is ε-DP.

**Recursive** (the first stage of Chen and Zhou's recursive mechanism, specialised to sums,
as seed 003's appendix A.5 uses it). Let ``a_0 ≥ a_1 ≥ …`` be the weights of the people,
largest first (``a_k = 0`` for ``k ≥ N``), and ``g(v) = max(0, ⌈ln(v/θ₀)/β⌉)`` the index of
``v`` on the geometric grid ``θ₀ e^(βj)``. The statistic
``J = min_k (k + g(a_k))`` — "remove the ``k`` largest people, pay ``β`` in log-scale per
person removed" (``ln Δ = min_k(βk + ln a_k)``, the recursive mechanism's empirical
sensitivity ladder) — changes by 0 or 1 when a person is added or removed, because
``a'_k ≥ a_k`` and ``a'_{k+1} ≤ a_k``. Releasing ``J + Lap(1/ε)`` (discrete) is ε-DP, and
``Δ̂ = θ₀ · exp(β (J + Y) + μ)`` is its post-processing: log-scale noise of scale ``β/ε``
(``= 2/5`` with ``β = 2ε/5``), shifted up by ``μ`` so that ``Δ̂`` rarely falls below the
ladder's value, and floored at ``θ₀``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.privacy import Ledger, exact_fraction
from dpmm.sums.noise import ExactNoise, Noise, charge
from dpmm.workload.prefix_sum import (  # seed 003's defaults, shared with the config
    RECURSIVE_FLOOR,
    RECURSIVE_SHIFT,
    SVT_GROWTH,
    SVT_RATIO,
    SVT_START,
)

__all__ = ["recursive_grid_statistic", "recursive_threshold", "svt_candidates", "svt_threshold"]


def svt_candidates(start: int, growth: Fraction, top: int) -> np.ndarray:
    """The candidate thresholds ``⌊s·c^(i−1)⌋`` below ``top`` (the largest bucket weight).

    Example:
        >>> svt_candidates(10, Fraction(3, 2), 40).tolist()
        [10, 15, 22, 33]
    """
    if start < 1 or growth <= 1:
        raise ArgumentError(f"SVT needs start ≥ 1 and growth > 1, got {start!r} and {growth!r}.")
    values, bound = [], Fraction(start)
    while math.floor(bound) < top:
        values.append(math.floor(bound))
        bound *= growth
    return np.array(values, dtype=np.int64)


def svt_threshold(
    counts: np.ndarray,
    bounds: np.ndarray,
    epsilon: object,
    *,
    ratio: object = SVT_RATIO,
    growth: object = SVT_GROWTH,
    start: int = SVT_START,
    runs: int | None = None,
    noise: Noise | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
    release_id: str | None = None,
) -> int | list[int | None] | None:
    """The first candidate below which at least a ratio ``r`` of people lie, by SVT.

    Args:
        counts: People per bucket (the vector ``x``).
        bounds: The buckets' integer upper bounds (weights).
        epsilon: The share of the budget for one run, e.g. ``ρ ε``.
        ratio: ``r``, the share of people that should not be truncated (rational).
        growth: ``c > 1``, the ratio between successive candidates (rational).
        start: ``s``, the first candidate.
        runs: Independent runs (SQM runs one per query); ``None`` for a single threshold.
        noise: The noise source; exact discrete Laplace by default.
        ledger, dataset, release_id: Where to charge ``epsilon`` per run (optional).

    Returns:
        ``θ`` (an int), or ``None`` if no candidate below the top bound passed; a list of
        those with ``runs``.

    Example:
        >>> x = np.array([50, 40, 10, 0])
        >>> svt_threshold(x, np.array([10, 20, 30, 40]), 1000, ratio="0.9", start=10)
        20
    """
    share = exact_fraction(epsilon, "epsilon")
    kept = exact_fraction(ratio, "ratio")
    if not 0 < kept < 1:
        raise ArgumentError(f"The SVT keep ratio must lie strictly between 0 and 1, got {kept}.")
    candidates = svt_candidates(start, exact_fraction(growth, "growth"), int(bounds[-1]))
    count = 1 if runs is None else runs
    if candidates.size == 0:  # s is at or above the top weight: nothing to ask, nothing spent
        return None if runs is None else [None] * count
    noise = noise or ExactNoise()
    sensitivity = max(kept.numerator, kept.denominator - kept.numerator)
    with charge(ledger, dataset, release_id, share * count) as step:
        people = np.asarray(counts, dtype=np.int64)
        # People in buckets whose weight is at most the candidate (none below the first).
        last = np.searchsorted(bounds, candidates, side="right") - 1
        below = np.where(last >= 0, np.cumsum(people)[np.maximum(last, 0)], 0)
        queries = kept.denominator * below - kept.numerator * int(people.sum())
        step.drawing()
        threshold = noise.laplace(2 * sensitivity / share, count)
        perturbed = queries + noise.laplace(4 * sensitivity / share, (count, candidates.size))
    passed = perturbed >= threshold[:, None]
    found = passed.any(axis=1)
    first = np.argmax(passed, axis=1)
    chosen = [int(candidates[i]) if ok else None for i, ok in zip(first, found, strict=True)]
    return chosen[0] if runs is None else chosen


def recursive_grid_statistic(
    counts: np.ndarray, bounds: np.ndarray, floor: int, beta: float
) -> int:
    """``J = min_k (k + g(a_k))``, the sensitivity-1 ladder of the recursive mechanism.

    Within a bucket all people share a weight, so the minimum over its people is at the
    first of them (fewest removed): one term per non-empty bucket, plus ``N`` (all removed).

    Example:
        >>> recursive_grid_statistic(np.array([5, 0, 1]), np.array([1, 2, 8]), 1, 0.5)
        1
    """
    people = np.asarray(counts, dtype=np.int64)
    weights = np.asarray(bounds, dtype=np.float64)
    removed_before = np.cumsum(people[::-1])[::-1] - people  # people in heavier buckets
    grid = np.maximum(0, np.ceil(np.log(weights / floor) / beta)).astype(np.int64)
    terms = (removed_before + grid)[people > 0]
    return int(min(int(people.sum()), int(terms.min(initial=people.sum()))))


def recursive_threshold(
    counts: np.ndarray,
    bounds: np.ndarray,
    epsilon: object,
    *,
    floor: int = RECURSIVE_FLOOR,
    beta: float | None = None,
    shift: float = RECURSIVE_SHIFT,
    runs: int | None = None,
    noise: Noise | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
    release_id: str | None = None,
) -> int | list[int | None] | None:
    """The recursive mechanism's ``Δ̂`` as a truncation threshold (see the module docstring).

    Args:
        counts, bounds: The vector form, as for :func:`svt_threshold`.
        epsilon: The share of the budget for one run, e.g. ``ρ ε``.
        floor: ``θ₀``, the smallest threshold returned.
        beta: Log-scale step; seed 003 uses ``2ε/5`` (the default).
        shift: ``μ``, the upward shift of ``ln Δ̂``.
        runs, noise, ledger, dataset, release_id: As for :func:`svt_threshold`.

    Returns:
        ``θ`` (an int ≥ ``floor``), or ``None`` if ``Δ̂`` reaches the top bucket weight; a
        list with ``runs``.

    Example:
        >>> x = np.array([900, 100, 0, 0])
        >>> recursive_threshold(x, np.array([10, 20, 30, 4000]), 100, floor=10, beta=0.1)
        33
    """
    share = exact_fraction(epsilon, "epsilon")
    step_size = 2 * float(share) / 5 if beta is None else float(beta)
    if floor < 1 or step_size <= 0:
        raise ArgumentError(f"Need floor ≥ 1 and beta > 0, got {floor!r} and {step_size!r}.")
    count = 1 if runs is None else runs
    noise = noise or ExactNoise()
    with charge(ledger, dataset, release_id, share * count) as step:
        statistic = recursive_grid_statistic(counts, bounds, floor, step_size)
        step.drawing()
        noisy = statistic + noise.laplace(1 / share, count)
    # Post-processing of the noisy integer: clip the exponent so exp never overflows.
    log_ratio = np.minimum(step_size * np.asarray(noisy, dtype=np.float64) + shift, 700.0)
    theta = np.floor(floor * np.exp(np.maximum(log_ratio, 0.0)))
    top = int(bounds[-1])
    chosen = [None if t >= top else int(t) for t in theta]
    return chosen[0] if runs is None else chosen
