"""Interval half-widths against the exact distributions, enumerated by brute force."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import special

import dpmm.reconstruct.intervals as intervals_module
from dpmm.linalg import Hierarchical, Prefix
from dpmm.measure import quantize
from dpmm.reconstruct.intervals import (
    RESOLUTION,
    Intervals,
    NoiseLaw,
    _chernoff_width,
    coefficient_rows,
    exact_half_width,
)

LEVELS = (0.8, 0.95)


def _pmf(law: NoiseLaw) -> tuple[np.ndarray, np.ndarray]:
    """The noise's PMF on the integers beyond which lies under 1e-11, normalized by brute force."""
    reach = law.reach(1e-11)
    k = np.arange(-reach, reach + 1)
    p = float(law.parameter)
    weights = np.exp(-np.abs(k) / p) if law.laplace else np.exp(-(k**2) / (2 * p))
    return k, weights / weights.sum()


def _enumerated(coefficients: list[float], law: NoiseLaw) -> tuple[np.ndarray, np.ndarray]:
    """Every value of ``Σ c_j z_j`` over the product of the draws' supports, and its mass."""
    k, p = _pmf(law)
    values, masses = np.zeros(1), np.ones(1)
    for c in coefficients:
        values = (values[:, None] + c * k[None, :]).ravel()
        masses = (masses[:, None] * p[None, :]).ravel()
    return values, masses


def _coverage(values: np.ndarray, masses: np.ndarray, h: float) -> float:
    return float(masses[np.abs(values) <= h * (1 + 1e-12) + 1e-12].sum())


def _least_half_width(values: np.ndarray, masses: np.ndarray, level: float) -> float:
    """The least h on the distribution's support with ``P(|e| ≤ h) ≥ level``."""
    magnitudes = np.abs(values)
    order = np.argsort(magnitudes, kind="stable")
    cumulative = np.cumsum(masses[order])
    distinct = np.r_[magnitudes[order][1:] - magnitudes[order][:-1] > 1e-12, True]
    ok = distinct & (cumulative >= level - 1e-12)
    return float(magnitudes[order][np.argmax(ok)])


SCALES = [
    NoiseLaw("discrete_laplace", Fraction(1, 2)),
    NoiseLaw("discrete_laplace", Fraction(2)),
    NoiseLaw("discrete_gaussian", Fraction(1, 3)),
    NoiseLaw("discrete_gaussian", Fraction(5)),
]
LATTICE_ROWS = [[1.0], [1.0, -1.0], [0.5, 0.25, -0.25], [0.7, 0.3, 0.41], [1 / 3, -2 / 3, 1 / 3]]
OFF_LATTICE_ROWS = [[1.0, math.sqrt(2) / 2], [math.pi / 5, -0.3, math.e / 7]]


@pytest.mark.parametrize("law", SCALES, ids=lambda law: f"{law.noise}-{law.parameter}")
@pytest.mark.parametrize("row", LATTICE_ROWS, ids=str)
def test_on_a_lattice_the_half_width_is_the_exact_least_one(law, row):
    values, masses = _enumerated(row, law)
    for level in LEVELS:
        h, exact = exact_half_width(np.array(row), law, level)
        assert exact
        assert _coverage(values, masses, h) >= level
        assert h == pytest.approx(_least_half_width(values, masses, level), abs=1e-9)


@pytest.mark.parametrize("law", SCALES, ids=lambda law: f"{law.noise}-{law.parameter}")
@pytest.mark.parametrize("row", OFF_LATTICE_ROWS, ids=str)
def test_off_a_lattice_the_half_width_covers_and_is_within_the_resolution(law, row):
    values, masses = _enumerated(row, law)
    error = math.sqrt(law.variance() * sum(c * c for c in row))
    for level in LEVELS:
        h, exact = exact_half_width(np.array(row), law, level)
        assert exact
        assert _coverage(values, masses, h) >= level
        least = _least_half_width(values, masses, level)
        assert least <= h < least + RESOLUTION * error


def test_a_single_discrete_laplace_draw_matches_its_closed_form():
    """P(|z| ≤ k) = 1 − 2q^{k+1}/(1+q): the least k reaching the level, for several scales."""
    for scale in (Fraction(1, 5), Fraction(1), Fraction(7, 2), Fraction(40)):
        q = math.exp(-1 / float(scale))
        for level in (0.5, 0.9, 0.95, 0.99):
            k = 0
            while 1 - 2 * q ** (k + 1) / (1 + q) < level:
                k += 1
            law = NoiseLaw("discrete_laplace", scale)
            assert exact_half_width(np.array([1.0]), law, level) == (k, True)


