"""The projection mechanism: feasibility, and never farther from the truth than its input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmm.baselines import noisy_total, project_measurements, projection_mechanism
from dpmm.errors import ConfigError, PrivacyParameterError
from dpmm.linalg import Identity, Marginals, Prefix
from dpmm.privacy import ZCDP, PureDP
from dpmm.privacy.randomness import as_random_source


def _two_way(d: int) -> Marginals:
    return Marginals((2,) * d, {pair: 1.0 for pair in itertools.combinations(range(d), 2)})


def test_output_is_feasible_and_closer_to_the_truth_on_every_draw() -> None:
    rng = np.random.default_rng(3)
    W = _two_way(5)
    total = 30
    raw_errors, projected_errors = [], []
    for _ in range(6):
        x = np.bincount(rng.integers(0, W.shape[1], total), minlength=W.shape[1])
        truth = W @ x
        noisy = truth + rng.normal(0.0, 4.0, W.shape[0])
        result = projection_mechanism(W, noisy, total)
        assert result.converged
        assert result.x.min() >= 0.0
        assert result.x.sum() == pytest.approx(total, rel=1e-12)
        np.testing.assert_allclose(result.answers, W @ result.x)
        raw = float(np.sum((noisy - truth) ** 2))
        projected = float(np.sum((result.answers - truth) ** 2))
        # Projection onto a convex set holding the truth never moves away from it.
        assert projected <= raw * (1 + 1e-9)
        raw_errors.append(raw)
        projected_errors.append(projected)
    # Small n: the projected answers are several times more accurate on average.
    assert np.mean(projected_errors) < 0.5 * np.mean(raw_errors)


def test_projection_matches_a_reference_solver() -> None:
    """Against scipy's SLSQP on the same small simplex-constrained least squares."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(9)
    W = Prefix(5)
    dense = W.dense()
    noisy = rng.normal(3.0, 3.0, 5)
    total = 7.0
    result = projection_mechanism(W, noisy, total)
    reference = minimize(
        lambda z: float(np.sum((dense @ z - noisy) ** 2)),
        np.full(5, total / 5),
        jac=lambda z: 2 * dense.T @ (dense @ z - noisy),
        bounds=[(0, None)] * 5,
        constraints=[{"type": "eq", "fun": lambda z: z.sum() - total}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    objective = float(np.sum((result.answers - noisy) ** 2))
    assert objective <= reference.fun + 1e-7


def test_measurement_projection_is_feasible() -> None:
    rng = np.random.default_rng(4)
    A = Identity(8)
    y = rng.normal(1.0, 2.0, 8)
    result = project_measurements(A, y, 5, noise_std=2.0)
    assert result.x.min() >= 0.0
    assert result.x.sum() == pytest.approx(5.0)


def test_noisy_total_is_centred() -> None:
    rng = as_random_source(np.random.default_rng(8))
    x = np.array([10, 20, 30])
    draws = [noisy_total(x, ZCDP(2), rng=rng) for _ in range(400)]
    assert abs(np.mean(draws) - 60) < 0.2
    assert noisy_total(x, PureDP(10**6), rng=rng) == 60


def test_bad_inputs_raise_dpmm_errors() -> None:
    W = Identity(3)
    with pytest.raises(ConfigError, match="3 values"):
        projection_mechanism(W, np.zeros(4), 2)
    with pytest.raises(ConfigError, match="non-negative"):
        projection_mechanism(W, np.zeros(3), -1)
    with pytest.raises(ConfigError, match=r"dpmm\.linalg"):
        projection_mechanism(np.eye(3), np.zeros(3), 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="histogram"):
        noisy_total(np.array([1.5]), ZCDP(1))
    with pytest.raises(PrivacyParameterError):
        noisy_total(np.array([1]), "rho=1")  # type: ignore[arg-type]
