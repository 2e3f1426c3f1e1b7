"""The Low-Rank Mechanism: its gradients, its ball projections, and the strategy it returns."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.error import expected_error, identity_error
from dpmm.errors import ArgumentError
from dpmm.linalg import Dense
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import lrm_solver
from dpmm.strategy.l1_ball import l1_thresholds, project_columns_l1, project_columns_l2
from dpmm.strategy.low_rank_matrix import LowRankGram, LowRankStrategy
from dpmm.strategy.lrm import (
    complete_row_space,
    completed_scale,
    lrm_decomposition,
    lrm_strategy,
    select_lrm,
)
from dpmm.strategy.lrm_solver import (
    augmented_lagrangian,
    least_squares_scale,
    mean_and_centered,
    scaled_into_balls,
    update_B,
    update_L,
    warm_start,
)
from dpmm.workload.lrm_workloads import wdiscrete, wrange, wrelated

PRIVACIES = [PureDP(1), ZCDP(1)]


def augmented_lagrangian_gradients(
    W: np.ndarray, B: np.ndarray, L: np.ndarray, multiplier: np.ndarray, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(∂J/∂B, ∂J/∂L) = (B − T Lᵀ + β B L Lᵀ, β BᵀB L − Bᵀ T)`` with ``T = βW + Π``."""
    target = beta * W + multiplier
    product = B @ L
    return B - target @ L.T + beta * product @ L.T, beta * (B.T @ product) - B.T @ target


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
def test_update_L_descends_and_stays_feasible(norm: int, monkeypatch) -> None:
    W, B, L, multiplier, beta = _problem(np.random.default_rng(3))
    L = L / np.linalg.norm(L, ord=norm, axis=0).max()
    monkeypatch.setattr(lrm_solver, "MAX_GRADIENT_STEPS", 500)
    updated = update_L(W, B, L, multiplier, beta, norm=norm, tolerance=1e-10)
    assert np.linalg.norm(updated, ord=norm, axis=0).max() <= 1 + 1e-12
    assert augmented_lagrangian(W, B, updated, multiplier, beta) < augmented_lagrangian(
        W, B, L, multiplier, beta
    )


def _thresholds_by_bisection(X: np.ndarray, radius: float) -> np.ndarray:
    """Each column's soft-threshold with L1 norm ``radius``, by bisection (all columns at once)."""
    magnitudes = np.abs(X)
    low, high = np.zeros(X.shape[1]), magnitudes.max(axis=0)
    for _ in range(200):
        middle = (low + high) / 2
        above = np.maximum(magnitudes - middle, 0).sum(axis=0) > radius
        low, high = np.where(above, middle, low), np.where(above, high, middle)
    return high


@pytest.mark.parametrize("radius", [0.3, 1.0, 2.5])
def test_l1_projection_matches_bisection_and_kkt(radius: float) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(9, 300)) * rng.exponential(size=300)
    X[:, 0] = 0.0
    X[:, 1] = [radius, 0, 0, 0, 0, 0, 0, 0, 0]  # on the boundary: unchanged
    projected = project_columns_l1(X, radius)
    thresholds = l1_thresholds(X, radius)
    inside = np.abs(X).sum(axis=0) <= radius
    expected = np.where(inside, 0.0, _thresholds_by_bisection(X, radius))
    np.testing.assert_allclose(thresholds, expected, atol=1e-9)
    norms = np.abs(projected).sum(axis=0)
    assert norms.max() <= radius * (1 + 1e-12)
    outside = np.abs(X).sum(axis=0) > radius
    np.testing.assert_allclose(norms[outside], radius, rtol=1e-12)
    np.testing.assert_array_equal(projected[:, ~outside], X[:, ~outside])
    # Optimality over a convex set: <x − p, u − p> ≤ 0 for every u in the ball, and the
    # ball is the convex hull of its vertices ±radius·e_i.
    vertices = radius * np.vstack([np.eye(9), -np.eye(9)])  # 18 × 9
    directions = X - projected
    slack = vertices @ directions - np.einsum("ij,ij->j", projected, directions)
    assert slack.max() <= 1e-9


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


def test_bad_radius_is_an_argument_error() -> None:
    with pytest.raises(ArgumentError):
        project_columns_l1(np.ones((2, 2)), radius=0.0)


def _workloads(rng: np.random.Generator):
    return [wdiscrete(12, 20, rng), wrange(12, 20, rng), wrelated(12, 20, 3, rng)]


@pytest.mark.parametrize("privacy", PRIVACIES, ids=["laplace", "gaussian"])
def test_strategy_has_unit_sensitivity_and_supports_the_workload(privacy) -> None:
    rng = np.random.default_rng(6)
    for W in _workloads(rng):
        A = lrm_strategy(W, privacy, max_iterations=15, rng=rng)
        assert isinstance(A, LowRankStrategy)
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
    assert isinstance(A, Dense) and A.shape[1] == 4  # serializable as every method's strategy
    for bad in ({"rank": 0}, {"gamma": -1.0}, {"max_iterations": 0}, {"tolerance": 0.0}):
        with pytest.raises(ArgumentError):
            lrm_strategy(W, PureDP(1), rng=np.random.default_rng(0), **bad)
    with pytest.raises(ArgumentError):
        lrm_strategy(Dense(np.zeros((2, 3))), PureDP(1), rng=np.random.default_rng(0))


