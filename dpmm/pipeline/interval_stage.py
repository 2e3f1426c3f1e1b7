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
  whose multiset is the products of theirs (:func:`_kron_multisets`, one product per
  combination of the axes' distinct multisets, :class:`KronMultisets`);
* on the cluster (the ``chunked`` plan), the same per-axis multisets: only the factors are
  formed, and each answer's half-width is made on the workers from its row's position on
  each axis, so nothing the size of the domain reaches the flow's process;
* on marginal tables, through the marginal algebra
  (:func:`~dpmm.reconstruct.marginal_tables.noise_coefficients`): a cell of an estimated
  table has coefficients that depend only on which of the shared attributes a measured
  cell agrees on, the same multiset for every cell of the table (the algebra is invariant
  under relabelling each attribute's values), so a marginal group needs one row per table;
  other rows in table form (ranges, prefixes) are formed up to :data:`ROW_WORK` entries;
* for residual blocks, per residual set
  (:func:`~dpmm.reconstruct.residual_blocks.block_noise_coefficients`, up to
  :data:`ROW_WORK` entries): the Helmert bases are not invariant under relabelling, so
  each answer has its own row;
* elsewhere (factors too wide, larger workloads) none: the half-width is a factor of the
  standard error (:meth:`~dpmm.reconstruct.intervals.Intervals.bounded`).

A noise law then gives every half-width (:func:`half_widths`), one
:class:`~dpmm.reconstruct.intervals.Intervals` per release sharing its work budget across
the groups, cheapest group first (:func:`release_half_widths`), as the release does.
:class:`PlannedIntervals` gives them at any budget and level, for the plan's
``half_width`` targets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.errors import TooLargeError
from dpmm.linalg import Identity, Matrix, VStack, Weighted
from dpmm.linalg.chunked_kron import axis_factors
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.table_krons import TableKrons
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
from dpmm.reconstruct.residual_blocks import block_noise_coefficients
from dpmm.targets import Budget, budget_noise
from dpmm.workload import WorkloadGroup
from dpmm.workload.table_form import TableBlock, table_form

__all__ = [
    "ROW_WORK",
    "KronMultisets",
    "PlannedIntervals",
    "group_multisets",
    "half_widths",
    "release_half_widths",
]

#: Entries (rows × measured cells sharing the row's attributes) formed for one group's
#: rows in table form, magnitudes of its Kronecker multisets' products together, and
#: entries of its residual blocks' rows; beyond, its half-widths come from the standard
#: errors.
ROW_WORK = 1 << 22
#: The widest Kronecker factor whose pseudo-inverse is formed densely, and the most
#: products of its axes' distinct multisets a group forms (the distinct queries).
KRON_FACTOR_LIMIT = 4096
KRON_QUERY_LIMIT = 1 << 18


def group_multisets(
    config: ReleaseConfig, strategy: ChosenStrategy, plan: str, group: WorkloadGroup
) -> Multisets | KronMultisets | None:
    """The coefficient multisets of a group's least-squares answers on the integer noise
    (None: the release bounds them from the standard errors).

    The release calls this after the noise is drawn, so a group too large to form its
    multisets (a workload factor over the dense limit: all ranges over 512 values is
    131,328 × 512) gets the standard errors' bound, never an error: the plan does not
    form them.
    """
    try:
        return _group_multisets(config, strategy, plan, group)
    except TooLargeError:
        return None


def _group_multisets(
    config: ReleaseConfig, strategy: ChosenStrategy, plan: str, group: WorkloadGroup
) -> Multisets | KronMultisets | None:
    integer, scale = strategy.quantized.integer, strategy.quantized.scale
    shape = tuple(config.domain.shape)
    if isinstance(integer, HelmertBlocks):
        rows = block_noise_coefficients(integer, group.matrix, ROW_WORK)
        return None if rows is None else Multisets.of_rows(rows)
    if isinstance(integer, TableKrons):  # every answer mixes whole tables' noise
        return None
    if plan == "chunked":  # the factors only: nothing the size of the domain
        return _kron_multisets(group.matrix, strategy.quantized.matrix, shape, scale)
    if plan == "vector":
        blocks = coefficient_rows(group.matrix, strategy.quantized.matrix, scale)
        if blocks is not None:
            return Multisets.of_rows(blocks)
        return _kron_multisets(group.matrix, strategy.quantized.matrix, shape, scale)
    measured = [
        (attrs, weight / scale)
        for attrs, weight in zip(strategy_tables(integer), integer.weights.values(), strict=True)
    ]
    blocks = table_form(group.matrix, shape)
    if blocks is None or _work(blocks, measured, shape) > ROW_WORK:
        return None
    return Multisets.collect(_table_multisets(blocks, measured, shape, scale))


@dataclass(frozen=True, eq=False)
class KronPositions:
    """Which product multiset each query of a group of Kronecker blocks has, by axis: query
    ``(r_1, …, r_d)`` of a block has the product of its factors' row multisets, so it is
    named by which of its axis's distinct multisets each row has.

    Attributes:
        blocks: Per block, in row order: per axis, each factor row's position among that
            axis's distinct multisets, and the table from those positions to the group's
            distinct products.
    """

    blocks: tuple[tuple[tuple[np.ndarray, ...], np.ndarray], ...]

    @property
    def size(self) -> int:
        """The group's queries."""
        return sum(math.prod(axis.size for axis in axes) for axes, _ in self.blocks)

    def take(self, per_distinct: np.ndarray, first: int, stop: int) -> np.ndarray:
        """``per_distinct``'s entry for each query from ``first`` to ``stop``."""
        found = np.empty(stop - first, dtype=per_distinct.dtype)
        start = 0
        for axes, table in self.blocks:
            end = start + math.prod(axis.size for axis in axes)
            low, high = max(first, start), min(stop, end)
            if low < high:
                shape = [axis.size for axis in axes]
                rows = np.unravel_index(np.arange(low - start, high - start), shape)
                where = table[tuple(axis[row] for axis, row in zip(axes, rows, strict=True))]
                found[low - first : high - first] = per_distinct[where]
            start = end
        return found


@dataclass(frozen=True, eq=False)
class KronMultisets:
    """A group of Kronecker blocks' multisets: one product per combination of the axes'
    distinct multisets used, never one entry per query (the cluster's groups span the
    domain).

    Attributes:
        distinct: ``(values, counts)`` per distinct product, in order of first use by the
            queries (as :class:`~dpmm.reconstruct.intervals.Multisets`).
        positions: Which one each query has.
    """

    distinct: tuple[tuple[np.ndarray, np.ndarray], ...]
    positions: KronPositions

    @property
    def index(self) -> np.ndarray:
        """Per query, the position of its multiset in ``distinct`` (formed in full)."""
        return self.positions.take(np.arange(len(self.distinct)), 0, self.positions.size)

    def lazy(self, per_distinct: np.ndarray, chunks: tuple[int, ...]) -> Any:
        """``per_distinct``'s entry for every query as a flat Dask array in ``chunks``, each
        block made where it is computed from the per-axis positions (the products stay
        here)."""
        import dask.array as da

        positions = self.positions

        def block(block_info: Any = None) -> np.ndarray:
            first, stop = block_info[None]["array-location"][0]
            return positions.take(per_distinct, first, stop)

        meta = np.array((), dtype=per_distinct.dtype)
        return da.map_blocks(block, chunks=(chunks,), dtype=per_distinct.dtype, meta=meta)


def _kron_blocks(matrix: Matrix) -> list[Matrix]:
    """A stacked workload's blocks, nested stacks flattened."""
    if isinstance(matrix, VStack):
        return [part for block in matrix.blocks for part in _kron_blocks(block)]
    return [matrix]


def _kron_multisets(
    workload: Matrix, strategy: Matrix, shape: tuple[int, ...], scale: int
) -> KronMultisets | None:
    """The multisets of a group of Kronecker blocks answered through a Kronecker strategy
    over the same axes, from each axis's ``W_k A_k⁺`` (None: not both Kronecker, a factor
    over :data:`KRON_FACTOR_LIMIT` columns, more than :data:`KRON_QUERY_LIMIT` distinct
    combinations of the axes' multisets, or more than :data:`ROW_WORK` magnitudes in their
    products together)."""
    factors = axis_factors(strategy, shape)
    if factors is None or max(f.shape[1] for f in factors) > KRON_FACTOR_LIMIT:
        return None
    solved = [np.linalg.pinv(f.dense()) for f in factors]  # A_k⁺, cells × rows
    blocks = []
    for block in _kron_blocks(workload):
        local = axis_factors(block, shape)
        if local is None:
            return None
        axes = [
            Multisets.collect(
                merged_multiset(row, np.ones(row.size, dtype=np.int64))
                for row in np.asarray(w.dense()) @ pinv
            )
            for w, pinv in zip(local, solved, strict=True)
        ]
        blocks.append(axes)
    # The products' magnitudes over every combination: Π_k Σ_j |multiset j of axis k|.
    work = sum(math.prod(sum(v.size for v, _ in axis.distinct) for axis in axes) for axes in blocks)
    combinations = sum(math.prod(len(axis.distinct) for axis in axes) for axes in blocks)
    if work > ROW_WORK or combinations > KRON_QUERY_LIMIT:
        return None

    def products() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # An axis's distinct multisets are in order of first use, so C order over their
        # combinations is the order in which the block's queries first use them.
        for axes in blocks:
            for combination in np.ndindex(*[len(axis.distinct) for axis in axes]):
                values, counts = np.ones(1), np.ones(1, dtype=np.int64)
                for axis, position in zip(axes, combination, strict=True):
                    v, c = axis.distinct[position]
                    values = np.multiply.outer(values, v).reshape(-1)
                    counts = np.multiply.outer(counts, c).reshape(-1)
                yield merged_multiset(values / scale, counts)

    found = Multisets.collect(products())
    tables, start = [], 0
    for axes in blocks:
        sizes = [len(axis.distinct) for axis in axes]
        table = found.index[start : start + math.prod(sizes)].reshape(sizes)
        tables.append((tuple(axis.index for axis in axes), table))
        start += math.prod(sizes)
    return KronMultisets(found.distinct, KronPositions(tuple(tables)))


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
    multisets: Multisets | KronMultisets | None,
    standard_errors: Any,
    terms: int,
) -> tuple[Any, Any]:
    """A group's half-widths under ``intervals``' law and level, and whether each is
    exact: from its multisets, or (None) from its standard errors and the ``terms``
    measured rows. Standard errors on the cluster (a Dask array) give half-widths there,
    made block by block from the multisets' per-axis positions, and one flag for the group
    where its multisets agree."""
    if multisets is None:
        return intervals.bounded(standard_errors, terms)
    widths, exact = intervals.distinct(multisets.distinct)
    chunks = getattr(standard_errors, "chunks", None)
    if chunks is None or not isinstance(multisets, KronMultisets):
        return widths[multisets.index], exact[multisets.index]
    agree = bool(exact.all()) or not exact.any()
    flags = bool(exact.all()) if agree else multisets.lazy(exact, chunks[0])
    return multisets.lazy(widths, chunks[0]), flags


def release_half_widths(
    intervals: Intervals,
    multisets: Sequence[Multisets | KronMultisets | None],
    standard_errors: Sequence[Any],
    terms: int,
) -> list[tuple[Any, Any]]:
    """Every group's :func:`half_widths`, the work budget for exact ones given to the
    groups cheapest first (:meth:`~dpmm.reconstruct.intervals.Intervals.admit`): what the
    release publishes and the plan states."""
    intervals.admit([found.distinct for found in multisets if found is not None])
    return [
        half_widths(intervals, found, errors, terms)
        for found, errors in zip(multisets, standard_errors, strict=True)
    ]


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
        the release computes them (:func:`release_half_widths`)."""
        amount = budget.epsilon if isinstance(budget, PureDP) else budget.rho
        key = (level, type(budget), amount)
        if key not in self._known:
            intervals = Intervals(self._law(budget), level)
            factor = math.sqrt(self._variance(budget) / self._variance(self._privacy))
            errors = [errors * factor for errors in self._errors]
            found = release_half_widths(intervals, self._multisets, errors, self._terms)
            self._known[key] = [widths for widths, _ in found]
        return self._known[key]

    def group(self, name: str, level: float, budget: Budget) -> Any:
        """One group's half-widths at ``level`` from a release at ``budget``."""
        return self.at(budget, level)[self._names.index(name)]
