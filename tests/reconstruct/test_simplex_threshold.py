"""The simplex threshold from block summaries equals the sorting formula's."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from dpmm.reconstruct.simplex_threshold import threshold


def _sorted_projection(v: np.ndarray, total: float) -> np.ndarray:
    """The textbook projection onto {x ≥ 0, Σx = total} (sort, cumulative sums)."""
    if total == 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    candidates = (np.cumsum(u) - total) / np.arange(1, u.size + 1)
    rho = np.nonzero(u > candidates)[0][-1]
    return np.maximum(v - candidates[rho], 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_threshold_matches_the_sorting_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        size = int(rng.integers(1, 60))
        v = rng.normal(size=size) * rng.choice([1e-6, 1.0, 1e6])
        if rng.random() < 0.3:
            v = np.round(v)  # ties
        if rng.random() < 0.2:
            v = np.abs(rng.standard_cauchy(size))  # heavy tail: one entry takes most
        total = float(rng.choice([0.0, 1e-9, abs(rng.normal()) * size, 1e7]))
        blocks = np.array_split(v, int(rng.integers(1, 5)))  # empty blocks included
        projected = np.maximum(v - threshold(blocks, total), 0.0)
        expected = _sorted_projection(v, total)
        scale = max(1.0, float(np.abs(v).max()), total)
        np.testing.assert_allclose(projected, expected, atol=1e-12 * scale)
        assert projected.sum() == pytest.approx(total, abs=1e-10 * scale)


def test_a_million_spread_entries_leave_few_in_the_final_bracket() -> None:
    from dpmm.reconstruct import simplex_threshold as st

    v = np.random.default_rng(7).exponential(size=10**6) - 0.5
    bracket = st.first_bracket([st.summary(v)], 1e5)
    for _ in range(st.HISTOGRAM_PASSES):
        bracket = st.narrow([st.histogram(v, bracket)], bracket, 1e5)
    assert st.inside(v, bracket)[2].size <= 10
    np.testing.assert_allclose(
        np.maximum(v - st.exact([st.inside(v, bracket)], bracket, 1e5), 0.0),
        _sorted_projection(v, 1e5),
        atol=1e-9,
    )


def test_threshold_over_delayed_blocks() -> None:
    v = np.random.default_rng(8).normal(size=1000)
    blocks = [dask.delayed(np.asarray)(b) for b in np.array_split(v, 4)]
    tau = threshold(blocks, 30.0)
    np.testing.assert_allclose(np.maximum(v - tau, 0.0), _sorted_projection(v, 30.0), atol=1e-12)
