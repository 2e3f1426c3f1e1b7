"""Gaussian and factorization mechanisms: noise scale, both error measures, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.baselines import (
    Factorization,
    factorization_mechanism,
    gaussian_mechanism,
    identity_factorization,
    mean_squared_error,
    strategy_factorization,
    worst_case_error,
    worst_case_strategy,
)
from dpmm.error import expected_error
from dpmm.errors import PrivacyParameterError, UnsupportedQueryError
from dpmm.linalg import Dense, Hierarchical, Identity, Prefix
from dpmm.measure import MeasurementError
from dpmm.privacy import ZCDP, PureDP
from dpmm.privacy.randomness import as_random_source


def test_gaussian_mechanism_noise_matches_its_calibration() -> None:
    W = Prefix(6)  # Δ₂² = 6
    x = np.array([3, 0, 2, 5, 1, 4])
    privacy = ZCDP("1/4")
    rng = as_random_source(np.random.default_rng(0))
    draws = np.array([gaussian_mechanism(W, x, privacy, rng=rng).values for _ in range(300)])
    first = gaussian_mechanism(W, x, privacy, rng=rng)
    assert first.sigma2 == 12  # 6 / (2 · 1/4)
    assert first.guarantee.privacy == privacy
    errors = draws - W @ x
    assert abs(errors.mean()) < 0.2
    assert errors.var() == pytest.approx(12, rel=0.1)


def test_factorization_mechanism_error_matches_both_measures() -> None:
    W = Prefix(8)
    f = worst_case_strategy(W)
    x = np.arange(8)
    privacy = ZCDP(2)
    rng = as_random_source(np.random.default_rng(1))
    draws = np.array([factorization_mechanism(f, x, privacy, rng=rng).values for _ in range(250)])
    errors = draws - W @ x
    assert np.mean(errors**2) == pytest.approx(mean_squared_error(f, privacy), rel=0.1)
    # The worst-case bound holds for the mean of the largest error (and is not loose by 3x).
    largest = np.abs(errors).max(axis=1).mean()
    assert largest <= worst_case_error(f, privacy) <= 3 * largest


def test_matrix_mechanism_factorization_matches_expected_error() -> None:
    W, A = Prefix(16), Hierarchical(16, 2)
    privacy = ZCDP(1)
    f = strategy_factorization(W, A)
    np.testing.assert_allclose((f.R @ A.dense()), W.dense(), atol=1e-9)
    assert mean_squared_error(f, privacy) == pytest.approx(
        expected_error(W, A, privacy) / 16, rel=1e-9
    )
    gaussian = identity_factorization(W)
    assert mean_squared_error(gaussian, privacy) == pytest.approx(16 / 2)


def test_worst_case_strategy_has_the_least_worst_case_error() -> None:
    W = Prefix(16)
    privacy = ZCDP(1)
    best = worst_case_error(worst_case_strategy(W), privacy)
    for other in (identity_factorization(W), strategy_factorization(W, Hierarchical(16, 2))):
        assert best < worst_case_error(other, privacy)
    assert best < worst_case_error(Factorization(W, Identity(16)), privacy)


def test_bad_inputs_raise_dpmm_errors() -> None:
    W = Prefix(3)
    with pytest.raises(PrivacyParameterError, match="ZCDP"):
        gaussian_mechanism(W, np.ones(3, dtype=int), PureDP(1))
    with pytest.raises(UnsupportedQueryError, match="3 counts"):
        gaussian_mechanism(W, np.ones(4, dtype=int), ZCDP(1))
    with pytest.raises(UnsupportedQueryError, match="non-negative integer"):
        gaussian_mechanism(W, np.array([1, -1, 0]), ZCDP(1))
    with pytest.raises(MeasurementError):
        gaussian_mechanism(Dense([[0.5, 1, 0]]), np.ones(3, dtype=int), ZCDP(1))
    with pytest.raises(UnsupportedQueryError, match="rows"):
        Factorization(Identity(2), Identity(3))
    with pytest.raises(UnsupportedQueryError, match=r"dpmm\.linalg"):
        Factorization(np.eye(2), Identity(2))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match="columns"):
        strategy_factorization(W, Identity(4))
