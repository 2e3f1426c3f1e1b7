"""Marginal tables counted from record arrays, against the marginals of the data vector."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmm.measure.exact import MeasurementError
from dpmm.measure.tables import count_marginals


def _records(rng: np.random.Generator, shape, count: int) -> np.ndarray:
    return np.stack([rng.integers(0, n, size=count) for n in shape], axis=1)


def _cube(records: np.ndarray, shape) -> np.ndarray:
    cells = np.ravel_multi_index(records.T, shape)
    return np.bincount(cells, minlength=math.prod(shape)).reshape(shape)


def _marginal(cube: np.ndarray, attrs) -> np.ndarray:
    return cube.sum(axis=tuple(i for i in range(cube.ndim) if i not in attrs))


def test_tables_from_record_chunks_equal_the_data_vector():
    shape = (2, 3, 4)
    records = _records(np.random.default_rng(2), shape, 200)
    sets = [(), (0,), (2,), (0, 1), (1, 2), (0, 1, 2)]
    counts = count_marginals([records[:70], records[70:]], shape, sets)
    cube = _cube(records, shape)
    assert counts.domain_shape == shape and set(counts.tables) == set(sets)
    for attrs, table in counts.tables.items():
        np.testing.assert_array_equal(table, _marginal(cube, attrs))
    assert counts.tables[()].item() == 200


def test_sets_with_gaps_and_mixed_sizes_are_sorted_and_counted():
    shape = (2, 3, 4, 5)
    records = _records(np.random.default_rng(9), shape, 300)
    counts = count_marginals([records[:1], records[1:]], shape, [(3, 0), (0, 1), (2,), (1, 3)])
    cube = _cube(records, shape)
    assert set(counts.tables) == {(0, 1), (0, 3), (2,), (1, 3)}
    for attrs in counts.tables:
        np.testing.assert_array_equal(counts.tables[attrs], _marginal(cube, attrs))


def test_refusals():
    shape = (2, 3, 4)
    with pytest.raises(MeasurementError, match="outside"):
        count_marginals([np.array([[0, 3, 0]])], shape, [(1,)])
    with pytest.raises(MeasurementError, match="not in the domain"):
        count_marginals([np.array([[0, 0, 0]])], shape, [(3,)])
    with pytest.raises(MeasurementError, match="chunk"):
        count_marginals([np.array([0, 0, 0])], shape, [(1,)])
