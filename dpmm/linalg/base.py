"""The base class of dpmm's implicit matrices.

A :class:`Matrix` is a :class:`scipy.sparse.linalg.LinearOperator` that also
knows the structured operations the matrix mechanism needs: its Gram matrix,
its sensitivity, its pseudo-inverse, traces and diagonals. Every operation has
a generic fallback here (through the dense matrix, guarded by a size limit);
structured types override them with fast versions (a Kronecker product works
factor by factor, a marginal through the marginal algebra).

Composition uses ``@``; ``A @ B`` of two matrices is a lazy :class:`Product`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from numbers import Number
from typing import ClassVar, TypeVar

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator

from dpmm.errors import NotIntegerError, TooLargeError

__all__ = ["DENSE_LIMIT", "Matrix", "Symmetric", "check_dense_size"]

#: Most entries :meth:`Matrix.dense` builds unless told otherwise (400 MB of float64).
DENSE_LIMIT = 50_000_000

#: Singular values below this fraction of the largest count as zero in :meth:`Matrix.pinv`
#: (numpy's default, 1e-15, is below the rounding error of a formed Gram ``AᵀA``).
PINV_TOLERANCE = 1e-10

#: Exact integer norms and entry bounds stay below this: int64, with room for a sum of two.
INT_LIMIT = 2**62

#: ``(column L1 norms, column sums of squares, entry bound)``: see
#: :meth:`Matrix.integer_column_norms`.
IntegerNorms = tuple[np.ndarray, np.ndarray, int]


def check_dense_size(rows: int, cols: int, what: str, limit: int | None = None) -> None:
    """Raise :class:`TooLargeError` if a ``rows × cols`` dense array exceeds ``limit`` entries."""
    limit = DENSE_LIMIT if limit is None else limit
    if rows * cols > limit:
        raise TooLargeError(
            f"Refusing to build a dense {rows:,} × {cols:,} array for {what}: "
            f"{rows * cols:.3g} entries exceed the limit of {limit:,}; "
            "use its implicit operations instead."
        )


def singular_values_of_gram(gram: np.ndarray) -> np.ndarray:
    """Descending singular values of M from a dense Gram ``MᵀM`` (or ``M Mᵀ``)."""
    # Divide and conquer: several times faster than the default driver on the
    # thousand-row Grams of census workloads.
    values = scipy.linalg.eigvalsh(gram, driver="evd")[::-1]
    # Rounding leaves Gram eigenvalues near eps·λ_max where the truth is zero; their
    # roots (near √eps·σ_max) would be spurious singular values.
    floor = values.max(initial=0.0) * gram.shape[0] * np.finfo(np.float64).eps
    return np.sqrt(np.where(values > floor, values, 0.0))


_COMPUTED_ONCE = ("gram", "pinv", "gram_pinv")


_Value = TypeVar("_Value")


def _computed_once(method: Callable[[Matrix], _Value]) -> Callable[[Matrix], _Value]:
    """``method`` computed once per (immutable) matrix and kept until it is pickled."""
    name = method.__name__

    @functools.wraps(method)
    def cached(self: Matrix) -> _Value:
        store = self.__dict__.setdefault("_computed", {})
        if name not in store:
            store[name] = method(self)
        return store[name]

    return cached


class Matrix(LinearOperator):
    """An implicitly represented real matrix.

    Subclasses call ``super().__init__(shape)``, implement ``_matmat`` and
    either ``_adjoint`` (returning a :class:`Matrix`) or ``_rmatmat``.
    """

    #: True on a type whose Gram's pseudo-inverse is a structured closed form:
    #: :meth:`gram_pinv` is then ``gram().pinv()``.
    closed_form_gram_pinv: ClassVar[bool] = False

    def __init_subclass__(cls, abstract: bool = False, **kwargs: object) -> None:
        """``abstract=True`` marks a shared base whose subclasses implement the products."""
        super().__init_subclass__(**kwargs)
        if cls._matmat is Matrix._matmat and not abstract:
            raise TypeError(f"{cls.__name__} must implement _matmat")
        if cls._adjoint is Matrix._adjoint and cls._rmatmat is Matrix._rmatmat and not abstract:
            raise TypeError(f"{cls.__name__} must implement _adjoint or _rmatmat")
        # Matrices are immutable: a Gram or pseudo-inverse is computed once per instance
        # (strategy selection asks for the same ones many times).
        for name in _COMPUTED_ONCE:
            if name in cls.__dict__:
                setattr(cls, name, _computed_once(cls.__dict__[name]))

    def __init__(self, shape: tuple[int, int], *, full_column_rank: bool = False) -> None:
        """``full_column_rank=True`` promises linearly independent columns (inverses skip
        the SVD); a type whose rank follows from its parts overrides
        :attr:`known_full_column_rank` instead."""
        rows, cols = (int(s) for s in shape)
        if rows < 0 or cols < 0:
            raise ValueError(f"A matrix shape must be non-negative, got {shape}")
        super().__init__(dtype=np.dtype(np.float64), shape=(rows, cols))
        self._full_column_rank = full_column_rank

    def __getstate__(self) -> dict:
        # Cached Grams and inverses can be far larger than the matrix: a pickled matrix (a
        # Dask task argument, say) travels without them and recomputes them where needed.
        state = self.__dict__.copy()
        state.pop("_computed", None)
        return state

    # -- scipy LinearOperator hooks -------------------------------------------------------
    def _matmat(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _matvec(self, x: np.ndarray) -> np.ndarray:
        return self._matmat(np.asarray(x).reshape(-1, 1)).reshape(-1)

    def _rmatvec(self, x: np.ndarray) -> np.ndarray:
        return self._rmatmat(np.asarray(x).reshape(-1, 1)).reshape(-1)

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return self._adjoint()._matmat(X)

    def _adjoint(self) -> Matrix:
        from dpmm.linalg.combinators import Transposed

        return Transposed(self)

    def _transpose(self) -> Matrix:
        return self._adjoint()  # real matrices only

    # -- composition ----------------------------------------------------------------------
    def dot(self, x: object) -> object:
        """``self @ x``: a lazy Product with a matrix, a Weighted with a scalar, else an array."""
        from dpmm.linalg.combinators import Product, Weighted

        if isinstance(x, Matrix):
            return Product([self, x])
        if isinstance(x, Number) and not isinstance(x, bool):
            return Weighted(float(x), self)
        return super().dot(x)

    def __matmul__(self, other: object) -> object:
        if isinstance(other, Number):
            raise ValueError("Scalar operands are not allowed with @; use *")
        return self.dot(other)

    def __rmatmul__(self, other: object) -> object:
        if isinstance(other, np.ndarray | list):
            other = np.asarray(other)
            if other.ndim == 1:  # y @ M for a vector y, as numpy does
                return np.asarray(self.rmatvec(other))
            return np.asarray(self.rmatmat(other.T).T)
        return NotImplemented

    def __add__(self, other: object) -> object:
        from dpmm.linalg.combinators import Sum

        if isinstance(other, Matrix):
            return Sum([self, other])
        return NotImplemented

    def __sub__(self, other: object) -> object:
        if isinstance(other, Matrix):
            return self + -other
        return NotImplemented

    def __neg__(self) -> Matrix:
        return self.dot(-1.0)

    def __mul__(self, other: object) -> object:
        if isinstance(other, Number) and not isinstance(other, bool):
            return self.dot(other)
        return NotImplemented

    def __rmul__(self, other: object) -> object:
        return self.__mul__(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shape[0]}×{self.shape[1]})"

    # -- dense views ----------------------------------------------------------------------
    def dense(self, limit: int | None = None) -> np.ndarray:
        """The matrix as a dense array; raises :class:`TooLargeError` above ``limit`` entries."""
        check_dense_size(*self.shape, what=repr(self), limit=limit)
        return np.asarray(self._dense(), dtype=np.float64)

    def _dense(self) -> np.ndarray:
        return self._matmat(np.eye(self.shape[1]))

    def _column_blocks(self, limit: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, columns)`` blocks of the dense matrix, each within ``limit`` entries."""
        rows, cols = self.shape
        limit = DENSE_LIMIT if limit is None else limit
        # Both the block and the identity columns it is computed from stay within the limit.
        width = max(1, min(cols, limit // max(rows, cols, 1)))
        for start in range(0, cols, width):
            stop = min(cols, start + width)
            eye = np.zeros((cols, stop - start))
            eye[np.arange(start, stop), np.arange(stop - start)] = 1.0
            yield start, self._matmat(eye)

    # -- structured operations (generic fallbacks) ----------------------------------------
    @property
    def known_full_column_rank(self) -> bool:
        """True when the type guarantees linearly independent columns (so ``(AᵀA)⁺ = (AᵀA)⁻¹``)."""
        return self._full_column_rank

    @property
    def size(self) -> int:
        """Number of entries, rows × columns (an integer, never materialized)."""
        return self.shape[0] * self.shape[1]

    def gram(self) -> Matrix:
        """The Gram matrix ``selfᵀ self`` as an implicit matrix."""
        from dpmm.linalg.combinators import Dense, Product

        if self.size <= DENSE_LIMIT and self.shape[1] ** 2 <= DENSE_LIMIT:
            dense = self.dense()
            return Dense(dense.T @ dense, full_column_rank=self.known_full_column_rank)
        return Product([self.T, self])

    def column_norms(self, p: float = 1) -> np.ndarray:
        """The ``p``-norm of every column (a vector of length ``shape[1]``)."""
        p = _check_norm(p)
        norms = np.empty(self.shape[1])
        for start, block in self._column_blocks():
            norms[start : start + block.shape[1]] = _pnorm(block, p)
        return norms

    def uniform_column_norm(self, p: float = 1) -> float | None:
        """The common ``p``-norm of the columns when the structure shows they all agree, else None.

        Cheap by construction: it never builds the vector of column norms of a large matrix.
        """
        _check_norm(p)
        return None

    def sensitivity(self, p: float = 1) -> float:
        """The largest column ``p``-norm: the ``L_p`` sensitivity of ``self @ x``."""
        uniform = self.uniform_column_norm(p)
        if uniform is not None:
            return uniform
        norms = self.column_norms(p)
        return float(norms.max()) if norms.size else 0.0

    def pinv(self) -> Matrix:
        """The Moore–Penrose pseudo-inverse."""
        from dpmm.linalg.combinators import Dense

        dense = self.dense()
        square = dense.shape[0] == dense.shape[1]
        if square and self.known_full_column_rank:
            return Dense(np.linalg.inv(dense), full_column_rank=True)
        # Only exact symmetry: eigh reads one triangle, so a near-symmetric matrix would be
        # inverted as its symmetrization.
        symmetric = square and np.array_equal(dense, dense.T)
        return Dense(np.linalg.pinv(dense, rcond=PINV_TOLERANCE, hermitian=symmetric))

    def diagonal(self) -> np.ndarray:
        """The main diagonal of a square matrix."""
        _check_square(self, "diagonal")
        diag = np.empty(self.shape[0])
        for start, block in self._column_blocks():
            width = block.shape[1]
            diag[start : start + width] = block[np.arange(start, start + width), np.arange(width)]
        return diag

    def trace(self) -> float:
        """The trace of a square matrix."""
        return float(self.diagonal().sum())

    def entry_sum(self) -> float:
        """``1ᵀ self 1``, the sum of every entry: a closed form where the type has one, else
        one product with a vector of ones (refused when that vector would be too large)."""
        check_dense_size(self.shape[1], 1, f"the entry sum of {self!r:.80}")
        return float(self._matmat(np.ones((self.shape[1], 1))).sum())

    def _trace_dot(self, other: Matrix) -> float | object:
        """``trace(self @ other)`` from this type's structure, or NotImplemented.

        :func:`~dpmm.linalg.trace.trace_of_product` splits weighted matrices and sums on
        either side before it asks, and tries the other order, then the generic path.
        """
        return NotImplemented

    def gram_pinv(self) -> Matrix | None:
        """``(selfᵀ self)⁺`` as a structured matrix, or None when the type knows no closed
        form (least squares then iterates): never a dense inverse of a large Gram."""
        return self.gram().pinv() if self.closed_form_gram_pinv else None

    def integer_column_norms(self) -> IntegerNorms:
        """Exact ``(column L1 norms, column sums of squares, entry bound)`` of an integer matrix.

        The norms are int64, one per column (or one for all, a common value or a bound, on
        a huge domain), built by each type's ``_integer_column_norms`` from its structure,
        never from float norms. The bound bounds ``|a_ij|`` and every intermediate of
        ``self @ x`` per unit of ``sum(x)``.

        Raises:
            NotIntegerError: The type is not known to have integer entries, or an entry
                or weight is not an integer.
            TooLargeError: A norm or the bound would reach :data:`INT_LIMIT`.
        """
        l1, l2_squared, bound = self._integer_column_norms()
        for values in (l1, l2_squared):
            if values.size and (values.min() < 0 or int(values.max()) >= INT_LIMIT):
                raise TooLargeError(
                    f"the column norms of {self!r:.80} are too large to hold exactly"
                )
        if not 0 <= bound < INT_LIMIT:
            raise TooLargeError(f"the entries of {self!r:.80} are too large to hold exactly")
        return l1, l2_squared, bound

    def _integer_column_norms(self) -> IntegerNorms:
        # Types with integer entries override this; everything else is refused.
        raise NotIntegerError(
            f"{self!r} ({type(self).__name__}) is not known to have integer entries"
        )

    def eigh(self) -> tuple[np.ndarray, Matrix]:
        """Eigenvalues (ascending) and eigenvectors of a symmetric matrix."""
        from dpmm.linalg.combinators import Dense

        _check_square(self, "eigh")
        values, vectors = scipy.linalg.eigh(self.dense(), driver="evd")
        return values, Dense(vectors)

    def singular_values(self) -> np.ndarray:
        """All singular values, descending (from the Gram when it is the smaller side)."""
        rows, cols = self.shape
        if rows >= cols:
            check_dense_size(cols, cols, f"the Gram of {self!r}")
            return singular_values_of_gram(self.gram().dense())
        return np.linalg.svd(self.dense(), compute_uv=False)

    def nuclear_norm(self) -> float:
        """The sum of the singular values (the trace norm)."""
        return float(self.singular_values().sum())


for _name in _COMPUTED_ONCE:
    setattr(Matrix, _name, _computed_once(getattr(Matrix, _name)))


class Symmetric:
    """A mixin for a matrix equal to its transpose: list it before the :class:`Matrix` base
    (or an explicit type like :class:`~dpmm.linalg.combinators.Dense`), whose adjoint and
    transposed products it replaces with the matrix itself."""

    def _rmatmat(self: Matrix, X: np.ndarray) -> np.ndarray:
        return self._matmat(X)

    def _adjoint(self: Matrix) -> Matrix:
        return self


def _check_norm(p: float) -> float:
    if p not in (1, 2, np.inf):
        raise ValueError(f"Only the 1-, 2- and ∞-norms are supported, got p={p!r}")
    return float(p)


def _pnorm(block: np.ndarray, p: float) -> np.ndarray:
    if p == 1:
        return np.abs(block).sum(axis=0)
    if p == 2:
        return np.sqrt((block * block).sum(axis=0))
    return np.abs(block).max(axis=0, initial=0.0)


def _check_square(matrix: Matrix, operation: str) -> None:
    if matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{operation} needs a square matrix, got {matrix!r}")


def _integer_weight(value: float, matrix: Matrix) -> int:
    """``value`` as an int, or NotIntegerError naming it as a weight of ``matrix``."""
    if not float(value).is_integer():
        raise NotIntegerError(f"the weight {value!r} of {matrix!r:.80} is not an integer")
    return int(value)


def _guard_integer(value: int, matrix: Matrix) -> int:
    """``value`` if below INT_LIMIT, else TooLargeError: types check the largest result of
    each int64 step with it *before* the step (int64 arithmetic wraps around silently)."""
    if value >= INT_LIMIT:
        raise TooLargeError(f"the column norms of {matrix!r:.80} are too large to hold exactly")
    return value


def elementwise_norm_combiner(p: float) -> Callable[[list[np.ndarray]], np.ndarray]:
    """How column ``p``-norms of stacked blocks combine into the stack's column norms."""
    p = _check_norm(p)
    if p == np.inf:
        return lambda parts: np.max(parts, axis=0)
    return lambda parts: np.sum([part**p for part in parts], axis=0) ** (1.0 / p)
