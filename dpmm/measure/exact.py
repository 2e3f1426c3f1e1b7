"""Integer strategies: exact column norms, exact sensitivities and exact answers.

Exact noise (DESIGN §5.1) needs an integer query ``A x`` and an exact sensitivity. Until
quantization exists, only strategies whose entries are integers are measured: the elementary
counting matrices, sparse or dense arrays of integers, and Kronecker products, vertical
stacks and integer multiples of those. Their sensitivities are computed from integer column
norms built from the structure, never from floating-point norms.

The answers ``A x`` are computed by the matrices' own float64 products. That is exact when
every intermediate value is an integer below 2**53: each structured product forms integer
combinations of ``x`` bounded by ``max|entry| · sum(x)`` (for a Kronecker product, the
product of the factors' largest entries), so the bound is checked before the product, and
every result is checked to be an integer afterwards.

Example:
    >>> from dpmm.linalg import Hierarchical, Identity, Kron
    >>> exact = analyze_strategy(Kron([Hierarchical(4), Identity(3)]))
    >>> exact.sensitivity_l1, exact.sensitivity_l2_squared
    (3, 3)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from dpmm.errors import DomainError, DpmmError, TooLargeError
from dpmm.linalg import (
    Dense,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    RangeQueries,
    Sparse,
    VStack,
    Weighted,
)
from dpmm.linalg.helmert_blocks import HelmertBlocks

__all__ = [
    "ExactStrategy",
    "MeasurementError",
    "MeasurementMismatch",
    "analyze_strategy",
    "exact_answers",
]

#: Integers up to this bound are represented exactly by float64.
FLOAT_EXACT = 2**53
#: Answers checked and converted to int64 per block.
_BLOCK = 2**22
#: Column norms and entry bounds above this are refused rather than risk int64 overflow.
_INT_LIMIT = 2**62
#: Above this many columns a marginal strategy is fingerprinted by its structure, not a probe.
PROBE_LIMIT = 2**27
#: Above this many rows a Kronecker strategy is fingerprinted from its factors' fingerprints
#: (its probe product would cost as much memory as the measurement itself).
PROBE_ROWS = 2**24


class MeasurementError(DpmmError, ValueError):
    """A measurement cannot be taken (or reused) as requested; nothing was drawn."""


class MeasurementMismatch(MeasurementError):  # noqa: N818 (the name the API promises)
    """A stored measurement with this id was taken with another strategy or privacy."""


@dataclass(frozen=True, eq=False)
class ExactStrategy:
    """A strategy's exact integer facts: column norms, sensitivities and largest entry."""

    matrix: Matrix
    #: Sum of |a_ij| per column, int64 (one value for all columns of a marginal strategy
    #: on more than PROBE_LIMIT cells).
    column_l1: np.ndarray
    #: Sum of a_ij² per column, int64.
    column_l2_squared: np.ndarray
    #: A bound on |a_ij| that also bounds the growth of every intermediate of ``A @ x``.
    entry_bound: int

    @property
    def sensitivity_l1(self) -> int:
        """The L1 sensitivity: the largest column L1 norm, an exact integer."""
        return int(self.column_l1.max(initial=0))

    @property
    def sensitivity_l2_squared(self) -> int:
        """The squared L2 sensitivity: the largest column sum of squares, an exact integer."""
        return int(self.column_l2_squared.max(initial=0))

    def fingerprint(self) -> str:
        """sha256 of the shape, both sensitivities and ``A @ probe`` for a fixed probe.

        It identifies the strategy well enough to tell a stored measurement from a request
        with a different one; it is not a cryptographic commitment to the matrix.
        """
        rows, cols = self.matrix.shape
        if isinstance(self.matrix, HelmertBlocks):  # its integers are its identity
            return self.matrix.digest()
        if isinstance(self.matrix, Marginals) and cols > PROBE_LIMIT:
            return self._structural_fingerprint()
        if type(self.matrix) is Kron and rows > PROBE_ROWS:
            return self._kron_fingerprint()
        probe = (np.arange(cols, dtype=np.int64) * 7919 + 13) % 97 + 1  # no two columns alike
        answers = exact_answers(self, probe)
        digest = hashlib.sha256()
        header = f"{rows}x{cols};l1={self.sensitivity_l1};l2sq={self.sensitivity_l2_squared};"
        digest.update(header.encode())
        digest.update(answers.astype("<i8").tobytes())
        return digest.hexdigest()

    def _kron_fingerprint(self) -> str:
        """sha256 of the shape, sensitivities and every factor's own fingerprint, in order."""
        rows, cols = self.matrix.shape
        digest = hashlib.sha256()
        header = f"kron;{rows}x{cols};l1={self.sensitivity_l1};l2sq={self.sensitivity_l2_squared};"
        digest.update(header.encode())
        for factor in self.matrix.factors:
            digest.update(analyze_strategy(factor).fingerprint().encode())
        return digest.hexdigest()

    def _structural_fingerprint(self) -> str:
        """sha256 of a marginal strategy's shape, sensitivities, domain and weighted sets."""
        A = self.matrix
        parts = [
            f"{A.shape[0]}x{A.shape[1]};l1={self.sensitivity_l1};",
            f"l2sq={self.sensitivity_l2_squared};domain={list(A.domain_shape)};",
            ";".join(f"{mask}:{int(weight)}" for mask, weight in A.weights.items()),
        ]
        return hashlib.sha256("".join(parts).encode()).hexdigest()


