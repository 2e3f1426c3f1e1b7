"""The hierarchical Gram's closed-form inverse against numpy."""

import numpy as np
import pytest

from dpmm.linalg import AllRange, Dense, Hierarchical, Kron, Prefix, trace_of_product
from dpmm.linalg.hierarchy import TreeGram, TreeGramInverse
from dpmm.privacy import PureDP
from dpmm.strategy import optimize

SHAPES = [(1, 2), (2, 2), (3, 2), (5, 2), (7, 3), (16, 4), (33, 5), (10, 16), (64, 2)]


@pytest.mark.parametrize(("n", "branching"), SHAPES)
def test_inverse_gram_matches_numpy(n, branching):
    rng = np.random.default_rng(n * 31 + branching)
    tree = Hierarchical(n, branching)
    gram = tree.gram()
    inverse = gram.pinv()
    assert isinstance(gram, TreeGram) and isinstance(inverse, TreeGramInverse)
    expected = np.linalg.inv(tree.dense().T @ tree.dense())
    np.testing.assert_allclose(gram.dense(), tree.dense().T @ tree.dense())
    np.testing.assert_allclose(inverse.dense(), expected, atol=1e-12)
    X = rng.normal(size=(n, 3))
    np.testing.assert_allclose(inverse @ X, expected @ X, atol=1e-12)
    np.testing.assert_allclose(inverse.T @ X, expected @ X, atol=1e-12)
    np.testing.assert_allclose(inverse.diagonal(), np.diag(expected), atol=1e-12)
    np.testing.assert_allclose(gram.diagonal(), np.diag(tree.dense().T @ tree.dense()))
    other = rng.normal(size=(n, n))
    assert trace_of_product(Dense(other), inverse) == pytest.approx(
        np.trace(other @ expected), abs=1e-9
    )
    assert inverse.pinv() is gram


def test_hierarchical_selection_never_densifies_the_tree_gram(monkeypatch):
    def refuse(self):
        raise AssertionError("the tree Gram was densified")

    monkeypatch.setattr(TreeGram, "_dense", refuse)
    monkeypatch.setattr(TreeGramInverse, "_dense", refuse)
    A = optimize(Kron([AllRange(2048), Prefix(512)]), "hierarchical", PureDP(1))
    assert [type(f) for f in A.factors] == [Hierarchical, Hierarchical]
