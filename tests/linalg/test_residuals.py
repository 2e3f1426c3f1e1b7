"""Weighted residuals (a residual block strategy of scalar blocks) against their dense
matrix, on small random domains and weights."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpmm.errors import DpmmError, TooLargeError
from dpmm.linalg import Marginal, MarginalsGram
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import DomainSizes, ResidualGram, helmert
from dpmm.linalg.variance import query_variances
from dpmm.strategy.marginal_optimal import _marginal_variance

SHAPES = [(3,), (2, 3), (3, 1, 4), (2, 2, 3), (4, 3, 2, 2)]


def _random_strategy(
    shape: tuple[int, ...], seed: int, full: bool = False
) -> ResidualBlockStrategy:
    rng = np.random.default_rng(seed)
    masks = range(1 << len(shape))
    chosen = list(masks) if full else [m for m in masks if rng.random() < 0.6]
    # Weights of both signs and one exact zero exercise the rank logic.
    weights = {m: float(rng.choice([-1, 1]) * rng.uniform(0.3, 2.0)) for m in chosen}
    if len(chosen) > 2 and not full:
        weights[chosen[1]] = 0.0
    return ResidualBlockStrategy(shape, weights)


CASES = [(shape, seed) for shape in SHAPES for seed in range(3)]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_helmert_rows_are_orthonormal_and_orthogonal_to_ones(n):
    D = helmert(n)
    assert D.shape == (n - 1, n)
    np.testing.assert_allclose(D @ D.T, np.eye(n - 1), atol=1e-14)
    np.testing.assert_allclose(D.T @ D, np.eye(n) - 1.0 / n, atol=1e-14)


def _dense_residual(shape: tuple[int, ...], mask: int) -> np.ndarray:
    factors = [helmert(n) if mask >> i & 1 else np.ones((1, n)) for i, n in enumerate(shape)]
    return _kron_all(factors)


def _kron_all(factors: list[np.ndarray]) -> np.ndarray:
    result = np.ones((1, 1))
    for factor in factors:
        result = np.kron(result, factor)
    return result


def _oracle(A: ResidualBlockStrategy) -> np.ndarray:
    blocks = [w * _dense_residual(A.domain_shape, m) for m, w in A.blocks.items()]
    return np.vstack(blocks)


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_matmat_and_rmatmat_match_the_kron_of_helmert_factors(shape, seed):
    A = _random_strategy(shape, seed)
    dense = _oracle(A)
    rng = np.random.default_rng(seed + 100)
    X = rng.normal(size=(A.shape[1], 3))
    Y = rng.normal(size=(A.shape[0], 2))
    assert A.shape == dense.shape
    np.testing.assert_allclose(A @ X, dense @ X, atol=1e-12)
    np.testing.assert_allclose(A.T @ Y, dense.T @ Y, atol=1e-12)
    np.testing.assert_allclose(A @ X[:, 0], dense @ X[:, 0], atol=1e-12)


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_gram_and_its_pinv_match_dense(shape, seed):
    A = _random_strategy(shape, seed)
    dense = _oracle(A)
    gram = A.gram()
    assert isinstance(gram, ResidualGram)
    np.testing.assert_allclose(gram.dense(), dense.T @ dense, atol=1e-12)
    np.testing.assert_allclose(
        gram.pinv().dense(), np.linalg.pinv(dense.T @ dense, rcond=1e-10), atol=1e-10
    )
    # The stored eigenvalues agree with the base class's computation from coefficients.
    plain = MarginalsGram(shape, gram.coefficients)
    reference = plain.eigenvalues()
    assert gram.eigenvalues().keys() == reference.keys()
    for b, value in gram.eigenvalues().items():
        assert value == pytest.approx(reference[b], rel=1e-10)
        assert gram.multiplicity(b) == plain.multiplicity(b)


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_pinv_and_rank_match_dense(shape, seed):
    for full in (False, True):
        A = _random_strategy(shape, seed, full=full)
        dense = _oracle(A)
        np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(dense), atol=1e-12)
        rank = np.linalg.matrix_rank(dense) if dense.size else 0
        assert A.known_full_column_rank == (rank == dense.shape[1])
        if full:
            assert A.known_full_column_rank


@pytest.mark.parametrize(("shape", "seed"), CASES)
@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_column_norms_and_sensitivity_match_dense(shape, seed, p):
    A = _random_strategy(shape, seed)
    dense = _oracle(A)
    expected = np.linalg.norm(dense, ord=p, axis=0) if dense.size else np.zeros(A.shape[1])
    np.testing.assert_allclose(A.column_norms(p), expected, atol=1e-12)
    assert A.sensitivity(p) == pytest.approx(expected.max(), abs=1e-12)
    if p == 2:
        np.testing.assert_allclose(expected, expected[0], rtol=1e-12)
        assert A.uniform_column_norm(2) == pytest.approx(expected[0], rel=1e-12)


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_marginal_variance_is_the_diagonal_of_m_gram_pinv_mt(shape, seed):
    A = _random_strategy(shape, seed, full=True)
    sizes = DomainSizes(shape)
    pinv = np.linalg.pinv(A.gram().dense())
    for mask in range(1 << len(shape)):
        marginal = Marginal(shape, [i for i in range(len(shape)) if mask >> i & 1])
        M = marginal.dense()
        diagonal = np.diagonal(M @ pinv @ M.T)
        variance = _marginal_variance(A.blocks, sizes, mask)
        np.testing.assert_allclose(diagonal, variance, rtol=1e-9)
        np.testing.assert_allclose(
            query_variances(marginal, A.gram().pinv()), diagonal, rtol=1e-9, atol=1e-12
        )


def test_marginal_variance_is_infinite_when_a_needed_residual_is_missing():
    weights, sizes = {0: 1.0, 1: 1.0}, DomainSizes((3, 3))
    assert _marginal_variance(weights, sizes, 1) < math.inf
    assert _marginal_variance(weights, sizes, 0b11) == math.inf


def test_large_domain_operations_never_touch_the_cells():
    shape = (10,) * 60
    weights = {0: 1.0, 1 << 5: 0.5, (1 << 5) | (1 << 59): 2.0}
    A = ResidualBlockStrategy(shape, weights)
    assert A.shape == (1 + 9 + 81, 10**60)
    expected = 1.0 + 0.25 * 0.9 + 4.0 * 0.81
    assert A.sensitivity(2) == pytest.approx(math.sqrt(expected), rel=1e-14)
    eigen = A.gram().eigenvalues()
    assert eigen[1 << 5] == pytest.approx(0.25 * 1e59, rel=1e-14)
    inverse = A.gram().pinv().eigenvalues()
    assert inverse[0] == pytest.approx(1e-60, rel=1e-14)
    with pytest.raises(TooLargeError):
        A.column_norms(2)
    with pytest.raises(TooLargeError):
        A.sensitivity(1)


def test_residual_gram_drops_projections_of_size_one_attributes():
    gram = ResidualGram((3, 1), {0b01: 2.0, 0b11: 5.0})
    assert gram.eigenvalues() == {0b01: 2.0}
    reference = MarginalsGram.from_eigenvalues((3, 1), {0b01: 2.0})
    np.testing.assert_allclose(gram.dense(), reference.dense(), atol=1e-14)


@pytest.mark.parametrize(
    "weights",
    [{4: 1.0}, {-1: 1.0}, {"a": 1.0}, {1: math.nan}],
)
def test_invalid_weights_are_refused(weights):
    with pytest.raises(DpmmError, match="Residual"):
        ResidualBlockStrategy((2, 3), weights)


def test_rows_follow_the_weights_order():
    shape = (2, 3)
    A = ResidualBlockStrategy(shape, {0b10: 1.0, 0: 1.0})
    B = ResidualBlockStrategy(shape, {0: 1.0, 0b10: 1.0})
    assert A.shape == (3, 6)
    np.testing.assert_allclose(A.dense()[[2, 0, 1]], B.dense(), atol=1e-14)
    for row in itertools.chain(A.dense()[:2]):
        assert row.sum() == pytest.approx(0.0, abs=1e-12)
