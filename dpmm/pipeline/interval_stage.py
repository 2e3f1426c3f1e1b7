"""Each answer's interval half-width, from the strategy, the workload and the noise's law.

One computation serves the release (``answers.parquet``'s ``half_width``) and the plan
(``half_width`` targets are judged by it at every budget the least-budget search tries).
A least-squares answer's coefficients on the integer noise do not depend on the budget,
so they are found once per strategy, as the distinct multisets of their magnitudes
(:class:`~dpmm.reconstruct.intervals.Multisets`):

* with the full vector, from the rows of ``W (BᵀB)⁺ Bᵀ`` (up to
  :data:`~dpmm.reconstruct.intervals.ROW_LIMIT` entries of work per group), or beyond
  that, for a Kronecker strategy and a group of Kronecker blocks over the same axes, per
  axis: a row of ``⊗_k W_k (⊗_k A_k)⁺`` is the Kronecker product of the factors' rows,
  whose multiset is the products of theirs (:func:`_kron_multisets`);
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
the groups in workload order, as the release does. :class:`PlannedIntervals` gives them
at any budget and level, for the plan's ``half_width`` targets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.linalg import Identity, Matrix, VStack, Weighted
from dpmm.linalg.chunked_kron import axis_factors
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.measure.mechanism import NoiseModel, record_fields
from dpmm.measure.tables import strategy_tables
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.privacy.params import PureDP
from dpmm.reconstruct.intervals import (
    Intervals,
    Multisets,
    NoiseLaw,
    coefficient_rows,
    merged_multiset,
)
from dpmm.reconstruct.marginal_tables import noise_coefficients
from dpmm.targets import Budget, budget_noise
from dpmm.workload import WorkloadGroup
from dpmm.workload.table_form import TableBlock, table_form

__all__ = ["ROW_WORK", "PlannedIntervals", "group_multisets", "half_widths"]

#: Entries (rows × measured cells sharing the row's attributes) formed for one group's
#: rows in table form, and magnitudes of one query's Kronecker multiset; beyond, its
#: half-widths come from the standard errors.
ROW_WORK = 1 << 22
#: The widest Kronecker factor whose pseudo-inverse is formed densely, and the most
#: queries of a group whose Kronecker multisets are formed one by one.
KRON_FACTOR_LIMIT = 4096
KRON_QUERY_LIMIT = 1 << 18


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
        if blocks is not None:
            return Multisets.of_rows(blocks)
        shape = tuple(config.domain.shape)
        return _kron_multisets(group.matrix, strategy.quantized.matrix, shape, scale)
    shape = tuple(config.domain.shape)
    measured = [
        (attrs, weight / scale)
        for attrs, weight in zip(strategy_tables(integer), integer.weights.values(), strict=True)
    ]
    blocks = table_form(group.matrix, shape)
    if blocks is None or _work(blocks, measured, shape) > ROW_WORK:
        return None
    return Multisets.collect(_table_multisets(blocks, measured, shape, scale))


def _kron_blocks(matrix: Matrix) -> list[Matrix]:
    """A stacked workload's blocks, nested stacks flattened."""
    if isinstance(matrix, VStack):
        return [part for block in matrix.blocks for part in _kron_blocks(block)]
    return [matrix]


