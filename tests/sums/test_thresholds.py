"""Private thresholds: definitions, sensitivity, exact samplers and ledger accounting."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpmm.sums.noise as noise_module
from dpmm.privacy import BudgetExceeded, Ledger, PureDP
from dpmm.sums import (
    ExactNoise,
    Truncation,
    recursive_grid_statistic,
    recursive_threshold,
    svt_threshold,
)
from dpmm.sums.thresholds import svt_candidates

BOUNDS = 10 * np.arange(1, 101, dtype=np.int64)  # weights 10 … 1000


def counts_of(weights: np.ndarray) -> np.ndarray:
    return np.bincount(np.searchsorted(BOUNDS, weights), minlength=BOUNDS.size)


def brute_force_ladder(weights: list[int], floor: int, beta: float) -> int:
    """min over k of k + g(k-th largest weight), with a_k = 0 past the end."""
    ordered = [*sorted(weights, reverse=True), 0]
    grid = [0 if a == 0 else max(0, math.ceil(math.log(a / floor) / beta)) for a in ordered]
    return min(k + g for k, g in enumerate(grid))


def test_svt_candidates_grow_geometrically_below_the_top() -> None:
    values = svt_candidates(50_000, Fraction(6, 5), 800_000)
    assert values[:4].tolist() == [50_000, 60_000, 72_000, 86_400]
    assert values[-1] < 800_000 <= math.floor(50_000 * Fraction(6, 5) ** values.size)


def test_svt_with_negligible_noise_returns_the_first_candidate_reaching_the_ratio() -> None:
    rng = np.random.default_rng(0)
    weights = rng.choice(BOUNDS, 500)
    counts = counts_of(weights)
    chosen = svt_threshold(counts, BOUNDS, 10**9, ratio="0.9", start=10, noise=ExactNoise(rng))
    candidates = svt_candidates(10, Fraction(6, 5), int(BOUNDS[-1]))
    expected = next(u for u in candidates if np.sum(weights <= u) >= Fraction(9, 10) * 500)
    assert chosen == expected


def test_svt_returns_none_when_no_candidate_below_the_top_passes() -> None:
    counts = counts_of(np.full(50, 1000))
    assert svt_threshold(counts, BOUNDS, 10**9, start=10) is None


def test_svt_counts_no_one_below_a_candidate_under_the_smallest_weight() -> None:
    # Everyone in the top bucket: a candidate below every bucket weight has nobody under it
    # (its bucket index would be -1, which once read the cumulative count of everyone).
    counts = np.array([0, 0, 100])
    assert svt_threshold(counts, np.array([10, 20, 30]), 10**9, ratio="0.9", start=5) is None


def test_svt_draws_exact_discrete_laplace_with_the_seed_scales(monkeypatch) -> None:
    calls: list[tuple[Fraction, object]] = []

    def spy(scale, size, *, rng=None):
        calls.append((scale, size))
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(noise_module, "discrete_laplace", spy)
    svt_threshold(counts_of(np.full(5, 100)), BOUNDS, "1/100", ratio="0.998", start=10)
    # Δ = max(499, 1) for r = 499/500: threshold Lap(2Δ/ε), queries Lap(4Δ/ε).
    assert calls[0] == (Fraction(2 * 499 * 100), 1)
    assert calls[1][0] == Fraction(4 * 499 * 100)
    assert all(isinstance(scale, Fraction) for scale, _ in calls)


def test_exact_threshold_noise_is_integer_valued() -> None:
    draws = ExactNoise(np.random.default_rng(1)).laplace(Fraction(7, 3), 1000)
    assert draws.dtype == np.int64
    assert 2 < np.var(draws) < 20  # discrete Laplace of scale 7/3: variance ≈ 10.6


@pytest.mark.parametrize("seed", range(20))
def test_recursive_ladder_matches_definition_and_has_sensitivity_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.choice(BOUNDS, rng.integers(1, 60)).tolist()
    floor, beta = 20, float(rng.uniform(0.05, 1.0))
    ladder = recursive_grid_statistic(counts_of(np.array(weights)), BOUNDS, floor, beta)
    assert ladder == brute_force_ladder(weights, floor, beta)
    added = [*weights, int(rng.choice(BOUNDS))]  # any value, even the largest
    grown = recursive_grid_statistic(counts_of(np.array(added)), BOUNDS, floor, beta)
    assert ladder <= grown <= ladder + 1


def test_recursive_threshold_is_the_shifted_grid_point() -> None:
    counts = counts_of(np.array([100] * 50 + [900]))
    floor, beta, shift = 50, 0.2, 0.5
    ladder = recursive_grid_statistic(counts, BOUNDS, floor, beta)
    chosen = recursive_threshold(counts, BOUNDS, 10**9, floor=floor, beta=beta, shift=shift)
    assert chosen == math.floor(floor * math.exp(beta * ladder + shift))


def test_recursive_default_beta_is_two_fifths_of_epsilon(monkeypatch) -> None:
    seen: list[float] = []
    real = recursive_grid_statistic

    def spy(counts, bounds, floor, beta):
        seen.append(beta)
        return real(counts, bounds, floor, beta)

    monkeypatch.setattr("dpmm.sums.thresholds.recursive_grid_statistic", spy)
    recursive_threshold(counts_of(np.array([100])), BOUNDS, "1/10", floor=10)
    assert seen == [pytest.approx(0.04)]


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    ledger = Ledger.init(tmp_path / "ledger.sqlite")
    ledger.grant("randhie", PureDP(1))
    yield ledger
    ledger.close()


@pytest.mark.parametrize("method", ["svt", "recursive"])
def test_threshold_spends_exactly_its_share(ledger: Ledger, method: str) -> None:
    spec = Truncation(method, rho="1/10", start=10, floor=10)
    share = spec.split(Fraction(1, 100))[0]
    counts = counts_of(np.array([100, 200, 300]))
    spec.select(counts, BOUNDS, share, ledger=ledger, dataset="randhie", release_id="r1")
    assert ledger.remaining("randhie") == 1 - Fraction(1, 1000)
    assert ledger.balance("randhie").spent == Fraction(1, 1000)
    spec.select(counts, BOUNDS, share, runs=4, ledger=ledger, dataset="randhie", release_id="r2")
    assert ledger.remaining("randhie") == 1 - 5 * Fraction(1, 1000)


def test_threshold_failure_before_noise_cancels_the_reservation(ledger: Ledger) -> None:
    with pytest.raises(IndexError):  # counts shorter than the buckets: fails before any draw
        svt_threshold(np.array([1]), BOUNDS, "0.01", start=10, ledger=ledger, dataset="randhie",
                      release_id="broken")  # fmt: skip
    assert ledger.remaining("randhie") == 1
    assert ledger.active_reservations("randhie") == []


def test_threshold_refused_when_the_ledger_is_short(ledger: Ledger) -> None:
    with pytest.raises(BudgetExceeded):
        recursive_threshold(counts_of(np.array([100])), BOUNDS, 2, ledger=ledger,
                            dataset="randhie", release_id="big")  # fmt: skip
    assert ledger.remaining("randhie") == 1
