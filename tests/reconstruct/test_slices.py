"""Sliced rounding by chunks: the integers of the in-memory walk, bit for bit, whatever the
chunks (on the synchronous scheduler here; on worker processes in
tests/pipeline/test_integer_on_cluster.py)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.reconstruct.integer import cumulative_rounding
from dpmm.reconstruct.slices import chunked_sliced_rounding, slice_steps, sliced_rounding

SEED = 20261127


def _chunked(values: np.ndarray, chunks: tuple[int, ...], axes: list[int], totals) -> np.ndarray:
    seen: list[np.ndarray] = []

    def given(sums: np.ndarray) -> np.ndarray:
        seen.append(sums)
        return np.asarray(totals)

    with dask.config.set(scheduler="synchronous"):
        rounded = chunked_sliced_rounding(da.from_array(values, chunks=chunks), axes, given)
        result = rounded.compute()
    (sums,) = seen  # asked once, with the slices' sums shaped as their table
    assert sums.shape == tuple(values.shape[a] for a in axes)
    return result


def test_chunks_give_the_in_memory_integers_bit_for_bit() -> None:
    """Random sparse estimates of 1-3 attributes (zero slices, tiny and large values),
    random declared axes and totals far from the estimate's sums, random chunks (one
    cell, whole axes, uneven): always the in-memory integers."""
    rng = np.random.default_rng(SEED)
    for _ in range(150):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(s) for s in rng.integers(1, 8, ndim))
        scale = float(rng.choice([1e-3, 0.3, 4.0, 1e4]))
        values = rng.exponential(scale, shape) * (rng.random(shape) < 0.5)
        axes = sorted(int(a) for a in rng.permutation(ndim)[: int(rng.integers(0, ndim + 1))])
        totals = rng.integers(0, 40, [shape[a] for a in axes])
        chunks = tuple(int(rng.integers(1, s + 1)) for s in shape)
        expected = sliced_rounding(values, axes, totals)
        assert np.array_equal(_chunked(values, chunks, axes, totals), expected)


def test_long_running_sums_across_many_chunks_match() -> None:
    """2·10⁵ cells in chunks of 1,000 cells: the running sums continue from chunk to chunk
    in the order numpy adds them, so no rounding tie falls differently."""
    rng = np.random.default_rng(SEED + 1)
    values = rng.exponential(0.7, (40, 50, 100)) * (rng.random((40, 50, 100)) < 0.4)
    for axes in ([], [0], [1], [0, 2]):
        table = values.sum(axis=tuple(i for i in range(3) if i not in axes))
        totals = cumulative_rounding(table, round(values.sum()) + 17)
        expected = sliced_rounding(values, axes, totals)
        assert np.array_equal(_chunked(values, (1, 10, 100), axes, totals), expected)


def test_the_steps_follow_what_earlier_gaps_owe() -> None:
    """The first slice's total is 2 under its sum (2 owed), the second's 1 over (it takes
    1 of them back, half of what is owed), the third, of zeros, 2 over: it takes the 1
    still owed and spreads the other evenly."""
    steps = slice_steps(np.array([5.0, 3.0, 0.0]), np.array([3, 4, 2]), 4)
    assert steps.scales.tolist() == [-0.4, 0.0, 0.0]
    assert steps.repays.tolist() == [0.0, 0.5, 1.0]
    assert steps.spreads.tolist() == [0.0, 0.0, 1.0]


def test_bad_input_is_refused_in_one_sentence() -> None:
    values = da.from_array(np.ones((2, 3)), chunks=1)
    with pytest.raises(ArgumentError, match="ascending axes"):
        chunked_sliced_rounding(values, [1, 0], lambda sums: sums)
    with pytest.raises(ArgumentError, match=r"need as many non-negative totals, got \(3,\)"):
        chunked_sliced_rounding(values, [0], lambda sums: np.array([1, 2, 3]))
    with pytest.raises(ArgumentError, match="finite and ≥ 0"):
        chunked_sliced_rounding(values - 2.0, [], lambda sums: np.array(0))
