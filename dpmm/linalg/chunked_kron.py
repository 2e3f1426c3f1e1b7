"""Kronecker products applied to chunked Dask arrays, factor by factor, block by block.

For a vector that does not fit one machine, ``x`` is a Dask array shaped as the
domain ``(n_1, …, n_d)``, chunked along one axis. Applying ``⊗_i F_i`` means
applying each factor along its own axis: every block that holds the whole of
axis i is transformed independently (``map_blocks``); the one axis the home
chunking splits is first rechunked to be split along the others. So no task
ever holds more than one block. Measurement (``B x``) and reconstruction (``Aᵀy``,
the least-squares estimate, NNLS's Hessian) both apply products this way.

Blocks are also cut small enough for a worker's memory: a factor with more rows than
columns (a hierarchy has about twice as many) grows the tensor at every axis, so each
step is split into at least as many blocks as :data:`BLOCK_ELEMENTS` needs for the larger
of its input and output (a 1.6·10⁷-cell release on workers of 1 GiB was one block,
1.3·10⁸ answers, and every worker running it was killed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpmm.linalg.base import Matrix
from dpmm.linalg.combinators import Weighted
from dpmm.linalg.kron import Kron

__all__ = ["BLOCK_ELEMENTS", "ChunkedKron", "axis_factors", "chunk_count"]

#: The most elements (float64: 32 MiB) a block of a step's input or output holds, where
#: the tensor's axes other than the step's can be split that finely.
BLOCK_ELEMENTS = 2**22


def axis_factors(matrix: Matrix, shape: tuple[int, ...]) -> list[Matrix] | None:
    """The factors by which ``matrix`` acts on a tensor of ``shape``, one per axis in
    order, or None when it is not such a Kronecker product.

    Example:
        >>> from dpmm.linalg import Identity, Ones, Prefix
        >>> [f.shape for f in axis_factors(Kron([Prefix(3), Ones(1, 4)]), (3, 4))]
        [(3, 3), (1, 4)]
        >>> axis_factors(Prefix(12), (3, 4)) is None
        True
    """
    weight = 1.0
    while isinstance(matrix, Weighted):
        weight, matrix = weight * matrix.weight, matrix.base
    if len(shape) == 1 and matrix.shape[1] == shape[0]:
        factors = [matrix]
    elif isinstance(matrix, Kron) and [f.shape[1] for f in matrix.factors] == list(shape):
        factors = list(matrix.factors)
    else:
        return None
    if weight != 1.0:
        factors[0] = Weighted(weight, factors[0])
    return factors


class ChunkedKron:
    """Applies ``⊗_i factors[i]`` to Dask arrays shaped as the input tensor.

    Example:
        >>> import dask.array as da
        >>> from dpmm.linalg import Identity, Prefix
        >>> op = ChunkedKron(Kron([Prefix(2), Identity(3)]))
        >>> x = da.ones((2, 3), chunks=(1, 3))
        >>> op.apply(x).compute().tolist()
        [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    """

    def __init__(self, kron: Matrix) -> None:
        self.factors = list(kron.factors) if isinstance(kron, Kron) else [kron]

    def apply(self, tensor: Any) -> Any:
        """``(⊗ F_i) x`` for x shaped ``(n_1, …, n_d)``; the result keeps x's chunking axis
        (and is split along the others too where one axis cannot make blocks small)."""
        home = _chunked_axis(tensor)
        blocks = math.prod(tensor.numblocks)
        for axis, factor in enumerate(self.factors):
            grown = tensor.size * max(1.0, factor.shape[0] / max(factor.shape[1], 1))
            blocks = max(blocks, -(-int(grown) // BLOCK_ELEMENTS))
            tensor = _apply_along(tensor, factor, axis, blocks)
        return _split(tensor, _from(home, tensor.ndim), blocks)

    def apply_adjoint(self, tensor: Any) -> Any:
        """``(⊗ F_i)ᵀ r`` for r shaped ``(m_1, …, m_d)``."""
        return ChunkedKron(Kron([f.T for f in self.factors])).apply(tensor)


def chunk_count(tensor: Any) -> int:
    """The number of blocks along the most-split axis of a Dask array."""
    return max(tensor.numblocks)


def _chunked_axis(tensor: Any) -> int:
    return int(np.argmax(tensor.numblocks))


def _from(first: int, ndim: int) -> list[int]:
    return [(first + i) % ndim for i in range(ndim)]


def _split(tensor: Any, axes: list[int], blocks: int) -> Any:
    """``tensor`` rechunked into about ``blocks`` blocks, split along ``axes`` in order (the
    first as finely as it can be, then the next) and whole along the others."""
    chunks: dict[int, int] = {i: -1 for i in range(tensor.ndim)}
    left = max(blocks, 1)
    for axis in axes:
        if left <= 1:
            break
        pieces = min(tensor.shape[axis], left)
        chunks[axis] = max(1, -(-tensor.shape[axis] // pieces))
        left = -(-left // pieces)
    return tensor.rechunk(chunks)


def _apply_along(tensor: Any, factor: Matrix, axis: int, blocks: int) -> Any:
    if tensor.numblocks[axis] != 1 or math.prod(tensor.numblocks) < blocks:
        others = [a for a in _from(axis + 1, tensor.ndim) if a != axis]
        tensor = _split(tensor, others, blocks) if others else tensor.rechunk(-1)

    def transform(block: np.ndarray) -> np.ndarray:
        moved = np.moveaxis(block, axis, 0)
        flat = moved.reshape(moved.shape[0], -1)
        applied = factor._matmat(flat)
        return np.moveaxis(applied.reshape((applied.shape[0], *moved.shape[1:])), 0, axis)

    chunks = list(tensor.chunks)
    chunks[axis] = (factor.shape[0],)
    return tensor.map_blocks(transform, chunks=tuple(chunks), dtype=np.float64)
