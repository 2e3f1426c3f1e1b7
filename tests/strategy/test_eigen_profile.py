"""The eigen method under Laplace noise: the design's Gram, a lower 1-norm, less error."""

import numpy as np
import pytest

from dpmm.error import expected_error
from dpmm.linalg import AllRange, Identity, Kron, Prefix
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import eigen_profile, optimize
from dpmm.strategy.eigen import eigen_design
from dpmm.strategy.eigen_profile import reduce_eigen_l1

PURE = PureDP(1)


def _proportional_grams(A, B) -> bool:
    GA, GB = A.gram().dense(), B.gram().dense()
    scale = np.trace(GA) / np.trace(GB)
    return np.allclose(GA, scale * GB, rtol=1e-9, atol=1e-9 * np.abs(GA).max())


@pytest.mark.parametrize("W", [Prefix(32), AllRange(24), Kron([Prefix(8), AllRange(6)])])
def test_reduction_keeps_the_gram_and_lowers_the_error(W):
    design = eigen_design(W, PURE)
    reduced = optimize(W, "eigen", PURE)
    assert reduced is not design and not isinstance(reduced, EigenStrategy)
    assert reduced.sensitivity(1) == pytest.approx(1.0, rel=1e-12)
    assert _proportional_grams(reduced, design)
    # Same Gram up to scale and the same sensitivity: the error falls by the squared ratio
    # of the 1-norms before rescaling, which the descent makes well below 1.
    assert expected_error(W, reduced, PURE) < 0.6 * expected_error(W, design, PURE)
    dense = reduced.dense()
    assert np.abs(dense).sum(axis=0).max() == pytest.approx(1.0, rel=1e-9)


def test_a_kron_design_is_reduced_factor_by_factor():
    W = Kron([Prefix(8), AllRange(6)])
    reduced = reduce_eigen_l1(eigen_design(W, PURE))
    assert isinstance(reduced.base, Kron) and len(reduced.base.factors) == 2


def test_designs_wider_than_the_limit_are_kept(monkeypatch):
    monkeypatch.setattr(eigen_profile, "PROFILE_SIDE", 16)
    design = eigen_design(Prefix(32), PURE)
    assert reduce_eigen_l1(design) is design


def test_gaussian_designs_are_not_reduced():
    assert isinstance(optimize(Prefix(16), "eigen", ZCDP(1)), EigenStrategy)


def test_an_identity_design_has_nothing_to_reduce():
    design = eigen_design(Identity(8), PURE)
    assert reduce_eigen_l1(design) is design
