"""The exact exponential mechanism: its output distribution and its input checks."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpmm.baselines import (
    exponential_mechanism,
    grid_scores,
    rounded_sensitivity,
)
from dpmm.errors import ArgumentError, PrivacyParameterError
from dpmm.privacy.randomness import as_random_source


def test_distribution_matches_exp_of_scaled_scores() -> None:
    scores = [Fraction(0), Fraction(1), Fraction(5, 2), Fraction(3)]
    epsilon, sensitivity = Fraction(1), Fraction(1, 2)
    rng = as_random_source(np.random.default_rng(11))  # one buffered source
    draws = 4000
    counts = np.bincount(
        [
            exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)
            for _ in range(draws)
        ],
        minlength=len(scores),
    )
    expected = np.exp([float(epsilon * s / (2 * sensitivity)) for s in scores])
    expected = expected / expected.sum()
    _, p_value = stats.chisquare(counts, draws * expected)
    assert p_value > 1e-3


def test_chi_square_detects_a_wrong_epsilon() -> None:
    """The same check rejects draws made at twice the ε: the test has power."""
    scores = [Fraction(0), Fraction(1), Fraction(2)]
    rng = as_random_source(np.random.default_rng(5))
    draws = 4000
    counts = np.bincount(
        [exponential_mechanism(scores, epsilon=2, sensitivity=1, rng=rng) for _ in range(draws)],
        minlength=3,
    )
    wrong = np.exp([float(s) / 2 for s in scores])  # the distribution at ε = 1
    wrong = wrong / wrong.sum()
    _, p_value = stats.chisquare(counts, draws * wrong)
    assert p_value < 1e-6


def test_grid_rounding_and_its_sensitivity() -> None:
    assert grid_scores(np.array([0.124, -0.126, 2.0]), grid=4) == [
        Fraction(0),
        Fraction(-1, 4),
        Fraction(2),
    ]
    assert rounded_sensitivity(Fraction(1, 2), grid=8) == Fraction(5, 8)


def test_bad_inputs_raise_dpmm_errors() -> None:
    with pytest.raises(ArgumentError, match="at least one"):
        exponential_mechanism([], epsilon=1, sensitivity=1)
    with pytest.raises(ArgumentError, match="exact rationals"):
        exponential_mechanism([0.5, 1.0], epsilon=1, sensitivity=1)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        exponential_mechanism([1, 2], epsilon=-1, sensitivity=1)
    with pytest.raises(PrivacyParameterError, match="sensitivity"):
        exponential_mechanism([1, 2], epsilon=1, sensitivity=0)
    with pytest.raises(ArgumentError, match="grid"):
        grid_scores([1.0], grid=0)
    with pytest.raises(ArgumentError, match="finite"):
        grid_scores([np.nan], grid=2)
