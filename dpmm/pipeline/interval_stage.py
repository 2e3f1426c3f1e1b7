"""Each answer's interval half-width, from the strategy, the workload and the noise's law.

One computation serves the release (``answers.parquet``'s ``half_width``) and the plan
(``half_width`` targets are judged by it at every budget the least-budget search tries).
A least-squares answer's coefficients on the integer noise do not depend on the budget,
so they are found once per strategy, as the distinct multisets of their magnitudes
(:class:`~dpmm.reconstruct.intervals.Multisets`):

* with the full vector, from the rows of ``W (BᵀB)⁺ Bᵀ`` (up to
  :data:`~dpmm.reconstruct.intervals.ROW_LIMIT` entries of work per group);
* on marginal tables, through the marginal algebra
  (:func:`~dpmm.reconstruct.marginal_tables.noise_coefficients`): a cell of an estimated
  table has coefficients that depend only on which of the shared attributes a measured
  cell agrees on, the same multiset for every cell of the table (the algebra is invariant
  under relabelling each attribute's values), so a marginal group needs one row per table;
  other rows in table form (ranges, prefixes) are formed up to :data:`ROW_WORK` entries;
* elsewhere (residual blocks, the cluster's parts, larger workloads) none: the half-width
  is a factor of the standard error (:meth:`~dpmm.reconstruct.intervals.Intervals.bounded`).

A noise law then gives every half-width (:func:`half_widths`), one
:class:`~dpmm.reconstruct.intervals.Intervals` per release sharing its work budget across
the groups in workload order, as the release does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.linalg import Identity, Matrix, Weighted
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.measure.tables import strategy_tables
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.reconstruct.intervals import Intervals, Multisets, coefficient_rows, merged_multiset
from dpmm.reconstruct.marginal_tables import noise_coefficients
from dpmm.workload import WorkloadGroup
from dpmm.workload.table_form import TableBlock, table_form

__all__ = ["ROW_WORK", "group_multisets", "half_widths"]

#: Entries (rows × measured cells sharing the row's attributes) formed for one group's
#: rows in table form; beyond, its half-widths come from the standard errors.
ROW_WORK = 1 << 22


def group_multisets(
    config: ReleaseConfig, strategy: ChosenStrategy, plan: str, group: WorkloadGroup
) -> Multisets | None:
    """The coefficient multisets of a group's least-squares answers on the integer noise
    (None: the release bounds them from the standard errors)."""
    integer, scale = strategy.quantized.integer, strategy.quantized.scale
    if isinstance(integer, HelmertBlocks) or plan == "chunked":
        return None
    if plan == "vector":
        blocks = coefficient_rows(group.matrix, strategy.quantized.matrix, scale)
        return None if blocks is None else Multisets.of_rows(blocks)
    shape = tuple(config.domain.shape)
    measured = [
        (attrs, weight / scale)
        for attrs, weight in zip(strategy_tables(integer), integer.weights.values(), strict=True)
    ]
    blocks = table_form(group.matrix, shape)
    if blocks is None or _work(blocks, measured, shape) > ROW_WORK:
        return None
    return Multisets.collect(_table_multisets(blocks, measured, shape, scale))


def _identity(local: Matrix) -> bool:
    """Whether a block answers the cells of its table themselves (possibly weighted)."""
    return isinstance(local, Identity) or (
        isinstance(local, Weighted) and isinstance(local.base, Identity)
    )


def _work(
    blocks: Sequence[TableBlock],
    measured: Sequence[tuple[Sequence[int], float]],
    shape: tuple[int, ...],
) -> int:
    """Entries :func:`_table_multisets` forms: per row formed, the cells each measured
    table shares with its table."""
    total = 0
    for block in blocks:
        formed = 1 if _identity(block.local) else block.local.shape[0]
        for attrs, _ in measured:
            total += formed * int(np.prod([shape[i] for i in block.attrs if i in attrs]))
    return total


def _table_multisets(
    blocks: Sequence[TableBlock],
    measured: Sequence[tuple[Sequence[int], float]],
    shape: tuple[int, ...],
    scale: int,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each query's magnitudes and multiplicities on the integer noise (the measured
    tables' noise is the integer noise over ``scale``), in row order."""
    for block in blocks:
        local, queries = block.local, block.local.shape[0]
        formed = 1 if _identity(local) else queries
        pick = np.zeros((local.shape[0], formed))
        pick[np.arange(formed), np.arange(formed)] = 1.0
        rows = np.asarray(local.T @ pick, dtype=np.float64).T
        found = list(noise_coefficients(shape, measured, block.attrs, rows))
        for query in range(queries):
            values, counts = found[0 if formed == 1 else query]
            yield merged_multiset(values / scale, counts)


def half_widths(
    intervals: Intervals,
    multisets: Multisets | None,
    standard_errors: object,
    terms: int,
) -> tuple[object, bool | np.ndarray]:
    """A group's half-widths under ``intervals``' law and level, and whether each is
    exact: from its multisets, or (None) from its standard errors and the ``terms``
    measured rows."""
    if multisets is None:
        return intervals.bounded(standard_errors, terms)
    return intervals.of(multisets)
