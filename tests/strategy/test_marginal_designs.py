"""Packing starts for OPT_M: valid packings, and the error they unlock on all 3-way of [10]^8."""

import itertools

import numpy as np
import pytest

from dpmm.error import expected_error
from dpmm.linalg import Marginals
from dpmm.privacy import PureDP
from dpmm.strategy.marginal_designs import packing, packing_starts
from dpmm.strategy.weighted_marginals import optimize_marginal_weights

#: HDMM's OPT_M total squared error on all 3-way marginals of [10]^8 at ε = 1 (anchors/hdmm.md).
HDMM_MARG3_TEN8 = 2.40412e8


def _masks(sets):
    return [sum(1 << i for i in s) for s in sets]


@pytest.mark.parametrize(
    ("attributes", "k", "block"), [(8, 3, 4), (8, 2, 3), (10, 2, 4), (6, 1, 3)]
)
def test_packing_covers_each_table_or_leaves_it(attributes, k, block):
    tables = _masks(itertools.combinations(range(attributes), k))
    blocks, left = packing(tables, attributes, block, np.random.default_rng(attributes + k))
    assert all(b.bit_count() == block for b in blocks)
    covered = [t for t in tables if any(t & b == t for b in blocks)]
    assert sorted(covered + left) == sorted(tables)
    assert not set(covered) & set(left)
    # Greedy stops only when no block holds two uncovered tables.
    for candidate in _masks(itertools.combinations(range(attributes), block)):
        assert sum(1 for t in left if t & candidate == t) < 2
    assert len(blocks) < len(tables)


def test_packing_refuses_blocks_no_larger_than_the_tables():
    tables = _masks(itertools.combinations(range(5), 2))
    assert packing(tables, 5, 2, np.random.default_rng(0)) is None
    assert packing(tables, 5, 6, np.random.default_rng(0)) is None
    assert packing_starts([], 5, np.random.default_rng(0), np.sum, floor=1e-12) == []


def test_starts_put_unit_weight_on_blocks_and_leftovers_best_score_first():
    tables = _masks(itertools.combinations(range(8), 3))

    def blocks_used(start):
        return float((start == 1.0).sum())

    starts = packing_starts(tables, 8, np.random.default_rng(3), blocks_used, floor=1e-12)
    assert len(starts) == 4
    assert blocks_used(starts[0]) <= blocks_used(starts[1])
    assert blocks_used(starts[0]) == 14  # S(3, 4, 8): every triple in exactly one block
    for start in starts:
        chosen = np.flatnonzero(start == 1.0)
        covered = {t for t in tables if any(t & int(c) == t for c in chosen)}
        assert covered == set(tables)


def test_opt_m_beats_hdmm_on_all_three_way_marginals_of_ten_to_the_eight():
    # Random starts end 0.2–9 % above HDMM's optimum; a packing of the 56 triples into
    # four-way tables (S(3, 4, 8) has 14) ends about 26 % below it.
    W = Marginals((10,) * 8, {s: 1.0 for s in itertools.combinations(range(8), 3)})
    A, loss = optimize_marginal_weights(W, norm=1, restarts=1, rng=np.random.default_rng(3))
    error = expected_error(W, A, PureDP(1))
    assert error == pytest.approx(2 * loss, rel=1e-9)
    assert error < 0.8 * HDMM_MARG3_TEN8


def test_starts_scoring_at_or_above_the_bar_are_dropped_and_their_block_size_given_up():
    tables = _masks(itertools.combinations(range(8), 3))
    scored = []

    def cells(start):  # the cells of the unit-weight tables over [10]^8
        scored.append(start)
        return float(sum(10 ** int(m).bit_count() for m in np.flatnonzero(start == 1.0)))

    # Blocks of 4 (14-20 of them, 1.4-2.0e5 cells) score below 3e5; blocks of 5 (8-11 of
    # them, 8e5 cells or more) never do: they are dropped, and given up after 8 tries.
    starts = packing_starts(tables, 8, np.random.default_rng(3), cells, floor=1e-12, below=3e5)
    assert len(starts) == 2 and all(cells(start) < 3e5 for start in starts)
    fives = [s for s in scored if any(int(m).bit_count() == 5 for m in np.flatnonzero(s == 1))]
    assert len(fives) == 8
