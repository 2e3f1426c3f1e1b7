"""Private multiplicative weights (Hardt, Ligett, McSherry 2012; seed 001), exact and on the ledger.

The dataset is learned as a distribution ``p`` over the universe (the histogram cells).
Each of T rounds:

1. **select** the query the current ``p`` answers worst, with the exact exponential
   mechanism (:mod:`~dpmm.baselines.exponential`) on the scores ``|q(h) − n̂·q(p)|``;
2. **measure** that query's integer answer with exact discrete Laplace or Gaussian noise;
3. **update** ``p_x ← p_x · exp(q(x) · (m − n̂·q(p)) / (2 n̂))``, normalized (the MWEM
   form of the multiplicative-weights step: large corrections move more mass), replayed
   ``replays`` times over every measurement so far, as MWEM does (post-processing: it
   reads only released values; one step moves a badly answered query only part way).

The workload must hold counting queries (0/1 entries), so every true answer is an integer
and changes by at most 1 when one record is added or removed: the measurement's
sensitivity is 1, and so is the score's, because ``n̂·q(p)`` depends only on outputs
already released. That estimate is a float; it is rounded to the grid ``1/SCORE_GRID``
*before* it meets the data, so the scores are exact rationals and the rounding, being
data-independent, leaves the sensitivity at exactly 1 (rounding the whole score instead
would cost ``1/grid`` more: see :func:`~dpmm.baselines.exponential.rounded_sensitivity`).

n̂ is the public number of records when given (the seed's setting); otherwise it is
released first with its own share of the budget (:func:`~dpmm.baselines.projection.noisy_total`).

Budget: the configured ``PureDP(ε)`` or ``ZCDP(ρ)`` is reserved whole on the ledger before
the data is read, split exactly into (optional) total, and T × (select, measure), marked
spent once any noise has been drawn, and cancelled if the run fails before that. With a
zCDP budget the selection's ε is the largest 2⁻⁴⁰-grid value with ``ε²/2`` (the pure-to-zCDP
conversion, ``dpmm.privacy.pure_to_zcdp``) within its share, and the measurement takes the
exact remainder of the round, so the parts compose (``dpmm.privacy.compose``) to the
configured budget exactly: :func:`pmw_budget` builds that split and checks it.

Example:
    >>> split = pmw_budget(ZCDP("1/2"), rounds=4)
    >>> compose(split.parts()) == ZCDP("1/2"), float(split.select_epsilon) ** 2 / 2 <= 1 / 16
    (True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpmm.baselines.exponential import exponential_mechanism
from dpmm.baselines.projection import noisy_total
from dpmm.errors import ArgumentError, PrivacyParameterError, UnsupportedQueryError, describe_value
from dpmm.linalg import Marginal, Marginals, Matrix
from dpmm.privacy import (
    ZCDP,
    Ledger,
    PureDP,
    compose,
    discrete_gaussian,
    discrete_laplace,
    gaussian_sigma2,
    pure_to_zcdp,
)
from dpmm.privacy.randomness import RandomSource, as_random_source

__all__ = ["SCORE_GRID", "PMWBudget", "PMWResult", "pmw", "pmw_budget"]

#: Grid of the public estimates in the selection scores (a power of two: exact in float64).
SCORE_GRID = 2**20
#: Bits of the grid the selection's ε is rounded down to under a zCDP budget.
EPSILON_BITS = 40

Budget = PureDP | ZCDP
Rng = RandomSource | np.random.Generator | None


@dataclass(frozen=True)
class PMWBudget:
    """The exact split of a PMW budget: optional total, then per round select + measure."""

    privacy: Budget
    rounds: int
    count: Budget | None
    select: Budget
    select_epsilon: Fraction
    measure: Budget

    def parts(self) -> list[Budget]:
        """Every charge in order; ``compose(parts())`` equals ``privacy`` exactly."""
        head = [] if self.count is None else [self.count]
        return head + [self.select, self.measure] * self.rounds


def _share(value: object, name: str) -> Fraction:
    try:
        share = Fraction(str(value)) if isinstance(value, float) else Fraction(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"{name} must be a fraction in (0, 1), got {value!r}") from None
    if not 0 < share < 1:
        raise ArgumentError(f"{name} must be in (0, 1), got {describe_value(value)}")
    return share


def pmw_budget(
    privacy: Budget,
    rounds: int,
    *,
    select_share: object = Fraction(1, 2),
    count_share: object | None = None,
) -> PMWBudget:
    """Split ``privacy`` exactly over an optional noisy total and ``rounds`` rounds.

    Args:
        privacy: the whole budget, ``PureDP(ε)`` or ``ZCDP(ρ)``.
        rounds: T, at least 1.
        select_share: the part of each round spent on selection (the rest measures).
        count_share: the part of the whole budget spent on the noisy total, or ``None``
            when the total is public.

    Raises:
        ArgumentError: a share outside (0, 1) or a bad number of rounds.
        PrivacyParameterError: ``privacy`` is neither PureDP nor ZCDP.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ArgumentError(f"rounds must be a positive integer, got {describe_value(rounds)}")
    share = _share(select_share, "select_share")
    if isinstance(privacy, PureDP):
        whole, make = privacy.epsilon, PureDP
    elif isinstance(privacy, ZCDP):
        whole, make = privacy.rho, ZCDP
    else:
        raise PrivacyParameterError(f"PMW needs PureDP or ZCDP, got {describe_value(privacy)}")
    count = None
    if count_share is not None:
        count = make(whole * _share(count_share, "count_share"))
        whole -= count.epsilon if isinstance(count, PureDP) else count.rho
    per_round = whole / rounds
    if make is PureDP:
        select_epsilon = per_round * share
        select: Budget = PureDP(select_epsilon)
    else:
        # Largest ε on the 2⁻⁴⁰ grid with ε²/2 ≤ the selection's share of ρ.
        scale = 1 << EPSILON_BITS
        target = 2 * per_round * share * scale * scale
        select_epsilon = Fraction(math.isqrt(target.numerator // target.denominator), scale)
        if select_epsilon == 0:
            raise PrivacyParameterError(f"rho per round {per_round} is too small to select with")
        select = pure_to_zcdp(PureDP(select_epsilon))
    measure = make(per_round - (select.epsilon if make is PureDP else select.rho))
    split = PMWBudget(privacy, rounds, count, select, select_epsilon, measure)
    if compose(split.parts()) != privacy:  # exact Fractions: a real invariant, never rounding
        raise PrivacyParameterError(f"the PMW split of {privacy} does not compose to it")
    return split


@dataclass(frozen=True)
class PMWResult:
    """What PMW releases.

    Attributes:
        x: the synthetic histogram ``n̂ · p_T`` (non-negative, summing to n̂).
        answers: the workload answers of ``x``.
        total: n̂ (public, or noisy).
        selected: the query chosen in each round.
        measurements: the noisy integer answer of each selected query.
        budget: the exact split that was charged.
        reservation_id: the ledger reservation, now spent.
    """

    x: np.ndarray
    answers: np.ndarray
    total: int
    selected: list[int]
    measurements: list[int]
    budget: PMWBudget
    reservation_id: str


def _check_counting_workload(W: Matrix) -> None:
    if not isinstance(W, Matrix):
        raise UnsupportedQueryError(f"W must be a dpmm.linalg matrix, got {type(W).__name__}")
    if isinstance(W, Marginal) or (
        isinstance(W, Marginals) and all(w == 1 for w in W.weights.values())
    ):
        return
    dense = W.dense()
    if not np.all((dense == 0) | (dense == 1)):
        raise UnsupportedQueryError(
            f"PMW needs counting queries (entries 0 or 1); {W!r} has other entries"
        )


def _histogram(x: object, cells: int) -> np.ndarray:
    counts = np.asarray(x)
    if counts.shape != (cells,) or not np.issubdtype(counts.dtype, np.number):
        raise UnsupportedQueryError(f"the histogram must be a vector of {cells} counts")
    if np.any(counts < 0) or np.any(counts != np.rint(counts)) or counts.sum() >= 2**52:
        raise UnsupportedQueryError("the histogram must hold non-negative integer counts")
    return counts.astype(np.float64)


def pmw(
    W: Matrix,
    x: object,
    privacy: Budget,
    *,
    rounds: int,
    ledger: Ledger,
    dataset: str,
    release_id: str,
    total: int | None = None,
    select_share: object = Fraction(1, 2),
    count_share: object = Fraction(1, 10),
    replays: int = 10,
    rng: Rng = None,
) -> PMWResult:
    """Run PMW for ``rounds`` rounds, charging ``privacy`` to the ledger exactly.

    Args:
        W: a counting workload over the histogram's cells.
        x: the histogram (read only after the budget is reserved).
        privacy: the whole budget, ``PureDP(ε)`` or ``ZCDP(ρ)``.
        rounds: T.
        ledger, dataset, release_id: where the budget is reserved and spent.
        total: the public number of records; ``None`` releases a noisy total with
            ``count_share`` of the budget.
        select_share: each round's share spent on selection.
        count_share: the noisy total's share (ignored when ``total`` is given).
        replays: passes of the multiplicative-weights update over all measurements so far,
            after each round (1: the plain PMW step).
        rng: tests only (exact samplers driven by a numpy Generator).

    Raises:
        UnsupportedQueryError: W is not a counting workload, or x is not a histogram.
        BudgetExceeded: the ledger has less than ``privacy`` left.
    """
    _check_counting_workload(W)
    if isinstance(replays, bool) or not isinstance(replays, int) or replays < 1:
        raise ArgumentError(f"replays must be a positive integer, got {describe_value(replays)}")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 1):
        raise ArgumentError(f"total must be a positive integer, got {describe_value(total)}")
    split = pmw_budget(
        privacy, rounds, select_share=select_share, count_share=None if total else count_share
    )
    reservation = ledger.reserve(dataset, privacy, release_id)
    noise_drawn = False
    try:
        counts = _histogram(x, W.shape[1])
        source = as_random_source(rng)
        true_answers = np.asarray(W @ counts, dtype=np.float64)
        if split.count is not None:
            noise_drawn = True
            total = max(1, noisy_total(counts, split.count, rng=source))
        n_hat = int(total)
        p = np.full(W.shape[1], 1.0 / W.shape[1])
        selected: list[int] = []
        measured: list[int] = []
        basis = np.zeros(W.shape[0])
        queries: list[np.ndarray] = []
        for _ in range(rounds):
            estimate = np.rint(np.asarray(W @ p, dtype=np.float64) * n_hat * SCORE_GRID)
            scores = [
                abs(int(a) - Fraction(int(e), SCORE_GRID))
                for a, e in zip(true_answers, estimate, strict=True)
            ]
            noise_drawn = True
            index = exponential_mechanism(
                scores, epsilon=split.select_epsilon, sensitivity=1, rng=source
            )
            measurement = int(true_answers[index]) + _noise(split.measure, source)
            selected.append(index)
            measured.append(measurement)
            basis[index] = 1.0
            queries.append(np.asarray(W.T @ basis, dtype=np.float64))
            basis[index] = 0.0
            p = _multiplicative_weights(p, queries, measured, n_hat, replays)
    except BaseException:
        if noise_drawn:
            ledger.mark_spent(reservation)
        else:
            ledger.cancel(reservation)
        raise
    ledger.mark_spent(reservation)
    synthetic = n_hat * p
    return PMWResult(
        synthetic,
        np.asarray(W @ synthetic, dtype=np.float64),
        n_hat,
        selected,
        measured,
        split,
        reservation.id,
    )


def _multiplicative_weights(
    p: np.ndarray, queries: list[np.ndarray], measured: list[int], n_hat: int, replays: int
) -> np.ndarray:
    """``replays`` passes of the MWEM update over every (query, noisy answer) pair."""
    for _ in range(replays):
        for query, measurement in zip(queries, measured, strict=True):
            correction = (measurement - n_hat * float(query @ p)) / (2.0 * n_hat)
            # Shift the exponent by its maximum: the normalization makes it cancel.
            exponent = query * correction
            p = p * np.exp(exponent - exponent.max())
            p /= p.sum()
    return p


def _noise(privacy: Budget, source: RandomSource) -> int:
    """One exact noise draw for a sensitivity-1 integer query under ``privacy``."""
    if isinstance(privacy, PureDP):
        return int(discrete_laplace(1 / privacy.epsilon, 1, rng=source)[0])
    return int(discrete_gaussian(gaussian_sigma2(Fraction(1), privacy), 1, rng=source)[0])
