"""The marginal-optimal strategy: closed form vs numerical optimization, baselines, duality."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.optimize

from dpmm.error import expected_error, identity_error, per_query_variance, svd_bound
from dpmm.errors import DpmmError, UnsupportedQueryError
from dpmm.linalg import Identity, Kron, Marginal, Marginals, Ones, Prefix, VStack, Weighted
from dpmm.linalg.marginals import _submasks
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import DomainSizes
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import METHODS
from dpmm.strategy.marginal_optimal import (
    _marginal_variance,
    cell_variances,
    marginal_optimal,
    sum_variance_optimum,
    workload_marginals,
)
from dpmm.strategy.residual import max_variance_split, residual_optimum, residual_strategy

RHO = ZCDP(1)


def _all_k_way(d: int, sizes: tuple[int, ...]) -> dict[tuple[int, ...], float]:
    return {c: 1.0 for k in sizes for c in itertools.combinations(range(d), k)}


def _cell_variance(A: ResidualBlockStrategy, mask: int) -> float:
    """Variance of one cell of marginal ``mask`` under unit noise, from the closed form."""
    return _marginal_variance(A.blocks, DomainSizes(A.domain_shape), mask)


def _random_marginals(seed: int) -> Marginals:
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(2, 5, size=4))
    sets = {}
    for k in (0, 1, 2, 3):
        for c in itertools.combinations(range(4), k):
            if rng.random() < 0.35:
                sets[c] = float(rng.uniform(0.2, 3.0))
    sets.setdefault((0, 2), 1.0)
    return Marginals(shape, sets)


SMALL = [_random_marginals(seed) for seed in range(6)]


def _max_variance_strategy(W: Marginals, privacy: ZCDP) -> ResidualBlockStrategy:
    """The residual method's max-variance strategy, whose blocks on marginals are scalars."""
    return residual_strategy(W, privacy, loss="max_variance")


def _variance_matrix(W: Marginals) -> tuple[np.ndarray, np.ndarray]:
    """``K[a, S] = w_a² p_S / (Π_{i∈a∖S} n_i)²`` over the down-closure, and ``p_S``."""
    shape, workload = workload_marginals(W)
    sizes = DomainSizes(shape)
    closure = sorted({s for a in workload for s in _submasks(a) if sizes.multiplicity(s)})
    K = np.zeros((len(workload), len(closure)))
    for row, (a, squared) in enumerate(workload.items()):
        for j, s in enumerate(closure):
            if s & a == s:
                ratio = sizes.inside(a) // sizes.inside(s)
                K[row, j] = squared * sizes.column_norm_squared(s) / ratio**2
    return K, np.array([sizes.column_norm_squared(s) for s in closure])


@pytest.mark.parametrize(
    ("shape", "sizes", "reference"),
    [
        ((10,) * 8, (2,), 30_351.2),
        ((10,) * 8, (3,), 1_091_233),
        ((2,) * 15, (2,), 3_671.04),
        ((2,) * 15, (3,), 62_250.8),
    ],
)
def test_matches_residualplanners_published_optimum(shape, sizes, reference):
    W = Marginals(shape, _all_k_way(len(shape), sizes))
    A = marginal_optimal(W, RHO)
    error = expected_error(W, A, RHO)
    assert error == pytest.approx(reference, rel=2e-6)
    assert error <= expected_error(W, W, RHO)


@pytest.mark.parametrize("W", SMALL[1:4])
def test_closed_form_equals_a_numerical_optimum_over_residual_weights(W):
    shape, workload = workload_marginals(W)
    optimum = sum_variance_optimum(shape, workload)
    support = sorted(optimum.squared_weights)

    # Scale-free objective: sensitivity² × trace(WᵀW (AᵀA)⁺), through dpmm's own formula.
    def error_of(log_x: np.ndarray) -> float:
        A = ResidualBlockStrategy(shape, dict(zip(support, np.exp(0.5 * log_x), strict=True)))
        return expected_error(W, A, ZCDP("1/2"))

    start = np.zeros(len(support))
    found = scipy.optimize.minimize(error_of, start, method="BFGS")
    closed = expected_error(W, optimum.strategy(), ZCDP("1/2"))
    assert closed == pytest.approx(optimum.objective, rel=1e-10)
    assert closed <= found.fun * (1 + 1e-9)
    assert closed == pytest.approx(found.fun, rel=1e-5)


@pytest.mark.parametrize("W", SMALL)
def test_no_worse_than_identity_the_workload_or_random_marginal_weights(W):
    A = marginal_optimal(W, RHO)
    error = expected_error(W, A, RHO)
    assert error <= identity_error(W, RHO) * (1 + 1e-12)
    assert error <= expected_error(W, W, RHO) * (1 + 1e-12)
    rng = np.random.default_rng(7)
    for _ in range(5):
        reweighted = Marginals(
            W.domain_shape,
            {
                tuple(i for i in range(4) if m >> i & 1): float(rng.uniform(0.1, 3))
                for m in W.weights
            },
        )
        assert error <= expected_error(W, reweighted, RHO) * (1 + 1e-12)
    assert error >= svd_bound(W, RHO) * (1 - 1e-9)


