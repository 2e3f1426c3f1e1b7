"""Every builder against a hand-built dense matrix, and every bad argument against its message."""

from __future__ import annotations

import itertools
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmm.domain import Domain
from dpmm.errors import DomainError
from dpmm.linalg import Marginals, Matrix, Weighted
from dpmm.workload import (
    all_range,
    identity,
    kron,
    marginal,
    marginals,
    prefix,
    ranges,
    total,
    vstack,
    weighted,
)

DOMAIN = Domain.from_dict({"a": 2, "b": 3, "c": 4})


def marginal_dense(shape: tuple[int, ...], keep: set[int]) -> np.ndarray:
    """The marginal on positions ``keep``, from a loop over cells (no Kronecker algebra)."""
    cells = list(itertools.product(*(range(n) for n in shape)))
    tables = list(itertools.product(*(range(shape[i]) for i in sorted(keep))))
    dense = np.zeros((len(tables), len(cells)))
    for column, cell in enumerate(cells):
        row = tables.index(tuple(cell[i] for i in sorted(keep)))
        dense[row, column] = 1.0
    return dense


def test_identity_total_prefix_dense():
    np.testing.assert_array_equal(identity(4).dense(), np.eye(4))
    np.testing.assert_array_equal(total(4).dense(), np.ones((1, 4)))
    expected_prefix = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(prefix(4).dense(), expected_prefix)


def test_all_range_dense_lists_every_interval_by_low_then_high():
    n = 4
    rows = []
    for low in range(n):
        for high in range(low, n):
            row = np.zeros(n)
            row[low : high + 1] = 1
            rows.append(row)
    np.testing.assert_array_equal(all_range(n).dense(), np.array(rows))
    assert all_range(n).shape == (n * (n + 1) // 2, n)


def test_ranges_dense_keeps_the_given_order():
    expected = np.array([[0, 0, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    got = ranges(5, [[2, 4], [0, 0], [0, 4], (1, 2)]).dense()
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ranges_matches_a_loop_on_random_intervals(data):
    n = data.draw(st.integers(1, 12))
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=8)
    )
    intervals = [sorted(pair) for pair in pairs]
    expected = np.array(
        [[1.0 if low <= j <= high else 0.0 for j in range(n)] for low, high in intervals]
    )
    np.testing.assert_array_equal(ranges(n, intervals).dense(), expected)


def test_kron_dense_is_numpy_kron_with_first_factor_slowest():
    factors = [prefix(2), total(3), all_range(3)]
    expected = reduce(np.kron, [np.tril(np.ones((2, 2))), np.ones((1, 3)), all_range(3).dense()])
    got = kron(factors)
    assert got.shape == (2 * 1 * 6, 2 * 3 * 3)
    np.testing.assert_array_equal(got.dense(), expected)
    x = np.arange(18.0)
    # Row 0 = prefix row 0 ⊗ total ⊗ interval [0, 0]: cells (0, j, 0) for j = 0..2.
    assert (got @ x)[0] == x[0] + x[3] + x[6]


def test_vstack_dense_concatenates_rows():
    got = vstack([total(3), identity(3), prefix(3)]).dense()
    expected = np.vstack([np.ones((1, 3)), np.eye(3), np.tril(np.ones((3, 3)))])
    np.testing.assert_array_equal(got, expected)


def test_weighted_scales_every_query():
    got = weighted(2.5, prefix(3))
    assert isinstance(got, Weighted)
    np.testing.assert_array_equal(got.dense(), 2.5 * np.tril(np.ones((3, 3))))


@pytest.mark.parametrize("attrs", [["a"], ["c"], ["a", "c"], ["c", "a"], ["a", "b", "c"]])
def test_marginal_matches_a_loop_over_cells(attrs):
    keep = {DOMAIN.index(name) for name in attrs}
    np.testing.assert_array_equal(
        marginal(DOMAIN, attrs).dense(), marginal_dense(DOMAIN.shape, keep)
    )


@pytest.mark.parametrize(
    ("k", "expected_sets"),
    [
        (1, [{0}, {1}, {2}]),
        (2, [{0, 1}, {0, 2}, {1, 2}]),
        (3, [{0, 1, 2}]),
    ],
)
def test_marginals_k_builds_exactly_k_way_tables_in_lexicographic_order(k, expected_sets):
    got = marginals(DOMAIN, k=k)
    assert isinstance(got, Marginals)
    expected = np.vstack([marginal_dense(DOMAIN.shape, keep) for keep in expected_sets])
    np.testing.assert_array_equal(got.dense(), expected)


def test_marginals_k_over_restricted_attributes_uses_domain_order():
    got = marginals(DOMAIN, k=1, attributes=["c", "a"])
    expected = np.vstack([marginal_dense(DOMAIN.shape, {0}), marginal_dense(DOMAIN.shape, {2})])
    np.testing.assert_array_equal(got.dense(), expected)


def test_marginals_sets_keep_their_order_and_weights():
    got = marginals(DOMAIN, sets=[["c"], ["b", "a"]], weights=[3, 0.5])
    expected = np.vstack(
        [3 * marginal_dense(DOMAIN.shape, {2}), 0.5 * marginal_dense(DOMAIN.shape, {0, 1})]
    )
    np.testing.assert_array_equal(got.dense(), expected)
    # The marginal algebra Gram must agree with the dense one.
    np.testing.assert_allclose(got.gram().dense(), expected.T @ expected)


def test_marginals_count_on_many_attributes():
    domain = Domain.from_dict({f"x{i}": 2 for i in range(6)})
    assert len(marginals(domain, k=3).blocks) == 20
    assert marginals(domain, k=3).shape == (20 * 8, 64)


def test_builders_return_dpmm_matrices():
    built = [identity(2), total(2), prefix(2), all_range(2), ranges(2, [[0, 1]])]
    built += [kron([identity(2)]), vstack([total(2)]), weighted(1, total(2))]
    built += [marginal(DOMAIN, ["a"]), marginals(DOMAIN, k=1)]
    assert all(isinstance(matrix, Matrix) for matrix in built)


@pytest.mark.parametrize("builder", [identity, total, prefix, all_range])
@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "4", None])
def test_one_d_builders_reject_bad_sizes(builder, bad):
    with pytest.raises(ValueError, match=f"{builder.__name__} needs a positive integer size"):
        builder(bad)


