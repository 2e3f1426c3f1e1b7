"""The projection mechanism: feasibility, and never farther from the truth than its input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmm.baselines import noisy_total, project_measurements, projection_mechanism
from dpmm.errors import ArgumentError, PrivacyParameterError
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
        # The exact projection onto a convex set holding the truth never moves away from
        # it; the returned answers are certified within ``bound`` of the exact projection.
        assert result.bound <= result.target
        assert np.sqrt(projected) <= np.sqrt(raw) + result.bound + 1e-9
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


def test_noise_scaled_rule_is_within_its_bound_and_no_worse_in_expectation() -> None:
    """Monte Carlo: with the noise level given, on every draw the projected answers are
    within ``bound ≤ τ·√Σσ²`` of the exact projection, so never farther from the truth than
    the raw answers by more than that; on average they are much closer."""
    rng = np.random.default_rng(11)
    W = _two_way(6)
    sigma, total, tolerance = 5.0, 40, 0.05
    scale = sigma * np.sqrt(W.shape[0])
    raw, projected = [], []
    for _ in range(30):
        x = np.bincount(rng.integers(0, W.shape[1], total), minlength=W.shape[1])
        truth = W @ x
        noisy = truth + rng.normal(0.0, sigma, W.shape[0])
        result = projection_mechanism(W, noisy, total, tolerance=tolerance, noise_std=sigma)
        assert result.converged and result.bound <= result.target
        assert result.target == pytest.approx(tolerance * scale)
        assert result.x.min() >= 0.0
        assert result.x.sum() == pytest.approx(total, rel=1e-12)
        raw.append(float(np.linalg.norm(noisy - truth)))
        projected.append(float(np.linalg.norm(result.answers - truth)))
        assert projected[-1] <= raw[-1] + result.bound + 1e-9
    assert np.mean(projected) <= np.mean(raw)
    assert np.mean(np.square(projected)) < 0.5 * np.mean(np.square(raw))


def test_per_query_noise_levels_set_the_scale() -> None:
    rng = np.random.default_rng(12)
    W = Prefix(6)
    stds = np.linspace(1.0, 3.0, 6)
    noisy = rng.normal(2.0, 2.0, 6)
    result = projection_mechanism(W, noisy, 4, noise_std=stds, tolerance=0.1)
    assert result.target == pytest.approx(0.1 * np.sqrt(np.sum(stds**2)))


def test_measurement_projection_is_feasible() -> None:
    rng = np.random.default_rng(4)
    A = Identity(8)
    y = rng.normal(1.0, 2.0, 8)
    result = project_measurements(A, y, 5, noise_std=2.0)
    assert result.x.min() >= 0.0
    assert result.x.sum() == pytest.approx(5.0)
    np.testing.assert_allclose(result.answers, result.x)
    # Identity: the whitened projection is the plain simplex projection of y.
    expected = np.maximum(y - _simplex_threshold(y, 5.0), 0.0)
    np.testing.assert_allclose(result.x, expected, atol=1e-6)
    assert result.target == pytest.approx(0.01 * np.sqrt(8))


def test_measurement_projection_whitens_rows() -> None:
    """Against SLSQP on ``‖D⁻¹(A z − y)‖`` with unequal noise levels."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(13)
    A = Prefix(5)
    dense = A.dense()
    stds = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
    y = rng.normal(3.0, 2.0, 5)
    result = project_measurements(A, y, 6.0, noise_std=stds, tolerance=1e-6)
    reference = minimize(
        lambda z: float(np.sum(((dense @ z - y) / stds) ** 2)),
        np.full(5, 6.0 / 5),
        bounds=[(0, None)] * 5,
        constraints=[{"type": "eq", "fun": lambda z: z.sum() - 6.0}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    np.testing.assert_allclose(result.answers, dense @ reference.x, atol=1e-5)


def _simplex_threshold(v: np.ndarray, total: float) -> float:
    """θ with ``Σ max(v − θ, 0) = total``, by bisection (independent of the solver)."""
    low, high = v.min() - total, v.max()
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if np.maximum(v - middle, 0).sum() > total else (low, middle)
    return (low + high) / 2


def test_noisy_total_is_centred() -> None:
    rng = as_random_source(np.random.default_rng(8))
    x = np.array([10, 20, 30])
    draws = [noisy_total(x, ZCDP(2), rng=rng) for _ in range(400)]
    assert abs(np.mean(draws) - 60) < 0.2
    assert noisy_total(x, PureDP(10**6), rng=rng) == 60


def test_bad_inputs_raise_dpmm_errors() -> None:
    W = Identity(3)
    with pytest.raises(ArgumentError, match="3 values"):
        projection_mechanism(W, np.zeros(4), 2)
    with pytest.raises(ArgumentError, match="non-negative"):
        projection_mechanism(W, np.zeros(3), -1)
    with pytest.raises(ArgumentError, match=r"dpmm\.linalg"):
        projection_mechanism(np.eye(3), np.zeros(3), 1)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="noise_std"):
        projection_mechanism(W, np.zeros(3), 1, noise_std=-1.0)
    with pytest.raises(ArgumentError, match="noise_std"):
        projection_mechanism(W, np.zeros(3), 1, noise_std=np.ones(2))
    with pytest.raises(ArgumentError, match="accuracy"):
        projection_mechanism(W, np.zeros(3), 1, tolerance=0.0)
    with pytest.raises(ArgumentError, match="noise_std"):
        project_measurements(W, np.zeros(3), 1, noise_std=np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ArgumentError, match="histogram"):
        noisy_total(np.array([1.5]), ZCDP(1))
    with pytest.raises(PrivacyParameterError):
        noisy_total(np.array([1]), "rho=1")  # type: ignore[arg-type]