def analyze_strategy(matrix: object) -> ExactStrategy:
    """The exact facts of an integer-valued strategy, or a MeasurementError for any other.

    Raises:
        MeasurementError: ``matrix`` is not a dpmm matrix, has a non-integer entry or
            weight, or is of a type whose entries are not known to be integers.
    """
    if not isinstance(matrix, Matrix):
        raise MeasurementError(
            f"a strategy must be a dpmm.linalg matrix, got {type(matrix).__name__}"
        )
    column_l1, column_l2_squared, bound = _norms(matrix)
    return ExactStrategy(matrix, column_l1, column_l2_squared, bound)


def exact_answers(strategy: ExactStrategy, x: np.ndarray) -> np.ndarray:
    """``A @ x`` as int64, computed in float64 only where that is provably exact.

    Args:
        strategy: the analyzed strategy.
        x: a 1-D array of non-negative integers of length ``A.shape[1]``.

    Raises:
        MeasurementError: The counts are too large for exact float64 arithmetic.
    """
    if isinstance(strategy.matrix, HelmertBlocks):  # exact int64 from its tables
        return helmert_answers(strategy.matrix, strategy.matrix.marginal_tables(x))
    total = int(x.sum(dtype=object)) if x.size else 0
    if strategy.entry_bound * total >= FLOAT_EXACT:
        raise MeasurementError(
            f"the answers of {strategy.matrix!r} on {total} records could exceed 2**53, "
            "beyond exact float64 arithmetic; measuring them is not supported"
        )
    result = np.asarray(strategy.matrix @ x.astype(np.float64), dtype=np.float64).reshape(-1)
    if result.shape != (strategy.matrix.shape[0],):
        raise MeasurementError(
            f"the product of {strategy.matrix!r} with the counts has shape {result.shape}"
        )
    # Check and convert a block at a time, in place: a 10⁹-answer product has no spare copy.
    integers = result.view(np.int64)
    for start in range(0, result.size, _BLOCK):
        block = result[start : start + _BLOCK]
        rounded = np.rint(block)
        if not np.array_equal(block, rounded):
            raise MeasurementError(
                f"the product of {strategy.matrix!r} with the counts is not an integer vector"
            )
        integers[start : start + _BLOCK] = rounded.astype(np.int64)
    return integers


def helmert_answers(matrix: HelmertBlocks, tables: dict) -> np.ndarray:
    """The exact int64 answers of an integer residual strategy from its marginal tables.

    Raises:
        MeasurementError: a table is missing or invalid, or an answer could overflow int64.
    """
    try:
        return matrix.table_answers(tables)
    except (DomainError, TooLargeError) as error:
        raise MeasurementError(str(error)) from None


