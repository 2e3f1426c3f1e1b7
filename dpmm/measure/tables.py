"""Marginal tables, and exact answers of a marginal strategy from them, without the data vector.

On a domain of 10¹⁰+ cells the data vector is never built: ingest counts only the marginal
tables a :class:`~dpmm.linalg.Marginals` strategy measures, and ``A x`` is the weighted
tables stacked in the strategy's block order (each table flattened in C order over its
attributes in domain order, as :class:`~dpmm.linalg.Marginal` orders its rows). An integer
residual strategy (:class:`~dpmm.linalg.helmert_blocks.HelmertBlocks`) is answered from its
tables too. :func:`count_marginals` counts many tables from integer record arrays in one
pass (research and benchmarks; a release counts through :mod:`dpmm.data`).

On a Dask cluster the tables stay on the workers as :class:`TableGroups`, one group of
whole tables per chunk of the measurement (:func:`~dpmm.measure.chunked.table_groups`),
and each chunk's answers are :func:`table_answers` of its part of the strategy.

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

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmm.errors import DomainError
from dpmm.linalg import Marginals
from dpmm.linalg.helmert_blocks import HelmertBlocks, checked_table
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.exact import FLOAT_EXACT, ExactStrategy, MeasurementError, own_answers

__all__ = [
    "MarginalCounts",
    "TableGroups",
    "TableStrategy",
    "count_marginals",
    "marginal_answers",
    "strategy_part",
    "strategy_tables",
    "table_answers",
]


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


@dataclass(frozen=True, eq=False)
class TableGroups:
    """Exact marginal tables held by a Dask cluster, a group of whole tables per chunk.

    Attributes:
        domain_shape: The attribute sizes of the whole domain.
        groups: One per chunk of the strategy's answers, in its block order: a
            ``distributed`` future (or, without a cluster, the value) of that chunk's
            tables, ``{sorted attribute positions: int64 table}``.
    """

    domain_shape: tuple[int, ...]
    groups: tuple[Any, ...]


def count_marginals(
    chunks: Iterable[np.ndarray], shape: Sequence[int], attribute_sets: Iterable[Sequence[int]]
) -> MarginalCounts:
    """Marginal tables of records in one pass over them, a chunk of records at a time.

    Sets sharing all but their last attribute are counted with one ``bincount`` over
    ``records × last attributes``, so the cost is O(records · sets) with few Python steps.

    Args:
        chunks: integer record arrays of shape ``(records, len(shape))``, codes in
            ``[0, n_i)``.
        shape: attribute sizes.
        attribute_sets: the tables to count (attribute positions; sorted on output).

    Example:
        >>> counts = count_marginals([np.array([[0, 2], [1, 2], [1, 0]])], (2, 3),
        ...                          [(), (0,), (1, 0)])
        >>> counts.tables[()].item(), counts.tables[(0, 1)].tolist()
        (3, [[0, 0, 1], [1, 0, 1]])
    """
    shape = tuple(int(n) for n in shape)
    wanted = sorted({tuple(sorted({int(i) for i in attrs})) for attrs in attribute_sets})
    groups: dict[tuple[int, ...], list[int]] = {}
    for attrs in wanted:
        if attrs and not all(0 <= i < len(shape) for i in attrs):
            raise MeasurementError(f"the attribute set {list(attrs)} is not in the domain")
        if attrs:
            groups.setdefault(attrs[:-1], []).append(attrs[-1])
    buffers = {
        prefix: np.zeros(math.prod(shape[i] for i in prefix) * sum(shape[i] for i in lasts), "i4")
        for prefix, lasts in groups.items()
    }
    total, wide = 0, False
    for records in chunks:
        records = np.asarray(records)
        if records.ndim != 2 or records.shape[1] != len(shape):
            raise MeasurementError(f"a record chunk must be (records, {len(shape)}) integers")
        if records.size and (records.min() < 0 or (records >= np.array(shape)).any()):
            raise MeasurementError("a record has a code outside its attribute's range")
        if not wide and total + records.shape[0] >= 2**31:
            # int32 halves the memory of 10⁵ tables; widen only when the counts could overflow.
            wide, buffers = True, {prefix: b.astype(np.int64) for prefix, b in buffers.items()}
        total += records.shape[0]
        # One contiguous row per attribute: the last attributes of a group are a slice.
        columns = np.ascontiguousarray(records.T, dtype=np.int64)
        for prefix, lasts in groups.items():
            code = np.zeros(records.shape[0], dtype=np.int64)
            for i in prefix:  # C order: earlier attributes are the slower indices
                code = code * shape[i] + columns[i]
            sizes = np.array([shape[i] for i in lasts], dtype=np.int64)
            width = math.prod(shape[i] for i in prefix)
            starts = width * (np.cumsum(sizes) - sizes)  # each table's place in the buffer
            consecutive = lasts[-1] - lasts[0] == len(lasts) - 1
            last_codes = columns[lasts[0] : lasts[-1] + 1] if consecutive else columns[lasts]
            flat = last_codes + starts[:, None]
            flat += code * sizes[:, None] if len(set(sizes.tolist())) > 1 else code * sizes[0]
            buffers[prefix] += np.bincount(flat.reshape(-1), minlength=buffers[prefix].size)
    tables: dict[tuple[int, ...], np.ndarray] = {}
    if () in wanted:
        tables[()] = np.array(total, dtype=np.int64 if wide else np.int32)
    for prefix, lasts in groups.items():
        buffer, start = buffers.pop(prefix), 0
        for last in lasts:
            size = math.prod(shape[i] for i in prefix) * shape[last]
            tables[(*prefix, last)] = buffer[start : start + size].reshape(
                [shape[i] for i in (*prefix, last)]
            )
            start += size
    return MarginalCounts(shape, tables)


#: Strategies answered from marginal tables: a union of marginals, and the types that
#: compute their own answers from the tables (``table_sets``, ``table_answers``, ``part``).
TableStrategy = Marginals | HelmertBlocks | TableKrons


def strategy_tables(A: TableStrategy) -> list[tuple[int, ...]]:
    """The marginal tables a strategy's answers are computed from, in its block order."""
    if isinstance(A, HelmertBlocks | TableKrons):
        return A.table_sets()
    return [tuple(mask_members(mask)) for mask in A.weights]


