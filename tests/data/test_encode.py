"""Column encoding against hand-made and numpy references; the bin edge convention."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmm.data.encode import cell_index, encode_column
from dpmm.domain import Attribute

AGE = Attribute("age", 3, bins=(0, 18, 65, 120))


def encode(values, attribute=AGE):
    return encode_column(values, attribute, file="f.parquet", column="c")


def test_bins_are_left_closed_and_the_top_edge_is_in_the_last_bin():
    out = encode(pa.array([0.0, 17.999, 18.0, 64.9, 65.0, 119.9, 120.0]))
    assert out.codes.tolist() == [0, 0, 1, 1, 2, 2, 2]
    assert out.problems == ()


def test_bins_agree_with_numpy_histogram():
    rng = np.random.default_rng(3)
    values = np.r_[rng.uniform(0, 120, 500), AGE.bins]
    codes = encode(pa.array(values)).codes
    expected, _ = np.histogram(values, bins=AGE.bins)
    np.testing.assert_array_equal(np.bincount(codes, minlength=3), expected)


def test_values_outside_bins_and_nulls_are_flagged_once():
    out = encode(pa.array([-0.1, 120.5, None, 5], pa.float64()))
    assert [(p.reason, p.mask.tolist()) for p in out.problems] == [
        ("missing (null) values", [False, False, True, False]),
        ("values outside the bins [0, 120]", [True, True, False, False]),
    ]


def test_integer_bins_column():
    assert encode(pa.array([0, 18, 120], pa.int16())).codes.tolist() == [0, 1, 2]


def test_labels_match_text_of_any_type():
    colour = Attribute("colour", 3, labels=("1", "2", "x"))
    assert encode(pa.array([2, 1]), colour).codes.tolist() == [1, 0]
    out = encode(pa.array(["x", "y", None]), colour)
    assert out.codes[0] == 2
    assert sorted(p.reason for p in out.problems) == [
        "missing (null) values",
        "values not among its labels",
    ]


def test_dictionary_columns_are_looked_up_through_their_dictionary():
    colour = Attribute("colour", 2, labels=("red", "blue"))
    values = pa.array(["blue", "red", "blue", "green"]).dictionary_encode()
    out = encode(values, colour)
    assert out.codes[:3].tolist() == [1, 0, 1]
    assert out.bad_mask().tolist() == [False, False, False, True]


def test_integer_codes_range_and_types():
    sex = Attribute("sex", 2)
    assert encode(pa.array([True, False]), sex).codes.tolist() == [1, 0]
    assert encode(pa.array([1.0, 0.0]), sex).codes.tolist() == [1, 0]
    out = encode(pa.array([0, -1, 2, 1], pa.int8()), sex)
    assert out.bad_mask().tolist() == [False, True, True, False]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=5), st.integers(0, 40), st.randoms())
def test_cell_index_is_numpys_c_order(shape, rows, random):
    rng = np.random.default_rng(random.randint(0, 2**32))
    codes = [rng.integers(0, size, rows) for size in shape]
    expected = np.ravel_multi_index(codes, shape) if rows else np.zeros(0, np.int64)
    np.testing.assert_array_equal(cell_index(codes, shape), expected)


def test_cell_index_refuses_more_than_int64_cells():
    from dpmm.errors import TooLargeError

    with pytest.raises(TooLargeError):
        cell_index([np.zeros(1, int)] * 3, (2**21, 2**21, 2**21))
