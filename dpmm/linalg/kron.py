"""Kronecker products of implicit matrices, handled factor by factor.

A Kronecker product over d attributes never forms the product: it applies each
factor along its own axis of the reshaped vector, and every structured
operation (Gram, pseudo-inverse, norms, traces, eigendecomposition) is the
Kronecker combination of the factors' results. :func:`kron_terms` reads a workload
as a union of weighted Kron products; :func:`kron_rows` is the Kron of small dense arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from dpmm.linalg.base import IntegerNorms, Matrix, _guard_integer, check_dense_size
from dpmm.linalg.combinators import VStack, Weighted, _flattened
from dpmm.linalg.trace import trace_of_product

__all__ = ["Kron", "KronTerm", "factor_gram_pinv", "kron_rows", "kron_terms"]

#: Columns above which a product's exact column norms are summarized by their largest
#: (2²⁴ int64 per norm: 128 MiB; a 10⁹-cell product's would be 8 GB each).
NORMS_PER_COLUMN_LIMIT = 2**24

#: A factor without a closed-form Gram inverse gets a dense one up to this many columns.
SMALL_FACTOR = 4096


def factor_gram_pinv(factor: Matrix) -> Matrix | None:
    """``(FᵀF)⁺`` of one Kronecker factor: its closed form, or (a fitted factor, such as
    HDMM's ``[I; T]``) a dense pseudo-inverse while it has at most :data:`SMALL_FACTOR`
    columns; None beyond."""
    return factor.gram_pinv() or (factor.gram().pinv() if factor.shape[1] <= SMALL_FACTOR else None)


class Kron(Matrix):
    """``factors[0] ⊗ factors[1] ⊗ …``; the first factor varies slowest (C order)."""

    def __init__(self, factors: Sequence[Matrix]) -> None:
        for factor in factors:
            if not isinstance(factor, Matrix):
                raise TypeError(f"Kron factors must be dpmm matrices, got {type(factor).__name__}")
        flat = _flattened(factors, Kron, "factors", "factor")
        super().__init__(
            (
                math.prod(factor.shape[0] for factor in flat),
                math.prod(factor.shape[1] for factor in flat),
            )
        )
        self.factors = flat

    # O(k · Σ_i m_i n / n_i) per product with k columns: one factor at a time, each on a
    # (before, n_i, after) view, so any number of factors works (numpy has at most 64 axes).
    def _apply(self, X: np.ndarray, transpose: bool) -> np.ndarray:
        columns = X.shape[1]
        after = X.shape[0] * columns
        before, tensor = 1, X
        for factor in self.factors:
            rows, cols = factor.shape[::-1] if transpose else factor.shape
            after //= cols
            moved = tensor.reshape(before, cols, after).transpose(1, 0, 2).reshape(cols, -1)
            applied = factor._rmatmat(moved) if transpose else factor._matmat(moved)
            tensor = applied.reshape(rows, before, after).transpose(1, 0, 2)
            before *= rows
        return tensor.reshape(before, columns)  # also for 0 columns

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self._apply(X, transpose=False)

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return self._apply(X, transpose=True)

    def _adjoint(self) -> Kron:
        return Kron([factor.T for factor in self.factors])

    def _dense(self) -> np.ndarray:
        return reduce(np.kron, [factor.dense() for factor in self.factors])

    @property
    def known_full_column_rank(self) -> bool:
        return all(factor.known_full_column_rank for factor in self.factors)

    def _per_distinct_factor(self, operation: Callable[[Matrix], Any]) -> list[Any]:
        """``operation`` of every factor, computed once per distinct factor object
        (strategies often repeat one factor object across attributes)."""
        distinct = {id(factor): factor for factor in self.factors}
        results = {key: operation(factor) for key, factor in distinct.items()}
        return [results[id(factor)] for factor in self.factors]

    def gram(self) -> Kron:
        return Kron(self._per_distinct_factor(lambda factor: factor.gram()))

    def pinv(self) -> Kron:
        return Kron(self._per_distinct_factor(lambda factor: factor.pinv()))

    def gram_pinv(self) -> Kron | None:
        parts = self._per_distinct_factor(factor_gram_pinv)
        return None if any(part is None for part in parts) else Kron(parts)

    def _kron_vector(self, parts: list[np.ndarray], what: str) -> np.ndarray:
        check_dense_size(1, math.prod(part.size for part in parts), f"the {what} of {self!r}")
        return reduce(np.kron, parts)

    def column_norms(self, p: float = 1) -> np.ndarray:
        return self._kron_vector([f.column_norms(p) for f in self.factors], "column norms")

    def sensitivity(self, p: float = 1) -> float:
        return math.prod(factor.sensitivity(p) for factor in self.factors)

    def uniform_column_norm(self, p: float = 1) -> float | None:
        parts = [factor.uniform_column_norm(p) for factor in self.factors]
        return None if any(part is None for part in parts) else math.prod(parts)

    def _integer_column_norms(self) -> IntegerNorms:
        """Per column; beyond :data:`NORMS_PER_COLUMN_LIMIT` columns, only the largest of
        each (exact: the product of the factors' largest, the norms being non-negative),
        which a stack of such products adds up to a bound."""
        huge = self.shape[1] > NORMS_PER_COLUMN_LIMIT
        l1, l2_squared, bound = np.ones(1, np.int64), np.ones(1, np.int64), 1
        for factor in self.factors:
            f_l1, f_l2, f_bound = factor.integer_column_norms()
            _guard_integer(int(l1.max(initial=0)) * int(f_l1.max(initial=0)), self)
            _guard_integer(int(l2_squared.max(initial=0)) * int(f_l2.max(initial=0)), self)
            if huge:
                f_l1, f_l2 = f_l1.max(initial=0, keepdims=True), f_l2.max(initial=0, keepdims=True)
            l1, l2_squared, bound = np.kron(l1, f_l1), np.kron(l2_squared, f_l2), bound * f_bound
            _guard_integer(bound, self)
        return l1, l2_squared, bound

    def is_square_over(self, sizes: Sequence[int]) -> bool:
        """Whether the factors are square, of these sizes in order (a Gram over a domain)."""
        return [factor.shape for factor in self.factors] == [(n, n) for n in sizes]

    def _square_factors(self) -> bool:
        # A square Kron of non-square factors (a×b ⊗ b×a) has no factor-wise diagonal.
        return all(factor.shape[0] == factor.shape[1] for factor in self.factors)

    def diagonal(self) -> np.ndarray:
        if not self._square_factors():
            return super().diagonal()
        return self._kron_vector([f.diagonal() for f in self.factors], "diagonal")

    def entry_sum(self) -> float:
        return math.prod(factor.entry_sum() for factor in self.factors)

    def trace(self) -> float:
        if not self._square_factors():
            return super().trace()
        return math.prod(factor.trace() for factor in self.factors)

    def _trace_dot(self, other: Matrix) -> float | object:
        # trace((⊗X_i)(⊗Y_i)) = Π trace(X_i Y_i) when every X_i has the shape of Y_iᵀ.
        if len(self.factors) == 1 and not isinstance(other, Kron):  # one factor: it
            return trace_of_product(self.factors[0], other)
        partners = other.factors if isinstance(other, Kron) else []
        if [g.shape[::-1] for g in partners] != [f.shape for f in self.factors]:
            return NotImplemented
        pairs = zip(self.factors, partners, strict=True)
        return math.prod(trace_of_product(f, g) for f, g in pairs)

    def factor_eigh(self) -> list[tuple[np.ndarray, Matrix]]:
        """The eigendecomposition of every factor (each factor must be symmetric)."""
        return [factor.eigh() for factor in self.factors]

    def eigh(self) -> tuple[np.ndarray, Kron]:
        """Eigenvalues in Kronecker order (not sorted) and the Kron of factor eigenvectors."""
        pairs = self.factor_eigh()
        values = self._kron_vector([values for values, _ in pairs], "eigenvalues")
        return values, Kron([vectors for _, vectors in pairs])

    def singular_values(self) -> np.ndarray:
        """Singular values in Kronecker order (not sorted)."""
        return self._kron_vector([f.singular_values() for f in self.factors], "singular values")

    def nuclear_norm(self) -> float:
        return math.prod(self._per_distinct_factor(lambda factor: factor.nuclear_norm()))

    def __repr__(self) -> str:
        return " ⊗ ".join(repr(factor) for factor in self.factors)


def kron_rows(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``parts[0] ⊗ parts[1] ⊗ …`` of dense vectors or matrices (``[1.0]`` for none).

    Example:
        >>> kron_rows([np.array([1.0, 2.0]), np.array([1.0, 10.0])]).tolist()
        [1.0, 10.0, 2.0, 20.0]
    """
    return reduce(np.kron, parts, np.ones(1))


@dataclass(frozen=True)
class KronTerm:
    """One product of a union: ``weight · ⊗ factors``."""

    weight: float
    factors: tuple[Matrix, ...]


def kron_terms(W: Matrix) -> list[KronTerm]:
    """W as a union of weighted Kronecker products with aligned columns.

    A matrix with no Kronecker structure, or a union whose products split the columns
    differently, is one term with a single factor.
    """
    terms = _terms(W, 1.0)
    sizes = {tuple(f.shape[1] for f in term.factors) for term in terms}
    if len(sizes) != 1:
        return [KronTerm(1.0, (W,))]
    return terms


def _terms(W: Matrix, weight: float) -> list[KronTerm]:
    if isinstance(W, Weighted):
        return _terms(W.base, weight * W.weight)
    if isinstance(W, VStack):
        return [term for block in W.blocks for term in _terms(block, weight)]
    if isinstance(W, Kron):
        return [KronTerm(weight, tuple(W.factors))]
    return [KronTerm(weight, (W,))]