@pytest.mark.parametrize("law", SCALES, ids=lambda law: f"{law.noise}-{law.parameter}")
def test_the_bounds_cover(law):
    """The Chernoff bounds (from the standard error alone, and of the coefficients
    themselves) cover at least the level, and are no narrower than the exact width."""
    intervals = {level: Intervals(law, level) for level in LEVELS}
    for row in LATTICE_ROWS + OFF_LATTICE_ROWS:
        values, masses = _enumerated(row, law)
        error = math.sqrt(law.variance() * sum(c * c for c in row))
        for level in LEVELS:
            kappa, exact = intervals[level].factor(len(row))
            assert not exact
            magnitudes, counts = np.unique(np.abs(row), return_counts=True)
            own = _chernoff_width(magnitudes, counts, law, level)
            exact_width, _ = exact_half_width(np.array(row), law, level)
            for h in (kappa * error, own):
                assert _coverage(values, masses, h) >= level
                assert h >= exact_width - RESOLUTION * error


def test_a_wide_discrete_gaussian_gets_the_normal_quantile():
    """σ² above 2²⁴: the normal quantile plus ½‖c‖₁, which is negligible against σ."""
    law = NoiseLaw("discrete_gaussian", Fraction(2**40))
    row = np.array([0.5, -0.25, 0.25, 1.0])
    error = math.sqrt(law.variance() * float(row @ row))
    h, exact = exact_half_width(row, law, 0.95)
    quantile = float(special.ndtri(0.975))
    assert exact and quantile * error < h < quantile * error + 1e-6 * error
    kappa, exact = Intervals(law, 0.95).factor(4)
    assert exact and quantile < kappa < quantile + 1e-6


def test_equal_multisets_share_one_distribution():
    intervals = Intervals(NoiseLaw("discrete_gaussian", Fraction(2)), 0.95)
    rows = np.array([[1.0, 0.5, 0.0], [0.0, -0.5, 1.0], [0.5, 0.0, -1.0], [1.0, 1.0, 0.0]])
    widths, exact = intervals.from_rows(rows)
    assert exact.all() and widths[0] == widths[1] == widths[2] != widths[3]
    assert len(intervals._known) == 2


def test_coefficient_rows_are_the_least_squares_map_on_the_integer_noise():
    """Rows of W A_q⁺ / D for a quantized tree: the dense pseudo-inverse agrees."""
    quantized = quantize(Hierarchical(6, 3) * 0.3)
    A = quantized.matrix
    W = Prefix(6)
    dense = W.dense() @ np.linalg.pinv(A.dense()) / quantized.scale
    (first, rows), *rest = coefficient_rows(W, A, quantized.scale)
    assert first == 0 and not rest
    np.testing.assert_allclose(rows, dense, atol=1e-12)


def test_too_many_terms_to_convolve_get_the_bound():
    """A multiset past the work limit is not convolved: the Chernoff bound of its own
    coefficients, marked not exact."""
    law = NoiseLaw("discrete_laplace", Fraction(2**20))
    rng = np.random.default_rng(0)
    row = rng.uniform(0.1, 1.0, 400)
    assert exact_half_width(row, law, 0.95) is None
    (width,), (exact,) = Intervals(law, 0.95).from_rows(row[None, :])
    error = math.sqrt(law.variance() * float(row @ row))
    assert not exact and 1.96 * error < width < 3 * error


def test_a_level_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="level"):
        Intervals(NoiseLaw("discrete_gaussian", Fraction(1)), 1.0)


def test_every_enumeration_above_is_a_distribution():
    for law, row in itertools.product(SCALES, LATTICE_ROWS[:2]):
        _, masses = _enumerated(row, law)
        assert masses.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("row", [[1.0], [1.0, -1.0], [math.pi / 5, -0.3, math.e / 7]], ids=str)
