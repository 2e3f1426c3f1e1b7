"""Semiseparable prefix and all-range Grams: O(n) products against their dense arrays."""

import numpy as np
import pytest

from dpmm.linalg import AllRange, Prefix
from dpmm.linalg.elementary import ClosedFormGram, semiseparable_product


@pytest.mark.parametrize("n", [1, 2, 7, 64])
@pytest.mark.parametrize("workload", [AllRange, Prefix], ids=["allrange", "prefix"])
def test_structured_products_match_the_dense_gram(workload, n):
    G = workload(n).gram()
    assert isinstance(G, ClosedFormGram) and G.generators is not None
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 3))
    dense = G.dense()
    scale = np.abs(dense).sum() * np.abs(X).max()
    np.testing.assert_allclose(G @ X, dense @ X, rtol=0, atol=1e-14 * scale)
    np.testing.assert_allclose(G.T @ X, dense @ X, rtol=0, atol=1e-14 * scale)
    np.testing.assert_allclose(G.matvec(X[:, 0]), dense @ X[:, 0], rtol=0, atol=1e-14 * scale)
    np.testing.assert_allclose(G.rmatvec(X[:, 1]), dense @ X[:, 1], rtol=0, atol=1e-14 * scale)


@pytest.mark.parametrize("workload", [AllRange, Prefix], ids=["allrange", "prefix"])
def test_generators_reproduce_the_closed_form_array(workload):
    G = workload(9).gram()
    lower, upper = G.generators
    index = np.arange(9)
    rebuilt = lower[np.minimum.outer(index, index)] * upper[np.maximum.outer(index, index)]
    np.testing.assert_array_equal(rebuilt, G.dense())


def test_rows_times_gram_along_the_last_axis():
    G = AllRange(33).gram()
    rows = np.random.default_rng(4).uniform(size=(5, 33))
    product = semiseparable_product(*G.generators, rows, axis=-1)
    np.testing.assert_allclose(product, rows @ G.dense(), rtol=1e-13)


def test_nonnegative_vectors_keep_entrywise_precision():
    # Entries spread over 16 orders of magnitude: the sums only add positive terms, so
    # every entry of G x is accurate to a few ulps, as the optimizer's Θ ≥ 0 needs.
    n = 2048
    G = AllRange(n).gram()
    x = 10.0 ** np.random.default_rng(8).uniform(-8, 8, size=n)
    np.testing.assert_allclose(G @ x, G.dense() @ x, rtol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 64])
@pytest.mark.parametrize(
    "a, b", [(1.0, 1.0), (2.0, 0.5), (0.0, 3.0), (2.0, -0.4), (1e-3, 5.0)], ids=str
)
def test_identity_plus_ones_is_inverted_in_closed_form(n, a, b):
    """``(aI + bJ)⁺`` (the Gram of ``[I; 1]`` among others), singular cases included:
    a = 0 leaves J alone, and a + nb = 0 (n = 5, b = −0.4) kills the ones direction."""
    from dpmm.linalg import Identity, Ones, Sum, Weighted

    gram = Sum([Weighted(a, Identity(n)), Weighted(b, Ones(n, n))])
    inverse = gram.pinv()
    assert isinstance(inverse, Sum)  # never a dense inverse
    expected = np.linalg.pinv(gram.dense(), hermitian=True)
    np.testing.assert_allclose(
        inverse.dense(), expected, rtol=0, atol=1e-8 * np.abs(expected).max()
    )


def test_a_stack_of_weighted_identity_and_total_has_a_closed_form_inverse_gram():
    # Its Gram is a sum of twice-weighted terms; at 10⁵ cells a dense inverse is refused.
    from dpmm.linalg import Identity, Ones, Sum, VStack, Weighted, trace_of_product

    n = 100_000
    inverse = VStack([Weighted(2.0, Identity(n)), Weighted(0.5, Ones(1, n))]).gram().pinv()
    assert isinstance(inverse, Sum)
    a, b = 4.0, 0.25  # the Gram 4 I + 0.25 J
    assert trace_of_product(Identity(n).gram(), inverse) == pytest.approx(
        (n - 1) / a + 1 / (a + n * b), rel=1e-12
    )
