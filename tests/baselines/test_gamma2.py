"""γ₂ bounds against an exact SDP (cvxpy + Clarabel) and known closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.baselines import dual_bound, gamma2, worst_case_strategy
from dpmm.errors import ArgumentError, TooLargeError
from dpmm.linalg import AllRange, Dense, Identity, Prefix


def exact_gamma2(W: np.ndarray) -> float:
    """min t s.t. [[X, W], [Wᵀ, Y]] ⪰ 0, diag ≤ t, by an interior-point solver."""
    cp = pytest.importorskip("cvxpy")  # test-only dependency; closed forms run without it
    k, n = W.shape
    block = cp.Variable((k + n, k + n), PSD=True)
    t = cp.Variable()
    problem = cp.Problem(cp.Minimize(t), [block[:k, k:] == W, cp.diag(block) <= t])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return float(t.value)


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2026)
    return {
        "identity": np.eye(5),
        "prefix": Prefix(8).dense(),
        "all_range": AllRange(4).dense(),
        "gaussian": rng.normal(size=(7, 5)),
        "binary": rng.integers(0, 2, size=(12, 6)).astype(float),
        "wide": rng.normal(size=(3, 9)),
        "zero_row_and_column": np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [3.0, 0.0, -1.0]]),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_bounds_bracket_the_exact_sdp_value(name: str) -> None:
    W = _cases()[name]
    exact = exact_gamma2(W)
    bounds = gamma2(Dense(W))
    slack = 1e-8 * exact  # the interior-point solver's own accuracy at tolerance 1e-10
    assert bounds.converged
    assert bounds.lower <= exact + slack
    assert bounds.upper >= exact - slack
    assert bounds.gap <= 1e-6
    # The factorization is exact and reaches the upper bound, with Δ₂(A) = 1.
    R, A = bounds.factorization.R.dense(), bounds.factorization.A.dense()
    np.testing.assert_allclose(R @ A, W, rtol=0, atol=1e-9 * np.abs(W).max())
    assert np.sqrt((A * A).sum(axis=0)).max() == pytest.approx(1.0)
    assert np.sqrt((R * R).sum(axis=1)).max() == pytest.approx(bounds.upper, rel=1e-9)
    # The certificate reproduces the lower bound.
    assert dual_bound(W, bounds.row_weights, bounds.column_weights) == pytest.approx(
        bounds.lower, rel=1e-12
    )


def test_closed_forms() -> None:
    rng = np.random.default_rng(7)
    u, v = rng.normal(size=6), rng.normal(size=4)
    rank_one = gamma2(Dense(np.outer(u, v)))
    # γ₂(u vᵀ) = max|u_i|·max|v_j| = the largest entry, the trivial lower bound.
    expected = np.abs(u).max() * np.abs(v).max()
    assert rank_one.lower <= expected * (1 + 1e-12)
    assert rank_one.upper == pytest.approx(expected, rel=2e-6)
    H = np.array([[1.0, 1.0], [1.0, -1.0]])
    hadamard = np.kron(np.kron(H, H), H)  # order 8: γ₂ = √8
    bounds = gamma2(Dense(hadamard))
    assert bounds.lower == pytest.approx(np.sqrt(8), rel=1e-9)
    assert bounds.upper == pytest.approx(np.sqrt(8), rel=1e-8)
    assert gamma2(Identity(6)).upper == pytest.approx(1.0)


def test_early_stop_still_gives_valid_bounds() -> None:
    W = AllRange(6).dense()
    exact = exact_gamma2(W)
    bounds = gamma2(Dense(W), max_iterations=3)
    assert bounds.iterations == 3
    assert bounds.lower <= exact + 1e-6 * exact <= bounds.upper + 2e-6 * exact


def test_worst_case_strategy_beats_identity_on_prefix() -> None:
    W = Prefix(16)
    f = worst_case_strategy(W)
    R, A = f.R.dense(), f.A.dense()
    worst = np.sqrt((R * R).sum(axis=1)).max() * np.sqrt((A * A).sum(axis=0)).max()
    identity = np.sqrt(16)  # R = W, A = I: the largest row norm of the prefix matrix
    assert worst < 0.7 * identity


def test_bad_inputs_raise_dpmm_errors() -> None:
    with pytest.raises(ArgumentError, match="zero matrix"):
        gamma2(Dense(np.zeros((2, 2))))
    with pytest.raises(ArgumentError, match="step"):
        gamma2(Identity(2), step=2)
    with pytest.raises(ArgumentError, match=r"dpmm\.linalg"):
        gamma2([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(TooLargeError):
        gamma2(Identity(3000))
    with pytest.raises(ArgumentError, match="non-negative weights"):
        dual_bound(np.eye(2), np.array([1.0, 1.0]), np.array([0.5, 0.5]))
