import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpmm.error import expected_error
from dpmm.errors import ArgumentError, TooLargeError
from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Ones,
    Prefix,
    Weighted,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy.profile import MAX_SIDE, haar_tree_equivalent, reduce_l1

# Seed 000, "Strategies equivalent to wavelet": Y, Y′ (norm 3) and Y″ (norm 2.414).
SEED_Y = np.array([[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 0, 0], [0, 0, 1, -1]], dtype=float)
SEED_Y1 = np.vstack([[[1, 1, 0, 0], [0, 0, 1, 1]], np.eye(4), np.eye(4)])
SEED_Y2 = np.vstack([[[1, 1, 0, 0], [0, 0, 1, 1]], math.sqrt(2) * np.eye(4)])

FAST = {"max_iterations": 400, "starts": 1}


def l1(matrix: np.ndarray) -> float:
    return float(np.abs(matrix).sum(axis=0).max())


def relative_gram_error(reduced: np.ndarray, original: np.ndarray) -> float:
    gram = original.T @ original
    return float(np.linalg.norm(reduced.T @ reduced - gram) / np.linalg.norm(gram))


def test_seed_wavelet_example_is_reproduced_exactly():
    assert np.array_equal(Haar(4).dense(), SEED_Y)
    # Y, Y′, Y″ are profile equivalent (integer Grams: exact up to √2·√2 rounding).
    assert np.array_equal(SEED_Y1.T @ SEED_Y1, SEED_Y.T @ SEED_Y)
    assert np.allclose(SEED_Y2.T @ SEED_Y2, SEED_Y.T @ SEED_Y, rtol=0, atol=1e-14)
    assert l1(SEED_Y) == 3 and l1(SEED_Y1) == 3
    assert round(l1(SEED_Y2), 3) == 2.414
    # The construction gives the seed's Y″ row for row.
    assert np.array_equal(haar_tree_equivalent(4), SEED_Y2)


def test_reduction_of_the_seed_wavelet_beats_the_seeds_y_double_prime():
    reduced = reduce_l1(Haar(4), **FAST).dense()
    assert relative_gram_error(reduced, SEED_Y) < 1e-12
    assert l1(reduced) <= 1 + math.sqrt(2) + 1e-12
    # Each half's Gram [[3, 1], [1, 3]] is also that of columns (p, q), (q, p) with
    # p² + q² = 3, 2pq = 1, whose L1 norm p + q = 2: below the seed's 2.414.
    assert l1(reduced) == pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize("n", range(1, 20))
def test_haar_tree_equivalent_has_the_wavelet_gram(n):
    Y = Haar(n).dense()
    tree = haar_tree_equivalent(n)
    assert np.allclose(tree.T @ tree, Y.T @ Y, rtol=0, atol=1e-12)
    assert l1(tree) <= l1(Y)
    if n & (n - 1) == 0 and n > 1:  # n = 2ᵏ: (k − 1) + √2 against k + 1
        k = n.bit_length() - 1
        assert l1(Y) == k + 1
        assert l1(tree) == pytest.approx(k - 1 + math.sqrt(2), abs=1e-12)


STRUCTURED = {
    "haar8": Haar(8),
    "haar16": Haar(16),
    "hier8": Hierarchical(8, 2),
    "prefix8": Prefix(8),
    "dense": Dense(np.random.default_rng(7).standard_normal((7, 5))),
}


@pytest.mark.parametrize("name", STRUCTURED)
def test_gram_is_preserved_and_norm_strictly_lowered(name):
    A = STRUCTURED[name]
    reduced = reduce_l1(A, rng=np.random.default_rng(3), **FAST)
    assert isinstance(reduced, Dense)
    assert relative_gram_error(reduced.dense(), A.dense()) < 1e-9
    assert reduced.sensitivity(1) == pytest.approx(l1(reduced.dense()))
    # The seed's point: neither the tree nor the wavelet is efficient; prefix and a random
    # matrix improve too. Margins are well below what the search finds.
    assert reduced.sensitivity(1) < 0.95 * A.sensitivity(1)


def test_known_improvements_are_found():
    # Hierarchical(2): Gram [[2, 1], [1, 2]] = that of (p, q), (q, p), p + q = √3.
    tree = Hierarchical(2, 2)
    # The tree itself is a critical point of the surrogate (all columns tie), so without
    # random starts nothing moves: the input comes back.
    assert reduce_l1(tree, **FAST) is tree
    reduced = reduce_l1(tree, rng=np.random.default_rng(2), **FAST)
    assert reduced.sensitivity(1) == pytest.approx(math.sqrt(3), abs=1e-6)
    # Haar(8) reaches 2√2 (block-diagonal Gram of two 4-cell halves, each rotated).
    reduced = reduce_l1(Haar(8), max_iterations=2000, starts=1, rng=np.random.default_rng(0))
    assert reduced.sensitivity(1) <= 2 * math.sqrt(2) + 1e-6


