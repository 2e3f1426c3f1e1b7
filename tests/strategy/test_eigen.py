"""eigen_design: exact errors, the SVD bound, separability, Dask == numpy, support of W."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from dpmm.error import expected_error, svd_bound
from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import AllRange, Identity, Kron, Ones, Prefix, VStack
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy.eigen import (
    eigen_design,
    select_eigen,
    solve_eigen_design,
)

GAUSS, LAPLACE = ZCDP(1), PureDP(1)


def _dense_error(W, A, privacy) -> float:
    dense, gram = A.dense(), W.gram().dense()
    columns = np.abs(dense).sum(0) if privacy.norm == 1 else np.linalg.norm(dense, axis=0)
    return privacy.noise_variance(columns.max()) * np.trace(
        gram @ np.linalg.pinv(dense.T @ dense, rcond=1e-10)
    )


def _union() -> VStack:
    return VStack([Kron([Prefix(6), Identity(5)]), 2.0 * Kron([Identity(6), AllRange(5)])])


@pytest.mark.parametrize("W", [AllRange(32), Prefix(32)])
def test_one_dimensional_error_is_certified_against_the_svd_bound(W) -> None:
    design = solve_eigen_design(W, GAUSS, tol=1e-6)
    error = expected_error(W, design.strategy, GAUSS)
    assert error == pytest.approx(_dense_error(W, design.strategy, GAUSS), rel=1e-9)
    assert error == pytest.approx(design.objective * GAUSS.noise_variance(1), rel=1e-9)
    bound = svd_bound(W, GAUSS)
    # The certificate: no eigen weights reach below dual_bound, which is above the SVD bound.
    assert bound <= design.dual_bound * GAUSS.noise_variance(1) * (1 + 1e-9)
    assert error <= design.dual_bound * GAUSS.noise_variance(1) * (1 + 1e-6)
    if isinstance(W, AllRange):
        assert error / bound < 1.1
    else:
        # Prefix: the eigen family itself is provably 1.5x above the SVD bound.
        assert design.dual_bound * GAUSS.noise_variance(1) / bound > 1.5


@pytest.mark.parametrize("privacy", [GAUSS, LAPLACE])
def test_separable_solution_is_the_per_factor_solution(privacy) -> None:
    factors = [AllRange(8), Prefix(6)]
    design = solve_eigen_design(Kron(factors), privacy, tol=1e-8)
    assert design.separable
    product = 1.0
    for factor, weights in zip(factors, design.strategy.factor_values, strict=True):
        alone = solve_eigen_design(factor, privacy, tol=1e-8)
        np.testing.assert_allclose(
            weights / weights.max(),
            alone.strategy.factor_values[0] / alone.strategy.factor_values[0].max(),
            rtol=1e-5,
            atol=1e-9,
        )
        product *= alone.objective
    assert design.objective == pytest.approx(product, rel=1e-7)
    A = design.strategy
    assert expected_error(Kron(factors), A, privacy) == pytest.approx(
        _dense_error(Kron(factors), A, privacy), rel=1e-9
    )


@pytest.mark.parametrize("privacy", [GAUSS, LAPLACE])
def test_per_cell_weights_beat_kron_weights_on_a_union(privacy) -> None:
    W = _union()
    separable = solve_eigen_design(W, privacy, separable=True, tol=1e-6)
    full = solve_eigen_design(W, privacy, separable=False, tol=1e-6)
    separable_error = expected_error(W, separable.strategy, privacy)
    full_error = expected_error(W, full.strategy, privacy)
    assert full_error == pytest.approx(_dense_error(W, full.strategy, privacy), rel=1e-9)
    assert separable_error == pytest.approx(_dense_error(W, separable.strategy, privacy), rel=1e-9)
    assert full_error < separable_error
    assert full_error <= full.dual_bound * privacy.noise_variance(1) * (1 + 1e-6)


def test_dask_design_equals_numpy_design() -> None:
    W = _union()
    with dask.config.set(scheduler="threads"):
        eager = solve_eigen_design(W, GAUSS, separable=False, tol=0.0, max_iter=10)
        lazy = solve_eigen_design(W, GAUSS, separable=False, tol=0.0, max_iter=10, chunk_cells=10)
        assert lazy.objective == pytest.approx(eager.objective, rel=1e-12)
        np.testing.assert_allclose(
            np.asarray(lazy.strategy.full_values), eager.strategy.full_values, rtol=1e-9
        )
        assert expected_error(W, lazy.strategy, GAUSS) == pytest.approx(
            expected_error(W, eager.strategy, GAUSS), rel=1e-10
        )


@pytest.mark.parametrize(
    "W",
    [
        Kron([Prefix(4), Ones(1, 3)]),  # Ones has a two-dimensional null space
        VStack([Kron([Identity(4), Ones(1, 3)]), Kron([Ones(1, 4), Identity(3)])]),  # marginals
        AllRange(7),
    ],
)
@pytest.mark.parametrize("separable", [True, False])
def test_strategy_supports_the_workload(W, separable: bool) -> None:
    A = eigen_design(W, GAUSS, separable=separable)
    dense_w, dense_a = W.dense(), A.dense()
    np.testing.assert_allclose(dense_w @ np.linalg.pinv(dense_a) @ dense_a, dense_w, atol=1e-8)
    assert A.sensitivity(2) == pytest.approx(1.0, rel=1e-9)
    assert expected_error(W, A, GAUSS) == pytest.approx(_dense_error(W, A, GAUSS), rel=1e-8)


def test_laplace_weights_are_optimal_for_the_l1_sensitivity() -> None:
    W = AllRange(16)
    l1 = eigen_design(W, LAPLACE)
    assert isinstance(l1, EigenStrategy)
    assert l1.sensitivity(1) == pytest.approx(np.abs(l1.dense()).sum(0).max(), rel=1e-12)
    l2 = eigen_design(W, GAUSS)  # the L2-optimal weights, judged by their L1 sensitivity
    assert expected_error(W, l1, LAPLACE) < expected_error(W, l2, LAPLACE)


def test_non_commuting_grams_are_refused() -> None:
    W = VStack([Kron([Prefix(4), Identity(3)]), Kron([AllRange(4), Identity(3)])])
    with pytest.raises(UnsupportedQueryError):
        eigen_design(W, GAUSS)


def test_select_eigen_is_the_default_design() -> None:
    W = Kron([Prefix(5), AllRange(4)])
    assert np.allclose(select_eigen(W, GAUSS).dense(), eigen_design(W, GAUSS).dense())


@pytest.mark.parametrize("privacy", [GAUSS, LAPLACE])
def test_completion_keeps_sensitivity_and_lowers_error(privacy) -> None:
    W = Kron([AllRange(12), Prefix(5)])
    plain = eigen_design(W, privacy)
    completed = eigen_design(W, privacy, complete=True)
    dense = completed.dense()
    columns = np.abs(dense).sum(0) if privacy.norm == 1 else np.linalg.norm(dense, axis=0)
    np.testing.assert_allclose(columns, 1.0, rtol=1e-9)  # every column at the sensitivity
    error = expected_error(W, completed, privacy)
    assert error == pytest.approx(_dense_error(W, completed, privacy), rel=1e-9)
    assert error < expected_error(W, plain, privacy)
