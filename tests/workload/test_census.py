"""The SF1 workload against the anchor's definition (anchors/hdmm.md) and its measured figures."""

from __future__ import annotations

import itertools
from functools import reduce
from math import comb

import numpy as np
import pytest

from dpmm.linalg import Kron, Matrix, VStack
from dpmm.workload import census_domain, census_factors, census_sf1, census_w1
from dpmm.workload.census import SF1_PRODUCTS

ATTRIBUTES = ("sex", "hispanic", "race", "relationship", "age")
# Queries per product, in the anchor's order (P1, P3, P1, P4, …, PCT12A–O).
PRODUCT_ROWS = [1, 7, 1, 2, 1, 14, 3, 70, 1, 2, 70, 1, 70, 1, 2, 70, 1]
PRODUCT_ROWS += [46, 3, 322, 21, 46, 3, 46, 3, 206, 3, 1442, 21, 206, 3, 1442, 21]


def arrays_of(factors, product, drop: str | None = None) -> list[np.ndarray]:
    """The dense factors of one product, in attribute order, optionally without one attribute."""
    pairs = zip(ATTRIBUTES, product, strict=True)
    return [factors[attr][name] for attr, name in pairs if attr != drop]


@pytest.fixture(scope="module")
def factors() -> dict[str, dict[str, np.ndarray]]:
    return {
        attr: {name: matrix.dense() for name, matrix in named.items()}
        for attr, named in census_factors().items()
    }


def test_census_domain_attributes_sizes_and_labels():
    domain = census_domain()
    assert domain.attributes == ATTRIBUTES
    assert domain.shape == (2, 2, 64, 17, 115)
    assert domain.size == 500_480
    assert domain["sex"].labels == ("male", "female")
    assert domain["hispanic"].labels == ("hispanic", "not hispanic")
    assert domain["age"].labels == tuple(str(age) for age in range(115))
    race = domain["race"].labels
    assert race[0] == "none" and race[1] == "white" and race[63].count("+") == 5
    # A race label names exactly the flags set in its cell's bits.
    assert all(label.count("+") + 1 == cell.bit_count() for cell, label in enumerate(race) if cell)
    assert len(domain["relationship"].labels) == 17
    assert domain.project(a for a in ATTRIBUTES if a != "relationship").size == 29_440


def test_sf1_and_w1_shapes_and_product_sizes():
    sf1, w1 = census_sf1(), census_w1()
    assert sf1.shape == (4151, 500_480)
    assert w1.shape == (4151, 29_440)
    assert isinstance(sf1, VStack) and len(sf1.blocks) == len(SF1_PRODUCTS) == 33
    assert [block.shape[0] for block in sf1.blocks] == PRODUCT_ROWS
    assert [block.shape[0] for block in w1.blocks] == PRODUCT_ROWS
    assert all(isinstance(block, Kron) and len(block.factors) == 5 for block in sf1.blocks)
    assert all(len(block.factors) == 4 for block in w1.blocks)


def test_products_follow_the_anchor_list():
    # Spot checks against anchors/hdmm.md: the repeated P1, P5's IT term, P12A–I's white term.
    p1 = ("T", "T", "T", "T", "T")
    assert [i for i, product in enumerate(SF1_PRODUCTS) if product == p1] == [0, 2, 4, 8, 11]
    assert SF1_PRODUCTS[6] == ("T", "IT", "T", "T", "T")
    assert SF1_PRODUCTS[23] == ("I", "nothisp", "white", "T", "age1")
    assert SF1_PRODUCTS[32] == ("IT", "nothisp", "race1", "T", "T")
    assert all(product[3] == "T" for product in SF1_PRODUCTS)


@pytest.fixture
def no_dense(monkeypatch):
    """Fail if anything builds a dense matrix larger than a census factor."""
    original = Matrix.dense

    def guarded(self, limit=None):
        if self.shape[0] * self.shape[1] > 200 * 200:
            raise AssertionError(f"dense() called on {self!r}")
        return original(self, limit)

    def no_blocks(self, limit=None):
        raise AssertionError(f"column blocks of {self!r} requested")

    monkeypatch.setattr(Matrix, "dense", guarded)
    monkeypatch.setattr(Matrix, "_column_blocks", no_blocks)


@pytest.mark.usefixtures("no_dense")
def test_frobenius_norms_match_the_anchor_identity_tse():
    sf1_frobenius = census_sf1().gram().trace()
    w1_frobenius = census_w1().gram().trace()
    # Identity TSE = 2/ε² · ‖W‖_F² at ε = 1 (anchors/hdmm.md, rows sf1 and census_w1).
    assert f"{2 * sf1_frobenius:.5e}" == "3.79971e+07"
    assert f"{2 * w1_frobenius:.5e}" == "2.23512e+06"
    assert sf1_frobenius == pytest.approx(17 * w1_frobenius)  # every product totals relationship


def test_frobenius_norm_equals_the_sum_over_products_of_factor_norms(factors):
    expected = sum(
        np.prod([np.sum(array**2) for array in arrays_of(factors, product)])
        for product in SF1_PRODUCTS
    )
    assert census_sf1().gram().trace() == pytest.approx(expected, rel=1e-12)
    assert expected == 18_998_554


