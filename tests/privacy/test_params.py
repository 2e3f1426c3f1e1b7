from decimal import Decimal
from fractions import Fraction

import pytest

from dpmm.errors import PrivacyParameterError
from dpmm.privacy import ZCDP, PureDP, exact_fraction, privacy_from_config


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, Fraction(1)),
        (0.1, Fraction(1, 10)),
        (1e-3, Fraction(1, 1000)),
        ("1/3", Fraction(1, 3)),
        (" 0.25 ", Fraction(1, 4)),
        ("2e-2", Fraction(1, 50)),
        (Decimal("0.3"), Fraction(3, 10)),
        (Fraction(7, 9), Fraction(7, 9)),
    ],
)
def test_exact_fraction_reads_the_number_written(value, expected):
    result = exact_fraction(value, "epsilon")
    assert isinstance(result, Fraction)
    assert result == expected


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        -0.5,
        "0",
        "-1/2",
        float("nan"),
        float("inf"),
        "inf",
        "nan",
        "abc",
        "1/0",
        True,
        None,
        [1],
        Decimal("Infinity"),
    ],
)
def test_non_positive_or_non_finite_values_are_rejected(value):
    with pytest.raises(PrivacyParameterError, match="epsilon must be a positive finite number"):
        PureDP(value)


@pytest.mark.parametrize(
    "value",
    ["1e101", "1e-101", 10**101, Fraction(1, 10**101), "1e999999999", "1e-999999999"],
)
def test_values_outside_the_range_are_rejected_without_building_them(value):
    # "1e999999999" would take minutes to turn into an exact integer.
    with pytest.raises(PrivacyParameterError, match="rho must be between 1e-100 and 1e100"):
        ZCDP(value)


@pytest.mark.parametrize("value", ["1e100", "1e-100", Fraction(1, 10**100), 10**100])
def test_the_ends_of_the_range_are_accepted_and_give_finite_noise(value):
    for privacy in (PureDP(value), ZCDP(value)):
        assert 0 < privacy.noise_variance(1.0) < float("inf")


def test_values_are_exact_and_frozen():
    privacy = ZCDP("1/3")
    assert privacy.rho == Fraction(1, 3)
    with pytest.raises(AttributeError):
        privacy.rho = Fraction(1)  # type: ignore[misc]
    assert PureDP(0.5) == PureDP("1/2")


def test_noise_variances_follow_the_design_formulas():
    # Laplace with scale Δ₁/ε has variance 2Δ₁²/ε²; Gaussian zCDP σ² = Δ₂²/(2ρ).
    assert PureDP("1/2").noise_variance(3.0) == pytest.approx(2 * 9 / 0.25)
    assert ZCDP("1/8").noise_variance(2.0) == pytest.approx(4 / 0.25)
    assert PureDP(1).norm == 1 and ZCDP(1).norm == 2


def test_to_dict_keeps_the_exact_value():
    assert PureDP(0.1).to_dict() == {"kind": "pure", "epsilon": "1/10"}
    assert ZCDP(2).to_dict() == {"kind": "zcdp", "rho": "2"}


def test_privacy_from_config_infers_or_reads_the_kind():
    assert privacy_from_config({"epsilon": 1}) == PureDP(1)
    assert privacy_from_config({"kind": "zcdp", "rho": "1/2"}) == ZCDP("1/2")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"epsilon": -1}, "privacy.epsilon must be a positive finite number, got -1"),
        ({"epsilon": "lots"}, "privacy.epsilon must be a positive finite number"),
        ({}, "privacy needs exactly one of 'epsilon' or 'rho'"),
        ({"epsilon": 1, "rho": 1}, "privacy needs exactly one of 'epsilon' or 'rho'"),
        ({"kind": "approx", "epsilon": 1}, "privacy.kind: unknown privacy kind 'approx'"),
        ({"kind": ["pure"], "epsilon": 1}, "privacy.kind: unknown privacy kind ['pure']"),
        ({"kind": "zcdp", "epsilon": 1}, "privacy.rho is required for kind 'zcdp'"),
        ({"epsilon": 1, "delta": 1e-6}, "privacy.delta: unknown key"),
        ([1], "privacy must be a mapping"),
    ],
)
def test_privacy_from_config_names_the_bad_key(section, message):
    with pytest.raises(PrivacyParameterError) as caught:
        privacy_from_config(section)
    assert message in str(caught.value)