def _norms(matrix: Matrix) -> tuple[np.ndarray, np.ndarray, int]:
    """(column L1 norms, column sums of squares, entry bound) from the matrix's structure."""
    rows, cols = matrix.shape
    if isinstance(matrix, HelmertBlocks):
        try:
            return matrix.integer_column_norms()
        except TooLargeError as error:
            raise MeasurementError(
                f"the sensitivity of {matrix!r} cannot be found: {error}"
            ) from None
    # Subclasses first: Hierarchical and Haar are Sparse, Marginal is Kron, Marginals and
    # AllRange are VStack and RangeQueries, so each is covered by its parent's rule.
    if isinstance(matrix, Identity):
        ones = np.ones(cols, dtype=np.int64)
        return ones, ones, 1
    if isinstance(matrix, Ones):
        counts = np.full(cols, rows, dtype=np.int64)
        return counts, counts, 1
    if isinstance(matrix, Prefix):
        counts = cols - np.arange(cols, dtype=np.int64)
        return counts, counts, 1
    if isinstance(matrix, RangeQueries):
        counts = matrix.coverage().astype(np.int64)
        return counts, counts, 1
    if isinstance(matrix, Sparse | Dense):
        return _array_norms(matrix)
    if isinstance(matrix, Marginals):
        # Every column meets exactly one row of each table, with entry w_a: the norms are
        # the same for every column, kept as one value on astronomical domains.
        weights = [
            _integer(w, f"the weight {w!r} of {matrix!r:.80}") for w in matrix.weights.values()
        ]
        l1, l2_squared = sum(abs(w) for w in weights), sum(w * w for w in weights)
        _guard(l1, matrix)
        _guard(l2_squared, matrix)
        bound = max(abs(w) for w in weights)
        size = cols if cols <= PROBE_LIMIT else 1
        return _checked(np.full(size, l1, np.int64), np.full(size, l2_squared, np.int64), bound)
    if isinstance(matrix, Weighted):
        weight = _integer(matrix.weight, f"the weight {matrix.weight!r} of {matrix!r}")
        l1, l2_squared, bound = _norms(matrix.base)
        _guard(int(l2_squared.max(initial=0)) * weight * weight, matrix)
        _guard(bound * abs(weight), matrix)
        return _checked(l1 * abs(weight), l2_squared * weight * weight, bound * abs(weight))
    if isinstance(matrix, Kron):
        l1, l2_squared, bound = np.ones(1, np.int64), np.ones(1, np.int64), 1
        for factor in matrix.factors:
            f_l1, f_l2, f_bound = _norms(factor)
            _guard(int(l1.max(initial=0)) * int(f_l1.max(initial=0)), matrix)
            _guard(int(l2_squared.max(initial=0)) * int(f_l2.max(initial=0)), matrix)
            l1, l2_squared, bound = np.kron(l1, f_l1), np.kron(l2_squared, f_l2), bound * f_bound
            _guard(bound, matrix)
        return _checked(l1, l2_squared, bound)
    if isinstance(matrix, VStack):
        l1, l2_squared = np.zeros(cols, np.int64), np.zeros(cols, np.int64)
        bound = 1
        for block in matrix.blocks:
            b_l1, b_l2, b_bound = _norms(block)
            _guard(int(l1.max(initial=0)) + int(b_l1.max(initial=0)), matrix)
            _guard(int(l2_squared.max(initial=0)) + int(b_l2.max(initial=0)), matrix)
            l1, l2_squared, bound = l1 + b_l1, l2_squared + b_l2, max(bound, b_bound)
        return _checked(l1, l2_squared, bound)
    raise MeasurementError(
        f"{matrix!r} ({type(matrix).__name__}) is not known to have integer entries; "
        "real-valued strategies need quantization, which is not supported yet"
    )


def _array_norms(matrix: Sparse | Dense) -> tuple[np.ndarray, np.ndarray, int]:
    if isinstance(matrix, Sparse):
        csc = matrix.matrix.tocsc()
        values = csc.data
        columns = np.repeat(np.arange(matrix.shape[1]), np.diff(csc.indptr))
    else:
        values = matrix.array.reshape(-1)
        columns = np.tile(np.arange(matrix.shape[1]), matrix.shape[0])
    if not np.array_equal(values, np.rint(values)):
        raise MeasurementError(
            f"{matrix!r} has non-integer entries; real-valued strategies need quantization, "
            "which is not supported yet"
        )
    magnitudes = np.abs(values)
    bound = int(magnitudes.max(initial=0))
    _guard(bound * bound * max(matrix.shape[0], 1), matrix)
    integers = magnitudes.astype(np.int64)
    l1 = np.zeros(matrix.shape[1], dtype=np.int64)
    l2_squared = np.zeros(matrix.shape[1], dtype=np.int64)
    np.add.at(l1, columns, integers)
    np.add.at(l2_squared, columns, integers * integers)
    return l1, l2_squared, max(bound, 1)


def _integer(value: float, what: str) -> int:
    if not float(value).is_integer():
        raise MeasurementError(
            f"{what} is not an integer; real-valued strategies need quantization, "
            "which is not supported yet"
        )
    return int(value)


def _guard(value: int, matrix: Matrix) -> None:
    if value >= _INT_LIMIT:
        raise MeasurementError(f"the column norms of {matrix!r} are too large to hold exactly")


def _checked(l1: np.ndarray, l2_squared: np.ndarray, bound: int) -> tuple[np.ndarray, ...]:
    for values in (l1, l2_squared):
        if values.size and (values.min() < 0 or int(values.max()) >= _INT_LIMIT):
            raise MeasurementError("a strategy's column norms are too large to hold exactly")
    if bound >= _INT_LIMIT:
        raise MeasurementError("a strategy's entries are too large to hold exactly")
    return l1, l2_squared, bound
