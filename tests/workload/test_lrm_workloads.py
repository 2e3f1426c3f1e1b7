"""The seed-002 workload generators: shapes, entries, ranks."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.workload.lrm_workloads import wdiscrete, wrange, wrelated


def test_wdiscrete_entries_and_frequency() -> None:
    W = wdiscrete(256, 512, np.random.default_rng(0)).dense()
    assert W.shape == (256, 512)
    assert set(np.unique(W)) == {-1.0, 1.0}
    # 131,072 Bernoulli(0.02) draws: the share of +1 is 0.02 within 5 standard errors.
    share = (W == 1).mean()
    assert abs(share - 0.02) < 5 * np.sqrt(0.02 * 0.98 / W.size)
    assert np.linalg.matrix_rank(W) == 256


def test_wrange_rows_are_intervals() -> None:
    n = 40
    W = wrange(200, n, np.random.default_rng(1)).dense()
    assert W.shape == (200, n)
    for row in W:
        ones = np.flatnonzero(row)
        assert set(np.unique(row)) <= {0.0, 1.0}
        assert ones.size >= 1 and ones[-1] - ones[0] + 1 == ones.size  # contiguous
    # Both ends uniform: the first cell is in a range with probability 1/n² + … ≈ 2/n.
    assert W[:, 0].mean() < 0.2 and W.sum(axis=1).mean() == pytest.approx(n / 3, rel=0.25)


@pytest.mark.parametrize(("m", "n", "s"), [(30, 50, 5), (20, 10, 4), (8, 12, 20)])
def test_wrelated_rank(m: int, n: int, s: int) -> None:
    W = wrelated(m, n, s, np.random.default_rng(2)).dense()
    assert W.shape == (m, n)
    assert np.linalg.matrix_rank(W) == min(m, n, s)


def test_generators_reject_bad_sizes() -> None:
    rng = np.random.default_rng(3)
    for call in (
        lambda: wdiscrete(0, 4, rng),
        lambda: wrange(3, -1, rng),
        lambda: wrelated(3, 4, 0, rng),
        lambda: wrelated(3, 4, 1.5, rng),
    ):
        with pytest.raises(ArgumentError):
            call()
