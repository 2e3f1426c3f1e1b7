"""Non-negative consistent tables against a QP on the full vector, dense least squares,
the local-polytope relaxation, huge domains and bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import linprog

from dpmm.errors import ArgumentError
from dpmm.linalg import Marginal
from dpmm.reconstruct.consistent_tables import _prepare, consistency_violation, nonnegative_tables

cp = pytest.importorskip("cvxpy")

SHAPE = (3, 2, 4, 3)
KEYS = [(0, 1), (1, 2, 3), (0, 3), (2,), (0, 1, 2), ()]


def _problem(seed: int, noise: float = 1.5):
    rng = np.random.default_rng(seed)
    x = rng.poisson(0.3, math.prod(SHAPE)).astype(float)
    tables = {
        k: (Marginal(SHAPE, k) @ x).reshape([SHAPE[i] for i in k])
        + rng.normal(0, noise, [SHAPE[i] for i in k])
        for k in KEYS
    }
    weights = {k: float(rng.uniform(0.5, 2.0)) for k in KEYS}
    return tables, weights


def _qp(tables, weights, total=None):
    """The projection onto {(M_a x)_a : x ∈ R^N, M_a x ≥ 0} by a QP on the full vector."""
    x = cp.Variable(math.prod(SHAPE))
    objective, constraints = 0, []
    for k, t in tables.items():
        M = Marginal(SHAPE, k).dense()
        constraints.append(M @ x >= 0)
        objective += weights[k] * cp.sum_squares(M @ x - t.reshape(-1))
    if total is not None:
        constraints.append(cp.sum(x) == total)
    problem = cp.Problem(cp.Minimize(objective), constraints)
    with warnings.catch_warnings():  # "may be inaccurate": the comparison has its tolerance
        warnings.simplefilter("ignore", UserWarning)
        problem.solve(solver="CLARABEL")
    return {k: Marginal(SHAPE, k).dense() @ x.value for k in tables}, problem.value


def _distance(a, b, weights) -> float:
    return sum(weights[k] * float(np.sum((np.ravel(a[k]) - np.ravel(b[k])) ** 2)) for k in a)


@pytest.mark.parametrize("accelerate", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_the_qp_on_the_full_vector(seed: int, accelerate: bool) -> None:
    tables, weights = _problem(seed)
    expected, optimum = _qp(tables, weights)
    out = nonnegative_tables(tables, weights=weights, tolerance=1e-10, accelerate=accelerate)
    assert out.converged
    total = out.total
    for k in KEYS:
        np.testing.assert_allclose(out.tables[k].reshape(-1), expected[k], atol=1e-5 * total)
        assert out.tables[k].min() >= 0
        assert math.isclose(out.tables[k].sum(), total, rel_tol=1e-12)
    assert consistency_violation(out.tables) <= 1e-11 * total
    assert out.objective == pytest.approx(_distance(out.tables, tables, weights), rel=1e-12)
    assert out.objective <= optimum * (1 + 1e-7)
    assert 0 <= out.gap <= 1e-6 * optimum
    assert any(t.min() < 0 for t in tables.values())  # the constraint was active


def test_known_total_matches_the_qp() -> None:
    tables, weights = _problem(2)
    expected, _ = _qp(tables, weights, total=25.0)
    out = nonnegative_tables(tables, weights=weights, total=25.0, tolerance=1e-10)
    assert out.total == pytest.approx(25.0, rel=1e-12)
    for k in KEYS:
        np.testing.assert_allclose(out.tables[k].reshape(-1), expected[k], atol=1e-4)


def test_never_farther_than_other_feasible_points() -> None:
    tables, weights = _problem(3, noise=3.0)
    out = nonnegative_tables(tables, weights=weights, tolerance=1e-10)
    best = out.objective
    rng = np.random.default_rng(4)
    uniform = {k: np.full(t.shape, out.total / t.size) for k, t in out.tables.items()}
    for trial in range(30):
        x = rng.gamma(0.5, 1.0, math.prod(SHAPE)) * (trial % 5 != 0)
        x[rng.integers(x.size)] += 1.0
        other = {k: (Marginal(SHAPE, k) @ x).reshape(out.tables[k].shape) for k in KEYS}
        assert consistency_violation(other) < 1e-9
        for mix in (0.0, 0.01, 0.5):  # feasible points near the solution too
            point = {k: (1 - mix) * out.tables[k] + mix * other[k] for k in KEYS}
            assert _distance(point, tables, weights) >= best * (1 - 1e-12)
            # The projection's variational inequality: ⟨t − μ*, μ − μ*⟩_w ≤ 0.
            inner = sum(
                weights[k] * float(np.sum((tables[k] - out.tables[k]) * (other[k] - out.tables[k])))
                for k in KEYS
            )
            assert inner <= 1e-6 * best
    assert _distance(uniform, tables, weights) > best


def test_projection_is_weighted_least_squares_in_the_marginal_algebra() -> None:
    tables, weights = _problem(5)
    A = np.vstack([math.sqrt(weights[k]) * Marginal(SHAPE, k).dense() for k in KEYS])
    b = np.concatenate([math.sqrt(weights[k]) * tables[k].reshape(-1) for k in KEYS])
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    layout, stacks = _prepare(tables, weights, None, None)
    projected = layout.unstack(layout.project(stacks))
    for k in KEYS:
        np.testing.assert_allclose(projected[k].reshape(-1), Marginal(SHAPE, k) @ x, atol=1e-12)
    assert consistency_violation(tables) > 0.5
    assert consistency_violation(projected) < 1e-12


def test_flat_tables_unsorted_keys_and_shape_checks() -> None:
    tables, _ = _problem(6)
    flat = {tuple(reversed(k)): np.asarray(t).transpose().reshape(-1) for k, t in tables.items()}
    a = nonnegative_tables(tables, tolerance=1e-10)
    b = nonnegative_tables(flat, domain_shape=SHAPE, tolerance=1e-10)
    for k in KEYS:
        np.testing.assert_allclose(a.tables[k], b.tables[k], atol=1e-12)


def test_the_local_polytope_is_a_relaxation() -> None:
    # x0 = x1 and x1 = x2 with mass ½ on two cells each, but x0 ≠ x2: consistent, ≥ 0.
    equal = np.array([[0.5, 0.0], [0.0, 0.5]])
    tables = {(0, 1): equal, (1, 2): equal, (0, 2): equal[::-1].copy()}
    out = nonnegative_tables(tables)
    assert out.objective == pytest.approx(0.0, abs=1e-20) and out.iterations == 1
    # No non-negative x over the 8 cells has these marginals.
    rows = [Marginal((2, 2, 2), k).dense() for k in tables]
    result = linprog(
        np.zeros(8), A_eq=np.vstack(rows), b_eq=np.concatenate([t.ravel() for t in tables.values()])
    )
    assert result.status == 2  # infeasible


def test_huge_domain_never_builds_the_vector() -> None:
    shape = (100,) * 8  # 10¹⁶ cells
    rng = np.random.default_rng(7)
    keys = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5), (2,), (6, 7), (5, 6)]
    tables = {k: rng.normal(1.0, 2.0, [shape[i] for i in k]) for k in keys}
    out = nonnegative_tables(tables, domain_shape=shape, tolerance=1e-8)
    assert out.converged
    assert min(float(t.min()) for t in out.tables.values()) >= 0
    assert consistency_violation(out.tables) <= 1e-9 * out.total
    assert out.gap <= 1e-4 * out.objective


def test_early_stop_still_feasible_and_zero_total() -> None:
    tables, weights = _problem(8, noise=4.0)
    out = nonnegative_tables(tables, weights=weights, max_iterations=3)
    assert not out.converged and out.mixing > 0
    assert min(float(t.min()) for t in out.tables.values()) >= 0
    assert consistency_violation(out.tables) <= 1e-11 * out.total
    negative = {(0,): np.array([-1.0, -2.0]), (0, 1): -np.ones((2, 3))}
    zero = nonnegative_tables(negative)
    assert zero.total == 0 and all(not t.any() for t in zero.tables.values())


@pytest.mark.parametrize(
    ("tables", "options", "message"),
    [
        ({(0, 1): np.ones((2, 3)), (1,): np.ones(4)}, {}, "Attribute 1 has size 3"),
        ({(0, 1): np.ones(6)}, {"domain_shape": (2, 4)}, "has 6 cells, not 8"),
        ({(0, 1): np.ones(6)}, {}, "pass domain_shape"),
        ({(0, 1): np.ones((2, 3)), (1, 0): np.ones((3, 2))}, {}, "two tables"),
        ({(0, 0): np.ones((2, 2))}, {}, "distinct attributes"),
        ({(0,): np.array([1.0, np.nan])}, {}, "NaN"),
        ({(0,): np.ones(2)}, {"weights": {(0,): 0.0}}, "positive finite weight"),
        ({(0,): np.ones(2)}, {"weights": {(0,): 1.0, (1,): 1.0}}, "has no table"),
        ({(0,): np.ones(2)}, {"total": -1.0}, "known total"),
        ({(3,): np.ones(2)}, {"domain_shape": (2, 2)}, "outside 2 attributes"),
        ({}, {}, "at least one table"),
    ],
)
def test_bad_input_raises_argument_error(tables, options, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        nonnegative_tables(tables, **options)
