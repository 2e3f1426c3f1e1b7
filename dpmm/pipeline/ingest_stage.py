"""Count a release's input: the data vector, or only the marginal tables its strategy measures.

A residual strategy (integer residual blocks) is always measured from marginal tables.
Otherwise the full vector is counted when the domain has at most :data:`VECTOR_LIMIT`
cells; larger domains are released only through a union-of-marginals strategy whose
workload groups all read marginal tables: then only those tables are counted. Tables
counted for either strategy stay on the Dask workers, a group of whole tables per chunk of
the measurement (``worker-tables``), when the config asks (``cluster.arrays: workers``) or
they have more than :data:`VECTOR_LIMIT` cells together (``auto``).
:func:`counting_plan` decides this from the config and strategy alone, so an impossible
release is refused before any budget is reserved.

With ``data.person`` set, each person's rows are first combined into one record
(:mod:`dpmm.pipeline.persons`); the records are then counted the same way.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.data import IngestReport, MarginalTables, Source, histogram, marginal_tables, open_source
from dpmm.data.execute import Progress
from dpmm.data.histogram import CHUNK_CELLS, DENSE_LIMIT
from dpmm.data.reader import check_location
from dpmm.errors import ConfigError
from dpmm.linalg import Marginals
from dpmm.linalg.chunked_kron import axis_factors
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.chunked import table_groups
from dpmm.measure.tables import MarginalCounts, TableGroups, strategy_tables
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.persons import PersonCounts, count_people, summed_attributes
from dpmm.workload.table_form import table_form

#: Largest domain whose full count vector is built (cells; int64, 2 GiB), and most cells
#: of marginal tables counted into the flow's process under ``cluster.arrays: auto``.
VECTOR_LIMIT = 2**28
#: The counting plans that measure marginal tables, not the vector: their measurement is
#: post-processed alike, in the flow's process.
TABLE_PLANS = ("tables", "worker-tables")

__all__ = [
    "TABLE_PLANS",
    "VECTOR_LIMIT",
    "Counts",
    "check_countable",
    "count_input",
    "count_tables",
    "counting_plan",
]


@dataclass(frozen=True, eq=False)
class Counts:
    """Exact counts of the input: raw data, never logged or released.

    Attributes:
        vector: The count vector (the ``vector`` plan; a Dask array on the workers for
            the ``chunked`` plan), else None.
        tables: The strategy's marginal tables (the ``tables`` plan; held by the workers
            in the ``worker-tables`` plan), else None.
        report: The ingest report, for the operator's run state only.
        fingerprint: sha256 of the input files' paths, sizes and row groups.
        partitions: Files (or row-group splits) read.
    """

    vector: np.ndarray | None
    tables: MarginalCounts | TableGroups | None
    report: IngestReport
    fingerprint: str
    partitions: int


def check_countable(config: ReleaseConfig) -> None:
    """Refuse a release without input before anything is chosen or reserved (whether the
    chosen strategy can count it is :func:`counting_plan`'s to say).

    Raises:
        ConfigError: No ``data`` section.
        DataError: Its location does not exist (no file is read here).
    """
    if config.data is None:
        raise ConfigError(f"{config.path}: data: a release needs a data section with a path")
    check_location(config.data)


def counting_plan(config: ReleaseConfig, strategy: ChosenStrategy) -> str:
    """``vector``, ``tables``, ``worker-tables`` or ``chunked``: how the input of this
    release is counted.

    ``chunked`` keeps the counts (and the answers and estimate after them) on the Dask
    workers, for a Kronecker strategy: when the config asks (``cluster.arrays: workers``)
    or the domain is too large for the vector in the flow's process (``auto``).
    ``worker-tables`` counts and measures the marginal tables of a strategy read from
    tables on the workers, when the config asks or they are too many cells for the flow's
    process (``auto``); the flow then reads the measurement, the size of the tables, to
    reconstruct.

    Raises:
        ConfigError: The domain is too large for the vector and the strategy or a
            workload group can be served neither by marginal tables nor on the workers,
            or ``cluster.arrays: workers`` is asked of a strategy that is neither a
            Kronecker product over the domain's attributes nor read from tables.
    """
    plan = _flow_counting(config, strategy)
    if plan == "tables" and config.cluster.arrays != "flow":
        cells = sum(_table_cells(config, attrs) for attrs in _tables_of(strategy))
        if config.cluster.arrays == "workers" or cells > VECTOR_LIMIT:
            return "worker-tables"
    return plan


def _tables_of(strategy: ChosenStrategy) -> list[tuple[int, ...]]:
    return strategy_tables(strategy.quantized.integer)


def _table_cells(config: ReleaseConfig, attrs: tuple[int, ...]) -> int:
    return math.prod(config.domain.shape[i] for i in attrs)


def _flow_counting(config: ReleaseConfig, strategy: ChosenStrategy) -> str:
    """:func:`counting_plan` but for where the tables are counted."""
    cells = config.domain.size
    integer = strategy.quantized.integer
    if isinstance(integer, HelmertBlocks | TableKrons):  # never the vector
        return "tables"
    arrays = config.cluster.arrays
    kron = axis_factors(integer, tuple(config.domain.shape)) is not None
    if arrays == "workers" and isinstance(integer, Marginals) and not kron:
        return _tables_plan(config, strategy)
    if arrays == "workers" and not kron:
        raise ConfigError(
            f"{config.path}: cluster.arrays: workers holds the arrays of a Kronecker "
            f"strategy over the domain's attributes or the marginal tables of a union of "
            f"marginals or residual blocks, and {strategy.selected!r} is neither; use "
            "strategy.method hierarchical, hdmm_kron, identity, marginals or residual, or "
            "cluster.arrays: auto"
        )
    if arrays == "workers" or (arrays == "auto" and cells > VECTOR_LIMIT and kron):
        if cells > VECTOR_LIMIT and config.data is not None and config.data.person is not None:
            raise ConfigError(
                f"{config.path}: data.person: combining each person's rows is done in the "
                f"flow's process, which cannot hold the {cells:,} cells of this domain"
            )
        return "chunked"
    if cells <= VECTOR_LIMIT:
        return "vector"
    if not isinstance(integer, Marginals):
        raise ConfigError(
            f"{config.path}: the domain has {cells:,} cells, more than the {VECTOR_LIMIT:,} "
            f"a data vector can hold, and the strategy {strategy.selected!r} is "
            "measured neither from marginal tables nor on the workers; use strategy.method "
            "marginals, hdmm_marginals, marginal_optimal, residual, or a Kronecker one "
            "(hierarchical, hdmm_kron) with cluster.arrays: auto"
        )
    return _tables_plan(config, strategy)


def _tables_plan(config: ReleaseConfig, strategy: ChosenStrategy) -> str:
    """``tables`` for a union of marginals whose workload groups all read marginal tables.

    Raises:
        ConfigError: A group cannot be answered from marginal tables.
    """
    for group in config.workload:
        if table_form(group.matrix, config.domain.shape) is None:
            raise ConfigError(
                f"{config.path}: the strategy {strategy.selected!r} is measured from marginal "
                f"tables without the data vector ({config.domain.size:,} cells), and workload "
                f"group {group.name!r} cannot be answered from marginal tables"
            )
    return "tables"


def _fingerprint(source: Any) -> str:
    digest = hashlib.sha256()
    for partition in source.partitions:
        try:
            size = source.filesystem.get_file_info(partition.path).size
        except OSError:
            size = None
        digest.update(f"{partition.path}|{size}|{list(partition.row_groups)}\n".encode())
    return digest.hexdigest()


def count_input(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    *,
    client: Any = None,
    progress: Progress | None = None,
) -> Counts:
    """Read the config's data and count it as :func:`counting_plan` says.

    Raises:
        ConfigError: The config has no ``data`` section.
        DataError: Unreadable data or (under ``bad_rows: reject``) a bad value.
    """
    check_countable(config)
    plan = counting_plan(config, strategy)
    source = open_source(config.data)
    fingerprint, partitions = _fingerprint(source), len(source.partitions)
    if plan in TABLE_PLANS:
        sets = _tables_of(strategy)
        named = [tuple(config.domain.attributes[i] for i in attrs) for attrs in sets]
        on_workers = plan == "worker-tables"
        counted = count_tables(
            config, named, source=source, client=client, progress=progress, keep=on_workers
        )
        shape = tuple(config.domain.shape)
        if on_workers:
            groups = _grouped(counted.tables, sets, named, strategy, client)
            return Counts(None, TableGroups(shape, groups), counted.report, fingerprint, partitions)
        tables = {attrs: counted.tables[key] for attrs, key in zip(sets, named, strict=True)}
        counts = MarginalCounts(shape, tables)
        return Counts(None, counts, counted.report, fingerprint, partitions)
    chunked = plan == "chunked"  # counts kept on the workers, as a chunked Dask array
    if config.data.person is not None:
        people = _count_people(config, source, None, client, progress)
        vector = _on_workers(people.vector, client) if chunked else people.vector
        return Counts(vector, None, people.report, fingerprint, partitions)
    dense_limit = 0 if chunked else DENSE_LIMIT
    counted = histogram(
        source, config.domain, client=client, progress=progress, dense_limit=dense_limit
    )
    vector = counted.counts
    if not chunked and not isinstance(vector, np.ndarray):  # chunked above DENSE_LIMIT
        vector = np.asarray(vector.compute())
    return Counts(vector, None, counted.report, fingerprint, partitions)


def _grouped(
    tables: Any,
    sets: list[tuple[int, ...]],
    named: list[tuple[str, ...]],
    strategy: ChosenStrategy,
    client: Any,
) -> tuple[Any, ...]:
    """The counted tables (on the workers: a future of them all) as the groups the
    measurement draws a chunk from (:func:`~dpmm.measure.chunked.table_groups`), each
    made and kept on a worker, keyed by attribute positions."""
    bounds = table_groups(strategy.quantized.integer)
    keys = [(sets[start:stop], named[start:stop]) for start, stop in bounds]
    if client is None:
        return tuple(_select(tables, positions, names) for positions, names in keys)
    from distributed import wait

    if isinstance(tables, dict):  # counted per person in the flow's process: each group
        # is sent in its task, so a worker lost later recomputes it from there
        groups = [
            client.submit(_select, {key: tables[key] for key in names}, positions, names)
            for positions, names in keys
        ]
    else:
        groups = [client.submit(_select, tables, positions, names) for positions, names in keys]
    wait(groups)
    return tuple(groups)


def _select(
    tables: dict[tuple[str, ...], np.ndarray],
    positions: list[tuple[int, ...]],
    names: list[tuple[str, ...]],
) -> dict[tuple[int, ...], np.ndarray]:
    return {attrs: tables[key] for attrs, key in zip(positions, names, strict=True)}


def _on_workers(vector: np.ndarray, client: Any) -> Any:
    """A count vector counted in the flow's process, chunked onto the workers."""
    import dask.array as da

    chunked = da.from_array(vector, chunks=CHUNK_CELLS)
    return client.persist(chunked) if client is not None else chunked


def count_tables(
    config: ReleaseConfig,
    sets: Sequence[tuple[str, ...]],
    *,
    source: Source | None = None,
    client: Any = None,
    progress: Progress | None = None,
    keep: bool = False,
) -> MarginalTables:
    """The int64 marginal tables of the config's data: of its rows or, with ``data.person``,
    of the records combined per person. Raw counts, never written or logged.

    Args:
        config: The release config.
        sets: Attribute names of each table, in domain order; ``()`` is the total.
        source: The config's data, opened already; by default it is opened here.
        client: A ``distributed.Client``; None runs on local threads.
        progress: Called with ``(partitions done, total)``.
        keep: With a client, leave the tables of the rows on the worker that summed them
            (``tables`` is then a future of the mapping).

    Raises:
        ConfigError: The config has no ``data`` section.
        DataError: Unreadable data or (under ``bad_rows: reject``) a bad value.
    """
    check_countable(config)
    source = open_source(config.data) if source is None else source
    if config.data.person is None:
        return marginal_tables(
            source, config.domain, sets, client=client, progress=progress, keep=keep
        )
    people = _count_people(config, source, sets, client, progress)
    return MarginalTables(people.tables, people.report)


def _count_people(
    config: ReleaseConfig,
    source: Source,
    sets: Sequence[tuple[str, ...]] | None,
    client: Any,
    progress: Progress | None,
) -> PersonCounts:
    """The records combined per person (``data.person``): the vector (``sets`` None) or
    the marginal tables over ``sets``."""
    summed = summed_attributes(config.workload)
    return count_people(
        source, config.domain, summed=summed, sets=sets, client=client, progress=progress
    )
