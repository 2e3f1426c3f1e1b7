"""Exact answers of a marginal strategy from marginal tables, without the full data vector.

On a domain of 10¹⁰+ cells the data vector is never built: ingest counts only the marginal
tables a :class:`~dpmm.linalg.Marginals` strategy measures, and ``A x`` is the weighted
tables stacked in the strategy's block order (each table flattened in C order over its
attributes in domain order, as :class:`~dpmm.linalg.Marginal` orders its rows).

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Marginals
    >>> from dpmm.measure.exact import analyze_strategy
    >>> A = Marginals((2, 3), {(0,): 2, (0, 1): 1})
    >>> counts = MarginalCounts((2, 3), {(0,): np.array([4, 2]),
    ...                                  (0, 1): np.array([[1, 0, 3], [2, 0, 0]])})
    >>> marginal_answers(analyze_strategy(A), counts).tolist()
    [8, 4, 1, 0, 3, 2, 0, 0]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dpmm.linalg import Marginals
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.measure.exact import FLOAT_EXACT, ExactStrategy, MeasurementError, helmert_answers

__all__ = ["MarginalCounts", "marginal_answers", "strategy_tables"]


@dataclass(frozen=True, eq=False)
class MarginalCounts:
    """Exact marginal tables of a dataset.

    Attributes:
        domain_shape: The attribute sizes of the whole domain.
        tables: ``{sorted attribute positions: int64 table}``, each table shaped by the
            sizes of its attributes (``()`` is the total count, a 0-d array).
    """

    domain_shape: tuple[int, ...]
    tables: Mapping[tuple[int, ...], np.ndarray]


def strategy_tables(A: Marginals | HelmertBlocks) -> list[tuple[int, ...]]:
    """The marginal tables a strategy's answers are computed from, in its block order."""
    if isinstance(A, HelmertBlocks):
        return A.table_sets()
    dims = len(A.domain_shape)
    return [tuple(i for i in range(dims) if mask >> i & 1) for mask in A.weights]


def _table(counts: MarginalCounts, attrs: tuple[int, ...]) -> np.ndarray:
    if attrs not in counts.tables:
        raise MeasurementError(f"the marginal table on attributes {list(attrs)} was not counted")
    table = np.asarray(counts.tables[attrs])
    expected = tuple(counts.domain_shape[i] for i in attrs)
    if table.shape != expected or not np.issubdtype(table.dtype, np.integer):
        raise MeasurementError(
            f"the marginal table on attributes {list(attrs)} must be an integer array of "
            f"shape {expected}, got {table.dtype} of shape {table.shape}"
        )
    if table.size and table.min() < 0:
        raise MeasurementError(
            f"the marginal table on attributes {list(attrs)} has a negative count"
        )
    return table


def marginal_answers(strategy: ExactStrategy, counts: MarginalCounts) -> np.ndarray:
    """``A x`` as int64 for an integer-weighted :class:`~dpmm.linalg.Marginals` strategy or
    an integer residual strategy (:class:`~dpmm.linalg.helmert_blocks.HelmertBlocks`).

    Raises:
        MeasurementError: The strategy is not a weighted union of marginals, the tables do
            not match its domain or sets, they disagree on the total, or the answers could
            exceed exact arithmetic.
    """
    A = strategy.matrix
    if isinstance(A, HelmertBlocks):
        if tuple(counts.domain_shape) != tuple(A.domain_shape):
            raise MeasurementError(
                f"the tables are over a domain of shape {tuple(counts.domain_shape)}, the "
                f"strategy over {tuple(A.domain_shape)}"
            )
        return helmert_answers(A, dict(counts.tables))
    if not isinstance(A, Marginals):
        raise MeasurementError(
            f"answers from marginal tables need a Marginals strategy, got {A!r:.120}"
        )
    if tuple(counts.domain_shape) != tuple(A.domain_shape):
        raise MeasurementError(
            f"the tables are over a domain of shape {tuple(counts.domain_shape)}, the strategy "
            f"over {tuple(A.domain_shape)}"
        )
    tables = [_table(counts, attrs) for attrs in strategy_tables(A)]
    totals = {int(table.sum(dtype=np.int64)) for table in tables}
    if len(totals) > 1:
        raise MeasurementError("the marginal tables disagree on the number of records")
    total = totals.pop()
    if strategy.entry_bound * total >= FLOAT_EXACT:
        raise MeasurementError(
            f"the answers of {A!r:.120} on {total} records could exceed 2**53; "
            "measuring them is not supported"
        )
    weights = [int(w) for w in A.weights.values()]
    return np.concatenate(
        [w * table.reshape(-1).astype(np.int64) for w, table in zip(weights, tables, strict=True)]
    )