def _kron_multisets(
    workload: Matrix, strategy: Matrix, shape: tuple[int, ...], scale: int
) -> Multisets | None:
    """The multisets of a group of Kronecker blocks answered through a Kronecker strategy
    over the same axes, from each axis's ``W_k A_k⁺`` (None: not both Kronecker, a factor
    over :data:`KRON_FACTOR_LIMIT` columns, more than :data:`KRON_QUERY_LIMIT` queries, or a
    product of more than :data:`ROW_WORK` magnitudes)."""
    factors = axis_factors(strategy, shape)
    if workload.shape[0] > KRON_QUERY_LIMIT or factors is None:
        return None
    if max(f.shape[1] for f in factors) > KRON_FACTOR_LIMIT:
        return None
    solved = [np.linalg.pinv(f.dense()) for f in factors]  # A_k⁺, cells × rows
    combined: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def queries() -> Iterator[tuple[np.ndarray, np.ndarray]] | None:
        parts = []
        for block in _kron_blocks(workload):
            local = axis_factors(block, shape)
            if local is None:
                return None
            rows = [np.asarray(w.dense()) @ pinv for w, pinv in zip(local, solved, strict=True)]
            sets = [[merged_multiset(r, np.ones(r.size, dtype=np.int64)) for r in f] for f in rows]
            if math.prod(max(len(v) for v, _ in axis) for axis in sets) > ROW_WORK:
                return None
            parts.append(sets)
        return _combine(parts)

    def _combine(parts: list) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for number, sets in enumerate(parts):
            for index in np.ndindex(*[len(axis) for axis in sets]):
                key = (number, *index)
                if key not in combined:
                    values, counts = np.ones(1), np.ones(1, dtype=np.int64)
                    for axis, i in zip(sets, index, strict=True):
                        v, c = axis[i]
                        values = np.multiply.outer(values, v).reshape(-1)
                        counts = np.multiply.outer(counts, c).reshape(-1)
                    combined[key] = merged_multiset(values / scale, counts)
                yield combined[key]

    found = queries()
    return None if found is None else Multisets.collect(found)


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


class PlannedIntervals:
    """The half-widths a release of a strategy publishes, at any budget and level: each
    group's multisets found once, its standard errors moved with the noise's deviation.

    Args:
        config: The config (its budget is the one ``standard_errors`` are stated at).
        strategy: The strategy the release measures.
        plan: How the release counts its input (``vector``, ``tables`` or ``chunked``).
        groups: The workload groups, in order.
        standard_errors: Their answers' standard errors at ``stated_at``.
        stated_at: The whole budget the standard errors are stated at (None: the
            config's).
    """

    def __init__(
        self,
        config: ReleaseConfig,
        strategy: ChosenStrategy,
        plan: str,
        groups: Sequence[WorkloadGroup],
        standard_errors: Sequence[object],
        stated_at: Budget | None = None,
    ) -> None:
        self._names = [group.name for group in groups]
        self._multisets = [group_multisets(config, strategy, plan, group) for group in groups]
        self._errors = list(standard_errors)  # Dask arrays on the cluster stay there
        self._terms = int(strategy.quantized.integer.shape[0])
        noise = NoiseModel.of(strategy.quantized)
        self._privacy = stated_at or config.privacy
        self._variance = budget_noise(noise.variance, config.privacy, config.measurement_privacy)

        def law(budget: Budget) -> NoiseLaw:
            fields = record_fields(noise.exact, budget)
            parameter = (
                fields["scale"] if fields["noise"] == "discrete_laplace" else fields["sigma2"]
            )
            return NoiseLaw(str(fields["noise"]), Fraction(str(parameter)))

        self._law = budget_noise(law, config.privacy, config.measurement_privacy)
        self._known: dict[tuple[float, type, Fraction], list[Any]] = {}

    def at(self, budget: Budget, level: float) -> list[Any]:
        """Every group's half-widths at ``level`` from a release at ``budget``, computed as
        the release computes them (one work budget across the groups, in order)."""
        amount = budget.epsilon if isinstance(budget, PureDP) else budget.rho
        key = (level, type(budget), amount)
        if key not in self._known:
            intervals = Intervals(self._law(budget), level)
            factor = math.sqrt(self._variance(budget) / self._variance(self._privacy))
            self._known[key] = [
                half_widths(intervals, multisets, errors * factor, self._terms)[0]
                for multisets, errors in zip(self._multisets, self._errors, strict=True)
            ]
        return self._known[key]

    def group(self, name: str, level: float, budget: Budget) -> Any:
        """One group's half-widths at ``level`` from a release at ``budget``."""
        return self.at(budget, level)[self._names.index(name)]
