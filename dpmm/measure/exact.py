"""Integer strategies: exact column norms, exact sensitivities and exact answers.

Exact noise (DESIGN §5.1) needs an integer query ``A x`` and an exact sensitivity. Only
strategies whose entries are integers are measured (:mod:`dpmm.measure.quantize` puts a
real-valued one on an integer grid first). Their sensitivities come from the exact integer
column norms every matrix type builds from its structure
(:meth:`~dpmm.linalg.Matrix.integer_column_norms`), never from floating-point norms; a type
that does not know its entries to be integers is refused.

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
from functools import cached_property

import numpy as np

from dpmm.errors import DomainError, DpmmError, NotIntegerError, TooLargeError
from dpmm.linalg import Kron, Marginals, Matrix
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.table_krons import TableKrons

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
    #: Sum of |a_ij| per column, int64 (one value for all columns where the type gives a
    #: common value or a bound on a huge domain: see ``Matrix.integer_column_norms``).
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
        with a different one; it is not a cryptographic commitment to the matrix. Computed
        once per analyzed strategy (a noise model asks for it at every budget it prices).
        """
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        rows, cols = self.matrix.shape
        if isinstance(self.matrix, HelmertBlocks):  # its integers are its identity
            return self.matrix.digest()
        if isinstance(self.matrix, TableKrons):
            return self._tables_fingerprint()
        if isinstance(self.matrix, Marginals) and cols > PROBE_LIMIT:
            return self._structural_fingerprint()
        if type(self.matrix) is Kron and rows > PROBE_ROWS:
            return self._kron_fingerprint()
        probe = (np.arange(cols, dtype=np.int64) * 7919 + 13) % 97 + 1  # no two columns alike
        answers = exact_answers(self, probe)
        digest = hashlib.sha256(self._facts().encode())
        digest.update(answers.astype("<i8").tobytes())
        return digest.hexdigest()

    def _facts(self) -> str:
        """The shape and both sensitivities, as every fingerprint starts."""
        rows, cols = self.matrix.shape
        return f"{rows}x{cols};l1={self.sensitivity_l1};l2sq={self.sensitivity_l2_squared};"

    def _kron_fingerprint(self) -> str:
        """sha256 of the shape, sensitivities and every factor's own fingerprint, in order."""
        digest = hashlib.sha256(f"kron;{self._facts()}".encode())
        for factor in self.matrix.factors:
            digest.update(analyze_strategy(factor).fingerprint().encode())
        return digest.hexdigest()

    def _tables_fingerprint(self) -> str:
        """sha256 of the facts, the domain and every block's table, weight and factors."""
        A = self.matrix
        digest = hashlib.sha256(f"tables;{self._facts()}domain={list(A.domain_shape)};".encode())
        for table in A.tables:
            digest.update(f"{list(table.attributes)}:{int(table.weight)};".encode())
            for factor in table.factors:
                digest.update(analyze_strategy(factor).fingerprint().encode())
        return digest.hexdigest()

    def _structural_fingerprint(self) -> str:
        """sha256 of a marginal strategy's shape, sensitivities, domain and weighted sets."""
        A = self.matrix
        sets = ";".join(f"{mask}:{int(weight)}" for mask, weight in A.weights.items())
        text = f"{self._facts()}domain={list(A.domain_shape)};{sets}"
        return hashlib.sha256(text.encode()).hexdigest()


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
    try:
        return ExactStrategy(matrix, *matrix.integer_column_norms())
    except NotIntegerError as error:
        raise MeasurementError(
            f"{error}; real-valued strategies need quantization first (dpmm.measure.quantize)"
        ) from None
    except TooLargeError as error:
        raise MeasurementError(f"the sensitivity of {matrix!r} cannot be found: {error}") from None


def exact_answers(strategy: ExactStrategy, x: np.ndarray) -> np.ndarray:
    """``A @ x`` as int64, computed in float64 only where that is provably exact.

    Args:
        strategy: the analyzed strategy.
        x: a 1-D array of non-negative integers of length ``A.shape[1]``.

    Raises:
        MeasurementError: The counts are too large for exact float64 arithmetic.
    """
    if isinstance(strategy.matrix, HelmertBlocks):  # exact int64 from its tables
        return own_answers(strategy.matrix, strategy.matrix.marginal_tables(x))
    total = int(x.sum(dtype=object)) if x.size else 0
    if strategy.entry_bound * total >= FLOAT_EXACT:
        raise MeasurementError(
            f"the answers of {strategy.matrix!r} on this many records could exceed 2**53, "
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


def own_answers(matrix: HelmertBlocks | TableKrons, tables: dict) -> np.ndarray:
    """The exact int64 answers of a strategy that computes its own from its marginal tables
    (integer residual blocks, per-table Kronecker blocks).

    Raises:
        MeasurementError: a table is missing or invalid, or an answer could overflow int64.
    """
    try:
        return matrix.table_answers(tables)
    except (DomainError, TooLargeError) as error:
        raise MeasurementError(str(error)) from None
