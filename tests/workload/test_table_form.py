"""Table form: answers from marginal tables equal W @ x exactly; None where no table suffices."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpmm.domain import Domain
from dpmm.errors import DpmmError
from dpmm.linalg import (
    Dense,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    Product,
    RangeQueries,
    Sum,
    VStack,
    Weighted,
)
from dpmm.workload import from_config, stack
from dpmm.workload.table_form import answer_from_tables, needed_tables, table_form


def _true_tables(x: np.ndarray, shape: tuple[int, ...], sets: list) -> dict:
    """Marginal tables by summing the reshaped vector (independent of Marginal)."""
    tensor = x.reshape(shape)
    return {
        attrs: tensor.sum(axis=tuple(i for i in range(len(shape)) if i not in attrs))
        for attrs in sets
    }


def _check(W: Matrix, shape: tuple[int, ...], rng: np.random.Generator) -> list:
    blocks = table_form(W, shape)
    assert blocks is not None, repr(W)
    assert blocks[0].rows.start == 0 and blocks[-1].rows.stop == W.shape[0]
    for before, after in itertools.pairwise(blocks):
        assert before.rows.stop == after.rows.start
    for block in blocks:
        assert list(block.attrs) == sorted(set(block.attrs))
        assert block.local.shape == (
            block.rows.stop - block.rows.start,
            math.prod(shape[i] for i in block.attrs),
        )
    x = rng.integers(0, 50, size=math.prod(shape)).astype(np.float64)
    answers = answer_from_tables(blocks, _true_tables(x, shape, needed_tables(blocks)))
    np.testing.assert_array_equal(answers, W.dense() @ x)
    return blocks


def _entries(domain: Domain, rng: np.random.Generator) -> list[dict]:
    names = list(domain.attributes)
    one, other = rng.choice(names, size=2, replace=False).tolist()
    size = domain[one].size
    low = int(rng.integers(0, size))
    return [
        {"kind": "identity"},
        {"kind": "identity", "attribute": one},
        {"kind": "total"},
        {"kind": "total", "attribute": one, "by": [other]},
        {"kind": "prefix", "attribute": one},
        {"kind": "prefix", "attribute": one, "by": [other], "weight": 2.5},
        {"kind": "all_range", "attribute": one, "by": [other]},
        {"kind": "ranges", "attribute": one, "intervals": [[low, size - 1], [0, low]]},
        {"kind": "marginal", "attributes": [other, one]},
        {"kind": "marginals", "k": 1},
        {"kind": "marginals", "k": 2, "weight": 3},
        {"kind": "marginals", "sets": [[one], [one, other]]},
        {"kind": "kron", "factors": {one: "prefix", other: "all_range"}},
        {"kind": "kron", "factors": {one: {"ranges": [[0, low]]}, other: "identity"}},
    ]


@pytest.mark.parametrize("seed", range(6))
def test_every_config_kind_on_random_domains(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 5))
    domain = Domain.from_dict({f"a{i}": int(rng.integers(1, 5)) for i in range(d)})
    groups = from_config(_entries(domain, rng), domain)
    for group in groups:
        _check(group.matrix, domain.shape, rng)
    _check(stack(groups), domain.shape, rng)


def test_blocks_of_a_marginal_union_and_a_kron() -> None:
    shape = (2, 3, 4)
    rng = np.random.default_rng(1)
    blocks = _check(Marginals(shape, {(0, 2): 1.0, (): 2.0, (1,): 0.5}), shape, rng)
    assert [b.attrs for b in blocks] == [(0, 2), (), (1,)]
    assert [(b.rows.start, b.rows.stop) for b in blocks] == [(0, 8), (8, 9), (9, 12)]
    (block,) = _check(Kron([Prefix(2), Prefix(3), Prefix(4)]), shape, rng)
    assert block.attrs == (0, 1, 2)
    (block,) = _check(Kron([Ones(1, 2), Ones(1, 3), Ones(1, 4)]), shape, rng)
    assert block.attrs == ()
    assert needed_tables(table_form(VStack([Marginal(shape, [1]), Marginal(shape, [1])]), shape))
    assert needed_tables(
        table_form(
            VStack([Marginal(shape, [1]), Marginal(shape, [0]), Marginal(shape, [1])]), shape
        )
    ) == [(1,), (0,)]


@pytest.mark.parametrize(
    "W",
    [
        # totals with several rows, and a factor that is a weighted total
        Kron([Ones(3, 2), Prefix(3), Weighted(2.0, Ones(1, 4))]),
        # one identity spanning two attributes; two factors splitting one attribute
        Kron([Identity(6), Ones(1, 4)]),
        Kron([Ones(1, 2), Ones(1, 3), Prefix(2), RangeQueries(2, [(0, 1), (1, 1)])]),
        # nesting: weights of stacks of weighted marginals and products ending in one table
        Weighted(
            -1.5,
            VStack(
                [
                    Marginals((2, 3, 4), {(1, 2): 3.0, (0,): 1.0}),
                    Weighted(2.0, Kron([Prefix(2), Ones(1, 3), Identity(4)])),
                ]
            ),
        ),
        Product([Dense(np.arange(6.0).reshape(2, 3)), Marginal((2, 3, 4), [1])]),
        Sum([Marginal((2, 3, 4), [0, 2]), Kron([Prefix(2), Ones(1, 3), Identity(4)])]),
        # the whole domain: identities and totals over all cells
        Identity(24),
        Ones(2, 24),
        # a marginal over a coarser split of the same cells
        Marginal((6, 4), [0]),
    ],
    ids=repr,
)
def test_nested_and_unusual_structures(W: Matrix) -> None:
    _check(W, (2, 3, 4), np.random.default_rng(5))


def test_any_matrix_over_one_attribute_reads_its_table() -> None:
    W = Dense(np.random.default_rng(2).normal(size=(3, 5)).round(0))
    (block,) = _check(W, (5,), np.random.default_rng(3))
    assert block.attrs == (0,)
    (block,) = _check(W, (1, 5, 1), np.random.default_rng(3))


@pytest.mark.parametrize(
    "W",
    [
        Dense(np.ones((2, 24))),
        Prefix(24),
        Kron([Dense(np.eye(6)), Ones(1, 4)]),
        VStack([Marginal((2, 3, 4), [0]), Dense(np.eye(24))]),
        Product([Dense(np.ones((1, 5))), Marginals((2, 3, 4), {(0,): 1.0, (1,): 1.0})]),
        Sum([Marginal((2, 3, 4), [0]), Kron([Ones(1, 2), Dense(np.ones((2, 3))), Ones(1, 4)])]),
    ],
    ids=repr,
)
def test_not_in_table_form(W: Matrix) -> None:
    assert table_form(W, (2, 3, 4)) is None


def test_errors_name_the_problem() -> None:
    with pytest.raises(DpmmError, match="has 6 columns but the domain"):
        table_form(Identity(6), (2, 4))
    blocks = table_form(Marginal((2, 3), [1]), (2, 3))
    with pytest.raises(DpmmError, match=r"No marginal table .* \(1,\)"):
        answer_from_tables(blocks, {(0,): np.ones(2)})
    with pytest.raises(DpmmError, match="has 2 cells, expected 3"):
        answer_from_tables(blocks, {(1,): np.ones(2)})


def test_huge_domain_is_handled_through_shapes_only() -> None:
    """10¹⁵ cells: tables from 400 records, answers checked against the records directly."""
    sizes = [1000] * 5
    domain = Domain.from_dict({f"a{i}": n for i, n in enumerate(sizes)})
    rng = np.random.default_rng(11)
    records = rng.integers(0, 1000, size=(400, 5))
    records[:200, 2] = rng.integers(0, 20, size=200)  # crowd low ages so prefixes vary
    marginals, cdf = from_config(
        [
            {"kind": "marginals", "k": 2, "attributes": ["a0", "a2", "a4"]},
            {"kind": "prefix", "attribute": "a2", "by": ["a0"], "weight": 2},
        ],
        domain,
    )
    blocks = table_form(stack([marginals, cdf]), domain.shape)
    assert needed_tables(blocks) == [(0, 2), (0, 4), (2, 4)]
    tables = {}
    for attrs in needed_tables(blocks):
        table = np.zeros([sizes[i] for i in attrs])
        np.add.at(table, tuple(records[:, list(attrs)].T), 1.0)
        tables[attrs] = table
    answers = answer_from_tables(blocks, tables)
    assert answers.shape == (3 * 10**6 + 10**6,)
    # Marginal rows count the records in one cell of a table; CDF rows count a0 = s, a2 ≤ a.
    for record in records[:30]:
        for table_index, (first, second) in enumerate([(0, 2), (0, 4), (2, 4)]):
            row = table_index * 10**6 + record[first] * 1000 + record[second]
            count = np.sum(
                (records[:, first] == record[first]) & (records[:, second] == record[second])
            )
            assert answers[row] == count > 0
    for s, age in [(int(records[0, 0]), 5), (int(records[1, 0]), 999), (3, 0)]:
        count = np.sum((records[:, 0] == s) & (records[:, 2] <= age))
        assert answers[3 * 10**6 + s * 1000 + age] == 2 * count