@pytest.mark.parametrize(
    ("intervals", "fragment"),
    [
        ([], "non-empty list of \\[low, high\\] pairs"),
        ("0-3", "non-empty list of \\[low, high\\] pairs"),
        ([[0, 1], [1]], "Interval 1 must be a pair of integers"),
        ([[0.5, 2]], "Interval 0 must be a pair of integers"),
        ([[True, 2]], "Interval 0 must be a pair of integers"),
        ([[0, 4]], "Interval 0 = \\[0, 4\\] must satisfy 0 ≤ low ≤ high ≤ 3"),
        ([[-1, 2]], "Interval 0 = \\[-1, 2\\]"),
        ([[0, 1], [3, 2]], "Interval 1 = \\[3, 2\\]"),
    ],
)
def test_ranges_rejects_bad_intervals(intervals, fragment):
    with pytest.raises(ValueError, match=fragment):
        ranges(4, intervals)


def test_kron_and_vstack_reject_bad_lists():
    with pytest.raises(ValueError, match="kron needs a non-empty list of matrices"):
        kron([])
    with pytest.raises(ValueError, match="kron item 1 must be a dpmm matrix, got ndarray"):
        kron([identity(2), np.eye(2)])
    with pytest.raises(ValueError, match="vstack needs a non-empty list of matrices"):
        vstack(identity(2))
    with pytest.raises(
        ValueError, match=r"vstack needs matrices with one column count, got \[2, 3\]"
    ):
        vstack([identity(2), total(3)])


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "2", True])
def test_weighted_rejects_non_positive_or_non_numeric_weights(bad):
    with pytest.raises(ValueError, match="A workload weight must be a positive finite number"):
        weighted(bad, identity(2))


def test_weighted_rejects_a_non_matrix():
    with pytest.raises(ValueError, match="weighted needs a dpmm matrix, got ndarray"):
        weighted(2, np.eye(2))


def test_marginal_rejects_bad_attributes():
    with pytest.raises(DomainError, match="Unknown attribute 'd' \\(the domain has: a, b, c\\)"):
        marginal(DOMAIN, ["a", "d"])
    with pytest.raises(ValueError, match="non-empty list of attribute names"):
        marginal(DOMAIN, [])
    with pytest.raises(ValueError, match="non-empty list of attribute names"):
        marginal(DOMAIN, "a")
    with pytest.raises(ValueError, match="lists an attribute twice"):
        marginal(DOMAIN, ["a", "a"])
    with pytest.raises(ValueError, match="marginal needs a Domain, got tuple"):
        marginal((2, 3), ["a"])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "exactly one of k and sets"),
        ({"k": 1, "sets": [["a"]]}, "exactly one of k and sets"),
        ({"k": 0}, "k must be an integer in 1..3, got 0"),
        ({"k": 4}, "k must be an integer in 1..3, got 4"),
        ({"k": 2, "attributes": ["a"]}, "k must be an integer in 1..1, got 2"),
        ({"k": 1.0}, "k must be an integer in 1..3"),
        ({"sets": []}, "sets must be a non-empty list of lists"),
        ({"sets": [["a"], []]}, "set 1 must be a non-empty list of attribute names"),
        ({"sets": [["a", "b"], ["b", "a"]]}, "sets 0 and 1 are the same set"),
        ({"sets": [["a", "c"]], "attributes": ["a", "b"]}, "set 0 uses 'c', which is not among"),
        ({"k": 1, "weights": [1, 2]}, "has 3 tables but 2 weights were given"),
        ({"k": 1, "weights": [1, 0, 2]}, "weight 1 must be a positive finite number"),
        ({"k": 1, "weights": {"a": 1}}, "weights must be a list of numbers"),
        ({"k": 1, "attributes": []}, "attributes must be a non-empty list"),
    ],
)
def test_marginals_rejects_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        marginals(DOMAIN, **kwargs)


def test_marginals_unknown_attribute_is_a_domain_error():
    with pytest.raises(DomainError, match="Unknown attribute 'z'"):
        marginals(DOMAIN, sets=[["z"]])
