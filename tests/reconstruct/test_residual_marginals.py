"""Marginals from residual measurements vs dense least squares on small domains."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Marginal, Marginals
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.measure.residual_tables import helmert_norms, measure_residuals
from dpmm.privacy import ZCDP
from dpmm.reconstruct.residual_marginals import (
    iter_residual_marginals,
    marginal_variance,
    residual_marginals,
)
from dpmm.strategy.marginal_optimal import cell_variances, marginal_optimal


def _members(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _row_norms(shape, mask) -> np.ndarray:
    norms = np.ones(1)
    for i in _members(mask):
        norms = np.multiply.outer(norms, helmert_norms(shape[i])).reshape(-1)
    return norms


def _workload(shape, sizes) -> Marginals:
    d = len(shape)
    return Marginals(shape, {c: 1.0 for k in sizes for c in itertools.combinations(range(d), k)})


@pytest.mark.parametrize(
    ("shape", "sizes"), [((2, 3, 4), (0, 1, 2)), ((3, 1, 2, 3), (2, 3)), ((4, 3), (1, 2))]
)
def test_tables_and_variances_equal_dense_least_squares(shape, sizes) -> None:
    rng = np.random.default_rng(7)
    W = _workload(shape, sizes)
    A = marginal_optimal(W, ZCDP(1))
    x = rng.integers(0, 5, size=math.prod(shape))
    measurement = measure_residuals(A, x, ZCDP(1), rng=rng)
    # Dense: normalized rows y = v / √c measure R_S x with noise σ_S²; generalized LS.
    R = ResidualStrategy(shape, {mask: 1.0 for mask in measurement.sets}).dense()
    norms = np.concatenate([_row_norms(shape, m) for m in measurement.sets])
    y = measurement.values / np.sqrt(norms)
    noise = np.concatenate(
        [np.full(len(_row_norms(shape, m)), float(measurement.sigma2[m])) for m in measurement.sets]
    )
    weighted = R / np.sqrt(noise)[:, None]
    x_hat = np.linalg.lstsq(weighted, y / np.sqrt(noise), rcond=None)[0]
    covariance = np.linalg.pinv(weighted.T @ weighted)
    queries = [c for k in sizes for c in itertools.combinations(range(len(shape)), k)]
    tables = residual_marginals(measurement, queries)
    expected_variances = cell_variances(W, A, ZCDP(1))
    for attrs in queries:
        M = Marginal(shape, attrs).dense()
        assert np.allclose(tables[attrs].values.reshape(-1), M @ x_hat, atol=1e-8)
        dense_variance = np.diag(M @ covariance @ M.T)
        assert np.allclose(dense_variance, tables[attrs].variance, rtol=1e-9)
        assert math.isclose(marginal_variance(measurement, attrs), tables[attrs].variance)
        # σ_S² is rounded up by a relative 2^-20 at most.
        mask = sum(1 << i for i in attrs)
        assert math.isclose(tables[attrs].variance, expected_variances[mask], rel_tol=2e-6)
        assert tables[attrs].values.shape == tuple(shape[i] for i in attrs)


def test_estimates_are_unbiased_around_the_true_tables() -> None:
    shape = (3, 4, 2)
    W = _workload(shape, (2,))
    A = marginal_optimal(W, ZCDP(1))
    rng = np.random.default_rng(8)
    x = rng.integers(0, 20, size=math.prod(shape))
    errors = []
    for _ in range(30):
        measurement = measure_residuals(A, x, ZCDP(1), rng=rng)
        for item in iter_residual_marginals(measurement, [(0, 2)]):
            truth = x.reshape(shape).sum(axis=1)
            errors.append(((item.values - truth) ** 2).mean() / item.variance)
    assert 0.7 < np.mean(errors) < 1.3


def test_a_query_needing_an_unmeasured_residual_is_refused() -> None:
    shape = (2, 3, 2)
    A = ResidualStrategy(shape, {0: 1.0, 0b001: 1.0, 0b010: 1.0, 0b011: 1.0})
    measurement = measure_residuals(A, np.ones(12, dtype=np.int64), ZCDP(1))
    with pytest.raises(UnsupportedQueryError, match=r"\[2\]"):
        residual_marginals(measurement, [(0, 2)])
    with pytest.raises(UnsupportedQueryError, match="outside"):
        residual_marginals(measurement, [(5,)])
