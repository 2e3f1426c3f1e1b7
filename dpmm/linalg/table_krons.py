"""Kronecker strategies that each read one marginal table: HDMM's OPT_+ on any domain.

Block b measures ``α_b (⊗_{i∈S_b} B_{b,i}) M_{S_b} x``: a Kronecker product of factors
``B_{b,i}`` over the attributes S_b of one marginal table, and the total ``1ᵀ`` on every
other attribute. Its answers are those of the stacked Kronecker blocks (a
:class:`~dpmm.linalg.VStack`), but such a strategy is not answered by least squares on the
whole stack, whose Gram is a sum of Kronecker products with no structured inverse: each
table is estimated from its own block, and the tables are made consistent
(:mod:`dpmm.reconstruct.table_krons`), so the covariance of every answer is an exact sum of
Kronecker products whatever the domain's size.

Example:
    >>> from dpmm.linalg import Identity, Prefix
    >>> tables = [((0,), (Prefix(3),), 0.5), ((0, 2), (Identity(3), Identity(4)), 0.5)]
    >>> A = TableKrons((3, 2, 4), tables)
    >>> A.shape, [table.attributes for table in A.tables]
    ((15, 24), [(0,), (0, 2)])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpmm.errors import DomainError, NotIntegerError, TooLargeError, UnsupportedQueryError
from dpmm.linalg.base import INT_LIMIT, IntegerNorms, Matrix, elementwise_norm_combiner
from dpmm.linalg.combinators import VStack, Weighted
from dpmm.linalg.eigen_strategy import kron_apply
from dpmm.linalg.elementary import Ones
from dpmm.linalg.helmert_blocks import checked_table
from dpmm.linalg.kron import NORMS_PER_COLUMN_LIMIT, Kron
from dpmm.linalg.marginals import members_mask

#: Integers float64 holds exactly (as :data:`dpmm.measure.exact.FLOAT_EXACT`): every answer
#: and partial sum of an integer block stays below it, so its float products are exact.
FLOAT_EXACT = 2**53

__all__ = ["KronTable", "TableKrons", "read_attributes", "subsets"]


def read_attributes(factors: Sequence[Matrix]) -> tuple[int, ...]:
    """The positions of a product's factors that are not the total (``Ones(1, n)``, or one
    row of ones however it is stored)."""
    return tuple(i for i, f in enumerate(factors) if not _is_total(f))


def _is_total(factor: Matrix) -> bool:
    if isinstance(factor, Ones):
        return factor.shape[0] == 1
    return factor.shape[0] == 1 and bool(np.all(factor.dense() == 1.0))


def subsets(attributes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every subset of ``attributes`` (sorted), smallest first."""
    return [s for k in range(len(attributes) + 1) for s in itertools.combinations(attributes, k)]


@dataclass(frozen=True, eq=False)
class KronTable:
    """One block: ``weight · ⊗ factors`` on the marginal table of ``attributes`` (sorted)."""

    attributes: tuple[int, ...]
    factors: tuple[Matrix, ...]
    weight: float

    @property
    def shape(self) -> tuple[int, ...]:
        """The table's shape."""
        return tuple(factor.shape[1] for factor in self.factors)

    @cached_property
    def gram_pinvs(self) -> tuple[np.ndarray, ...]:
        """``(B_iᵀ B_i)⁻¹`` per factor, dense: the per-attribute covariance of the table's
        least-squares estimate at unit noise variance (before the weight)."""
        return tuple(np.linalg.inv(factor.gram().dense()) for factor in self.factors)


