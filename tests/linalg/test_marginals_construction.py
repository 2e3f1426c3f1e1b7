"""Marginals and Marginal build their blocks and factors on first use, with unchanged results."""

from __future__ import annotations

import math
import pickle
from itertools import combinations

import numpy as np
import pytest

from dpmm.domain import Domain
from dpmm.errors import DomainError
from dpmm.linalg import Identity, Kron, Marginal, Marginals, Ones, VStack, Weighted
from dpmm.linalg.marginals import attribute_mask

SHAPE = (2, 3, 4)


def _eager(shape, weights) -> VStack:
    """The union spelled out: one explicit Kron of identities and totals per set."""
    blocks = []
    for attrs, weight in weights.items():
        kron = Kron([Identity(n) if i in attrs else Ones(1, n) for i, n in enumerate(shape)])
        blocks.append(kron if weight == 1 else Weighted(float(weight), kron))
    return VStack(blocks)


WEIGHTS = [
    {(0,): 1.0, (1, 2): 2.0, (): 1.0},
    {(0, 1): 0.5, (2,): 1, (0, 1, 2): 3.0},
    {s: 1.0 for k in (0, 1, 2) for s in combinations(range(3), k)},
]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_marginals_equal_the_explicit_stack(weights) -> None:
    W = Marginals(SHAPE, weights)
    eager = _eager(SHAPE, weights)
    assert W.shape == eager.shape
    np.testing.assert_array_equal(W.dense(), eager.dense())
    np.testing.assert_array_equal(W.offsets, eager.offsets)
    assert [isinstance(b, Weighted) for b in W.blocks] == [
        isinstance(b, Weighted) for b in eager.blocks
    ]
    x = np.random.default_rng(0).normal(size=(W.shape[1], 2))
    np.testing.assert_allclose(W @ x, eager.dense() @ x)
    y = np.random.default_rng(1).normal(size=(W.shape[0], 2))
    np.testing.assert_allclose(W.T @ y, eager.dense().T @ y)


def test_marginal_factors_are_made_on_first_use_and_match_the_kron() -> None:
    M = Marginal(SHAPE, [2, 0])
    assert "factors" not in M.__dict__
    assert M.shape == (2 * 4, 24)
    assert [type(f) for f in M.factors] == [Identity, Ones, Identity]
    assert [f.shape for f in M.factors] == [(2, 2), (1, 3), (4, 4)]
    np.testing.assert_array_equal(M.dense(), _eager(SHAPE, {(0, 2): 1.0}).dense())
    np.testing.assert_array_equal(M.T.dense(), M.dense().T)
    assert repr(M) == "Marginal([0, 2])"


def test_the_algebra_never_builds_the_blocks() -> None:
    d = 120  # 10¹²⁰ cells: only the marginal algebra can handle this
    sets = {s: 1.0 for k in (0, 1, 2) for s in combinations(range(d), k)}
    W = Marginals([10] * d, sets)
    assert W.shape == (1 + d * 10 + math.comb(d, 2) * 100, 10**d)
    assert W.sensitivity(2) == pytest.approx(math.sqrt(len(sets)))
    assert W.gram().trace() == pytest.approx(float(len(sets)) * 10.0**d)
    assert "blocks" not in W.__dict__ and "offsets" not in W.__dict__
    assert len(W.blocks) == len(sets)  # made on request, every one O(1)
    assert W.blocks[-1].mask == 1 << (d - 2) | 1 << (d - 1)
    assert "factors" not in W.blocks[-1].__dict__


def test_a_pickled_union_is_the_same_matrix() -> None:
    W = Marginals(SHAPE, WEIGHTS[1])
    fresh = pickle.loads(pickle.dumps(W))
    np.testing.assert_array_equal(fresh.dense(), W.dense())
    _ = W.blocks
    again = pickle.loads(pickle.dumps(W))
    np.testing.assert_array_equal(again.dense(), W.dense())


def test_named_attributes_and_repeats() -> None:
    domain = Domain.from_dict({"a": 2, "b": 3, "c": 4})
    W = Marginals(domain, {("c", "a"): 1.0, ("b",): 2.0})
    assert list(W.weights) == [0b101, 0b010]
    assert attribute_mask(domain, ["a", "a", "c"]) == 0b101
    assert Marginal(SHAPE, [1, 1]).shape == (3, 24)  # a repeated attribute counts once


@pytest.mark.parametrize(
    ("domain", "weights", "error", "message"),
    [
        (SHAPE, {}, ValueError, "at least one attribute set"),
        (SHAPE, {(0, 1): 1.0, (1, 0): 2.0}, ValueError, "twice"),
        (SHAPE, {(3,): 1.0}, ValueError, "outside 0..2"),
        (SHAPE, {(-1,): 1.0}, ValueError, "outside 0..2"),
        (SHAPE, {("a",): 1.0}, ValueError, "needs a Domain"),
        (Domain.from_dict({"a": 2}), {("z",): 1.0}, DomainError, "Unknown attribute 'z'"),
        ((2, 0), {(0,): 1.0}, ValueError, "positive sizes"),
    ],
)
def test_invalid_unions_are_refused(domain, weights, error, message) -> None:
    with pytest.raises(error, match=message):
        Marginals(domain, weights)
