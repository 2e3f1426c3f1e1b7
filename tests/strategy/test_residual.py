"""The residual method against dense computations, simulation, ResidualPlanner and HDMM."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpmm.error import expected_error, per_query_variance
from dpmm.errors import ArgumentError, UnsupportedQueryError
from dpmm.linalg import (
    AllRange,
    Dense,
    Identity,
    Kron,
    Marginals,
    Ones,
    Prefix,
    VStack,
    residual_general,
)
from dpmm.linalg.residual_general import subspace_basis
from dpmm.linalg.residuals import helmert
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import AUTO_CANDIDATES, METHODS, optimize
from dpmm.strategy.marginal_optimal import marginal_optimal
from dpmm.strategy.residual import residual_optimum, residual_strategy
from dpmm.strategy.residual_subspace import solve_subspace
from dpmm.strategy.selection import select

RHO = ZCDP(1)

#: Documented tolerance of a solved block: its cells' squared column norms agree to
#: the solver's certified gap, so the reported sensitivity exceeds the true largest
#: column norm by at most this relative amount (never falls below it).
SOLVED_TOLERANCE = 1e-6


def _two_way(d: int, n: int, make) -> VStack:
    f, total = make(n), Ones(1, n)
    return VStack(
        [
            Kron([f if i in pair else total for i in range(d)])
            for pair in itertools.combinations(range(d), 2)
        ]
    )


def _mixed() -> VStack:
    """Prefix, range, identity and a dense predicate on a (4, 5, 3) domain, with a total."""
    predicate = Dense(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))
    return VStack(
        [
            Kron([Prefix(4), AllRange(5), Ones(1, 3)]),
            1.5 * Kron([Identity(4), Ones(1, 5), predicate]),
            Kron([Ones(1, 4), Prefix(5), Identity(3)]),
            Kron([Ones(1, 4), Ones(1, 5), Ones(1, 3)]),
        ]
    )


def test_plain_marginals_equal_marginal_optimal() -> None:
    for W in (
        _two_way(8, 10, Identity),
        Marginals((2, 3, 4, 5), {(): 1.0, (0, 2): 2.0, (1, 2, 3): 1.0, (3,): 0.5}),
    ):
        mine = expected_error(W, residual_strategy(W, RHO), RHO)
        reference = expected_error(W, marginal_optimal(W, RHO), RHO)
        assert mine == pytest.approx(reference, rel=1e-12)
    assert mine == pytest.approx(residual_optimum(W).objective / 2, rel=1e-12)


def test_plain_marginal_sensitivity_is_exactly_one() -> None:
    # Exact: every block is a scaled residual, whose columns all have the squared norm
    # Π(1 − 1/n_i); the sum in Fraction arithmetic of the float shares is 1 to rounding.
    W = Marginals((2, 3, 4), {(0, 1): 1.0, (1, 2): 1.0, (0,): 3.0})
    A = residual_strategy(W, RHO)
    shape = A.domain_shape
    squared = sum(
        Fraction(block) ** 2
        * Fraction(
            math.prod(shape[i] - 1 for i in range(3) if mask >> i & 1),
            math.prod(shape[i] for i in range(3) if mask >> i & 1),
        )
        for mask, block in A.blocks.items()
    )
    assert abs(squared - 1) < Fraction(1, 10**14)
    norms = np.linalg.norm(A.dense(), axis=0)
    assert np.ptp(norms) < 1e-14
    assert A.uniform_column_norm(2) == pytest.approx(1.0, abs=1e-15)


def test_variances_match_the_dense_matrix_mechanism() -> None:
    W = _mixed()
    A = residual_strategy(W, RHO)
    dense_a, dense_w = A.dense(), W.dense()
    sigma2 = A.sensitivity(2) ** 2 / 2  # ρ = 1
    covariance = sigma2 * dense_w @ np.linalg.pinv(dense_a.T @ dense_a) @ dense_w.T
    np.testing.assert_allclose(per_query_variance(W, A, RHO), np.diag(covariance), rtol=1e-8)
    assert expected_error(W, A, RHO) == pytest.approx(np.trace(covariance), rel=1e-9)
    assert residual_optimum(W).objective * sigma2 == pytest.approx(np.trace(covariance), rel=1e-9)


def test_privacy_cost_is_the_requested_rho() -> None:
    # Small domains: the sensitivity is the exact largest column norm, and it is 1.
    for W in (_mixed(), _two_way(3, 5, Prefix), _two_way(3, 4, AllRange)):
        A = residual_strategy(W, RHO)
        norms = np.linalg.norm(A.dense(), axis=0)
        assert A.sensitivity(2) == pytest.approx(norms.max(), rel=1e-13)
        assert A.sensitivity(2) == pytest.approx(1.0, rel=1e-13)


def test_large_domain_sensitivity_is_a_tight_upper_bound(monkeypatch) -> None:
    # Above EXACT_CELLS the sensitivity is Σ_S max diag: never below the true largest
    # column norm, and above it by at most the solver's tolerance on prefix and range
    # blocks, whose cells are all tight at the optimum.
    monkeypatch.setattr(residual_general, "EXACT_CELLS", 0)
    for W in (_two_way(3, 5, Prefix), _two_way(3, 4, AllRange)):
        A = residual_strategy(W, RHO)
        norms = np.linalg.norm(A.dense(), axis=0)
        assert norms.max() <= A.sensitivity(2) * (1 + 1e-14)
        assert norms.min() >= A.sensitivity(2) * (1 - SOLVED_TOLERANCE)
    A = residual_strategy(_mixed(), RHO)  # a slack cell: the bound stays a bound
    assert np.linalg.norm(A.dense(), axis=0).max() <= A.sensitivity(2) * (1 + 1e-14)


def test_monte_carlo_least_squares_matches_predicted_variance() -> None:
    W = _two_way(3, 4, Prefix)
    A = residual_strategy(W, RHO)
    dense_a, dense_w = A.dense(), W.dense()
    rng = np.random.default_rng(2024)
    x = rng.integers(0, 20, size=dense_a.shape[1]).astype(float)
    sigma = np.sqrt(A.sensitivity(2) ** 2 / 2)
    trials = 4000
    noisy = dense_a @ x[:, None] + sigma * rng.standard_normal((dense_a.shape[0], trials))
    estimates, *_ = np.linalg.lstsq(dense_a, noisy, rcond=None)
    errors = dense_w @ estimates - (dense_w @ x)[:, None]
    predicted = per_query_variance(W, A, RHO)
    empirical = (errors**2).mean(axis=1)
    # 4000 draws: the relative standard error of a variance estimate is √(2/4000) ≈ 2.2 %.
    assert np.abs(empirical / predicted - 1).max() < 0.12
    assert abs(empirical.sum() / predicted.sum() - 1) < 0.05
    assert np.abs(errors.mean(axis=1)).max() < 4 * np.sqrt(predicted.max() / trials)


@pytest.mark.parametrize("make", [Prefix, AllRange])
def test_beats_identity_and_hdmm_kron_on_prefix_and_range(make) -> None:
    # From four attributes on (at three, HDMM's Kron product is slightly better: a Kron
    # strategy couples totals and residuals, which a per-subspace design cannot). OPT_+ with
    # its blocks refitted to the consistent tables does better still here (2,930 and 41,569
    # against 3,168 and 42,633): auto keeps whichever is least.
    W = _two_way(5, 6, make)
    mine = expected_error(W, optimize(W, "residual", RHO), RHO)
    for method in ("identity", "hdmm_kron"):
        other = expected_error(W, optimize(W, method, RHO), RHO)
        assert mine <= other * (1 + 1e-9)


def test_auto_tries_the_residual_method() -> None:
    # The selection machinery auto uses, restricted to the baseline and this method.
    assert "residual" in AUTO_CANDIDATES
    W = _two_way(3, 5, Prefix)
    selection = select(W, RHO, METHODS, ("identity", "residual"))
    tried = {c.method: c for c in selection.candidates}
    assert selection.chosen.method == "residual"
    assert tried["residual"].error == pytest.approx(residual_optimum(W).objective / 2, rel=1e-9)
    laplace = select(W, PureDP(1), METHODS, ("identity", "residual"))
    skipped = {c.method: c.skipped for c in laplace.candidates}
    assert "Gaussian" in skipped["residual"]


def test_max_variance_loss_lowers_the_largest_variance() -> None:
    W = _mixed()
    plain = residual_strategy(W, RHO)
    balanced = residual_strategy(W, RHO, loss="max_variance")
    assert balanced.sensitivity(2) == pytest.approx(1.0, abs=1e-14)
    worst_plain = per_query_variance(W, plain, RHO).max()
    worst_balanced = per_query_variance(W, balanced, RHO).max()
    assert worst_balanced < worst_plain
    assert residual_optimum(W, loss="max_variance").objective / 2 == pytest.approx(
        worst_balanced, rel=1e-6
    )


def test_weighted_sum_shifts_accuracy_to_the_heavy_term() -> None:
    W = VStack([Kron([Prefix(5), Ones(1, 4)]), Kron([Ones(1, 5), AllRange(4)])])
    light = residual_strategy(W, RHO, loss="weighted_sum", weights=[1.0, 1.0])
    heavy = residual_strategy(W, RHO, loss="weighted_sum", weights=[100.0, 1.0])
    first = slice(0, 5)
    assert (
        per_query_variance(W, heavy, RHO)[first].sum()
        < per_query_variance(W, light, RHO)[first].sum()
    )
    optimum = residual_optimum(W, loss="weighted_sum", weights=[100.0, 1.0])
    variances = per_query_variance(W, heavy, RHO)
    assert optimum.objective / 2 == pytest.approx(
        100 * variances[first].sum() + variances[5:].sum(), rel=1e-9
    )


def test_subspace_solver_certifies_its_optimum() -> None:
    D = helmert(6)
    gram = D @ Prefix(6).gram().dense() @ D.T
    optimum = solve_subspace(gram, D)
    assert optimum.lower_bound <= optimum.error <= optimum.lower_bound * (1 + 1e-8)
    diagonal = np.einsum("kn,kl,ln->n", D, optimum.gram, D)
    assert diagonal.max() == pytest.approx(1.0, abs=1e-12)
    # No strategy on the subspace does better: compare with a random feasible design.
    rng = np.random.default_rng(3)
    for _ in range(20):
        L = rng.normal(size=(5, 5))
        M = L.T @ L
        M /= np.einsum("kn,kl,ln->n", D, M, D).max()
        assert np.trace(gram @ np.linalg.inv(M)) >= optimum.lower_bound
    assert subspace_basis((3, 4), 0b11).shape == (6, 12)


def test_unread_directions_get_no_budget_and_the_optimum_is_kept() -> None:
    # A sub-workload that reads 3 of the 5 directions of a 6-cell attribute's subspace.
    D = helmert(6)
    rng = np.random.default_rng(5)
    reads = rng.normal(size=(4, 3)) @ np.linalg.qr(rng.normal(size=(5, 3)))[0].T
    gram = reads.T @ reads
    optimum = solve_subspace(gram, D)
    assert optimum.factor.shape == (3, 5)
    assert np.linalg.matrix_rank(optimum.factor) == 3
    # Every row lies in the read directions: nothing of the budget goes elsewhere.
    unread = np.linalg.svd(reads)[2][3:]
    assert np.abs(optimum.factor @ unread.T).max() < 1e-12
    assert optimum.lower_bound <= optimum.error <= optimum.lower_bound * (1 + 1e-8)
    M = optimum.gram
    assert optimum.error == pytest.approx(np.trace(gram @ np.linalg.pinv(M)), rel=1e-10)
    assert np.einsum("kn,kl,ln->n", D, M, D).max() == pytest.approx(1.0, abs=1e-12)
    # Measuring the unread directions as well can only cost budget: a full-rank design
    # feasible for the same constraint is never better than the certified bound.
    for _ in range(20):
        L = rng.normal(size=(5, 5))
        full = L.T @ L
        full /= np.einsum("kn,kl,ln->n", D, full, D).max()
        assert np.trace(gram @ np.linalg.inv(full)) >= optimum.lower_bound


def test_bad_inputs_raise_clear_errors() -> None:
    W = _two_way(3, 4, Prefix)
    with pytest.raises(UnsupportedQueryError, match="Gaussian noise"):
        residual_strategy(W, PureDP(1))
    with pytest.raises(ArgumentError, match="Unknown residual loss"):
        residual_strategy(W, RHO, loss="l1")
    with pytest.raises(ArgumentError, match="needs weights"):
        residual_strategy(W, RHO, loss="weighted_sum")
    with pytest.raises(ArgumentError, match="3 Kron terms"):
        residual_strategy(W, RHO, weights=[1.0])
    with pytest.raises(ArgumentError, match="non-negative"):
        residual_strategy(W, RHO, weights=[1.0, -1.0, 1.0])
    with pytest.raises(ArgumentError, match="dpmm Matrix"):
        residual_strategy(np.eye(3), RHO)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match="no non-zero query"):
        residual_strategy(0.0 * Kron([Prefix(3), Prefix(3)]), RHO)
