"""The discrete Gaussian at large σ (quantized strategies): exact, in int64, and fast."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpmm.privacy import samplers
from dpmm.privacy.accounting import discrete_gaussian_zcdp, gaussian_sigma2
from dpmm.privacy.params import ZCDP
from dpmm.privacy.samplers import _gaussian_parameters, discrete_gaussian, sampler_sigma2

LARGE = Fraction(9_000_000_000_000_002)  # Δ₂² of a quantized Kronecker strategy


def test_small_variances_are_unchanged() -> None:
    for sensitivity, rho in [(3, "1/2"), (14, "1/2"), (10**6, "1/3"), (7, "0.1")]:
        exact = Fraction(sensitivity) / (2 * Fraction(rho))
        assert gaussian_sigma2(sensitivity, ZCDP(rho)) == exact


def test_a_large_variance_is_rounded_up_by_less_than_one_over_sigma() -> None:
    exact = LARGE / 2
    rounded = gaussian_sigma2(LARGE, ZCDP(1))
    assert rounded >= exact
    assert (rounded - exact) / exact < 1 / math.sqrt(exact)
    assert _gaussian_parameters(rounded.numerator, rounded.denominator) is not None
    assert _gaussian_parameters(exact.numerator, exact.denominator) is None
    # The guarantee is computed for the rounded σ², and is within the budget.
    assert discrete_gaussian_zcdp(rounded, LARGE, 10**8).privacy.rho <= 1


def test_rounding_is_idempotent() -> None:
    rounded = sampler_sigma2(Fraction(LARGE, 3))
    assert sampler_sigma2(rounded) == rounded


def test_large_sigma_is_sampled_in_batches_with_the_right_scale(monkeypatch) -> None:
    def refuse(*args: object) -> int:
        raise AssertionError("the one-at-a-time Python path was used")

    monkeypatch.setattr(samplers, "_gaussian_one", refuse)
    sigma2 = gaussian_sigma2(LARGE, ZCDP(1))
    values = discrete_gaussian(sigma2, 1_000_000, rng=np.random.default_rng(11))
    scale = float(sigma2)
    standard_error = math.sqrt(2 / values.size)  # of the variance ratio
    ratio = float(np.var(values.astype(np.float64))) / scale
    assert abs(ratio - 1) < 5 * standard_error
    assert abs(values.mean()) < 5 * math.sqrt(scale / values.size)
    # A 1% wrong scale would be caught by the same check.
    assert abs(ratio / 1.01 - 1) > 5 * standard_error
    # The tail matches a Gaussian: about 4.55% beyond 2σ.
    beyond = np.mean(np.abs(values) > 2 * math.sqrt(scale))
    assert abs(beyond - 0.0455) < 0.002


@pytest.mark.parametrize("sigma2", [Fraction(14), Fraction(49, 9), Fraction(10**6, 3)])
def test_the_reduced_exponent_equals_the_unreduced_one(sigma2: Fraction) -> None:
    p, q = sigma2.numerator, sigma2.denominator
    t, a, b, denominator = _gaussian_parameters(p, q)
    for magnitude in range(0, 60 * t, max(1, t // 7)):
        reduced = Fraction((magnitude * a - b) ** 2, denominator)
        direct = (magnitude - sigma2 / t) ** 2 / (2 * sigma2)
        assert reduced == direct
