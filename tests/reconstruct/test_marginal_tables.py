"""Marginal tables in the marginal algebra against the dense GLS estimate; huge domains."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Marginal, Marginals
from dpmm.reconstruct import (
    MarginalMeasurement,
    ReconstructionError,
    least_squares,
    marginal_tables,
)


def _random_case(seed: int) -> tuple[tuple[int, ...], list, list, list, list]:
    """Overlapping measured sets of every size on a small domain, and queries inside them."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(2, 5, size=4))
    found = {
        tuple(sorted(rng.choice(4, size=int(k), replace=False))) for k in rng.integers(0, 4, 5)
    }
    sets = sorted(found)
    weights = list(rng.uniform(0.5, 2.0, len(sets)))
    stds = list(rng.uniform(0.5, 3.0, len(sets)))
    queries = sorted({sub for a in sets for sub in (a, a[:1], a[1:], ())})
    return shape, sets, weights, stds, queries


FIXED = (
    (3, 4, 2, 3),
    [(0, 1), (1, 2, 3), (0, 3), ()],
    [1.0, 2.0, 0.5, 1.0],
    [1.0, 3.0, 0.6, 2.0],
    [(1,), (0, 1), (3, 0), (2,), (), (1, 3)],
)


@pytest.mark.parametrize("case", [FIXED, *(_random_case(seed) for seed in range(6))])
def test_tables_match_dense_generalized_least_squares(case) -> None:
    shape, sets, weights, stds, queries = case
    rng = np.random.default_rng(40)
    truth = rng.poisson(2, int(np.prod(shape))).astype(float)
    measurements, ys, row_std = [], [], []
    for attrs, w, s in zip(sets, weights, stds, strict=True):
        M = Marginal(shape, attrs)
        y = w * (M @ truth) + rng.normal(0, s, M.shape[0])
        measurements.append(MarginalMeasurement(attrs, y, s, w))
        ys.append(y)
        row_std.append(np.full(M.shape[0], s))
    A = Marginals(shape, dict(zip(sets, weights, strict=True)))
    std = np.concatenate(row_std)
    x_hat = least_squares(A, np.concatenate(ys), noise_std=std).x
    whitened = A.dense() / std[:, None]
    covariance = np.linalg.pinv(whitened.T @ whitened)
    tables = marginal_tables(shape, measurements, queries)
    for query in queries:
        M = Marginal(shape, sorted(query)).dense()
        result = tables[tuple(sorted(query))]
        np.testing.assert_allclose(result.values, M @ x_hat, atol=1e-9)
        np.testing.assert_allclose(
            result.standard_errors, np.sqrt(np.diag(M @ covariance @ M.T)), atol=1e-12
        )


def test_huge_domain_without_the_full_vector() -> None:
    shape = (10**4, 10**4, 10**3)  # 10¹¹ cells
    rng = np.random.default_rng(41)
    a = rng.normal(100, 1, 10**4)
    measurements = [
        MarginalMeasurement((0,), a, 1.0),
        MarginalMeasurement((), np.array([a.sum() + 5.0]), 2.0),
    ]
    tables = marginal_tables(shape, measurements, [(), (0,)])
    # Two measurements of the total: precision-weighted average of Σa (var 10⁴) and Σa + 5 (var 4).
    expected = (a.sum() / 10**4 + (a.sum() + 5.0) / 4) / (1 / 10**4 + 1 / 4)
    assert tables[()].values[0] == pytest.approx(expected, rel=1e-12)
    assert tables[()].standard_errors[0] == pytest.approx((1 / 10**4 + 1 / 4) ** -0.5)


def test_unmeasured_marginal_and_bad_tables_raise() -> None:
    m = MarginalMeasurement((0,), np.zeros(3), 1.0)
    with pytest.raises(UnsupportedQueryError, match="not contained"):
        marginal_tables((3, 4), [m], [(1,)])
    with pytest.raises(ReconstructionError, match="has 2 values but 3 cells"):
        marginal_tables((3, 4), [MarginalMeasurement((0,), np.zeros(2), 1.0)], [(0,)])
    with pytest.raises(ReconstructionError, match="NaN"):
        marginal_tables((3, 4), [MarginalMeasurement((0,), np.array([1, np.nan, 2]), 1.0)], [])


@pytest.mark.parametrize("b", [0, 0b1, 0b1010_0110, (1 << 40) | (1 << 3) | 1])
def test_subsets_are_numbered_as_sorting_would(b: int) -> None:
    from dpmm.reconstruct.marginal_tables import _subset_positions

    masks = np.random.default_rng(b).integers(0, 1 << 42, size=(7, 300), dtype=np.int64)
    subsets, positions = _subset_positions(b, 42)(masks)
    met, inverse = np.unique(masks & b, return_inverse=True)
    assert subsets.tolist() == sorted(subsets.tolist())
    assert np.array_equal(subsets[positions], masks & b)
    assert np.array_equal(np.searchsorted(subsets, met)[inverse.reshape(masks.shape)], positions)
