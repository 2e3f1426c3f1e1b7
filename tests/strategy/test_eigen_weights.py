"""The eigen weight program: optimum, certificate, gradient, and Dask == numpy."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import scipy.optimize

from dpmm.errors import DpmmError
from dpmm.strategy.eigen_weights import KronEigenvalues, solve_weights


def primal_value(lam: np.ndarray, m: np.ndarray, x: np.ndarray, power: int) -> float:
    """``F(x) = Σ λ/x^a · max(Mx)^a`` (infinite if a positive λ gets weight 0)."""
    positive = lam > 0
    if (positive & (x <= 0)).any():
        return float("inf")
    spent = np.where(positive, lam / np.where(positive, x, 1.0) ** power, 0.0).sum()
    return float(spent * (m @ x).max() ** power)


def _problem(rng: np.random.Generator, n: int, power: int):
    q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    lam = rng.uniform(0.0, 3.0, n) ** 2
    lam[0] = 0.0  # a direction the workload never asks about
    return lam, (q * q if power == 1 else np.abs(q))


def _scipy_optimum(lam: np.ndarray, m: np.ndarray, power: int) -> float:
    positive = lam > 0

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        return (lam[positive] / x**power).sum(), -power * lam[positive] / x ** (power + 1)

    sub = m[:, positive]
    result = scipy.optimize.minimize(
        objective,
        np.full(positive.sum(), 1.0 / m.sum(axis=1).max()),
        jac=True,
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda x: 1 - sub @ x, "jac": lambda x: -sub}],
        bounds=[(1e-9, None)] * int(positive.sum()),
        options={"maxiter": 2000, "ftol": 1e-15},
    )
    return float(result.fun)


@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimum_matches_scipy_within_certified_gap(power: int, seed: int) -> None:
    lam, m = _problem(np.random.default_rng(seed), 8, power)
    solution = solve_weights(lam, [m], power, tol=1e-6, max_iter=5000)
    reference = _scipy_optimum(lam, m, power)
    assert solution.gap <= 1e-6
    assert solution.dual_bound <= reference * (1 + 1e-9)
    assert solution.objective == pytest.approx(reference, rel=2e-6)
    # The returned weights are feasible (sensitivity 1) and reach the reported objective.
    assert (m @ solution.weights).max() == pytest.approx(1.0, rel=1e-12)
    assert primal_value(lam, m, solution.weights, power) == pytest.approx(solution.objective)
    assert solution.weights[0] == 0.0


@pytest.mark.parametrize("power", [1, 2])
def test_dual_bound_holds_for_every_dual_point(power: int) -> None:
    rng = np.random.default_rng(4)
    lam, m = _problem(rng, 6, power)
    for _ in range(20):
        p = rng.uniform(0.01, 1.0, 6)
        q = m.T @ p
        s = (lam ** (1 / (power + 1)) * q ** (power / (power + 1))).sum()
        bound = s ** (power + 1) / p.sum() ** power
        x = rng.uniform(0.01, 1.0, 6)
        assert bound <= primal_value(lam, m, x, power) * (1 + 1e-12)


@pytest.mark.parametrize("power", [1, 2])
def test_update_direction_is_the_dual_gradient(power: int) -> None:
    """The update multiplies p by Mx(p), which is ((a+1)/a)·∇S(p): checked by differences."""
    rng = np.random.default_rng(9)
    lam, m = _problem(rng, 6, power)
    lam[0] = 0.5

    def dual_sum(p: np.ndarray) -> float:
        q = m.T @ p
        return float((lam ** (1 / (power + 1)) * q ** (power / (power + 1))).sum())

    p = rng.uniform(0.1, 1.0, 6)
    x = (lam / (m.T @ p)) ** (1 / (power + 1))
    gradient = power / (power + 1) * (m @ x)
    step = 1e-6
    numeric = [(dual_sum(p + step * e) - dual_sum(p - step * e)) / (2 * step) for e in np.eye(6)]
    np.testing.assert_allclose(numeric, gradient, rtol=1e-6)


def test_kron_eigenvalues_tensor() -> None:
    rng = np.random.default_rng(2)
    parts = ((rng.random(3), rng.random(4)), (rng.random(3), rng.random(4)))
    lam = KronEigenvalues((2.0, 0.5), parts)
    expected = 2.0 * np.kron(*parts[0]) + 0.5 * np.kron(*parts[1])
    np.testing.assert_allclose(lam.tensor().ravel(), expected)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(np.asarray(lam.tensor(chunks=2)).ravel(), expected)


@pytest.mark.parametrize("power", [1, 2])
def test_dask_path_equals_numpy_path(power: int) -> None:
    rng = np.random.default_rng(8)
    bases = [np.linalg.qr(rng.standard_normal((n, n)))[0] for n in (6, 5)]
    matrices = [q * q if power == 1 else np.abs(q) for q in bases]
    parts = ((rng.random(6), np.ones(5)), (np.ones(6), rng.random(5)))
    lam = KronEigenvalues((1.0, 2.0), parts)
    with dask.config.set(scheduler="threads"):
        # Same number of updates (tol 0), so any difference is the backends' arithmetic.
        eager = solve_weights(lam.tensor(), matrices, power, tol=0.0, max_iter=12)
        lazy = solve_weights(lam.tensor(chunks=2), matrices, power, tol=0.0, max_iter=12)
    assert lazy.iterations == eager.iterations == 12
    assert lazy.objective == pytest.approx(eager.objective, rel=1e-12)
    assert lazy.dual_bound == pytest.approx(eager.dual_bound, rel=1e-12)
    np.testing.assert_allclose(np.asarray(lazy.weights), eager.weights, rtol=1e-9)


def test_invalid_arguments_raise() -> None:
    m = np.eye(3)
    with pytest.raises(DpmmError):
        solve_weights(np.ones(3), [m], 3)
    with pytest.raises(DpmmError):
        solve_weights(np.zeros(3), [m], 1)
    with pytest.raises(DpmmError):
        solve_weights(np.ones(4), [m], 1)
