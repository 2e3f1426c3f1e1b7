"""PIdentity and its Woodbury Gram inverse against their dense counterparts."""

import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.linalg import AllRange, Dense, Prefix, trace_of_product
from dpmm.linalg.pidentity import PIdentity, PIdentityGramInverse, woodbury_solve

SHAPES = [(1, 1), (1, 5), (3, 7), (4, 4), (6, 3)]


def _theta(p, n, seed):
    theta = np.random.default_rng(seed).uniform(size=(p, n))
    theta[theta < 0.2] = 0.0  # some exact zeros, as the optimizer's bounds produce
    return theta


def _dense_strategy(theta, norm):
    stacked = np.vstack([np.eye(theta.shape[1]), theta])
    return stacked / np.linalg.norm(stacked, ord=norm, axis=0)


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize(("p", "n"), SHAPES)
def test_operations_match_the_dense_matrix(p, n, norm):
    theta = _theta(p, n, seed=p * 31 + n)
    A = PIdentity(theta, norm)
    dense = _dense_strategy(theta, norm)
    np.testing.assert_allclose(A.dense(), dense, atol=1e-14)
    x = np.random.default_rng(0).normal(size=(n, 2))
    y = np.random.default_rng(1).normal(size=(n + p, 2))
    np.testing.assert_allclose(A @ x, dense @ x, atol=1e-12)
    np.testing.assert_allclose(A.T @ y, dense.T @ y, atol=1e-12)
    gram = dense.T @ dense
    np.testing.assert_allclose(A.gram().dense(), gram, atol=1e-12)
    inverse = A.gram().pinv()
    assert isinstance(inverse, PIdentityGramInverse)
    np.testing.assert_allclose(inverse.dense(), np.linalg.inv(gram), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(inverse @ x, np.linalg.inv(gram) @ x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(inverse.diagonal(), np.diag(np.linalg.inv(gram)), rtol=1e-9)
    np.testing.assert_allclose(A.gram().diagonal(), np.diag(gram), rtol=1e-12)
    np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(dense), atol=1e-9)
    for q in (1, 2, np.inf):
        expected = np.linalg.norm(dense, ord=q, axis=0)
        np.testing.assert_allclose(A.column_norms(q), expected, rtol=1e-12)
        assert A.sensitivity(q) == pytest.approx(expected.max(), rel=1e-12)
    assert A.sensitivity(norm) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("norm", [1, 2])
def test_trace_of_product_is_fast_and_exact_for_dense_and_structured_grams(norm):
    theta = _theta(5, 40, seed=3)
    inverse = PIdentity(theta, norm).gram().pinv()
    exact_inverse = np.linalg.inv(_dense_strategy(theta, norm).T @ _dense_strategy(theta, norm))
    for G in (Prefix(40).gram(), AllRange(40).gram()):
        expected = np.trace(G.dense() @ exact_inverse)
        assert trace_of_product(G, inverse) == pytest.approx(expected, rel=1e-10)
        assert trace_of_product(inverse, G) == pytest.approx(expected, rel=1e-10)
    asymmetric = np.random.default_rng(2).normal(size=(40, 40))
    assert trace_of_product(Dense(asymmetric), inverse) == pytest.approx(
        np.trace(asymmetric @ exact_inverse), rel=1e-10
    )


def test_inverse_gram_never_forms_an_n_by_n_inverse():
    theta = np.random.default_rng(4).uniform(size=(8, 20_000))
    inverse = PIdentity(theta, 1).gram().pinv()
    x = np.random.default_rng(5).normal(size=20_000)
    back = inverse.pinv() @ (inverse @ x)  # Gram · Gram⁻¹ · x
    np.testing.assert_allclose(back, x, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(
    ("theta", "norm"),
    [
        (np.array([[-1.0, 0.5]]), 1),
        (np.array([[np.nan, 0.5]]), 1),
        (np.ones(3), 1),
        (np.ones((1, 3)), 3),
    ],
)
def test_bad_parameters_are_refused(theta, norm):
    with pytest.raises(ArgumentError):
        PIdentity(theta, norm)


@pytest.mark.parametrize("magnitude", [1.0, 1e3, 1e10], ids=["cholesky", "large", "qr"])
def test_woodbury_solve_matches_a_direct_solve(magnitude):
    theta = _theta(5, 40, seed=9) * magnitude
    expected = np.linalg.solve(np.eye(5) + theta @ theta.T, theta)
    np.testing.assert_allclose(
        woodbury_solve(theta), expected, rtol=1e-8, atol=1e-12 * np.abs(expected).max()
    )