@settings(max_examples=25, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 5), st.integers(1, 4)),
        elements=st.integers(-3, 3).map(float),
    ),
    st.integers(0, 2**32 - 1),
)
def test_never_worse_and_always_profile_equivalent(array, seed):
    A = Dense(array)
    reduced = reduce_l1(A, max_iterations=100, starts=1, rng=np.random.default_rng(seed))
    assert reduced.sensitivity(1) <= A.sensitivity(1)
    assert reduced.shape[1] == A.shape[1]
    if np.any(array):
        assert relative_gram_error(reduced.dense(), array) < 1e-9
    else:
        assert reduced is A


def test_kron_reduction_equals_reduction_of_each_factor():
    factors = [Haar(4), Prefix(3), Hierarchical(4, 2)]
    reduced = reduce_l1(Kron(factors), rng=np.random.default_rng(11), **FAST)
    rng = np.random.default_rng(11)  # the same draws, factor after factor
    expected = [reduce_l1(factor, rng=rng, **FAST) for factor in factors]
    assert isinstance(reduced, Kron)
    for got, want in zip(reduced.factors, expected, strict=True):
        assert np.array_equal(got.dense(), want.dense())
    # ‖A ⊗ B‖₁ = ‖A‖₁ ‖B‖₁ and the Gram is the Kron of the factor Grams.
    dense = reduced.dense()
    assert l1(dense) == pytest.approx(math.prod(f.sensitivity(1) for f in expected))
    assert relative_gram_error(dense, Kron(factors).dense()) < 1e-9


def test_kron_of_unimprovable_factors_is_returned_unchanged():
    A = Kron([Identity(3), Identity(4)])
    assert reduce_l1(A) is A


@pytest.mark.parametrize("A", [Haar(8), Hierarchical(8, 2), Kron([Haar(4), Prefix(3)])])
def test_laplace_error_improves_by_the_squared_norm_ratio(A):
    W = AllRange(8) if A.shape[1] == 8 else Kron([AllRange(4), Prefix(3)])
    reduced = reduce_l1(A, rng=np.random.default_rng(5), **FAST)
    privacy = PureDP(1)
    ratio = (reduced.sensitivity(1) / A.sensitivity(1)) ** 2
    assert ratio < 1
    assert expected_error(W, reduced, privacy) == pytest.approx(
        ratio * expected_error(W, A, privacy), rel=1e-9
    )
    # Under Gaussian noise the L2 sensitivity (the Gram's diagonal) is unchanged.
    gaussian = ZCDP("1/2")
    assert expected_error(W, reduced, gaussian) == pytest.approx(
        expected_error(W, A, gaussian), rel=1e-9
    )


def test_unimprovable_and_trivial_inputs_come_back_unchanged():
    identity = Identity(6)
    assert reduce_l1(identity) is identity
    # Disjoint column supports: L1 already equals L2 in every column.
    diagonal = Dense(np.diag([1.0, 2.0, 3.0]))
    assert reduce_l1(diagonal) is diagonal
    # No search at all: the input is returned, never something worse.
    tree = Hierarchical(8, 2)
    assert reduce_l1(tree, max_iterations=0) is tree


def test_weighted_strategies_are_reduced_through_their_base():
    A = Weighted(3.0, Haar(4))
    reduced = reduce_l1(A, **FAST)
    assert isinstance(reduced, Weighted) and reduced.weight == 3.0
    assert reduced.sensitivity(1) == pytest.approx(3.0 * 2.0, abs=1e-5)
    assert relative_gram_error(reduced.dense(), A.dense()) < 1e-9


def test_extra_rows_are_used_only_when_asked_for():
    reduced = reduce_l1(Haar(4), rows=4, **FAST)
    assert reduced.shape[0] <= 4
    assert reduced.sensitivity(1) == pytest.approx(2.0, abs=1e-6)


def test_bad_arguments_and_large_matrices_are_refused():
    with pytest.raises(TooLargeError, match="limited to"):
        reduce_l1(Ones(1, MAX_SIDE + 1))
    with pytest.raises(ArgumentError, match="non-negative"):
        reduce_l1(Haar(4), max_iterations=-1)
    with pytest.raises(ArgumentError, match="rows"):
        reduce_l1(Haar(4), rows=2)
    with pytest.raises(ArgumentError, match="at least one cell"):
        haar_tree_equivalent(0)