class TableKrons(VStack):
    """Kronecker blocks each reading one marginal table of a domain of ``domain_shape``.

    Args:
        domain_shape: The attribute sizes.
        tables: ``(attributes, factors, weight)`` per block, one block per attribute set;
            the factors (one per attribute, in attribute order) must have full column rank,
            so each table is identified by its block alone.
        coefficients: per block, ``{subset T of its attributes: c_{b,T}}``, how the tables
            are made consistent: coordinate T is ``Σ_b c_{b,T} φ_{b,T}`` over the blocks
            holding it, so the ``c_{b,T}`` of a T sum to 1
            (:mod:`dpmm.reconstruct.table_krons`); None for the default weights.
    """

    def __init__(
        self,
        domain_shape: Sequence[int],
        tables: Sequence[tuple[Sequence[int], Sequence[Matrix], float]],
        coefficients: Sequence[Mapping[tuple[int, ...], float]] | None = None,
    ) -> None:
        self.domain_shape = tuple(int(n) for n in domain_shape)
        self.tables = tuple(self._table(attrs, factors, w) for attrs, factors, w in tables)
        sets = [table.attributes for table in self.tables]
        if len(set(sets)) != len(sets):
            raise ValueError(f"Each table may be read by one block only, got {sets}")
        self.coefficients = None if coefficients is None else self._checked(coefficients)
        super().__init__([self._block(table) for table in self.tables])

    def _table(
        self, attributes: Sequence[int], factors: Sequence[Matrix], weight: float
    ) -> KronTable:
        order = sorted(range(len(attributes)), key=lambda p: attributes[p])
        attributes = tuple(int(attributes[p]) for p in order)
        factors = tuple(factors[p] for p in order)
        if len(set(attributes)) != len(attributes) or len(factors) != len(attributes):
            raise ValueError(f"A table needs one factor per distinct attribute, got {attributes}")
        for i, factor in zip(attributes, factors, strict=True):
            n = self.domain_shape[i]
            if factor.shape[1] != n:
                raise ValueError(f"Factor {factor!r} of attribute {i} needs {n} columns")
            full = factor.known_full_column_rank
            if not full and np.linalg.matrix_rank(factor.gram().dense()) < n:
                raise UnsupportedQueryError(
                    f"Factor {factor!r} of attribute {i} does not have full column rank, so "
                    "its table could not be estimated from its block alone"
                )
        return KronTable(attributes, factors, float(weight))

    def _checked(
        self, coefficients: Sequence[Mapping[tuple[int, ...], float]]
    ) -> tuple[dict[tuple[int, ...], float], ...]:
        if len(coefficients) != len(self.tables):
            raise ValueError(f"{self!r} needs coefficients for {len(self.tables)} blocks")
        sums: dict[tuple[int, ...], float] = {}
        checked = []
        for table, given in zip(self.tables, coefficients, strict=True):
            block = {tuple(sorted(s)): float(c) for s, c in given.items()}
            if set(block) != set(subsets(table.attributes)):
                raise ValueError(
                    f"The table on {list(table.attributes)} needs one coefficient per subset"
                )
            for subset, value in block.items():
                sums[subset] = sums.get(subset, 0.0) + value
            checked.append(block)
        wrong = [s for s, total in sums.items() if not math.isclose(total, 1.0, abs_tol=1e-9)]
        if wrong:
            raise ValueError(f"The coefficients of the subsets {wrong[:3]} do not sum to 1")
        return tuple(checked)

    def with_coefficients(
        self, coefficients: Sequence[Mapping[tuple[int, ...], float]] | None
    ) -> TableKrons:
        """The same blocks made consistent with ``coefficients``."""
        return TableKrons(self.domain_shape, self._entries(), coefficients)

    def _entries(self) -> list[tuple[tuple[int, ...], tuple[Matrix, ...], float]]:
        return [(t.attributes, t.factors, t.weight) for t in self.tables]

    def _block(self, table: KronTable) -> Matrix:
        by_attribute = dict(zip(table.attributes, table.factors, strict=True))
        factors = [by_attribute.get(i, Ones(1, n)) for i, n in enumerate(self.domain_shape)]
        return Weighted(table.weight, factors[0] if len(factors) == 1 else Kron(factors))

    def divided(self, scale: int) -> TableKrons:
        """The same blocks with every weight divided by ``scale`` (a quantized strategy)."""
        return TableKrons(
            self.domain_shape,
            [(t.attributes, t.factors, t.weight / scale) for t in self.tables],
            self.coefficients,
        )

    def part(self, start: int, stop: int) -> TableKrons:
        """The blocks ``[start, stop)`` as a strategy of their own (to answer them; how the
        whole strategy's tables are made consistent is not theirs)."""
        return TableKrons(
            self.domain_shape,
            [(t.attributes, t.factors, t.weight) for t in self.tables[start:stop]],
        )

    def table_sets(self) -> list[tuple[int, ...]]:
        """The marginal table each block reads, in block order."""
        return [table.attributes for table in self.tables]

    def table_answers(self, tables: Mapping[tuple[int, ...], np.ndarray]) -> np.ndarray:
        """The exact int64 answers of an integer strategy from its counted tables.

        Each block applies its factors axis by axis in float64, exact because every
        partial sum is at most the records times the factors' largest row sums, checked
        below 2**53 first.

        Raises:
            DomainError: a table is missing, of the wrong shape or type, or negative, or
                the tables disagree on the number of records.
            TooLargeError: an answer could leave exact float64 arithmetic.
        """
        answers = []
        totals: set[int] = set()
        for table in self.tables:
            counts = checked_table(tables, members_mask(table.attributes), table.shape)
            totals.add(int(counts.sum(dtype=np.int64)))
            if len(totals) > 1:
                raise DomainError("the marginal tables disagree on the number of records")
            growth = abs(table.weight) * math.prod(
                float(np.abs(f.dense()).sum(axis=1).max(initial=0)) for f in table.factors
            )
            if growth * max(totals) >= FLOAT_EXACT:
                raise TooLargeError(
                    f"the answers of {self!r} on this many records could exceed 2**53, beyond "
                    "exact float64 arithmetic"
                )
            values = kron_apply([f.dense() for f in table.factors], counts.astype(np.float64))
            values = table.weight * values.reshape(-1)
            rounded = np.rint(values)
            if not np.array_equal(values, rounded):
                raise NotIntegerError(f"{self!r} is not an integer strategy")
            answers.append(rounded.astype(np.int64))
        return np.concatenate(answers) if answers else np.zeros(0, np.int64)

    def __repr__(self) -> str:
        """The tables read, as ``Marginals`` lists them: ``TableKrons([0, 2], [1])``."""
        return f"TableKrons({', '.join(str(list(t.attributes)) for t in self.tables)})"

    def sensitivity(self, p: float = 1) -> float:
        """The stack's largest column norm: exact up to :data:`NORMS_PER_COLUMN_LIMIT`
        columns or where every block's columns agree, else the blocks' largest combined (an
        upper bound: the domain's columns are never listed)."""
        uniform = self.uniform_column_norm(p)
        if uniform is not None or self.shape[1] <= NORMS_PER_COLUMN_LIMIT:
            return super().sensitivity(p)
        parts = [np.array([block.sensitivity(p)]) for block in self.blocks]
        return float(elementwise_norm_combiner(p)(parts)[0])

    def _integer_column_norms(self) -> IntegerNorms:
        """Per column up to :data:`NORMS_PER_COLUMN_LIMIT` columns; beyond, the sum of the
        blocks' largest, as :meth:`sensitivity` bounds them."""
        if self.shape[1] <= NORMS_PER_COLUMN_LIMIT:
            return super()._integer_column_norms()
        l1, l2_squared, bound = 0, 0, 1
        for block in self.blocks:
            b_l1, b_l2, b_bound = block.integer_column_norms()
            l1 += int(b_l1.max(initial=0))
            l2_squared += int(b_l2.max(initial=0))
            bound = max(bound, b_bound)
        if max(l1, l2_squared) >= INT_LIMIT:
            raise TooLargeError(f"the column norms of {self!r} are too large to hold exactly")
        return np.array([l1], np.int64), np.array([l2_squared], np.int64), bound
