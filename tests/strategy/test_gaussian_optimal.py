import numpy as np
import pytest
from scipy.optimize import minimize

from dpmm.error import expected_error, svd_bound
from dpmm.errors import TooLargeError
from dpmm.linalg import AllRange, Dense, Hierarchical, Identity, Prefix
from dpmm.privacy import ZCDP
from dpmm.strategy.gaussian_optimal import MAX_SIZE, optimal_gaussian_factor

PRIVACY = ZCDP("1/2")  # unit noise variance at unit sensitivity


@pytest.mark.parametrize(
    "W", [Prefix(24), AllRange(20), Dense(np.random.default_rng(5).normal(size=(9, 6)))]
)
def test_error_is_exact_certified_and_between_the_bounds(W):
    optimum = optimal_gaussian_factor(W.gram().dense())
    assert optimum.strategy.sensitivity(2) == pytest.approx(1.0, rel=1e-12)
    assert expected_error(W, optimum.strategy, PRIVACY) == pytest.approx(optimum.error, rel=1e-9)
    assert optimum.lower_bound <= optimum.error <= optimum.lower_bound * (1 + 1e-3)
    assert optimum.lower_bound >= svd_bound(W, PRIVACY) * (1 - 1e-9)


def test_no_strategy_beats_the_dual_bound():
    W = Prefix(6)
    optimum = optimal_gaussian_factor(W.gram().dense())
    G = W.gram().dense()

    def error(flat):
        A = flat.reshape(6, 6)
        return np.trace(G @ np.linalg.pinv(A.T @ A)) * (A**2).sum(axis=0).max()

    rng = np.random.default_rng(3)
    found = min(minimize(error, rng.normal(size=36), method="BFGS").fun for _ in range(4))
    assert found >= optimum.lower_bound * (1 - 1e-6)
    assert optimum.error <= found * (1 + 2e-3)  # the certified strategy is as good as a search
    for A in (Identity(6), Hierarchical(6, 2)):
        assert expected_error(W, A, PRIVACY) >= optimum.lower_bound


def test_prefix_cannot_reach_the_svd_bound():
    # The dual certificate proves the SVD bound is not attainable for prefix sums.
    W = Prefix(32)
    optimum = optimal_gaussian_factor(W.gram().dense())
    assert optimum.lower_bound > 1.06 * svd_bound(W, PRIVACY)


def test_bad_grams_are_refused():
    with pytest.raises(ValueError, match="square"):
        optimal_gaussian_factor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="symmetric"):
        optimal_gaussian_factor(np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="zero diagonal"):
        optimal_gaussian_factor(np.diag([1.0, 0.0]))
    with pytest.raises(ValueError, match="singular"):
        optimal_gaussian_factor(np.ones((3, 3)))
    with pytest.raises(TooLargeError):
        optimal_gaussian_factor(np.eye(MAX_SIZE + 1))