def marginal_answers(strategy: ExactStrategy, counts: MarginalCounts) -> np.ndarray:
    """``A x`` as int64 for an integer-weighted :class:`~dpmm.linalg.Marginals` strategy or
    an integer residual strategy (:class:`~dpmm.linalg.helmert_blocks.HelmertBlocks`).

    Raises:
        MeasurementError: The strategy is not a weighted union of marginals, the tables do
            not match its domain or sets, they disagree on the total, or the answers could
            exceed exact arithmetic.
    """
    A = strategy.matrix
    if not isinstance(A, TableStrategy):
        raise MeasurementError(
            f"answers from marginal tables need a Marginals strategy, got {A!r:.120}"
        )
    if tuple(counts.domain_shape) != tuple(A.domain_shape):
        raise MeasurementError(
            f"the tables are over a domain of shape {tuple(counts.domain_shape)}, the strategy "
            f"over {tuple(A.domain_shape)}"
        )
    if isinstance(A, HelmertBlocks | TableKrons):
        return own_answers(A, dict(counts.tables))
    answers, total = _weighted_tables(A, counts.tables)
    check_exact(strategy, total)
    return answers


def check_exact(strategy: ExactStrategy, total: int) -> None:
    """Refuse a weighted union of marginals whose answers on ``total`` records could leave
    exact float64 arithmetic (the answers are read as floats to reconstruct); the message
    does not state the total, a count of the data.

    Raises:
        MeasurementError: They could.
    """
    if strategy.entry_bound * total >= FLOAT_EXACT:
        raise MeasurementError(
            f"the answers of {strategy.matrix!r:.120} on these records could exceed 2**53; "
            "measuring them is not supported"
        )


def _weighted_tables(
    A: Marginals, counts: Mapping[tuple[int, ...], np.ndarray]
) -> tuple[np.ndarray, int]:
    """The weighted tables stacked in block order, and their common total."""
    shape = A.domain_shape
    try:
        tables = [
            checked_table(counts, mask, tuple(shape[i] for i in mask_members(mask)))
            for mask in A.weights
        ]
    except DomainError as error:
        raise MeasurementError(str(error)) from None
    totals = {int(table.sum(dtype=np.int64)) for table in tables}
    if len(totals) > 1:
        raise MeasurementError("the marginal tables disagree on the number of records")
    weights = [int(w) for w in A.weights.values()]
    answers = [w * table.reshape(-1) for w, table in zip(weights, tables, strict=True)]
    return np.concatenate(answers), totals.pop()


def strategy_part(A: TableStrategy, start: int, stop: int) -> TableStrategy:
    """The blocks ``[start, stop)`` of a strategy answered from tables, as a strategy."""
    if isinstance(A, TableKrons):
        return A.part(start, stop)
    if isinstance(A, HelmertBlocks):
        return HelmertBlocks(A.domain_shape, {m: A.integers[m] for m in A.sets[start:stop]})
    masks = list(A.weights)[start:stop]
    return Marginals(A.domain_shape, {tuple(mask_members(m)): A.weights[m] for m in masks})


def table_answers(A: TableStrategy, tables: Mapping[tuple[int, ...], np.ndarray]) -> np.ndarray:
    """``A x`` as int64 from ``A``'s tables (a part of a strategy, on the worker holding
    them: :func:`strategy_part`); whether they fit exact arithmetic is the caller's check.

    Raises:
        MeasurementError: A table is missing or invalid, or the tables disagree on the total.
    """
    if isinstance(A, HelmertBlocks | TableKrons):
        return own_answers(A, dict(tables))
    return _weighted_tables(A, tables)[0]