def test_factor_shapes(factors):
    shapes = {
        (attr, name): array.shape
        for attr, named in factors.items()
        for name, array in named.items()
    }
    assert shapes[("race", "race1")] == (7, 64)
    assert shapes[("race", "race2")] == (70, 64)
    assert shapes[("race", "white")] == (1, 64)
    assert shapes[("age", "age1")] == (23, 115)
    assert shapes[("age", "age3")] == (103, 115)
    assert shapes[("age", "adult")] == (1, 115)
    assert shapes[("sex", "IT")] == shapes[("hispanic", "IT")] == (3, 2)
    for attr, n in zip(ATTRIBUTES, census_domain().shape, strict=True):
        assert shapes[(attr, "T")] == (1, n) and shapes[(attr, "I")] == (n, n)


def test_small_factors(factors):
    hispanic = factors["hispanic"]
    np.testing.assert_array_equal(hispanic["hisp"], [[1, 0]])
    np.testing.assert_array_equal(hispanic["nothisp"], [[0, 1]])
    np.testing.assert_array_equal(hispanic["IT"], [[1, 0], [0, 1], [1, 1]])
    np.testing.assert_array_equal(factors["sex"]["IT"], [[1, 0], [0, 1], [1, 1]])
    np.testing.assert_array_equal(np.flatnonzero(factors["race"]["white"][0]), [1])


def test_race1_rows(factors):
    race1 = factors["race"]["race1"]
    for i in range(6):
        np.testing.assert_array_equal(np.flatnonzero(race1[i]), [2**i])
    others = [cell for cell in range(64) if cell not in (1, 2, 4, 8, 16, 32)]
    np.testing.assert_array_equal(np.flatnonzero(race1[6]), others)
    assert race1[6, 0] == 1 and race1[6].sum() == 58
    np.testing.assert_array_equal(race1.sum(axis=0), np.ones(64))  # a partition of the cells


def test_race2_rows(factors):
    race2 = factors["race"]["race2"]
    np.testing.assert_array_equal(race2[:63], np.eye(64)[1:])
    for k in range(1, 7):
        row = race2[62 + k]
        assert row.sum() == comb(6, k)
        assert all(cell.bit_count() == k for cell in np.flatnonzero(row))
    two_or_more = np.flatnonzero(race2[69])
    assert two_or_more.size == 64 - 1 - 6
    assert set(two_or_more) == {cell for cell in range(64) if cell.bit_count() >= 2}
    assert not race2[:, 0].any()  # cell 0 (no race flag) is in no race2 query


def test_age_factors(factors):
    age1, age3, adult = factors["age"]["age1"], factors["age"]["age3"], factors["age"]["adult"]
    boundaries = [0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70]
    boundaries += [75, 80, 85, 115]
    for row, (low, stop) in enumerate(itertools.pairwise(boundaries)):
        np.testing.assert_array_equal(np.flatnonzero(age1[row]), np.arange(low, stop))
    np.testing.assert_array_equal(np.flatnonzero(age1[4]), [18, 19])
    np.testing.assert_array_equal(age1.sum(axis=0), np.ones(115))
    np.testing.assert_array_equal(age3[:100], np.eye(115)[:100])
    np.testing.assert_array_equal(np.flatnonzero(age3[100]), np.arange(100, 105))
    np.testing.assert_array_equal(np.flatnonzero(age3[102]), np.arange(110, 115))
    np.testing.assert_array_equal(age3.sum(axis=0), np.ones(115))
    np.testing.assert_array_equal(np.flatnonzero(adult[0]), np.arange(18, 115))


def test_w1_term_dense_agrees_with_numpy_kron(factors):
    index = SF1_PRODUCTS.index(("I", "hisp", "T", "T", "age1"))
    term = census_w1().blocks[index]
    expected = reduce(np.kron, arrays_of(factors, SF1_PRODUCTS[index], drop="relationship"))
    assert expected.shape == (46, 29_440)
    np.testing.assert_array_equal(term.dense(), expected)


@pytest.mark.parametrize("index", [1, 10, 23, 31])
def test_sf1_terms_answer_like_an_einsum_over_the_data_cube(factors, index):
    rng = np.random.default_rng(20261101)
    x = rng.integers(0, 5, size=500_480).astype(np.float64)
    arrays = arrays_of(factors, SF1_PRODUCTS[index])
    cube = x.reshape(census_domain().shape)
    expected = np.einsum("ai,bj,ck,dl,em,ijklm->abcde", *arrays, cube, optimize=True).reshape(-1)
    np.testing.assert_allclose(census_sf1().blocks[index] @ x, expected)


def test_whole_sf1_answers_its_first_queries_correctly():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, size=500_480).astype(np.float64)
    answers = census_sf1() @ x
    cube = x.reshape(2, 2, 64, 17, 115)
    assert answers.shape == (4151,)
    assert answers[0] == x.sum()  # P1
    # P3: each race alone, then everyone else.
    by_race = cube.sum(axis=(0, 1, 3, 4))
    np.testing.assert_allclose(answers[1:7], by_race[[1, 2, 4, 8, 16, 32]])
    np.testing.assert_allclose(answers[7], x.sum() - by_race[[1, 2, 4, 8, 16, 32]].sum())
