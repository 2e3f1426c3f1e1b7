"""NNLS against scipy.optimize.nnls, its KKT conditions, known totals and the projection bound."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from dpmm.linalg import AllRange, Dense, Haar, Hierarchical, Identity, Kron, Matrix, Prefix, VStack
from dpmm.reconstruct import least_squares, nnls
from dpmm.reconstruct.projected_gradient import project

CASES = [
    lambda rng: Dense(rng.normal(size=(30, 12))),
    lambda rng: Dense(np.abs(rng.normal(size=(25, 25)))),
    lambda rng: Hierarchical(32, 2),
    lambda rng: Haar(16),
    lambda rng: AllRange(16),
    lambda rng: Kron([Hierarchical(6, 2), Prefix(4)]),
    lambda rng: VStack([Identity(10), Prefix(10)]),
]


def _sparse_counts(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.poisson(4, n) * (rng.random(n) < 0.3)


def _kkt_violation(A: np.ndarray, y: np.ndarray, x: np.ndarray) -> float:
    gradient = A.T @ (A @ x - y)
    scale = np.linalg.norm(A.T @ y)
    return float(np.linalg.norm(np.where(x > 0, gradient, np.minimum(gradient, 0))) / scale)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_nnls_matches_scipy_and_satisfies_kkt(case: int) -> None:
    rng = np.random.default_rng(case)
    A = CASES[case](rng)
    dense = A.dense()
    y = dense @ _sparse_counts(rng, A.shape[1]) + rng.laplace(0, 2, A.shape[0])
    estimate = nnls(A, y, tolerance=1e-10)
    assert estimate.converged and estimate.x.min() >= 0
    reference = scipy.optimize.nnls(dense, y)[0]
    assert np.abs(estimate.x - reference).max() <= 1e-6 * max(1.0, np.abs(reference).max())
    assert _kkt_violation(dense, y, estimate.x) < 1e-8


@pytest.mark.parametrize("total", [0.0, 3.0, 250.0])
def test_known_total_is_respected_and_optimal(total: float) -> None:
    rng = np.random.default_rng(7)
    A = Hierarchical(24, 3)
    y = A @ _sparse_counts(rng, 24) + rng.laplace(0, 3, A.shape[0])
    estimate = nnls(A, y, total=total, tolerance=1e-10)
    assert estimate.x.min() >= 0
    assert estimate.x.sum() == pytest.approx(total, abs=1e-9)
    # KKT on the scaled simplex: gradient equals a constant μ on the support, ≥ μ off it.
    dense = A.dense()
    gradient = dense.T @ (dense @ estimate.x - y)
    if total > 0:
        support = estimate.x > 1e-9
        mu = gradient[support].mean()
        scale = np.linalg.norm(dense.T @ y)
        assert np.abs(gradient[support] - mu).max() < 1e-7 * scale
        assert gradient[~support].min(initial=np.inf) > mu - 1e-7 * scale


def test_estimated_total_is_the_least_squares_total() -> None:
    rng = np.random.default_rng(11)
    A = Hierarchical(32, 2)
    y = A @ _sparse_counts(rng, 32) + rng.laplace(0, 4, A.shape[0])
    ls_total = least_squares(A, y).x.sum()
    estimate = nnls(A, y, total="estimated", tolerance=1e-10)
    assert estimate.x.sum() == pytest.approx(max(ls_total, 0.0), abs=1e-8)
    # An estimated total is not a known one: its error is the least-squares total's.
    assert estimate.total is None
    # Constraining to the estimated total is the same as passing that number.
    fixed = nnls(A, y, total=max(float(ls_total), 0.0), tolerance=1e-10)
    assert fixed.total == pytest.approx(max(ls_total, 0.0))
    np.testing.assert_allclose(estimate.x, fixed.x, atol=1e-8)
    assert least_squares(A, y, total="estimated").total is None


def test_estimated_total_lowers_range_error_on_sparse_data() -> None:
    # Seed 000's point on sparse data: NNLS clips the many empty cells upwards, and the
    # bias adds up over long ranges; the least-squares total removes it.
    rng = np.random.default_rng(5)
    n = 256
    truth = np.zeros(n)
    truth[rng.choice(n, 8, replace=False)] = rng.integers(50, 400, 8)
    A, W = Hierarchical(n, 4), AllRange(n)
    gram = W.gram().dense()
    errors = {"ls": [], "nnls": [], "estimated": []}
    for _ in range(10):
        y = A @ truth + rng.laplace(0, 30, A.shape[0])
        for name, x in (
            ("ls", least_squares(A, y).x),
            ("nnls", nnls(A, y).x),
            ("estimated", nnls(A, y, total="estimated").x),
        ):
            errors[name].append((x - truth) @ gram @ (x - truth))
    mean = {name: float(np.mean(values)) for name, values in errors.items()}
    assert mean["estimated"] < 0.7 * min(mean["ls"], mean["nnls"])


def test_nnls_is_never_farther_from_the_truth_than_least_squares_in_strategy_space() -> None:
    # A x_nnls is the projection of A x_ls onto the cone {A x : x ≥ 0}, which holds A x_true.
    rng = np.random.default_rng(8)
    A = Hierarchical(64, 4)
    for _ in range(5):
        truth = _sparse_counts(rng, 64)
        y = A @ truth + rng.laplace(0, 10, A.shape[0])
        ls, nn = least_squares(A, y).x, nnls(A, y, tolerance=1e-10).x
        assert np.linalg.norm(A @ (nn - truth)) <= np.linalg.norm(A @ (ls - truth)) + 1e-8


def test_weighted_nnls_matches_scipy_on_whitened_problem() -> None:
    rng = np.random.default_rng(9)
    A = VStack([Identity(12), Hierarchical(12, 2)])
    std = np.concatenate([np.full(12, 3.0), np.full(A.shape[0] - 12, 0.5)])
    y = A @ _sparse_counts(rng, 12) + rng.normal(0, std)
    estimate = nnls(A, y, noise_std=std, tolerance=1e-11)
    reference = scipy.optimize.nnls(A.dense() / std[:, None], y / std)[0]
    np.testing.assert_allclose(estimate.x, reference, atol=1e-6)


def test_identity_kron_nnls_is_the_clipped_measurement() -> None:
    rng = np.random.default_rng(10)
    A = Kron([Identity(5), Identity(4)])
    y = rng.normal(size=20)
    np.testing.assert_array_equal(nnls(A, y).x, np.maximum(y, 0))


def test_projection_onto_the_scaled_simplex_matches_sorting_formula() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        v, total = rng.normal(size=50) * 3, float(rng.uniform(0.1, 20))
        # Reference: the classical sort-based threshold.
        u = np.sort(v)[::-1]
        cumulative = np.cumsum(u) - total
        k = np.nonzero(u - cumulative / np.arange(1, 51) > 0)[0][-1]
        expected = np.maximum(v - cumulative[k] / (k + 1), 0)
        np.testing.assert_allclose(project(v, total), expected, atol=1e-12)


def test_iteration_limit_is_reported_as_not_converged() -> None:
    rng = np.random.default_rng(12)
    A: Matrix = AllRange(64)
    y = A @ _sparse_counts(rng, 64) + rng.laplace(0, 30, A.shape[0])
    estimate = nnls(A, y, tolerance=1e-14, max_iterations=3)
    assert estimate.iterations == 3 and not estimate.converged
    assert estimate.residual > 1e-14
