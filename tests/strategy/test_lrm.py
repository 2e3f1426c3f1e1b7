"""The Low-Rank Mechanism: its gradients, its ball projections, and the strategy it returns."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.error import expected_error, identity_error
from dpmm.errors import ConfigError
from dpmm.linalg import Dense
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy.l1_ball import l1_thresholds, project_columns_l1, project_columns_l2
from dpmm.strategy.lrm import complete_row_space, lrm_decomposition, lrm_strategy, select_lrm
from dpmm.strategy.lrm_solver import (
    augmented_lagrangian,
    augmented_lagrangian_gradients,
    least_squares_scale,
    update_B,
    update_L,
)
from dpmm.workload.lrm_workloads import wdiscrete, wrange, wrelated

PRIVACIES = [PureDP(1), ZCDP(1)]


def _problem(rng: np.random.Generator, m: int = 5, n: int = 7, r: int = 4):
    W = rng.normal(size=(m, n))
    return W, rng.normal(size=(m, r)), rng.normal(size=(r, n)), rng.normal(size=(m, n)), 1.7


def test_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(0)
    W, B, L, multiplier, beta = _problem(rng)
    grad_B, grad_L = augmented_lagrangian_gradients(W, B, L, multiplier, beta)
    step = 1e-6
    for point, grad, which in ((B, grad_B, "B"), (L, grad_L, "L")):
        numeric = np.zeros_like(point)
        for index in np.ndindex(point.shape):
            bump = np.zeros_like(point)
            bump[index] = step
            args = {"B": B, "L": L}
            up = dict(args, **{which: point + bump})
            down = dict(args, **{which: point - bump})
            numeric[index] = (
                augmented_lagrangian(W, up["B"], up["L"], multiplier, beta)
                - augmented_lagrangian(W, down["B"], down["L"], multiplier, beta)
            ) / (2 * step)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)


def test_update_B_is_the_minimizer() -> None:
    W, _, L, multiplier, beta = _problem(np.random.default_rng(1))
    B = update_B(W, L, multiplier, beta)
    grad_B, _ = augmented_lagrangian_gradients(W, B, L, multiplier, beta)
    assert np.abs(grad_B).max() < 1e-10
    value = augmented_lagrangian(W, B, L, multiplier, beta)
    rng = np.random.default_rng(2)
    for _ in range(5):
        other = B + 1e-3 * rng.normal(size=B.shape)
        assert augmented_lagrangian(W, other, L, multiplier, beta) > value


@pytest.mark.parametrize("norm", [1, 2])
def test_update_L_descends_and_stays_feasible(norm: int) -> None:
    W, B, L, multiplier, beta = _problem(np.random.default_rng(3))
    L = L / np.linalg.norm(L, ord=norm, axis=0).max()
    updated = update_L(W, B, L, multiplier, beta, norm=norm, tolerance=1e-10, max_steps=500)
    assert np.linalg.norm(updated, ord=norm, axis=0).max() <= 1 + 1e-12
    assert augmented_lagrangian(W, B, updated, multiplier, beta) < augmented_lagrangian(
        W, B, L, multiplier, beta
    )


def _threshold_by_bisection(column: np.ndarray, radius: float) -> float:
    low, high = 0.0, float(np.abs(column).max())
    for _ in range(200):
        middle = (low + high) / 2
        if np.maximum(np.abs(column) - middle, 0).sum() > radius:
            low = middle
        else:
            high = middle
    return high


@pytest.mark.parametrize("radius", [0.3, 1.0, 2.5])
def test_l1_projection_matches_bisection_and_kkt(radius: float) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(9, 300)) * rng.exponential(size=300)
    X[:, 0] = 0.0
    X[:, 1] = [radius, 0, 0, 0, 0, 0, 0, 0, 0]  # on the boundary: unchanged
    projected = project_columns_l1(X, radius)
    thresholds = l1_thresholds(X, radius)
    for j in range(X.shape[1]):
        inside = np.abs(X[:, j]).sum() <= radius
        expected = 0.0 if inside else _threshold_by_bisection(X[:, j], radius)
        assert thresholds[j] == pytest.approx(expected, abs=1e-9)
    norms = np.abs(projected).sum(axis=0)
    assert norms.max() <= radius * (1 + 1e-12)
    outside = np.abs(X).sum(axis=0) > radius
    np.testing.assert_allclose(norms[outside], radius, rtol=1e-12)
    np.testing.assert_array_equal(projected[:, ~outside], X[:, ~outside])
    # Optimality over a convex set: <x − p, u − p> ≤ 0 for every u in the ball, and the
    # ball is the convex hull of its vertices ±radius·e_i.
    vertices = radius * np.vstack([np.eye(9), -np.eye(9)])  # 18 × 9
    for j in range(X.shape[1]):
        direction = X[:, j] - projected[:, j]
        assert (vertices @ direction - projected[:, j] @ direction).max() <= 1e-9


def test_l2_projection_is_nearest_point() -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(4, 100)) * rng.exponential(size=100)
    projected = project_columns_l2(X)
    assert np.linalg.norm(projected, axis=0).max() <= 1 + 1e-12
    for j in range(X.shape[1]):
        samples = rng.normal(size=(200, 4))
        samples /= np.maximum(1.0, np.linalg.norm(samples, axis=1, keepdims=True))
        best = np.linalg.norm(samples - X[:, j], axis=1).min()
        assert np.linalg.norm(projected[:, j] - X[:, j]) <= best + 1e-12


def test_bad_radius_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        project_columns_l1(np.ones((2, 2)), radius=0.0)


def _workloads(rng: np.random.Generator):
    return [wdiscrete(12, 20, rng), wrange(12, 20, rng), wrelated(12, 20, 3, rng)]


@pytest.mark.parametrize("privacy", PRIVACIES, ids=["laplace", "gaussian"])
def test_strategy_has_unit_sensitivity_and_supports_the_workload(privacy) -> None:
    rng = np.random.default_rng(6)
    for W in _workloads(rng):
        A = lrm_strategy(W, privacy, max_iterations=15, rng=rng)
        assert isinstance(A, Dense)
        assert A.sensitivity(privacy.norm) == pytest.approx(1.0, abs=1e-12)
        dense_W, dense_A = W.dense(), A.dense()
        residual = dense_W - dense_W @ np.linalg.pinv(dense_A) @ dense_A
        assert np.linalg.norm(residual) <= 1e-8 * np.linalg.norm(dense_W)
        # expected_error uses exactly the sensitivity in the strategy's own norm.
        trace = np.trace(dense_W @ np.linalg.pinv(dense_A.T @ dense_A) @ dense_W.T)
        direct = privacy.noise_variance(A.sensitivity(privacy.norm)) * trace
        assert expected_error(W, A, privacy) == pytest.approx(direct, rel=1e-6)


@pytest.mark.parametrize("privacy", PRIVACIES, ids=["laplace", "gaussian"])
def test_low_rank_workload_beats_identity_widely(privacy) -> None:
    rng = np.random.default_rng(7)
    W = wrelated(32, 64, 2, rng)
    A = lrm_strategy(W, privacy, rng=rng)
    assert A.shape[0] < 10  # a handful of measured queries, not 64 cells
    assert expected_error(W, A, privacy) < 0.3 * identity_error(W, privacy)


def test_seed_error_is_never_below_least_squares() -> None:
    rng = np.random.default_rng(8)
    W = wrelated(10, 16, 3, rng)
    privacy = PureDP(1)
    decomposition = lrm_decomposition(W, privacy, max_iterations=10, rng=rng)
    start = decomposition.start
    assert np.abs(start).sum(axis=0).max() == pytest.approx(1.0)
    # For any exact B with B·start = W, ‖B‖² ≥ ‖W start⁺‖² (least squares is optimal).
    B_exact = W.dense() @ np.linalg.pinv(start)
    rows = rng.normal(size=(W.shape[0], start.shape[0]))
    null = np.eye(start.shape[0]) - start @ np.linalg.pinv(start)
    other = B_exact + rows @ null
    np.testing.assert_allclose(other @ start, W.dense(), atol=1e-9)
    assert np.sum(other**2) >= least_squares_scale(W.dense(), start) * (1 - 1e-9)
    assert decomposition.variance_error(privacy) > 0


def test_complete_row_space_appends_missing_directions() -> None:
    W = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    L = np.array([[0.5, 0.5, 0.0]])
    for norm in (1, 2):
        A = complete_row_space(W, L, norm)
        assert A.shape == (2, 3)
        assert np.linalg.norm(A, ord=norm, axis=0).max() == pytest.approx(1.0)
        np.testing.assert_allclose(W @ np.linalg.pinv(A) @ A, W, atol=1e-12)


def test_select_lrm_and_bad_arguments() -> None:
    W = Dense([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    A = select_lrm(W, PureDP(1))
    assert A.shape[1] == 4
    for bad in ({"rank": 0}, {"gamma": -1.0}, {"max_iterations": 0}, {"tolerance": 0.0}):
        with pytest.raises(ConfigError):
            lrm_strategy(W, PureDP(1), rng=np.random.default_rng(0), **bad)
    with pytest.raises(ConfigError):
        lrm_strategy(Dense(np.zeros((2, 3))), PureDP(1), rng=np.random.default_rng(0))
