"""WNNLS and isotonic regression: feasible, and never farther from the truth than LS."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from dpmm.linalg import AllRange, Hierarchical, Identity, Prefix
from dpmm.reconstruct import (
    WorkloadAnswers,
    isotonic,
    least_squares,
    workload_answers,
    workload_nnls,
)


def _data(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.poisson(3, n) * (rng.random(n) < 0.25)


def test_workload_nnls_is_feasible_optimal_and_closer_to_truth() -> None:
    rng = np.random.default_rng(20)
    W, A = AllRange(32), Hierarchical(32, 2)
    for _ in range(4):
        truth = _data(rng, 32)
        y = A @ truth + rng.laplace(0, 8, A.shape[0])
        ls = least_squares(A, y).x
        estimate = workload_nnls(W, A, y, tolerance=1e-10)
        assert estimate.converged and estimate.x.min() >= 0
        # Its own objective: the dense NNLS of W x ≈ W x̂ agrees.
        reference = scipy.optimize.nnls(W.dense(), W @ ls)[0]
        objective = np.linalg.norm(W @ (estimate.x - ls))
        assert objective <= np.linalg.norm(W @ (reference - ls)) * (1 + 1e-7) + 1e-9
        # W x̃ is a projection onto a convex set holding W x_true.
        assert np.linalg.norm(W @ (estimate.x - truth)) <= np.linalg.norm(W @ (ls - truth)) + 1e-8


def test_workload_nnls_with_total() -> None:
    rng = np.random.default_rng(21)
    W, A = Prefix(16), Identity(16)
    y = _data(rng, 16) + rng.laplace(0, 3, 16)
    estimate = workload_nnls(W, A, y, total=20.0, tolerance=1e-10)
    assert estimate.x.min() >= 0 and estimate.x.sum() == pytest.approx(20.0)


def test_isotonic_is_monotone_and_never_farther_from_monotone_truth() -> None:
    rng = np.random.default_rng(22)
    W, A = Prefix(64), Hierarchical(64, 4)
    for _ in range(5):
        truth = W @ _data(rng, 64)
        estimate = least_squares(
            A,
            A @ np.linalg.solve(W.dense(), truth) + rng.laplace(0, 5, A.shape[0]),
            noise_std=5 * np.sqrt(2),
        )
        answers = workload_answers(W, A, estimate)
        fitted = isotonic(answers)
        assert isinstance(fitted, WorkloadAnswers)
        assert np.all(np.diff(fitted.values) >= -1e-9)
        assert fitted.method == "isotonic" and not fitted.exact_errors
        weights = 1 / answers.standard_errors**2
        before = np.sum(weights * (answers.values - truth) ** 2)
        after = np.sum(weights * (fitted.values - truth) ** 2)
        assert after <= before + 1e-8


def test_isotonic_on_a_vector_and_decreasing() -> None:
    values = np.array([5.0, 6.0, 4.0, 1.0])
    np.testing.assert_allclose(isotonic(values), [4.0, 4.0, 4.0, 4.0])
    np.testing.assert_allclose(isotonic(values, increasing=False), [5.5, 5.5, 4.0, 1.0])
