"""The Dask-chunked NNLS gives the in-memory answer."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from dpmm.linalg import Hierarchical, Identity, Kron, Prefix
from dpmm.reconstruct import ReconstructionError, nnls
from dpmm.reconstruct.chunked import ChunkedKron


def test_chunked_kron_apply_matches_in_memory() -> None:
    rng = np.random.default_rng(50)
    A = Kron([Hierarchical(5, 2), Prefix(4), Identity(3)])
    x = rng.normal(size=A.shape[1])
    tensor = da.from_array(x.reshape(5, 4, 3), chunks=(2, 4, 3))
    op = ChunkedKron(A)
    np.testing.assert_allclose(op.apply(tensor).compute().reshape(-1), A @ x)
    r = rng.normal(size=A.shape[0])
    rt = da.from_array(r.reshape(9, 4, 3), chunks=(4, 4, 3))
    np.testing.assert_allclose(op.apply_adjoint(rt).compute().reshape(-1), A.T @ r)


@pytest.mark.parametrize("total", [None, 40.0, "estimated"])
def test_chunked_nnls_matches_in_memory(total: float | str | None) -> None:
    rng = np.random.default_rng(51)
    A = Kron([Hierarchical(4, 2), Identity(3)])
    truth = rng.poisson(1, A.shape[1]) * (rng.random(A.shape[1]) < 0.4)
    y = A @ truth + rng.laplace(0, 2, A.shape[0])
    memory = nnls(A, y, total=total, tolerance=1e-6)
    chunks = da.from_array(y.reshape(7, 3), chunks=(3, 3))
    chunked = nnls(A, chunks, total=total, tolerance=1e-6)
    assert chunked.converged and chunked.iterations == memory.iterations
    np.testing.assert_allclose(chunked.x.compute().reshape(-1), memory.x, atol=1e-9)
    if total is not None:
        assert float(chunked.x.sum().compute()) == pytest.approx(memory.total)
        assert chunked.total == pytest.approx(memory.total)


def test_chunked_inputs_are_checked() -> None:
    A = Kron([Identity(3), Identity(2)])
    with pytest.raises(ReconstructionError, match="shape"):
        nnls(A, da.zeros((2, 3), chunks=1))
    with pytest.raises(ReconstructionError, match="NaN"):
        nnls(A, da.from_array(np.array([[1.0, np.nan]] * 3), chunks=1))
    with pytest.raises(ReconstructionError, match="Kronecker"):
        nnls(Identity(6), da.zeros(6, chunks=2))
