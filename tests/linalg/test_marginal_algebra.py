"""The marginal algebra against dense numpy: spectra, products, inverses, and the queries."""

from __future__ import annotations

import itertools
import math
from functools import reduce

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dpmm.domain import Domain
from dpmm.linalg import Marginal, Marginals, MarginalsGram, attribute_mask, trace_of_product
from dpmm.linalg.marginals import EIGEN_TOLERANCE

from .conftest import (
    ORACLE,
    WEIGHTS,
    assert_close,
    attribute_sets,
    dense_of,
    marginals,
    marginals_grams,
    pinv_oracle,
    small_domains,
)


def numpy_marginal(shape: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    """``⊗_i (I if i ∈ attrs else 1ᵀ)`` built by numpy."""
    return reduce(
        np.kron,
        [np.eye(n) if i in attrs else np.ones((1, n)) for i, n in enumerate(shape)],
        np.ones((1, 1)),
    )


def numpy_projection(shape: tuple[int, ...], mask: int) -> np.ndarray:
    """``E_b = ⊗_{i∈b} (I − J/n) ⊗_{i∉b} J/n`` built by numpy."""
    parts = [
        np.eye(n) - np.full((n, n), 1 / n) if mask >> i & 1 else np.full((n, n), 1 / n)
        for i, n in enumerate(shape)
    ]
    return reduce(np.kron, parts, np.ones((1, 1)))


def spectrum(G: MarginalsGram) -> np.ndarray:
    """All eigenvalues of G, with multiplicity, from the algebra's closed form."""
    values = [v for b, v in G.eigenvalues().items() for _ in range(G.multiplicity(b))]
    values += [0.0] * (G.shape[0] - len(values))
    return np.sort(values)


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_eigenvalues_with_multiplicities_are_numpys(shape, data) -> None:
    G = data.draw(marginals_grams(shape))
    dense = dense_of(G)
    assert_close(spectrum(G), np.linalg.eigvalsh(dense))
    assert G.eigen_sum() == pytest.approx(np.trace(dense), rel=1e-9, abs=1e-9)
    nuclear = np.abs(np.linalg.eigvalsh(dense)).sum()
    assert G.nuclear_norm() == pytest.approx(nuclear, rel=1e-9, abs=1e-8)


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_eigenvalue_of_each_projection(shape, data) -> None:
    G = data.draw(marginals_grams(shape))
    dense = dense_of(G)
    values = G.eigenvalues()
    rounding = 1e-12 * max(1.0, float(np.abs(dense).sum(axis=1).max()))
    # eigenvalues() drops those below EIGEN_TOLERANCE of the largest, as a pinv cutoff does.
    cutoff = EIGEN_TOLERANCE * max((abs(v) for v in values.values()), default=0.0)
    for mask in range(1 << len(shape)):
        projection = numpy_projection(shape, mask)
        expected = values.get(mask, 0.0)
        assert np.abs(dense @ projection - expected * projection).max() <= rounding + cutoff


@ORACLE
@given(shape=small_domains())
def test_projections_partition_the_identity(shape) -> None:
    cells = math.prod(shape)
    masks = range(1 << len(shape))
    assert sum(MarginalsGram(shape, {}).multiplicity(mask) for mask in masks) == cells
    total = np.zeros((cells, cells))
    for mask in masks:
        E = dense_of(MarginalsGram.from_eigenvalues(shape, {mask: 1.0}))
        assert_close(E, numpy_projection(shape, mask))
        assert_close(E @ E, E)
        assert round(np.trace(E)) == MarginalsGram(shape, {}).multiplicity(mask)
        total += E
    assert_close(total, np.eye(cells))


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_from_eigenvalues_round_trips(shape, data) -> None:
    masks = data.draw(st.lists(st.integers(0, (1 << len(shape)) - 1), min_size=1, unique=True))
    values = {mask: data.draw(st.sampled_from([-3.0, 0.25, 1.0, 7.0])) for mask in masks}
    G = MarginalsGram.from_eigenvalues(shape, values)
    # Projections of rank zero (an attribute of size one in b) carry no eigenvalue.
    expected = {b: v for b, v in values.items() if G.multiplicity(b)}
    found = {b: v for b, v in G.eigenvalues().items() if G.multiplicity(b)}
    assert found.keys() == expected.keys()
    for b, value in expected.items():
        assert found[b] == pytest.approx(value)


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_dot_algebra_is_the_dense_product(shape, data) -> None:
    left = data.draw(marginals_grams(shape))
    right = data.draw(marginals_grams(shape))
    product = left.dot_algebra(right)
    assert isinstance(product, MarginalsGram)
    expected = dense_of(left) @ dense_of(right)
    assert_close(dense_of(product), expected)
    assert_close(dense_of(left @ right), expected)
    assert_close(dense_of(left.gram()), dense_of(left) @ dense_of(left))


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_pinv_stays_in_the_algebra_and_is_numpys(shape, data) -> None:
    G = data.draw(marginals_grams(shape))
    inverse = G.pinv()
    assert isinstance(inverse, MarginalsGram)
    # A product of elements with orthogonal supports is zero up to rounding; the pinv of
    # rounding noise is noise (for numpy too), so there is nothing to compare.
    assume(np.abs(dense_of(G)).max() > 1e-12 * max(1.0, sum(map(abs, G.coefficients.values()))))
    expected = pinv_oracle(dense_of(G))
    assert_close(dense_of(inverse), expected, rtol=1e-6)
    assert_close(dense_of(inverse.pinv()), dense_of(G), rtol=1e-6)
    assert_close(dense_of(G.as_kron_sum()), dense_of(G))


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_marginal_sums_out_the_other_attributes(shape, data) -> None:
    attrs = data.draw(attribute_sets(len(shape)))
    M = Marginal(shape, attrs)
    x = np.random.default_rng(len(attrs)).standard_normal(math.prod(shape))
    others = tuple(i for i in range(len(shape)) if i not in attrs)
    assert_close(M @ x, x.reshape(shape).sum(axis=others).ravel())
    assert_close(dense_of(M), numpy_marginal(shape, attrs))
    assert M.mask == attribute_mask(shape, attrs)
    assert_close(dense_of(M.gram()), numpy_marginal(shape, attrs).T @ numpy_marginal(shape, attrs))


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_marginals_are_weighted_stacked_marginals(shape, data) -> None:
    W = data.draw(marginals(shape, max_rows=200))
    expected = np.vstack(
        [
            weight * numpy_marginal(shape, tuple(i for i in range(len(shape)) if mask >> i & 1))
            for mask, weight in W.weights.items()
        ]
    )
    assert_close(dense_of(W), expected)
    gram = W.gram()
    assert gram.coefficients == {m: w * w for m, w in W.weights.items()}
    assert_close(dense_of(gram), expected.T @ expected)
    assert_close(dense_of(W.pinv()), pinv_oracle(expected), rtol=1e-6)
    assert W.nuclear_norm() == pytest.approx(np.linalg.svd(expected, compute_uv=False).sum())
    for p in (1, 2):
        assert W.sensitivity(p) == pytest.approx(np.linalg.norm(expected, ord=p, axis=0).max())


@ORACLE
@given(shape=small_domains(), weight=WEIGHTS)
def test_singular_union_gram_has_the_rank_of_its_down_closure(shape, weight) -> None:
    # Two overlapping marginals: the union's rank counts their common sub-marginals once.
    dims = len(shape)
    first, second = tuple(range(dims // 2 + 1)), tuple(range(dims // 2, dims))
    W = Marginals(shape, {first: 1.0, second: weight})
    rank = np.linalg.matrix_rank(dense_of(W))
    assert sum(W.gram().multiplicity(b) for b in W.gram().eigenvalues()) == rank


def test_size_one_attributes_carry_no_eigenvalue() -> None:
    # E_b = 0 when b holds an attribute of size one: a value given for it must neither show
    # up as an eigenvalue nor make the true eigenvalues look negligible.
    G = MarginalsGram.from_eigenvalues((1, 4), {0b01: 1e12, 0b10: 1.0})
    assert G.eigenvalues() == pytest.approx({0b10: 1.0})
    assert G.eigen_sum() == pytest.approx(3.0)
    assert_close(dense_of(G.pinv()), pinv_oracle(dense_of(G)))
    W = Marginals((1, 4), {(0,): 1e-3, (1,): 1.0})
    gram = W.gram()
    assert all(gram.multiplicity(b) for b in gram.eigenvalues())
    assert_close(dense_of(gram.pinv().pinv()), dense_of(gram), rtol=1e-9)
    assert trace_of_product(gram, gram.pinv()) == pytest.approx(np.linalg.matrix_rank(dense_of(W)))


def test_named_domain_matches_positions() -> None:
    domain = Domain.from_dict({"sex": 2, "age": 3, "region": 4})
    assert_close(dense_of(Marginal(domain, ["age"])), dense_of(Marginal((2, 3, 4), [1])))
    named = Marginals(domain, {("sex", "region"): 2.0, (): 1.0})
    positional = Marginals((2, 3, 4), {(0, 2): 2.0, (): 1.0})
    assert_close(dense_of(named), dense_of(positional))
    assert attribute_mask(domain, ["region", "sex"]) == 0b101


def test_all_subsets_of_a_three_way_domain() -> None:
    # Every marginal of a 2×3×4 domain at once: the full down-closure, the identity's rank.
    shape = (2, 3, 4)
    sets = [s for k in range(4) for s in itertools.combinations(range(3), k)]
    W = Marginals(shape, dict.fromkeys(sets, 1.0))
    G = W.gram()
    assert_close(spectrum(G), np.linalg.eigvalsh(dense_of(G)))
    assert sum(G.multiplicity(b) for b in G.eigenvalues()) == 24
