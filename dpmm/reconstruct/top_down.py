"""A real (signed) estimate of the data vector rounded top-down through a tree of cells.

The integer vector of a large domain cannot come from NNLS (its solve took 10.5 minutes
on 2·10⁶ cells), and the one nearest the least-squares estimate over the whole vector is
a poor one: a least-squares vector of sparse data is noise around zero in most cells,
so one projection onto ``{x ≥ 0, Σx = T}`` clips those cells and takes their positive
noise from every occupied cell alike, and every aggregate over many cells drifts.

Here the vector is rounded the way census geographies are (Abowd et al. 2022's TopDown,
with least squares in place of their noisy measurements): the cells in their flat order
form a tree, whose levels are the attribute prefixes (the total; each value of the first
attribute; each pair of values of the first two; …) with an attribute of more than
:data:`BRANCHING` values split b-ary into runs of consecutive values first. From the
root's integer total down, each node's children get the non-negative integers summing to
the node's own that are nearest (in squared distance) their least-squares sums: the
Euclidean projection onto that simplex, then largest remainders, the rule of
:func:`~dpmm.reconstruct.integer.nearest_integer_vector`, run for every node of a level
at once. A node's clipping and shift then stay among its own children, and the sums of
the upper levels (large counts, little noise) are kept almost whole.

It is deterministic (ties to the lower cell), and costs two sorts of each level's nodes
within their parents: O(n log b) per level, a few seconds on 10⁷ cells.

Example:
    >>> top_down_rounding(np.array([[2.6, -0.4], [1.3, 0.5]]), 4).tolist()
    [[2, 0], [1, 1]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpmm.errors import ArgumentError

__all__ = ["BRANCHING", "level_starts", "nearest_in_segments", "top_down_rounding"]

#: An attribute with more values than this is split into runs of BRANCHING^j consecutive
#: values before its single values, so a run's clipping stays in the run (a range query
#: over the attribute keeps the sums of the runs it covers).
BRANCHING = 16


def level_starts(shape: Sequence[int], branching: int = BRANCHING) -> list[np.ndarray]:
    """The first cell (flat, C order) of every node of each level below the root, top down;
    the last level is every cell.

    Example:
        >>> [s.tolist() for s in level_starts([2, 3])]
        [[0, 3], [0, 1, 2, 3, 4, 5]]
        >>> [s.tolist() for s in level_starts([5], branching=2)]
        [[0, 4], [0, 2, 4], [0, 1, 2, 3, 4]]
    """
    levels: list[np.ndarray] = []
    outer = 1
    for axis, size in enumerate(shape):
        inner = math.prod(shape[axis + 1 :])
        width = 1
        while width * branching < size:
            width *= branching
        prefixes = np.arange(outer, dtype=np.int64)[:, None] * size
        while width >= 1:
            values = np.arange(0, size, width, dtype=np.int64)[None, :]
            if width > 1 or size > 1:  # a size-1 attribute adds no level
                levels.append(((prefixes + values) * inner).reshape(-1))
            width //= branching
        outer *= size
    if not levels or levels[-1].size != outer:
        levels.append(np.arange(outer, dtype=np.int64))
    return levels


def nearest_in_segments(values: np.ndarray, segments: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Per segment, the non-negative integers summing to its total nearest ``values`` in
    squared distance (projection onto the segment's simplex, then largest remainders,
    ties to the lower index).

    Args:
        values: Real values (negative allowed), one per element.
        segments: The segment of each element, non-decreasing, every segment
            ``0 … len(totals) − 1`` non-empty.
        totals: Each segment's non-negative integer sum.

    Example:
        >>> nearest_in_segments(np.array([2.6, -0.4, 0.5, 0.5]), np.array([0, 0, 1, 1]),
        ...                     np.array([2, 1])).tolist()
        [2, 0, 1, 0]
    """
    count = totals.size
    firsts = np.searchsorted(segments, np.arange(count))
    offsets = firsts[segments]  # each element's segment's first position
    order = np.lexsort((-values, segments))  # each segment's values, largest first
    ordered = values[order]
    del order
    shifts = np.cumsum(ordered)  # then the shift that leaves the first j in the support
    shifts -= (shifts[firsts] - ordered[firsts])[segments]
    shifts -= totals[segments]
    shifts /= np.arange(1, values.size + 1) - offsets
    support = np.bincount(segments, weights=ordered > shifts, minlength=count).astype(np.int64)
    del ordered
    # A segment of total 0 has no support: every element goes to 0.
    tau = np.full(count, np.inf)
    kept = support > 0
    tau[kept] = shifts[firsts[kept] + support[kept] - 1]
    del shifts
    projected = values - tau[segments]
    np.maximum(projected, 0.0, out=projected)
    rounded = np.floor(projected)
    short = totals - np.bincount(segments, weights=rounded, minlength=count).astype(np.int64)
    order = np.lexsort((rounded - projected, segments))  # largest remainders first
    up = order[np.arange(values.size) - offsets < short[segments]]
    del order, offsets
    rounded = rounded.astype(np.int64)
    rounded[up] += 1
    for segment in np.flatnonzero(short < 0):  # float rounding of a projection: rare
        rows = slice(firsts[segment], firsts[segment] + np.sum(segments == segment))
        rounded[rows] = _take_smallest(rounded[rows], projected[rows], int(-short[segment]))
    return rounded


def _take_smallest(rounded: np.ndarray, projected: np.ndarray, units: int) -> np.ndarray:
    """``units`` taken off the positive cells of smallest remainder (ties: lower index)."""
    result = rounded.copy()
    order = np.lexsort((np.arange(result.size), projected - np.floor(projected)))
    order = order[result[order] > 0]
    result[order[:units]] -= 1
    return result


def top_down_rounding(estimate: np.ndarray, total: int, branching: int = BRANCHING) -> np.ndarray:
    """The estimate (shaped as the domain) rounded to a non-negative integer vector
    summing to ``total``, top-down through :func:`level_starts`' tree.

    Raises:
        ArgumentError: a negative total, an empty vector with a positive one, or values
            that are not finite.
    """
    values = np.asarray(estimate, dtype=np.float64)
    flat = values.reshape(-1)
    total = int(total)
    if total < 0 or (flat.size == 0 and total > 0):
        raise ArgumentError(f"No non-negative vector of {flat.size} cells sums to {total}.")
    if not np.all(np.isfinite(flat)):
        raise ArgumentError("Values to round must be finite.")
    if flat.size == 0:
        return np.zeros(values.shape, dtype=np.int64)
    counts = np.array([total], dtype=np.int64)
    parents = np.array([0], dtype=np.int64)
    for starts in level_starts(values.shape or (1,), branching):
        sums = flat if starts.size == flat.size else np.add.reduceat(flat, starts)
        segments = np.searchsorted(parents, starts, side="right") - 1
        counts = nearest_in_segments(sums, segments, counts)
        parents = starts
    return counts.reshape(values.shape)
