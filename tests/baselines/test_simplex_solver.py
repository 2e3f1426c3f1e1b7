"""Least squares over a scaled simplex: the certified bound, feasibility, the pieces."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from dpmm.baselines import simplex_solver
from dpmm.baselines.simplex_solver import SimplexLeastSquares, project_simplex
from dpmm.errors import ArgumentError
from dpmm.linalg import Dense, Marginals, Prefix


def _two_way(d: int) -> Marginals:
    return Marginals((2,) * d, {pair: 1.0 for pair in itertools.combinations(range(d), 2)})


def _reference(dense: np.ndarray, Y: np.ndarray, total: float) -> np.ndarray:
    """The exact projection's answers by SLSQP (the answers are unique; z need not be)."""
    cols = dense.shape[1]
    result = minimize(
        lambda z: 0.5 * float(np.sum((dense @ z - Y) ** 2)),
        np.full(cols, total / cols),
        jac=lambda z: dense.T @ (dense @ z - Y),
        bounds=[(0, None)] * cols,
        constraints=[{"type": "eq", "fun": lambda z: z.sum() - total}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    return dense @ result.x


def _check_feasible(x: np.ndarray, total: float) -> None:
    assert x.min() >= 0.0
    assert x.sum() == pytest.approx(total, rel=1e-12, abs=1e-12)


def test_simplex_projection_matches_the_kkt_conditions() -> None:
    rng = np.random.default_rng(1)
    for total in (0.5, 3.0, 40.0):
        v = rng.normal(0.0, 5.0, 30)
        p = project_simplex(v, total)
        _check_feasible(p, total)
        # KKT: p = max(v − θ, 0) for one θ; on the support v − p is that constant θ.
        support = p > 0
        theta = (v - p)[support]
        np.testing.assert_allclose(theta, theta[0], atol=1e-12)
        assert np.all(v[~support] <= theta[0] + 1e-12)


@pytest.mark.parametrize("polish", [True, False])
def test_certified_bound_holds_against_a_reference_solver(
    polish: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distance to SLSQP's exact projection is at most the reported bound.

    Without polishing FISTA stops as soon as the loose target is certified, so the bound
    is near the target and the comparison is not vacuous.
    """
    if not polish:
        monkeypatch.setattr(simplex_solver, "FIRST_POLISH", 10**9)
    rng = np.random.default_rng(7)
    W = _two_way(4)
    dense = W.dense()
    solver = SimplexLeastSquares(W)
    for total in (5.0, 60.0):
        x = np.bincount(rng.integers(0, 16, int(total)), minlength=16).astype(float)
        Y = dense @ x + rng.normal(0.0, 3.0, W.shape[0])
        scale = 3.0 * np.sqrt(W.shape[0])
        fit = solver.solve(Y, total, scale=scale, accuracy=0.2)
        assert fit.converged and fit.bound <= fit.target == pytest.approx(0.2 * scale)
        _check_feasible(fit.x, total)
        np.testing.assert_allclose(fit.answers, dense @ fit.x)
        reference = _reference(dense, Y, total)
        assert float(np.linalg.norm(fit.answers - reference)) <= fit.bound + 1e-6
        # The gap is a certificate: it bounds the objective's excess over the optimum.
        excess = 0.5 * (np.sum((fit.answers - Y) ** 2) - np.sum((reference - Y) ** 2))
        assert excess <= fit.gap + 1e-9


def test_tight_solve_agrees_with_the_reference_on_a_general_matrix() -> None:
    rng = np.random.default_rng(3)
    array = rng.normal(0.0, 1.0, (6, 9))
    Y = rng.normal(0.0, 4.0, 6)
    fit = SimplexLeastSquares(Dense(array)).solve(Y, 2.5, accuracy=1e-7)
    assert fit.converged
    _check_feasible(fit.x, 2.5)
    np.testing.assert_allclose(fit.answers, _reference(array, Y, 2.5), atol=1e-5)


def test_implicit_matrices_are_solved_without_the_array_polish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simplex_solver, "DENSE_LIMIT", 0)
    rng = np.random.default_rng(5)
    W = Prefix(12)
    Y = rng.normal(4.0, 3.0, 12)
    fit = SimplexLeastSquares(W).solve(Y, 6.0, scale=3.0 * np.sqrt(12), accuracy=0.01)
    assert fit.converged
    _check_feasible(fit.x, 6.0)
    assert np.linalg.norm(fit.answers - _reference(W.dense(), Y, 6.0)) <= fit.bound + 1e-6


def test_step_size_is_the_top_eigenvalue_on_sum_zero_vectors() -> None:
    rng = np.random.default_rng(2)
    for W in (_two_way(5), Dense(rng.normal(0.0, 1.0, (7, 80))), Prefix(9)):
        dense = W.dense()
        cols = dense.shape[1]
        centre = np.eye(cols) - 1.0 / cols
        exact = np.linalg.eigvalsh(centre @ dense.T @ dense @ centre)[-1]
        value = SimplexLeastSquares(W).lipschitz
        assert exact * (1 - 1e-6) <= value <= exact * 1.03


def test_residual_scale_and_zero_total() -> None:
    rng = np.random.default_rng(4)
    W = _two_way(4)
    Y = rng.normal(2.0, 3.0, W.shape[0])
    fit = SimplexLeastSquares(W).solve(Y, 9.0, accuracy=0.01)
    assert fit.converged
    assert fit.target == pytest.approx(0.01 * np.linalg.norm(Y - fit.answers))
    empty = SimplexLeastSquares(W).solve(Y, 0.0)
    assert empty.converged and not empty.x.any() and empty.bound == 0.0


def test_iteration_limit_reports_an_unconverged_but_valid_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simplex_solver, "FIRST_POLISH", 10**9)
    rng = np.random.default_rng(6)
    W = _two_way(4)
    Y = W.dense() @ rng.integers(0, 5, 16) + rng.normal(0.0, 3.0, W.shape[0])
    fit = SimplexLeastSquares(W).solve(Y, 40.0, scale=1.0, accuracy=1e-6, max_iterations=3)
    assert fit.iterations == 3 and not fit.converged
    _check_feasible(fit.x, 40.0)
    assert np.linalg.norm(fit.answers - _reference(W.dense(), Y, 40.0)) <= fit.bound + 1e-6


def test_bad_inputs_raise_argument_errors() -> None:
    solver = SimplexLeastSquares(_two_way(3))
    Y = np.zeros(12)
    with pytest.raises(ArgumentError, match="accuracy"):
        solver.solve(Y, 1.0, accuracy=0.0)
    with pytest.raises(ArgumentError, match="scale"):
        solver.solve(Y, 1.0, scale=-1.0)
    with pytest.raises(ArgumentError, match="12 values"):
        solver.solve(np.zeros(5), 1.0)
    with pytest.raises(ArgumentError, match="total"):
        solver.solve(Y, -2.0)
    with pytest.raises(ArgumentError, match="start"):
        solver.solve(Y, 1.0, start=np.zeros(3))
    with pytest.raises(ArgumentError, match="max_iterations"):
        solver.solve(Y, 1.0, max_iterations=-1)
    with pytest.raises(ArgumentError, match=r"dpmm\.linalg"):
        SimplexLeastSquares(np.eye(3))  # type: ignore[arg-type]


@pytest.mark.slow
def test_fourteen_attributes_projects_in_seconds() -> None:
    import time

    rng = np.random.default_rng(8)
    W = _two_way(14)
    solver = SimplexLeastSquares(W)
    x = np.bincount(rng.integers(0, W.shape[1], 1000), minlength=W.shape[1])
    sigma = np.sqrt(W.shape[0] / 4 / 0.02)
    Y = W @ x + rng.normal(0.0, sigma, W.shape[0])
    start = time.perf_counter()
    fit = solver.solve(Y, 1000.0, scale=sigma * np.sqrt(W.shape[0]))
    assert fit.converged
    assert time.perf_counter() - start < 10.0  # about 0.3 s on an idle core