@pytest.mark.parametrize("W", SMALL)
@pytest.mark.parametrize("method", [marginal_optimal, _max_variance_strategy])
def test_sensitivity_is_exactly_one_so_the_cost_is_the_requested_rho(W, method):
    A = method(W, RHO)
    assert isinstance(A, ResidualBlockStrategy)
    assert all(isinstance(block, float) for block in A.blocks.values())
    assert abs(A.sensitivity(2) - 1.0) <= 1e-12
    dense = A.dense()
    assert np.linalg.norm(dense, axis=0).max() == pytest.approx(1.0, abs=1e-12)
    assert expected_error(W, A, ZCDP("1/4")) == pytest.approx(
        2 * expected_error(W, A, ZCDP("1/2")), rel=1e-12
    )


@pytest.mark.parametrize("W", SMALL)
def test_max_variance_solution_beats_sum_variance_on_the_max_and_certifies_its_gap(W):
    optimum = residual_optimum(W, loss="max_variance")
    assert optimum.lower_bound <= optimum.objective <= optimum.lower_bound * (1 + 1e-6)
    by_max = per_query_variance(W, optimum.strategy(), ZCDP("1/2"))
    by_sum = per_query_variance(W, marginal_optimal(W, RHO), ZCDP("1/2"))
    assert by_max.max() == pytest.approx(optimum.objective, rel=1e-6)
    assert by_max.max() <= by_sum.max() * (1 + 1e-9)
    assert by_sum.sum() <= by_max.sum() * (1 + 1e-9)


@pytest.mark.parametrize("W", SMALL[:3])
def test_max_variance_matches_a_scipy_epigraph_solution(W):
    K, p = _variance_matrix(W)
    # Variables: v_S = 1/x_S (convex constraint Σ p/v ≤ 1) and the epigraph t.
    constraints = [
        {"type": "ineq", "fun": lambda z: z[-1] - K @ z[:-1]},
        {"type": "ineq", "fun": lambda z: 1.0 - np.sum(p / z[:-1])},
    ]
    start = np.append(np.full(len(p), 2.0 * p.sum()), 0.0)
    start[-1] = (K @ start[:-1]).max()
    found = scipy.optimize.minimize(
        lambda z: z[-1],
        start,
        jac=lambda z: np.eye(len(z))[-1],
        constraints=constraints,
        bounds=[(1e-9, None)] * len(p) + [(0, None)],
        method="SLSQP",
        options={"maxiter": 1000, "ftol": 1e-12},
    )
    assert found.success
    optimum = residual_optimum(W, loss="max_variance")
    assert optimum.objective == pytest.approx(found.fun, rel=1e-5)


def test_max_variance_dual_bound_is_below_every_feasible_strategy():
    W = SMALL[0]
    optimum = residual_optimum(W, loss="max_variance")
    rng = np.random.default_rng(3)
    for _ in range(20):
        weights = {s: float(rng.uniform(0.1, 2)) for s in optimum.blocks}
        A = ResidualBlockStrategy(optimum.shape, weights)
        worst = per_query_variance(W, A, ZCDP("1/2")).max()
        assert worst >= optimum.lower_bound


def test_max_variance_importance_weights_favour_the_weighted_marginal():
    W = Marginals((3, 4, 5), {(0, 1): 1.0, (1, 2): 1.0, (0, 2): 1.0})
    importance = [4.0 if mask == 0b110 else 1.0 for mask in W.weights]
    plain = _max_variance_strategy(W, RHO)
    favoured = residual_strategy(W, RHO, loss="max_variance", weights=importance)
    assert _cell_variance(favoured, 0b110) < _cell_variance(plain, 0b110)
    assert _cell_variance(favoured, 0b011) > _cell_variance(plain, 0b011)


def test_max_variance_reports_an_unreached_gap():
    K, _ = _variance_matrix(SMALL[1])
    with pytest.raises(DpmmError, match="gap"):
        max_variance_split(K, tolerance=1e-30, max_iterations=3, accept=1e-30)


def test_simulated_cell_variances_match_the_formula():
    W = Marginals((3, 2, 4), {(0, 1): 1.0, (1, 2): 2.0, (): 1.0})
    A = marginal_optimal(W, ZCDP("1/2"))
    predicted = per_query_variance(W, A, ZCDP("1/2"))  # σ² = 1 at sensitivity 1
    rng = np.random.default_rng(11)
    x = rng.integers(0, 50, size=W.shape[1]).astype(float)
    trials = 20_000
    noisy = (A @ x)[:, None] + rng.normal(size=(A.shape[0], trials))
    estimates = W @ (A.pinv() @ noisy)
    errors = estimates - (W @ x)[:, None]
    empirical = (errors**2).mean(axis=1)
    # Relative standard error of a variance estimate is √(2/trials) ≈ 1 %: allow 5 of them.
    np.testing.assert_allclose(empirical, predicted, rtol=5 * math.sqrt(2 / trials))
    assert abs(errors.mean(axis=1)).max() < 5 * math.sqrt(predicted.max() / trials)


