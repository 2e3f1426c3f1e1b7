"""The per-table Kronecker strategy type: its blocks, checks, answers and norms."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Dense, Identity, Ones, Prefix, VStack, Weighted
from dpmm.linalg.table_krons import TableKrons, read_attributes
from dpmm.measure.exact import analyze_strategy
from dpmm.measure.quantize import measurable

SHAPE = (3, 2, 4)


def test_its_blocks_read_one_table_each_and_its_answers_come_from_the_tables() -> None:
    A = measurable(
        TableKrons(SHAPE, [((0,), (Prefix(3),), 0.4), ((2, 0), (Identity(4), Identity(3)), 0.3)])
    ).integer
    x = np.random.default_rng(0).integers(0, 9, size=24)
    cube = x.reshape(SHAPE)
    tables = {(0,): cube.sum(axis=(1, 2)), (0, 2): cube.sum(axis=1)}
    assert A.table_sets() == [(0,), (0, 2)]
    np.testing.assert_array_equal(A.table_answers(tables), np.rint(A.dense() @ x))
    np.testing.assert_array_equal(A.part(1, 2).table_answers(tables), A.blocks[1].dense() @ x)


def test_one_block_per_table_and_coefficients_that_sum_to_one() -> None:
    with pytest.raises(ValueError, match="one block only"):
        TableKrons(SHAPE, [((0,), (Identity(3),), 1.0), ((0,), (Prefix(3),), 1.0)])
    A = TableKrons(SHAPE, [((0,), (Identity(3),), 1.0), ((0, 1), (Identity(3), Identity(2)), 1)])
    with pytest.raises(ValueError, match="do not sum to 1"):
        A.with_coefficients([{(): 0.5, (0,): 0.5}, {(): 0.6, (0,): 0.5, (1,): 1, (0, 1): 1}])
    kept = A.with_coefficients([{(): 0.25, (0,): 0.5}, {(): 0.75, (0,): 0.5, (1,): 1, (0, 1): 1}])
    assert kept.divided(4).coefficients == kept.coefficients


def test_a_rank_deficient_factor_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="full column rank"):
        TableKrons(SHAPE, [((0,), (Ones(1, 3),), 1.0)])


def test_a_row_of_ones_is_a_total_however_stored() -> None:
    factors = (Ones(1, 3), Dense(np.ones((1, 2))), Dense([[1.0, 0.0, 1.0, 1.0]]), Identity(5))
    assert read_attributes(factors) == (2, 3)


def test_on_a_huge_domain_the_norms_are_the_blocks_largest_summed() -> None:
    """2.7·10¹⁰ cells: no array as large as the domain; in both the float and the integer
    forms the blocks' largest norms summed (here exact: a column where both are largest)."""
    shape = (3000,) * 3
    uneven = VStack([Identity(4), Weighted(3, Ones(1, 4))])
    A = TableKrons(shape, [((0,), (Prefix(3000),), 2.0), ((1, 2), (Identity(3000),) * 2, 3)])
    assert A.sensitivity(1) == 2 * 3000 + 3
    exact = analyze_strategy(A)
    assert exact.sensitivity_l1 == 2 * 3000 + 3
    assert exact.sensitivity_l2_squared == 4 * 3000 + 9
    small = TableKrons((4, 3), [((0,), (uneven,), 1.0), ((1,), (Identity(3),), 1.0)])
    assert small.sensitivity(1) == pytest.approx(np.abs(small.dense()).sum(axis=0).max())
