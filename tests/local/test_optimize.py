"""The optimizer: its gradient, projection and descent, and the comparison with the baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmm.errors import ArgumentError, UnsupportedQueryError
from dpmm.local import (
    Objective,
    baseline_strategies,
    build_workload,
    check_ldp,
    loss_and_gradient,
    optimize,
    optimize_strategy,
    per_user_variance,
    project_columns,
    randomized_response,
    reconstruction,
)
from dpmm.local.mechanism import strategy_gram
from dpmm.local.optimize import PATIENCE


def random_strategy(rng: np.random.Generator, m: int, n: int, eps: float) -> np.ndarray:
    z = np.full(m, (1 + math.exp(-eps)) / (2 * m))
    return project_columns(rng.uniform(size=(m, n)), z, eps)[0]


@pytest.mark.parametrize("name", ["Histogram", "Prefix", "Parity"])
def test_gradient_matches_finite_differences(name: str) -> None:
    rng = np.random.default_rng(5)
    W = build_workload(name, 8)
    gram = W.T @ W
    Q = random_strategy(rng, 24, 8, 1.0)
    loss, G = loss_and_gradient(gram, Q)
    assert loss == pytest.approx(np.trace(np.linalg.inv(strategy_gram(Q)) @ gram))
    for _ in range(4):
        direction = rng.normal(size=Q.shape)
        h = 1e-6 * np.abs(Q).max()
        plus = loss_and_gradient(gram, Q + h * direction)[0]
        minus = loss_and_gradient(gram, Q - h * direction)[0]
        assert (plus - minus) / (2 * h) == pytest.approx(np.sum(G * direction), rel=1e-5)


def test_singular_strategy_has_infinite_loss() -> None:
    Q = np.full((4, 3), 0.25)  # every type reports the same distribution
    assert loss_and_gradient(np.eye(3), Q)[0] == math.inf


def exact_ratio_ok(Q: np.ndarray, eps: float) -> bool:
    logs = np.log(Q)
    return bool(((logs.max(axis=1) - logs.min(axis=1)) <= eps + 1e-12).all())


def bisection_projection(r: np.ndarray, z: np.ndarray, eps: float) -> np.ndarray:
    low, high = -1e3, 1e3
    for _ in range(300):
        mid = 0.5 * (low + high)
        if np.clip(r + mid, z, math.exp(eps) * z).sum() > 1:
            high = mid
        else:
            low = mid
    return np.clip(r + mid, z, math.exp(eps) * z)


@pytest.mark.parametrize("eps", [0.3, 1.0, 5.0])
def test_projection_matches_bisection_and_is_nearest(eps: float) -> None:
    rng = np.random.default_rng(6)
    m, n = 30, 6
    z = rng.uniform(size=m)
    z *= (1 + math.exp(-eps)) / 2 / z.sum()
    R = rng.normal(size=(m, n)) * rng.choice([0.01, 1.0, 100.0])
    Q, lower, upper = project_columns(R, z, eps)
    for u in range(n):
        assert np.allclose(Q[:, u], bisection_projection(R[:, u], z, eps), atol=1e-12)
    assert np.allclose(Q.sum(axis=0), 1, atol=1e-14)
    assert (Q - z[:, None] >= -1e-15).all()
    assert (Q - math.exp(eps) * z[:, None] <= 1e-15).all()
    # Nearest point: no feasible perturbation of Q gets closer to R.
    for _ in range(20):
        u = rng.integers(n)
        other = project_columns(Q[:, [u]] + rng.normal(size=(m, 1)) * 0.01, z, eps)[0][:, 0]
        assert np.linalg.norm(other - R[:, u]) >= np.linalg.norm(Q[:, u] - R[:, u]) - 1e-12
    assert lower.dtype == bool and upper.dtype == bool


def test_projection_rejects_infeasible_bounds() -> None:
    with pytest.raises(ArgumentError):
        project_columns(np.zeros((3, 2)), np.full(3, 0.5), 1.0)


def test_descent_is_monotone_and_improves() -> None:
    W = build_workload("AllRange", 8)
    result = optimize_strategy(
        W, 1.0, iterations=40, tolerance=0, rng=np.random.default_rng(7), baselines=False
    )
    history = np.array(result.history)
    assert (np.diff(history) <= 1e-9 * history[:-1]).all()
    assert history[-1] < history[0]
    assert result.loss == pytest.approx(
        np.trace(np.linalg.inv(strategy_gram(result.Q)) @ (W.T @ W)), rel=1e-9
    )


def test_outputs_default_to_four_n_and_can_be_set() -> None:
    W = np.eye(5)
    assert optimize_strategy(
        W, 1.0, iterations=2, rng=np.random.default_rng(0), baselines=False
    ).Q.shape == (20, 5)
    assert optimize_strategy(W, 1.0, outputs=7, iterations=2, baselines=False).Q.shape == (7, 5)
    with pytest.raises(ArgumentError):
        optimize_strategy(W, 1.0, outputs=3)
    with pytest.raises(ArgumentError):
        optimize_strategy(W, -1.0)


def test_a_singular_random_start_is_drawn_again() -> None:
    # With 7 outputs for 5 inputs at ε = 1 about one start in 40 clips to a singular
    # QᵀD⁻¹Q; this seed's first draw does.
    result = optimize_strategy(
        np.eye(5), 1.0, outputs=7, iterations=2, rng=np.random.default_rng(257), baselines=False
    )
    assert result.Q.shape == (7, 5) and np.isfinite(result.history[-1])


def test_without_rng_each_run_differs() -> None:
    """No default seed: two runs without a generator start from different points."""
    a = optimize_strategy(np.eye(4), 1.0, iterations=0, baselines=False)
    b = optimize_strategy(np.eye(4), 1.0, iterations=0, baselines=False)
    assert not np.allclose(a.Q, b.Q)


@settings(max_examples=60, deadline=None)
@given(
    newton_passes=st.sampled_from([0, 1, optimize.NEWTON_PASSES]),
    m=st.integers(2, 40),
    n=st.integers(1, 6),
    eps=st.floats(0.05, 8.0),
    magnitude=st.sampled_from([1e-4, 0.01, 1.0, 100.0]),
    warm=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_vectorized_projection_equals_the_per_column_projection(
    newton_passes: int, m: int, n: int, eps: float, magnitude: float, warm: bool, seed: int
) -> None:
    """All columns at once equal each column by bisection, from far away or one step away,
    whether Newton or the sorted breakpoints settle them."""
    rng = np.random.default_rng(seed)
    z = rng.uniform(0.1, 1.0, size=m)
    z *= rng.uniform(math.exp(-eps), 1.0) / z.sum()  # any feasible Σz in [e^-ε, 1]
    if warm:  # the optimizer's case: a gradient step from a feasible Q
        start = project_columns(rng.uniform(size=(m, n)), z, eps)[0]
        R = start - magnitude / m * rng.normal(size=(m, n))
    else:
        R = rng.normal(size=(m, n)) * magnitude
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optimize, "NEWTON_PASSES", newton_passes)
        Q, lower, upper = project_columns(R, z, eps)
    for u in range(n):
        expected = bisection_projection(R[:, u], z, eps)
        assert np.allclose(Q[:, u], expected, rtol=0, atol=1e-12 * max(1.0, magnitude))
    assert np.allclose(Q.sum(axis=0), 1.0, rtol=0, atol=1e-13)
    assert (z[:, None] <= Q).all() and (math.exp(eps) * z[:, None] >= Q).all()
    assert not (lower & upper).any()


@pytest.mark.parametrize("rank", [2, 8])
def test_gradient_matches_finite_differences_at_any_rank(rank: int) -> None:
    """The objective factors WᵀW; below half rank it multiplies through the factor."""
    rng = np.random.default_rng(8)
    W = rng.normal(size=(rank, 8))
    objective = Objective.from_gram(W.T @ W)
    assert objective.factor.shape == (8, rank)
    Q = random_strategy(rng, 24, 8, 0.7)
    loss, G = objective.evaluate(Q)
    assert loss == pytest.approx(np.trace(np.linalg.inv(strategy_gram(Q)) @ W.T @ W))
    direction = rng.normal(size=Q.shape)
    h = 1e-6
    slope = (
        objective.evaluate(Q + h * direction)[0] - objective.evaluate(Q - h * direction)[0]
    ) / (2 * h)
    assert slope == pytest.approx(np.sum(G * direction), rel=1e-5)


@pytest.mark.parametrize(
    ("name", "eps"), [("Histogram", 4.0), ("Parity", 4.0), ("Prefix", 1.0), ("Parity", 0.5)]
)
def test_returned_mechanism_is_never_worse_than_a_baseline(name: str, eps: float) -> None:
    """At ε = 4 randomized response beats the optimizer on Histogram and Parity: it is returned."""
    n = 16
    W = build_workload(name, n)
    result = optimize_strategy(W, eps, rng=np.random.default_rng(9))
    check_ldp(result.Q, eps)
    assert exact_ratio_ok(result.Q, eps)
    # Every baseline, judged independently with its explicit reconstruction V.
    strategies = baseline_strategies(n, eps)
    assert set(result.candidates) == {"optimized", *strategies}
    for label, Q in strategies.items():
        try:
            V = reconstruction(W, Q)
        except UnsupportedQueryError:
            assert result.candidates[label] == math.inf
            continue
        worst = per_user_variance(W, Q, V).max()
        assert result.candidates[label] == pytest.approx(worst, rel=1e-8)
        assert result.worst_case <= worst * (1 + 1e-12), label
    assert (
        result.worst_case == result.candidates[result.mechanism] == min(result.candidates.values())
    )
    assert per_user_variance(W, result.Q).max() == pytest.approx(result.worst_case, rel=1e-8)
    assert result.loss == pytest.approx(
        np.trace(np.linalg.pinv(strategy_gram(result.Q), hermitian=True) @ W.T @ W), rel=1e-8
    )
    if name != "Prefix" and eps == 4.0:
        assert result.mechanism == "randomized response"
        assert np.allclose(result.Q, randomized_response(n, eps))
        assert result.candidates["optimized"] > result.worst_case  # the comparison mattered


def test_early_stop_and_iteration_cap() -> None:
    W = build_workload("Prefix", 8)
    capped = optimize_strategy(W, 1.0, iterations=5, tolerance=0, rng=np.random.default_rng(10))
    assert capped.iterations == 5 and len(capped.history) == 6
    loose = optimize_strategy(W, 1.0, tolerance=0.9, rng=np.random.default_rng(10))
    assert loose.iterations == PATIENCE  # 90 % gained over 20 iterations: never
    with pytest.raises(ArgumentError):
        optimize_strategy(W, 1.0, tolerance=-1.0)