def test_a_wide_discrete_laplace_agrees_with_its_integer_convolution(row, monkeypatch):
    """Past t = 2¹² the sum goes through the continuous Laplace (plus ‖c‖₁): it agrees with
    the exact convolution on the integers, within the resolution of each."""
    law = NoiseLaw("discrete_laplace", Fraction(5000))
    row = np.array(row)
    error = math.sqrt(law.variance() * float(row @ row))
    for level in LEVELS:
        wide, wide_exact = exact_half_width(row, law, level)
        monkeypatch.setattr(intervals_module, "_WIDE_LAPLACE", 1 << 30)
        integer, _ = exact_half_width(row, law, level)
        monkeypatch.undo()
        assert wide_exact and abs(wide - integer) < RESOLUTION * error


def test_a_slack_too_large_for_the_level_falls_back_to_the_bound():
    """The wide Gaussian's charge 2k · 0.1/σ² for k draws can exceed what the level leaves:
    then the Chernoff bound is published (a finite, valid half-width), not a NaN."""
    law = NoiseLaw("discrete_gaussian", Fraction(2**25))
    kappa, exact = Intervals(law, 0.999999).factor(10**6)
    assert not exact and math.isfinite(kappa) and kappa > 4.89
    assert exact_half_width(np.ones(10**6), law, 0.999999) is None


@pytest.mark.parametrize("dominant", [False, True])
@pytest.mark.parametrize(
    "law",
    [
        NoiseLaw("discrete_laplace", Fraction(20000)),
        NoiseLaw("discrete_gaussian", Fraction(12)),
        NoiseLaw("discrete_gaussian", Fraction(5000)),
    ],
    ids=["wide Laplace", "Gaussian σ² 12", "Gaussian σ² 5000"],
)
def test_the_split_bound_lies_between_the_exact_half_width_and_chernoffs(
    law: NoiseLaw, dominant: bool
) -> None:
    """Past the work budget a multiset of a wide Laplace or a discrete Gaussian summed term
    by term gets the least of the Chernoff bound and the split bound (its largest groups
    exact, the rest by their MGF or as subgaussian): never below the exact half-width, and
    tighter than Chernoff's, most where a coefficient dominates."""
    from dpmm.reconstruct.intervals import _chernoff_width, _split_half_width

    rng = np.random.default_rng(7)
    values = np.sort(rng.uniform(0.01, 1, 12))
    counts = rng.integers(1, 30, 12)
    if dominant:
        values[-1], counts[-1] = 8.0, 1
    row = np.repeat(values, counts)
    exact, _ = exact_half_width(row, law, 0.95, work_limit=math.inf)
    split = _split_half_width(values, counts, law, 0.95)
    chernoff = _chernoff_width(values, counts, law, 0.95)
    assert exact <= split < chernoff
    assert split < (1.3 if dominant else 1.35) * exact < chernoff
    intervals = Intervals(law, 0.95)
    intervals._work_left = 0.0  # the release's budget spent: the bound is published
    (width,), (flag,) = intervals.from_rows(row[None, :])
    assert width == pytest.approx(split) and not flag


def test_the_work_budget_goes_to_the_cheapest_group_first() -> None:
    """A costly group listed first no longer takes the budget for exact half-widths from a
    cheaper group after it: the groups are admitted cheapest first."""
    from dpmm.reconstruct.intervals import EXACT_BUDGET, _work

    law = NoiseLaw("discrete_laplace", Fraction(10**5))  # wide: the continuous Laplace path
    rng = np.random.default_rng(3)

    def multiset(groups: int) -> tuple[np.ndarray, np.ndarray]:
        return np.sort(rng.uniform(0.1, 1, groups)), np.ones(groups, dtype=np.int64)

    costly = [multiset(100) for _ in range(7)]
    cheap = [multiset(80)]
    # The costly group alone needs more than the budget, and leaves less than the cheap one.
    assert sum(_work(*found, law) for found in costly) > EXACT_BUDGET
    assert _work(*cheap[0], law) < sum(_work(*found, law) for found in costly)

    in_order = Intervals(law, 0.95)
    in_order.admit([costly])
    in_order.admit([cheap])  # what spending in workload order gave the cheap group
    _, (late,) = in_order.distinct(cheap)
    assert not late

    cheapest_first = Intervals(law, 0.95)
    cheapest_first.admit([costly, cheap])
    (width,), (exact,) = cheapest_first.distinct(cheap)
    assert exact
    assert width == pytest.approx(exact_half_width(np.repeat(*cheap[0]), law, 0.95)[0])
    # The costly group still gets what is left, in its own order: the first is exact.
    assert cheapest_first.distinct(costly[:1])[1].tolist() == [True]
