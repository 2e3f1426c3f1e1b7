"""Strategy matrices: the LDP check, reconstruction, variances, baselines and the lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.local import (
    LdpViolationError,
    baseline_strategies,
    build_workload,
    check_ldp,
    fourier,
    hadamard,
    hierarchical,
    optimize_strategy,
    per_user_matrix_mechanism_variance,
    per_user_variance,
    per_user_variance_from_gram,
    randomized_response,
    reconstruction,
    worst_case_lower_bound,
)
from dpmm.local.workloads import WORKLOADS

N = 16
EPSILONS = (0.5, 1.0, 4.0)


def some_baselines(n: int, eps: float) -> dict[str, np.ndarray]:
    return {
        "rr": randomized_response(n, eps),
        "hadamard": hadamard(n, eps),
        "hadamard_blocks": hadamard(n, eps, 4),
        "hierarchical": hierarchical(n, eps),
        "hierarchical_blocks": hierarchical(n, eps, 4, 2),
        "fourier": fourier(n, eps, 3),
    }


def exact_ratio_ok(Q: np.ndarray, eps: float) -> bool:
    """Independent check: every pair of entries in a row, by logs."""
    logs = np.log(Q)
    return bool(((logs.max(axis=1) - logs.min(axis=1)) <= eps + 1e-12).all())


@pytest.mark.parametrize("eps", EPSILONS)
def test_every_baseline_is_ldp_and_stochastic(eps: float) -> None:
    for name, Q in some_baselines(N, eps).items():
        check_ldp(Q, eps)
        assert np.allclose(Q.sum(axis=0), 1.0), name
        assert exact_ratio_ok(Q, eps), name
        # Not trivially private: some row really uses the budget.
        assert np.log(Q.max(axis=1) / Q.min(axis=1)).max() == pytest.approx(eps), name


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_optimized_strategy_is_ldp(eps: float) -> None:
    result = optimize_strategy(
        build_workload("Prefix", 8),
        eps,
        iterations=15,
        rng=np.random.default_rng(3),
        baselines=False,
    )
    check_ldp(result.Q, eps)
    assert exact_ratio_ok(result.Q, eps)
    assert result.Q.shape == (32, 8)
    assert (result.Q - result.z[:, None] * (1 - 1e-12) >= 0).all()


def test_violating_strategy_is_rejected() -> None:
    Q = randomized_response(4, 1.0)
    with pytest.raises(LdpViolationError, match="ratio"):
        check_ldp(Q, 0.9)  # RR at ε = 1 uses ratio e^1 > e^0.9
    bad = Q.copy()
    bad[0, 0] += 0.01
    with pytest.raises(LdpViolationError, match="sums to"):
        check_ldp(bad, 1.0)
    with pytest.raises(LdpViolationError, match="non-negative"):
        check_ldp(-Q, 1.0)


def test_reconstruction_is_unbiased_and_optimal() -> None:
    rng = np.random.default_rng(0)
    W = build_workload("AllRange", 8)
    Q = hierarchical(8, 1.0, branching=2)
    V = reconstruction(W, Q)
    assert np.allclose(V @ Q, W)
    # Any other unbiased V' = V + B with B Q = 0 has larger average-case variance.
    null = np.linalg.svd(Q.T)[2][np.linalg.matrix_rank(Q) :]
    D = Q.sum(axis=1)
    base = np.sum(V**2 * D)
    for _ in range(5):
        other = V + rng.normal(size=(W.shape[0], null.shape[0])) @ null * 0.1
        assert np.allclose(other @ Q, W)
        assert np.sum(other**2 * D) > base


def test_reconstruction_rejects_workload_outside_row_space() -> None:
    with pytest.raises(UnsupportedQueryError):
        reconstruction(np.eye(8), fourier(8, 1.0, 1))  # order-1 parities cannot give cells


def test_variance_matches_dense_formula() -> None:
    """z_u against a direct sum over a multinomial: Var(V y) for one user of type u."""
    W = build_workload("Prefix", 6)
    Q = hadamard(6, 1.0, 2)
    V = reconstruction(W, Q)
    for u in range(6):
        q = Q[:, u]
        cov = np.diag(q) - np.outer(q, q)  # covariance of one user's one-hot report
        assert per_user_variance(W, Q)[u] == pytest.approx(np.trace(V @ cov @ V.T))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_variance_from_the_gram_matches_the_explicit_reconstruction(name: str) -> None:
    """``per_user_variance`` never forms V; it agrees with ``Σ_j V[j,o]² Q[o,u] − W[j,u]²``."""
    W = build_workload(name, N)
    for label, Q in baseline_strategies(N, 1.0).items():
        try:
            V = reconstruction(W, Q)
        except UnsupportedQueryError:
            with pytest.raises(UnsupportedQueryError):
                per_user_variance_from_gram(W.T @ W, Q)
            continue
        explicit = (V**2).sum(axis=0) @ Q - (W**2).sum(axis=0)
        assert np.allclose(per_user_variance(W, Q), explicit, rtol=1e-9, atol=0), label
        assert np.allclose(per_user_variance_from_gram(W.T @ W, Q), explicit, rtol=1e-9), label


def test_randomized_response_variance_closed_form() -> None:
    n, eps = 10, 1.0
    s = math.exp(eps)
    z = per_user_variance(np.eye(n), randomized_response(n, eps))
    # RR is square and invertible, so the only unbiased reconstruction is V = Q⁻¹.
    Qinv = np.linalg.inv(randomized_response(n, eps))
    expected = (Qinv**2).sum(axis=0) @ randomized_response(n, eps) - 1
    assert np.allclose(z, expected)
    assert np.allclose(z, z[0])
    assert z[0] > (n - 1) / (s - 1) ** 2


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_lower_bound_below_every_mechanism(name: str) -> None:
    """Baselines and optimized strategies."""
    for eps in (0.5, 4.0):
        W = build_workload(name, 8)
        bound = worst_case_lower_bound(W, eps)
        assert bound > 0 or eps >= 4
        candidates = dict(some_baselines(8, eps))
        candidates["optimized"] = optimize_strategy(
            W, eps, iterations=20, rng=np.random.default_rng(1), baselines=False
        ).Q
        for label, Q in candidates.items():
            try:
                worst = per_user_variance(W, Q).max()
            except UnsupportedQueryError:
                continue  # e.g. Fourier cannot answer ranges at all
            assert bound <= worst * (1 + 1e-9), (name, eps, label)
        assert bound <= per_user_matrix_mechanism_variance(W, eps)


def test_lower_bound_is_nearly_tight_for_histogram() -> None:
    """The bound must not be vacuous: within 25 % of the optimized histogram mechanism."""
    W = np.eye(N)
    optimized = optimize_strategy(
        W, 1.0, iterations=100, rng=np.random.default_rng(2), baselines=False
    )
    worst = per_user_variance(W, optimized.Q).max()
    assert worst_case_lower_bound(W, 1.0) > 0.75 * worst


def test_optimized_beats_baselines_in_medium_privacy() -> None:
    W = build_workload("Prefix", N)
    result = optimize_strategy(W, 1.0, rng=np.random.default_rng(4), baselines=False)
    worst = per_user_variance(W, result.Q).max()
    for label, Q in baseline_strategies(N, 1.0).items():
        if not label.startswith("Fourier"):  # parities cannot answer prefixes
            assert worst < per_user_variance(W, Q).max(), label


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_per_user_matrix_mechanism_on_a_rank_deficient_workload(noise):
    # Parity at n = 256 has rank 92: rounding-level eigenvalues of WᵀW must count as zero,
    # or their fourth roots enter A⁺ and the "variance" comes out as −10¹⁶.
    W = build_workload("Parity", 256)
    variance = per_user_matrix_mechanism_variance(W, 0.5, noise)
    assert variance >= worst_case_lower_bound(W, 0.5) > 0
    if noise == "laplace":
        # The identity strategy is one candidate: replacement L1 sensitivity 2.
        identity = 2 * (2 / 0.5) ** 2 * float(np.sum(W * W))
        assert variance <= identity * (1 + 1e-9)
