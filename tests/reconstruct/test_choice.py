"""The auto reconstruction rule: NNLS for aggregating strategies on sparse-looking estimates."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.linalg import Haar, Hierarchical, Identity, Kron, Prefix
from dpmm.reconstruct import least_squares
from dpmm.reconstruct.choice import NEGATIVE_SHARE, prefers_nnls, reads_single_cells


def test_identity_strategies_read_single_cells() -> None:
    assert reads_single_cells(Identity(5))
    assert reads_single_cells(2.5 * Identity(5))
    assert reads_single_cells(Kron([Identity(2), 3.0 * Identity(3)]))
    assert not reads_single_cells(Kron([Identity(2), Prefix(3)]))
    assert not reads_single_cells(Hierarchical(8))


def test_the_cut_is_on_the_share_of_negative_cells() -> None:
    n = 100
    negatives = int(np.ceil(NEGATIVE_SHARE * n))
    estimate = np.ones(n)
    estimate[:negatives] = -1.0
    assert prefers_nnls(Hierarchical(n), estimate)
    estimate[0] = 1.0
    assert not prefers_nnls(Hierarchical(n), estimate)
    assert not prefers_nnls(Identity(n), -np.ones(n))


@pytest.mark.parametrize("strategy", [Hierarchical(256), Haar(256)])
def test_sparse_data_picks_nnls_and_dense_data_least_squares(strategy) -> None:
    rng = np.random.default_rng(5)
    sparse = np.zeros(256)
    sparse[rng.choice(256, 8, replace=False)] = 500.0
    dense = rng.poisson(400.0, 256).astype(np.float64)
    picks = {}
    for name, x in (("sparse", sparse), ("dense", dense)):
        y = strategy @ x + rng.laplace(0.0, 10.0, strategy.shape[0])
        picks[name] = prefers_nnls(strategy, least_squares(strategy, y).x)
    assert picks == {"sparse": True, "dense": False}
