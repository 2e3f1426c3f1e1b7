"""EigenStrategy and EigenGram against their dense counterparts."""

from __future__ import annotations

from functools import reduce

import dask
import dask.array as da
import numpy as np
import pytest

from dpmm.errors import DpmmError
from dpmm.linalg import (
    AllRange,
    Dense,
    Identity,
    Kron,
    Marginals,
    Prefix,
    VStack,
    trace_of_product,
)
from dpmm.linalg.eigen_strategy import EigenGram, EigenStrategy, kron_apply


def _basis(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((n, n)))[0]


def _case(rng: np.random.Generator, kron: bool, zeros: bool):
    bases = [_basis(rng, 3), _basis(rng, 4)]
    parts = [rng.uniform(0.2, 2.0, 3), rng.uniform(0.2, 2.0, 4)]
    if zeros:
        parts[0][1] = 0.0
    weights = parts if kron else np.kron(*parts) * rng.uniform(0.5, 1.5, 12)
    u = np.kron(*parts) if kron else weights
    q = np.kron(*bases)
    return bases, weights, u, q


@pytest.mark.parametrize("kron", [True, False])
@pytest.mark.parametrize("zeros", [False, True])
def test_operations_match_dense(kron: bool, zeros: bool) -> None:
    rng = np.random.default_rng(7)
    bases, weights, u, q = _case(rng, kron, zeros)
    A = EigenStrategy(bases, weights)
    dense = np.sqrt(u)[:, None] * q.T
    np.testing.assert_allclose(A.dense(), dense, atol=1e-12)
    Y = rng.standard_normal((12, 2))
    np.testing.assert_allclose(A.T @ Y, dense.T @ Y, atol=1e-12)
    np.testing.assert_allclose(A.gram().dense(), dense.T @ dense, atol=1e-12)
    np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(dense), atol=1e-10)
    np.testing.assert_allclose(A.gram().pinv().dense(), np.linalg.pinv(dense.T @ dense), atol=1e-9)
    for p, norms in ((1, np.abs(dense).sum(0)), (2, np.linalg.norm(dense, axis=0))):
        np.testing.assert_allclose(A.column_norms(p), norms, rtol=1e-12)
        assert A.sensitivity(p) == pytest.approx(norms.max(), rel=1e-12)
    np.testing.assert_allclose(A.column_norms(np.inf), np.abs(dense).max(0), rtol=1e-12)
    assert A.known_full_column_rank is (not zeros)
    gram = A.gram()
    np.testing.assert_allclose(gram.diagonal(), np.diag(dense.T @ dense), atol=1e-12)
    assert gram.trace() == pytest.approx(np.trace(dense.T @ dense))
    projector = A.row_space_projector().dense()
    np.testing.assert_allclose(projector, np.linalg.pinv(dense) @ dense, atol=1e-9)


@pytest.mark.parametrize("kron", [True, False])
def test_trace_hook_is_exact_for_any_aligned_gram(kron: bool) -> None:
    rng = np.random.default_rng(3)
    bases, weights, u, q = _case(rng, kron, zeros=False)
    inverse = EigenStrategy(bases, weights).gram().pinv()
    # Grams not diagonalized by the basis still give the exact trace (only diag(QᵀGQ) counts).
    W = VStack([Kron([Prefix(3), AllRange(4)]), 2.0 * Kron([Identity(3), Prefix(4)])])
    expected = np.trace(W.gram().dense() @ np.linalg.inv((q * u) @ q.T))
    assert trace_of_product(inverse, W.gram()) == pytest.approx(expected, rel=1e-10)
    assert trace_of_product(W.gram(), inverse) == pytest.approx(expected, rel=1e-10)
    other = EigenGram(bases, [np.ones(3), np.arange(1.0, 5.0)])
    assert inverse._trace_dot(other) == pytest.approx(
        np.trace(inverse.dense() @ other.dense()), rel=1e-10
    )
    assert inverse._trace_dot(Dense(np.ones((5, 5)))) is NotImplemented


@pytest.mark.parametrize("kron", [True, False])
def test_trace_hook_reads_a_marginal_algebra_gram_without_densifying(kron: bool) -> None:
    rng = np.random.default_rng(5)
    bases, weights, u, q = _case(rng, kron, zeros=False)
    inverse = EigenStrategy(bases, weights).gram().pinv()
    W = Marginals((3, 4), {(): 1.5, (0,): 1.0, (0, 1): 2.0})
    expected = np.trace(W.gram().dense() @ np.linalg.inv((q * u) @ q.T))
    assert inverse._trace_dot(W.gram()) == pytest.approx(expected, rel=1e-10)
    assert trace_of_product(W.gram(), inverse) == pytest.approx(expected, rel=1e-10)
    assert inverse._trace_dot(Marginals((4, 3), {(0,): 1.0}).gram()) is NotImplemented


def test_dask_weights_match_numpy() -> None:
    rng = np.random.default_rng(11)
    bases, _, _, _ = _case(rng, kron=True, zeros=False)
    full = rng.uniform(0.1, 1.0, (3, 4))
    lazy = da.from_array(full, chunks=(1, 4))
    A, B = EigenStrategy(bases, full), EigenStrategy(bases, lazy)
    W = Kron([Prefix(3), AllRange(4)])
    with dask.config.set(scheduler="sync"):
        for p in (1, 2):
            assert B.sensitivity(p) == pytest.approx(A.sensitivity(p), rel=1e-12)
            np.testing.assert_allclose(B.column_norms(p), A.column_norms(p), rtol=1e-12)
        np.testing.assert_allclose(B.dense(), A.dense(), atol=1e-12)
        assert trace_of_product(W.gram(), B.gram().pinv()) == pytest.approx(
            trace_of_product(W.gram(), A.gram().pinv()), rel=1e-12
        )


def test_kron_apply_numpy_and_dask() -> None:
    rng = np.random.default_rng(5)
    factors = [rng.standard_normal((n, n)) for n in (4, 3, 2)]
    x = rng.standard_normal((4, 3, 2))
    expected = reduce(np.kron, factors) @ x.ravel()
    np.testing.assert_allclose(kron_apply(factors, x).ravel(), expected, rtol=1e-12)
    lazy = da.from_array(x, chunks=(3, 3, 2))
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(
            np.asarray(kron_apply(factors, lazy)).ravel(), expected, rtol=1e-12
        )


def test_invalid_arguments_raise() -> None:
    q = np.eye(3)
    with pytest.raises(DpmmError):
        EigenStrategy([np.ones((3, 3))], [np.ones(3)])  # not orthonormal
    with pytest.raises(DpmmError):
        EigenStrategy([q], [-np.ones(3)])
    with pytest.raises(DpmmError):
        EigenStrategy([q, q], np.ones(8))
