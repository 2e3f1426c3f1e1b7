"""The hierarchical Gram's closed-form inverse against numpy."""

import numpy as np
import pytest

from dpmm.linalg import (
    AllRange,
    Dense,
    Hierarchical,
    Identity,
    Kron,
    Prefix,
    trace_of_product,
    tree_intervals,
)
from dpmm.linalg.hierarchy import TreeGram, TreeGramInverse, split_interval
from dpmm.linalg.variance import query_variances
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


@pytest.mark.parametrize(("n", "branching"), SHAPES)
def test_prefix_and_range_errors_and_prefix_variances_match_numpy(n, branching):
    """The closed forms against a semiseparable Gram (one cumulative sum per tree node)."""
    inverse = Hierarchical(n, branching).gram().pinv()
    expected = np.linalg.inv(inverse.pinv().dense())
    for workload in (Prefix(n), AllRange(n)):
        W = workload.dense()
        assert trace_of_product(workload.gram(), inverse) == pytest.approx(
            np.trace(W.T @ W @ expected), rel=1e-12
        )
    P = Prefix(n).dense()
    np.testing.assert_allclose(query_variances(Prefix(n), inverse), np.diag(P @ expected @ P.T))
    np.testing.assert_allclose(query_variances(Identity(n), inverse), np.diag(expected))


def test_a_prefix_over_a_million_cells_has_its_tree_error_without_a_dense_gram(monkeypatch):
    """Nothing n × n is formed: the Gram's array, the tree Grams and the inverse stay implicit."""

    def refuse(self):
        raise AssertionError("densified")

    monkeypatch.setattr(TreeGram, "_dense", refuse)
    monkeypatch.setattr(TreeGramInverse, "_dense", refuse)
    n = 1 << 20
    W = Prefix(n)
    inverse = Hierarchical(n, 16).gram().pinv()
    error = trace_of_product(W.gram(), inverse)
    variances = query_variances(W, inverse)
    assert error == pytest.approx(variances.sum(), rel=1e-9)
    # Hay et al.: a 16-ary tree answers every prefix with far less error than the cells.
    assert 0 < error < trace_of_product(W.gram(), Identity(n)) / 50
    assert "array" not in vars(W.gram())  # the lazy dense Gram was never read


def test_tree_intervals_split_each_node_as_split_interval_does():
    """The depth-by-depth split gives every node the children ``split_interval`` gives it."""
    for n, branching in [(1, 2), (9, 2), (100, 3), (1000, 7), (4097, 16), (65, 64)]:
        nodes = tree_intervals(n, branching)
        children = {}
        for low, high in nodes[1:]:
            parent = min(
                (
                    node
                    for node in nodes
                    if node[0] <= low and high <= node[1] and node != (low, high)
                ),
                key=lambda node: node[1] - node[0],
            )
            children.setdefault(parent, []).append((low, high))
        for node in nodes:
            assert children.get(node, []) == split_interval(*node, branching)
