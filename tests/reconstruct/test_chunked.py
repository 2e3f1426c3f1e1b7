"""The Dask-chunked NNLS gives the in-memory answer."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from dpmm.linalg import Hierarchical, Identity, Kron, Prefix
from dpmm.reconstruct import ReconstructionError, chunked_loop, nnls
from dpmm.reconstruct.chunked import ChunkedKron
from dpmm.reconstruct.chunked_loop import BlockKron, apply_inside, minimize_on_blocks


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
        assert float(chunked.x.sum().compute()) == pytest.approx(memory.x.sum())
        assert chunked.total == memory.total  # None for an estimated total


def test_chunked_inputs_are_checked() -> None:
    A = Kron([Identity(3), Identity(2)])
    with pytest.raises(ReconstructionError, match="shape"):
        nnls(A, da.zeros((2, 3), chunks=1))
    with pytest.raises(ReconstructionError, match="NaN"):
        nnls(A, da.from_array(np.array([[1.0, np.nan]] * 3), chunks=1))
    with pytest.raises(ReconstructionError, match="Kronecker"):
        nnls(Identity(6), da.zeros(6, chunks=2))


def _noisy(A: Kron, rng: np.random.Generator) -> np.ndarray:
    truth = rng.poisson(2, A.shape[1]) * (rng.random(A.shape[1]) < 0.3)
    return A @ truth + rng.laplace(0, 3, A.shape[0])


def test_apply_inside_matches_dense_kron() -> None:
    rng = np.random.default_rng(52)
    factors = [rng.normal(size=(4, 4)), rng.normal(size=(3, 3)), Prefix(5)]
    block = rng.normal(size=(2, 3, 5))
    inside = apply_inside(block, [factors[1], factors[2]])
    dense = np.kron(factors[1], Prefix(5).dense())
    np.testing.assert_allclose(inside.reshape(2, -1), block.reshape(2, -1) @ dense.T)


@pytest.mark.parametrize(
    ("factors", "chunks"),
    [
        ([Hierarchical(6, 2), Prefix(3), Hierarchical(4, 2)], 2),  # dense first-axis Gram
        ([Identity(5), Hierarchical(4, 2)], 2),  # diagonal: no cross-block products
        ([Hierarchical(7, 3), Identity(2)], 1),  # one block
    ],
)
def test_block_loop_matches_in_memory(factors: list, chunks: int) -> None:
    rng = np.random.default_rng(53)
    A = Kron(factors)
    y = _noisy(A, rng)
    shape = tuple(f.shape[0] for f in factors)
    tensor = da.from_array(y.reshape(shape), chunks=(chunks, *shape[1:]))
    memory = nnls(A, y, tolerance=1e-8)
    chunked = nnls(A, tensor, tolerance=1e-8)
    assert chunked.converged and chunked.residual <= 1e-8
    assert chunked.iterations == memory.iterations
    np.testing.assert_allclose(chunked.x.compute().reshape(-1), memory.x, atol=1e-8)


def test_block_loop_iteration_limit_and_batches(monkeypatch) -> None:
    rng = np.random.default_rng(54)
    A = Kron([Hierarchical(8, 2), Hierarchical(5, 2)])
    y = _noisy(A, rng)
    tensor = da.from_array(y.reshape(15, 9), chunks=(4, 9))
    for limit in (7, 23):
        memory = nnls(A, y, tolerance=1e-14, max_iterations=limit)
        chunked = nnls(A, tensor, tolerance=1e-14, max_iterations=limit)
        assert chunked.iterations == limit and not chunked.converged
        assert chunked.residual == pytest.approx(memory.residual, rel=1e-6)
        np.testing.assert_allclose(chunked.x.compute().reshape(-1), memory.x, atol=1e-9)
    # The batch length changes the graphs, not the iterates.
    grams = [f.gram().dense() for f in A.factors]
    b = (A.T @ y).reshape(8, 5)
    blocks = da.from_array(b, chunks=(3, 5)).to_delayed().ravel().tolist()
    operator = BlockKron(grams[0], [grams[1]], [0, 3, 6, 8])
    lipschitz = float(np.linalg.eigvalsh(np.kron(*grams))[-1])
    runs = []
    for batch in (10, 30):
        monkeypatch.setattr(chunked_loop, "BATCH_ITERATIONS", batch)
        runs.append(
            minimize_on_blocks(
                operator, blocks, blocks, lipschitz, tolerance=1e-9, max_iterations=None
            )
        )
    assert runs[0][0].iterations == runs[1][0].iterations
    assert runs[0][0].converged
    first, second = (np.concatenate(dask.compute(*blocks)) for _, blocks in runs)
    np.testing.assert_array_equal(first, second)


def test_block_loop_stops_at_an_optimal_start() -> None:
    A = Kron([Hierarchical(4, 2), Identity(3)])
    truth = np.arange(1.0, 13.0)
    chunked = nnls(A, da.from_array((A @ truth).reshape(7, 3), chunks=(2, 3)))
    assert chunked.iterations == 0 and chunked.converged
    np.testing.assert_allclose(chunked.x.compute().reshape(-1), truth)


@pytest.mark.slow
def test_block_loop_on_a_local_cluster() -> None:
    from dask.distributed import Client, LocalCluster

    rng = np.random.default_rng(55)
    A = Kron([Hierarchical(8, 2), Hierarchical(6, 2), Identity(3)])
    y = _noisy(A, rng)
    shape = tuple(f.shape[0] for f in A.factors)
    # An iteration limit keeps the scheduler round trips few; the iterates still must agree.
    memory = nnls(A, y, tolerance=1e-7, max_iterations=50)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster),
    ):
        tensor = da.from_array(y.reshape(shape), chunks=(4, *shape[1:]))
        chunked = nnls(A, tensor, tolerance=1e-7, max_iterations=50)
        x = chunked.x.compute().reshape(-1)
    assert chunked.iterations == memory.iterations
    assert chunked.converged == memory.converged
    assert chunked.residual == pytest.approx(memory.residual, rel=1e-6)
    np.testing.assert_allclose(x, memory.x, atol=1e-9 * max(memory.x.max(), 1.0))


def test_block_loop_with_a_total_persists_once_per_batch(monkeypatch) -> None:
    """The total's projection is part of the batch's graph: the driver persists once per
    batch of iterations, not once per projection pass (it used to be several per step)."""
    rng = np.random.default_rng(56)
    A = Kron([Hierarchical(8, 2), Hierarchical(5, 2)])
    y = _noisy(A, rng)
    tensor = da.from_array(y.reshape(15, 9), chunks=(4, 9))
    persists = []
    original = chunked_loop._Tasks.persist
    monkeypatch.setattr(
        chunked_loop._Tasks, "persist", lambda *a: persists.append(1) or original(*a)
    )
    monkeypatch.setattr(chunked_loop, "BATCH_ITERATIONS", 20)
    memory = nnls(A, y, total="estimated", tolerance=1e-14, max_iterations=60)
    chunked = nnls(A, tensor, total="estimated", tolerance=1e-14, max_iterations=60)
    assert chunked.iterations == memory.iterations == 60
    assert len(persists) == 2 + 60 // 20  # constants, the first check, one per batch
    x = chunked.x.compute().reshape(-1)
    np.testing.assert_allclose(x, memory.x, atol=1e-9)
    assert x.min() >= 0 and x.sum() == pytest.approx(memory.x.sum(), rel=1e-12)


def test_chunked_kron_cuts_growing_steps_into_small_blocks(monkeypatch) -> None:
    """A hierarchy doubles the tensor at every axis; each step's blocks stay within
    BLOCK_ELEMENTS where the other axes can be split, and the product is unchanged."""
    from dpmm.linalg import chunked_kron

    monkeypatch.setattr(chunked_kron, "BLOCK_ELEMENTS", 64)
    rng = np.random.default_rng(57)
    A = Kron([Hierarchical(8, 2), Hierarchical(8, 2), Hierarchical(4, 2)])
    x = rng.normal(size=A.shape[1])
    result = ChunkedKron(A).apply(da.from_array(x.reshape(8, 8, 4), chunks=(8, 8, 4)))
    steps = [
        layer.collection_annotations["chunks"]
        for name, layer in result.dask.layers.items()
        if name.startswith("transform")  # a factor's product (rechunks stay Dask's own)
    ]
    assert len(steps) == 3
    for chunks in steps:
        assert np.prod([max(c) for c in chunks]) <= 64, chunks
    assert np.prod(result.numblocks) >= A.shape[0] // 64
    np.testing.assert_allclose(result.compute().reshape(-1), A @ x)
