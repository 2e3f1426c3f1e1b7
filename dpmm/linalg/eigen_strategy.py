"""Eigen-design strategies: ``A = diag(√u) Qᵀ`` for an orthonormal Kron basis ``Q = ⊗ Q_i``.

The eigen-design (seed 000) measures the eigenvectors of a workload's Gram,
each with its own weight. Over a Kronecker domain the basis is the Kron of
per-attribute bases and is never formed; the weights ``u`` (one per basis
vector, i.e. per cell) are either a Kron of per-attribute vectors or one full
vector, a numpy array or a chunked Dask array.

Everything the matrix mechanism needs stays in eigen form:

* ``AᵀA = Q diag(u) Qᵀ`` and ``(AᵀA)⁺ = Q diag(u⁺) Qᵀ`` (:class:`EigenGram`);
* squared column 2-norms ``(⊗(Q_i∘Q_i)) u`` and column 1-norms ``(⊗|Q_i|) √u``,
  both one Kron mat-vec;
* ``trace(G Q diag(d) Qᵀ) = Σ_j d_j (QᵀGQ)_jj``, and for a Kron ``G = ⊗G_i`` the
  diagonal ``(QᵀGQ)_jj`` is the Kron of the small per-attribute diagonals.

Vectors over the domain are handled as tensors of the domain's shape; a Dask
tensor is chunked along its first axis only, so every other factor applies
inside a chunk and only the first needs a blocked contraction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import numpy as np

from dpmm.errors import DpmmError, TooLargeError
from dpmm.linalg.base import Matrix, Symmetric, _check_norm, check_dense_size
from dpmm.linalg.combinators import Dense
from dpmm.linalg.elementary import Identity
from dpmm.linalg.kron import Kron
from dpmm.linalg.marginals import MarginalsGram

__all__ = ["EigenGram", "EigenStrategy", "is_dask", "kron_apply"]

#: Relative tolerance when checking that a basis is orthonormal.
ORTHONORMAL_TOLERANCE = 1e-8


def is_dask(array: object) -> bool:
    """True for a Dask collection (checked without importing Dask)."""
    return hasattr(array, "__dask_graph__")


def _apply_axes(factors: Sequence[np.ndarray], tensor: np.ndarray, first: int) -> np.ndarray:
    """Apply ``factors[k]`` along axis ``first + k`` of a numpy tensor."""
    for k, factor in enumerate(factors):
        axis = first + k
        shape = tensor.shape
        before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
        # O(n_axis · size): one batched product on a (before, n, after) view, no axis moves.
        block = np.ascontiguousarray(tensor).reshape(before, shape[axis], after)
        applied = block[:, :, 0] @ factor.T if after == 1 else np.matmul(factor, block)
        tensor = applied.reshape((*shape[:axis], factor.shape[0], *shape[axis + 1 :]))
    return tensor


def _sum_of_products(
    factor_blocks: list[np.ndarray], tensor_blocks: list[np.ndarray]
) -> np.ndarray:
    """One output chunk of a blocked product: ``Σ_c F[b, c] @ X[c]``."""
    total = None
    for factor, block in zip(factor_blocks, tensor_blocks, strict=True):
        flat = np.ascontiguousarray(block).reshape(block.shape[0], -1)
        part = (factor @ flat).reshape((factor.shape[0], *block.shape[1:]))
        total = part if total is None else total + part
    return total


def kron_apply(factors: Sequence[np.ndarray], tensor: Any) -> Any:
    """``(⊗ factors) vec(tensor)`` as a tensor, for a numpy or first-axis-chunked Dask tensor.

    ``tensor`` has one axis per factor (its shape the factors' column counts). A
    Dask tensor keeps its first-axis chunks; the other factors act inside each chunk.

    Example:
        >>> import numpy as np
        >>> a, b = np.arange(4.0).reshape(2, 2), np.eye(3)
        >>> x = np.arange(6.0)
        >>> np.allclose(kron_apply([a, b], x.reshape(2, 3)).ravel(), np.kron(a, b) @ x)
        True
    """
    if len(factors) != tensor.ndim:
        raise DpmmError(f"kron_apply needs one factor per axis: {len(factors)} for {tensor.ndim}")
    if not is_dask(tensor):
        return _apply_axes(factors, np.asarray(tensor, dtype=np.float64), 0)
    import dask.array as da

    rest = list(factors[1:])
    if rest:
        shape = tuple(f.shape[0] for f in rest)
        tensor = tensor.map_blocks(
            lambda block: _apply_axes(rest, block, 1),
            chunks=(tensor.chunks[0], *((s,) for s in shape)),
            dtype=np.float64,
        )
    first = da.from_array(factors[0], chunks=(tensor.chunks[0], tensor.chunks[0]))
    # A blocked product along the chunked axis: one task per output chunk sums one partial
    # product per input chunk (O(n_1 · size) flops, chunk-sized pieces in memory).
    rest_index = "".join(chr(ord("m") + k) for k in range(tensor.ndim - 1))
    return da.blockwise(
        _sum_of_products,
        "i" + rest_index,
        first,
        "ik",
        tensor,
        "k" + rest_index,
        concatenate=False,
        dtype=np.float64,
    )


def _as_bases(factor_bases: Sequence[np.ndarray]) -> list[np.ndarray]:
    bases = [np.asarray(q, dtype=np.float64) for q in factor_bases]
    if not bases:
        raise DpmmError("An eigen strategy needs at least one factor basis")
    for q in bases:
        if q.ndim != 2 or q.shape[0] != q.shape[1]:
            raise DpmmError(f"Every factor basis must be a square matrix, got shape {q.shape}")
        defect = np.abs(q.T @ q - np.eye(q.shape[0])).max(initial=0.0)
        if defect > ORTHONORMAL_TOLERANCE * max(1, q.shape[0]):
            raise DpmmError(
                f"A factor basis of size {q.shape[0]} is not orthonormal ({defect:.2g})"
            )
    return bases


class _EigenForm(Matrix, abstract=True):
    """Shared storage: Kron bases and one value per basis vector (Kron parts or a full tensor)."""

    def __init__(self, factor_bases: Sequence[np.ndarray], values: Any) -> None:
        self.bases = _as_bases(factor_bases)
        self.dims = tuple(q.shape[0] for q in self.bases)
        cells = math.prod(self.dims)
        super().__init__((cells, cells))
        self.factor_values: list[np.ndarray] | None = None
        self.full_values: Any = None
        if isinstance(values, list | tuple) and len(values) == len(self.bases):
            parts = [np.asarray(v, dtype=np.float64).reshape(-1) for v in values]
            if [p.size for p in parts] != list(self.dims):
                raise DpmmError(
                    f"Factor weights of sizes {[p.size for p in parts]} for {self.dims}"
                )
            self.factor_values = parts
        else:
            if values.size != cells:
                raise DpmmError(
                    f"A full weight vector needs {cells:,} entries, got {values.size:,}"
                )
            full = values.reshape(self.dims) if values.shape != self.dims else values
            self.full_values = full if is_dask(full) else np.asarray(full, dtype=np.float64)
        # Dask weights stay uncomputed, so they are not checked here.
        in_memory = self.factor_values or ([] if is_dask(self.full_values) else [self.full_values])
        if any((v < 0).any() or not np.isfinite(v).all() for v in in_memory):
            raise DpmmError("Eigen weights must be finite and non-negative")

    # -- the value vector -------------------------------------------------------------------
    @property
    def is_kron(self) -> bool:
        """True when the values are a Kron of per-attribute vectors."""
        return self.factor_values is not None

    def values_tensor(self, limit: int | None = None) -> np.ndarray:
        """The values as a numpy tensor of the domain's shape (size-guarded)."""
        check_dense_size(1, self.shape[1], f"the weights of {self!r}", limit)
        if self.factor_values is not None:
            return reduce(np.multiply.outer, self.factor_values)
        return np.asarray(self.full_values, dtype=np.float64)

    def _map_values(self, function: Callable[[Any], Any]) -> list[np.ndarray] | Any:
        """The values with ``function`` applied entrywise (a Kron stays a Kron when it may)."""
        if self.factor_values is not None:
            return [function(v) for v in self.factor_values]
        return function(self.full_values)

    # -- mat-vecs -----------------------------------------------------------------------------
    def _basis_apply(self, X: np.ndarray, transpose: bool) -> np.ndarray:
        factors = [q.T for q in self.bases] if transpose else self.bases
        columns = np.asarray(X, dtype=np.float64).reshape((*self.dims, X.shape[1]))
        tensor = _apply_axes(factors, columns, 0)
        return tensor.reshape(self.shape[0], -1)

    def _scale(self, X: np.ndarray, function: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        scale = function(self.values_tensor()).reshape(-1, 1)
        return X * scale

    @property
    def known_full_column_rank(self) -> bool:
        if self.factor_values is not None:
            return all(bool((v > 0).all()) for v in self.factor_values)
        return bool(np.asarray((self.full_values > 0).all()))

    def _square_weighted_norms(self, values: Any) -> Any:
        """``(⊗(Q_i∘Q_i)) values`` as a tensor: the squared 2-norms of diag(√values)Qᵀ's columns."""
        return kron_apply([q * q for q in self.bases], values)

    def __repr__(self) -> str:
        kind = "kron" if self.is_kron else ("dask" if is_dask(self.full_values) else "full")
        return f"{type(self).__name__}({' ⊗ '.join(map(str, self.dims))}, {kind} weights)"


class EigenStrategy(_EigenForm):
    """``diag(√u) (⊗Q_i)ᵀ``: every basis vector measured once, scaled by ``√u``.

    Args:
        factor_bases: one orthonormal ``n_i × n_i`` basis per attribute (columns are
            basis vectors; the first attribute varies slowest, as in :class:`Kron`).
        weights: ``u``; a sequence of one non-negative vector per attribute (``u = ⊗u_i``)
            or one vector (or tensor) over the whole domain, numpy or Dask.

    Example:
        >>> import numpy as np
        >>> q = np.linalg.qr(np.arange(1.0, 10.0).reshape(3, 3) + np.eye(3))[0]
        >>> A = EigenStrategy([q, q], [np.array([1.0, 2.0, 0.5]), np.ones(3)])
        >>> dense = A.dense()
        >>> bool(np.isclose(A.sensitivity(2), np.linalg.norm(dense, axis=0).max()))
        True
    """

    closed_form_gram_pinv = True

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self._scale(self._basis_apply(X, transpose=True), np.sqrt)

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return self._basis_apply(self._scale(X, np.sqrt), transpose=False)

    def gram(self) -> EigenGram:
        """``AᵀA = Q diag(u) Qᵀ``."""
        return EigenGram(self.bases, self._map_values(lambda v: v))

    def pinv(self) -> Matrix:
        """``A⁺ = Q diag(1/√u) on u's support``: the transpose of an eigen strategy."""
        return EigenStrategy(self.bases, self._map_values(_pseudo_reciprocal)).T

    def row_space_projector(self) -> EigenGram:
        """The projector onto the row space: ``Q diag(1[u > 0]) Qᵀ``."""
        return EigenGram(self.bases, self._map_values(lambda v: (v > 0) * 1.0))

    def column_norms(self, p: float = 1) -> np.ndarray:
        p = _check_norm(p)
        if self.factor_values is not None:
            parts = [
                _factor_column_norms(q, v, p)
                for q, v in zip(self.bases, self.factor_values, strict=True)
            ]
            check_dense_size(1, self.shape[1], f"the column norms of {self!r}")
            return reduce(np.multiply.outer, parts).reshape(-1)
        norms = self._full_column_norms(p)
        if is_dask(norms):
            check_dense_size(1, self.shape[1], f"the column norms of {self!r}")
            norms = norms.compute()
        return np.asarray(norms).reshape(-1)

    def _full_column_norms(self, p: float) -> Any:
        if p == 2:
            return np.sqrt(np.maximum(self._square_weighted_norms(self.full_values), 0.0))
        if p == 1:
            return kron_apply([np.abs(q) for q in self.bases], np.sqrt(self.full_values))
        if is_dask(self.full_values):
            raise TooLargeError(
                f"The ∞-norm sensitivity of {self!r} is computed only for in-memory weights."
            )
        return _max_product_apply([np.abs(q) for q in self.bases], np.sqrt(self.full_values))

    def sensitivity(self, p: float = 1) -> float:
        p = _check_norm(p)
        if self.factor_values is not None:
            return math.prod(
                float(_factor_column_norms(q, v, p).max())
                for q, v in zip(self.bases, self.factor_values, strict=True)
            )
        return float(np.asarray(self._full_column_norms(p).max()))


class EigenGram(Symmetric, _EigenForm):
    """``(⊗Q_i) diag(d) (⊗Q_i)ᵀ``: a symmetric matrix in a known Kron eigenbasis."""

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        inner = self._scale(self._basis_apply(X, transpose=True), lambda v: v)
        return self._basis_apply(inner, transpose=False)

    def gram(self) -> EigenGram:
        return EigenGram(self.bases, self._map_values(np.square))

    def pinv(self) -> EigenGram:
        return EigenGram(self.bases, self._map_values(_pseudo_reciprocal))

    def diagonal(self) -> np.ndarray:
        if self.factor_values is not None:
            parts = [(q * q) @ v for q, v in zip(self.bases, self.factor_values, strict=True)]
            check_dense_size(1, self.shape[0], f"the diagonal of {self!r}")
            return reduce(np.multiply.outer, parts).reshape(-1)
        diagonal = self._square_weighted_norms(self.full_values)
        if is_dask(diagonal):
            check_dense_size(1, self.shape[0], f"the diagonal of {self!r}")
            diagonal = diagonal.compute()
        return np.asarray(diagonal).reshape(-1)

    def trace(self) -> float:
        return self.inner_product([np.ones(n) for n in self.dims])

    def eigh(self) -> tuple[np.ndarray, Matrix]:
        """Eigenvalues in Kronecker order (not sorted) and the Kron of the bases."""
        vectors = [Dense(q) for q in self.bases]
        return self.values_tensor().reshape(-1), Kron(vectors) if len(vectors) > 1 else vectors[0]

    def inner_product(self, parts: Sequence[np.ndarray]) -> float:
        """``Σ_j d_j (⊗ parts)_j`` without forming the Kron vector ``⊗ parts``."""
        if self.factor_values is not None:
            return math.prod(float(v @ w) for v, w in zip(self.factor_values, parts, strict=True))
        contracted = self.full_values
        for part in reversed(parts):  # contract the last axis each time: O(size)
            contracted = contracted @ part
        return float(np.asarray(contracted))

    def _trace_dot(self, other: Matrix) -> float | object:
        """``trace(self @ other)`` for ``other`` a Kron aligned with the basis, an eigen Gram
        in the same basis or an element of the marginal algebra."""
        if isinstance(other, EigenGram) and self._same_basis(other):
            if self.is_kron and other.is_kron:
                return self.inner_product(other.factor_values)
            return float(
                np.asarray((self.full_values_or_tensor() * other.full_values_or_tensor()).sum())
            )
        if isinstance(other, MarginalsGram) and tuple(other.domain_shape) == tuple(self.dims):
            # Σ_a u_a C(a), C(a) = ⊗ (I on a, J elsewhere): per set, diag(QᵀIQ) = 1 and
            # diag(QᵀJQ) = (1ᵀq)², so O(sets · size) instead of a dense Gram.
            column_sums = [np.square(q.sum(axis=0)) for q in self.bases]
            ones = [np.ones(q.shape[1]) for q in self.bases]
            return float(
                sum(
                    u
                    * self.inner_product(
                        [ones[i] if mask >> i & 1 else column_sums[i] for i in range(len(ones))]
                    )
                    for mask, u in other.coefficients.items()
                )
            )
        factors = other.factors if isinstance(other, Kron) else [other]
        if [f.shape for f in factors] != [(n, n) for n in self.dims]:
            return NotImplemented
        return self.inner_product(
            [_rotated_diagonal(f, q) for f, q in zip(factors, self.bases, strict=True)]
        )

    def full_values_or_tensor(self) -> Any:
        """The full value tensor (Dask stays Dask; a Kron is formed, size-guarded)."""
        return self.full_values if self.full_values is not None else self.values_tensor()

    def _same_basis(self, other: _EigenForm) -> bool:
        return self.dims == other.dims and all(
            a is b or np.array_equal(a, b) for a, b in zip(self.bases, other.bases, strict=True)
        )


def _pseudo_reciprocal(values: Any) -> Any:
    safe = np.where(values > 0, values, 1.0)
    return np.where(values > 0, 1.0 / safe, 0.0)


def _factor_column_norms(q: np.ndarray, weights: np.ndarray, p: float) -> np.ndarray:
    """Column p-norms of ``diag(√weights) qᵀ``."""
    if p == 2:
        return np.sqrt(np.maximum((q * q) @ weights, 0.0))
    root = np.sqrt(weights)
    if p == 1:
        return np.abs(q) @ root
    return (np.abs(q) * root).max(axis=1, initial=0.0)


def _max_product_apply(factors: Sequence[np.ndarray], tensor: np.ndarray) -> np.ndarray:
    """``out_j = max_i (⊗ factors)_ji · x_i`` for non-negative factors, one axis at a time."""
    check_dense_size(1, tensor.size * max(f.shape[0] for f in factors), "a max-product")
    for axis, factor in enumerate(factors):
        moved = np.moveaxis(tensor, axis, -1)
        tensor = np.moveaxis((moved[..., None, :] * factor).max(axis=-1), -1, axis)
    return tensor


def _rotated_diagonal(gram: Matrix, basis: np.ndarray) -> np.ndarray:
    """``diag(Qᵀ G Q)``: O(cost of G on n vectors + n²)."""
    if isinstance(gram, Identity):
        return np.ones(basis.shape[1])
    return np.einsum("ij,ij->j", basis, gram._matmat(basis))