def test_per_cell_variance_is_the_residual_formula():
    W = SMALL[2]
    A = marginal_optimal(W, RHO)
    variances = per_query_variance(W, A, RHO)
    offset = 0
    for mask, weight in W.weights.items():
        rows = Marginal(W.domain_shape, [i for i in range(4) if mask >> i & 1]).shape[0]
        expected = weight**2 * _cell_variance(A, mask) / 2.0
        np.testing.assert_allclose(variances[offset : offset + rows], expected, rtol=1e-9)
        offset += rows


def test_cell_variances_match_per_query_variance_per_marginal():
    W = SMALL[3]
    A = _max_variance_strategy(W, RHO)
    by_mask = cell_variances(W, A, RHO)
    variances = per_query_variance(W, A, RHO)
    offset = 0
    for mask in W.weights:
        rows = Marginal(W.domain_shape, [i for i in range(4) if mask >> i & 1]).shape[0]
        np.testing.assert_allclose(variances[offset : offset + rows], by_mask[mask], rtol=1e-9)
        offset += rows
    with pytest.raises(UnsupportedQueryError, match="over"):
        cell_variances(Marginals((2, 2), {(0,): 1.0}), A, RHO)
    dense = ResidualBlockStrategy(W.domain_shape, {0: 1.0, 0b1: np.eye(W.domain_shape[0] - 1)})
    with pytest.raises(UnsupportedQueryError, match="scalar"):
        cell_variances(W, dense, RHO)


def test_attributes_of_size_one_are_handled():
    W = Marginals((3, 1, 4), {(0, 1): 1.0, (1, 2): 2.0, (0, 2): 0.5})
    A = marginal_optimal(W, RHO)
    dense_w, dense_a = W.dense(), A.dense()
    trace = np.trace(dense_w.T @ dense_w @ np.linalg.pinv(dense_a.T @ dense_a))
    assert expected_error(W, A, RHO) == pytest.approx(trace / 2, rel=1e-10)
    assert abs(A.sensitivity(2) - 1.0) <= 1e-12
    assert expected_error(W, A, RHO) <= expected_error(W, W, RHO)


def test_accepts_a_marginal_and_unions_of_krons():
    shape = (3, 4)
    union = VStack(
        [
            Kron([Identity(3), Ones(1, 4)]),
            Weighted(2.0, Kron([Identity(3), Ones(1, 4)])),
            Kron([Ones(1, 3), Identity(4)]),
        ]
    )
    assert workload_marginals(union) == (shape, {0b01: 5.0, 0b10: 1.0})
    # m copies of a total count m times where repeated totals are accepted (OPT_M).
    repeated = VStack([union, Weighted(0.5, Kron([Ones(3, 3), Ones(2, 4)]))])
    with pytest.raises(UnsupportedQueryError, match="1×n totals"):
        workload_marginals(repeated)
    assert workload_marginals(repeated, repeated_totals=True) == (
        shape,
        {0b01: 5.0, 0b10: 1.0, 0: 1.5},
    )
    same = Marginals(shape, {(0,): math.sqrt(5.0), (1,): 1.0})
    np.testing.assert_allclose(
        marginal_optimal(union, RHO).dense(), marginal_optimal(same, RHO).dense(), atol=1e-14
    )
    single = Marginal(shape, [1])
    assert expected_error(single, marginal_optimal(single, RHO), RHO) == pytest.approx(2.0)
    assert METHODS["marginal_optimal"](same, RHO).blocks == marginal_optimal(same, RHO).blocks


def test_refuses_pure_dp_and_other_queries():
    W = Marginals((2, 3), {(0,): 1.0})
    with pytest.raises(UnsupportedQueryError, match="Gaussian"):
        marginal_optimal(W, PureDP(1))
    with pytest.raises(UnsupportedQueryError, match="marginals"):
        marginal_optimal(Kron([Prefix(2), Identity(3)]), RHO)
    with pytest.raises(UnsupportedQueryError):
        marginal_optimal(Marginals((2, 3), {(0,): 0.0}), RHO)


def test_selection_on_a_hundred_attributes_is_domain_free():
    shape = (10,) * 100
    workload = {
        sum(1 << i for i in c): 1.0 for k in range(3) for c in itertools.combinations(range(100), k)
    }
    optimum = sum_variance_optimum(shape, workload)
    A = optimum.strategy()
    assert abs(A.sensitivity(2) - 1.0) <= 1e-12
    assert len(A.blocks) == len(workload)
    assert optimum.objective == pytest.approx(optimum.lower_bound, rel=1e-12)