def test_warm_start_is_exact_and_stationary_in_B() -> None:
    rng = np.random.default_rng(9)
    W = wrelated(8, 15, 3, rng).dense()
    L = rng.normal(size=(5, 15))
    L[:3] = np.linalg.svd(W)[2][:3]  # W's row space inside L's
    B, multiplier = warm_start(W, L)
    np.testing.assert_allclose(B @ L, W, atol=1e-10)
    np.testing.assert_allclose(B, W @ np.linalg.pinv(L), atol=1e-10)
    # With the KKT multiplier the B-step keeps B at any penalty.
    for beta in (0.1, 10.0, 1e4):
        np.testing.assert_allclose(update_B(W, L, multiplier, beta), B, atol=1e-8)


@pytest.mark.parametrize("norm", [1, 2])
def test_decomposition_meets_relaxation_and_balls(norm: int) -> None:
    rng = np.random.default_rng(10)
    W = wrelated(16, 24, 3, rng)
    privacy = PureDP(1) if norm == 1 else ZCDP(1)
    gamma = 0.01
    decomposition = lrm_decomposition(W, privacy, gamma=gamma, max_iterations=80, rng=rng)
    assert decomposition.residual <= gamma
    dense = W.dense()
    assert np.linalg.norm(dense - decomposition.B @ decomposition.L) == pytest.approx(
        decomposition.residual
    )
    assert np.linalg.norm(decomposition.L, ord=norm, axis=0).max() <= 1 + 1e-9
    # The kept iterate is never worse than the exact start (the score is monotone).
    start_score = completed_scale(dense, decomposition.start, norm)
    assert decomposition.best_score <= start_score
    assert decomposition.best_score == pytest.approx(
        completed_scale(dense, decomposition.best, norm)
    )


def test_iterations_improve_on_the_scaled_svd_start() -> None:
    # WRelated with r < n: the start is the scaled SVD; Algorithm 1 must lower the exact
    # least-squares error of the completed strategy (the seed's B·L of Lemma 1 too).
    rng = np.random.default_rng(11)
    W = wrelated(24, 48, 3, rng)
    privacy = PureDP(1)
    decomposition = lrm_decomposition(W, privacy, max_iterations=30, rng=rng)
    start = completed_scale(W.dense(), decomposition.start, 1)
    assert decomposition.best_score < 0.9 * start
    A = lrm_strategy(W, privacy, max_iterations=30, rng=np.random.default_rng(11))
    assert expected_error(W, A, privacy) <= privacy.noise_variance(1.0) * start


def _dense_pinv_cases(rng: np.random.Generator):
    yield rng.normal(size=(3, 9))
    yield rng.normal(size=(4, 2)) @ rng.normal(size=(2, 11))  # rank-deficient
    yield rng.normal(size=(6, 6))
    square = rng.normal(size=(5, 7))
    square[2] = 0.0
    yield square


def test_low_rank_strategy_matches_dense_operations() -> None:
    rng = np.random.default_rng(12)
    for array in _dense_pinv_cases(rng):
        A = LowRankStrategy(array)
        np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(array), atol=1e-10)
        gram = A.gram()
        assert isinstance(gram, LowRankGram)
        np.testing.assert_allclose(gram.dense(), array.T @ array, atol=1e-10)
        np.testing.assert_allclose(
            gram.pinv().dense(), np.linalg.pinv(array.T @ array), rtol=1e-7, atol=1e-8
        )
        np.testing.assert_allclose(gram.diagonal(), np.diag(array.T @ array), atol=1e-10)
        np.testing.assert_allclose(A.column_norms(1), np.abs(array).sum(axis=0))
        x = rng.normal(size=array.shape[1])
        np.testing.assert_allclose(A @ x, array @ x)
        y = rng.normal(size=array.shape[0])
        np.testing.assert_allclose(A.rmatvec(y), array.T @ y)
        W = Dense(rng.normal(size=(4, 3)) @ array[:3])  # inside A's row space
        for privacy in PRIVACIES:
            assert expected_error(W, A, privacy) == pytest.approx(
                expected_error(W, Dense(array), privacy), rel=1e-8
            )
        projector = A.row_space_projector().dense()
        np.testing.assert_allclose(projector, np.linalg.pinv(array) @ array, atol=1e-10)


def test_mean_and_centered_start_is_exact_and_flat_in_n() -> None:
    # WDiscrete is a common all-(−1) part plus sparse +2 entries: measuring the mean query
    # and the centred queries keeps the error per query nearly flat in n, unlike identity.
    rng = np.random.default_rng(13)
    errors = []
    for n in (512, 2048):
        W = wdiscrete(16, n, rng).dense()
        L = mean_and_centered(W, 1)
        weight = L[0] @ W.mean(axis=0) / (W.mean(axis=0) @ W.mean(axis=0))
        B = np.hstack([np.ones((16, 1)) / weight, np.eye(16)])
        np.testing.assert_allclose(B @ L, W, atol=1e-9)
        errors.append(least_squares_scale(W, scaled_into_balls(L, 1)) / 16)
        assert errors[-1] < 0.5 * n  # identity's error per query (unit variance) is n
    assert errors[1] < 1.5 * errors[0]
