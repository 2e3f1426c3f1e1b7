"""Top-down rounding of a signed estimate through the tree of attribute prefixes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.reconstruct.integer import (
    level_starts,
    nearest_in_segments,
    nearest_integer_vector,
    top_down_rounding,
)

SEED = 20261127


def test_each_segment_is_the_nearest_integer_vector_with_its_total() -> None:
    rng = np.random.default_rng(SEED)
    for _ in range(200):
        sizes = rng.integers(1, 7, int(rng.integers(1, 6)))
        segments = np.repeat(np.arange(sizes.size), sizes)
        values = rng.normal(0.5, 2.0, segments.size).round(int(rng.integers(0, 3)))  # ties too
        totals = rng.integers(0, 9, sizes.size)
        rounded = nearest_in_segments(values, segments, totals)
        for segment, total in enumerate(totals):
            cells = segments == segment
            expected = nearest_integer_vector(values[cells], int(total))
            assert np.array_equal(rounded[cells], expected), (values[cells], total)


def test_levels_refine_down_to_every_cell() -> None:
    for shape in ([3], [40], [2, 3, 1, 5], [1, 1], [300, 7]):
        levels = level_starts(shape)
        size = int(np.prod(shape))
        assert np.array_equal(levels[-1], np.arange(size))
        for upper, lower in itertools.pairwise(levels):
            assert set(upper.tolist()) <= set(lower.tolist()) and upper.size < lower.size
    # 300 values: runs of 256, then of 16, then single values, before the next attribute.
    assert [s.size for s in level_starts([300, 7])] == [2, 19, 300, 2100]


def test_every_node_of_the_tree_is_rounded_from_its_parent() -> None:
    rng = np.random.default_rng(SEED + 1)
    for _ in range(20):
        shape = [int(s) for s in rng.integers(1, 40, int(rng.integers(1, 4)))]
        truth = rng.poisson(rng.exponential(2.0, shape) * (rng.random(shape) < 0.3))
        estimate = truth + rng.normal(0, 3.0, shape)  # least squares of sparse data
        total = int(rng.integers(0, 2 * truth.sum() + 5))
        rounded = top_down_rounding(estimate, total)
        assert rounded.shape == tuple(shape) and rounded.dtype == np.int64
        assert rounded.sum() == total and rounded.min() >= 0
        assert np.array_equal(rounded, top_down_rounding(estimate.copy(), total))
        flat, real = rounded.reshape(-1), estimate.reshape(-1)
        parents = np.array([0])
        for starts in level_starts(shape):
            counts, sums = np.add.reduceat(flat, starts), np.add.reduceat(real, starts)
            above = np.add.reduceat(flat, parents)
            owner = np.searchsorted(parents, starts, side="right") - 1
            for parent, count in enumerate(above):
                children = owner == parent
                expected = nearest_integer_vector(sums[children], int(count))
                assert np.array_equal(counts[children], expected)
            parents = starts


def test_integers_stay_and_bad_input_is_refused() -> None:
    counts = np.random.default_rng(SEED + 2).integers(0, 20, (6, 5, 4))
    assert np.array_equal(top_down_rounding(counts.astype(float), int(counts.sum())), counts)
    assert top_down_rounding(np.zeros((3, 2)), 0).sum() == 0
    with pytest.raises(ArgumentError, match="sums to -1"):
        top_down_rounding(np.ones(3), -1)
    with pytest.raises(ArgumentError, match="finite"):
        top_down_rounding(np.array([1.0, np.nan]), 1)
