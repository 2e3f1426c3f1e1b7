"""Exact counts of a dataset: the histogram vector ``x``, or only the marginal tables needed.

Each partition (file) is read with pyarrow, its columns encoded to attribute
indices, its rows to cell indices (mixed radix, C order, as in
:mod:`dpmm.domain`), and counted with :func:`numpy.bincount`; the per-partition
counts are added up as a tree on Dask. Counts are int64 and exact: the same
numbers from one partition or many, from one process or a cluster.

The ingest report's row counts describe the raw data: they are for the
operator's run log and must never be released.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpmm.data.encode import Encoded, Problem, cell_index, encode_column, encode_text
from dpmm.data.errors import DataError
from dpmm.data.execute import Progress, map_reduce
from dpmm.data.reader import Partition, Source, open_source, read_partition
from dpmm.data.spec import DataSpec
from dpmm.data.validate import Policed, apply_policy
from dpmm.domain import Domain
from dpmm.errors import TooLargeError

__all__ = [
    "DENSE_LIMIT",
    "Histogram",
    "IngestReport",
    "MarginalTables",
    "count_codes",
    "histogram",
    "marginal_tables",
]

#: Largest histogram returned as one numpy vector (cells); larger ones are Dask arrays.
DENSE_LIMIT = 2**25
#: Cells per chunk of a histogram returned as a Dask array.
CHUNK_CELLS = 2**24
#: Largest histogram built at all (cells), even as a Dask array.
MAX_CELLS = 2**36
#: Largest single marginal table (cells).
MAX_TABLE_CELLS = 2**28


@dataclass(frozen=True)
class IngestReport:
    """What an ingest read, for the operator's run log — raw-data counts, never released.

    Attributes:
        partitions: Files read.
        rows_read: Rows in them.
        rows_dropped: Rows skipped under ``bad_rows: drop`` (0 under ``reject``).
        dropped_by_attribute: Rows with a bad value, per attribute (a row may count twice).
        seconds: Wall time of the ingest.
    """

    partitions: int
    rows_read: int
    rows_dropped: int
    dropped_by_attribute: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class Histogram:
    """The data vector ``x`` over a domain (numpy, or a chunked Dask array when large)."""

    counts: Any
    domain: Domain
    report: IngestReport


@dataclass(frozen=True)
class MarginalTables:
    """Marginal count tables keyed by attribute names in domain order; shape = their sizes
    (or, counted with ``keep``, a future of that mapping on a worker)."""

    tables: Mapping[tuple[str, ...], np.ndarray]
    report: IngestReport


@dataclass(frozen=True)
class _Partial:
    """One partition's counts, or a sum of several."""

    payload: Any
    rows: int
    dropped: int
    dropped_by: Mapping[str, int]


def _combine_meta(parts: Sequence[_Partial], payload: Any) -> _Partial:
    by: dict[str, int] = {}
    for part in parts:
        for name, count in part.dropped_by.items():
            by[name] = by.get(name, 0) + count
    return _Partial(payload, sum(p.rows for p in parts), sum(p.dropped for p in parts), by)


def _add_vectors(*parts: _Partial) -> _Partial:
    # A new array: a retried task must find its inputs unchanged.
    total = parts[0].payload + parts[1].payload
    for part in parts[2:]:
        np.add(total, part.payload, out=total)
    return _combine_meta(parts, total)


def _add_tables(*parts: _Partial) -> _Partial:
    tables = {key: sum(p.payload[key] for p in parts) for key in parts[0].payload}
    return _combine_meta(parts, tables)


def _add_sparse(*parts: _Partial) -> _Partial:
    cells = np.concatenate([p.payload[0] for p in parts])
    counts = np.concatenate([p.payload[1] for p in parts])
    order = np.argsort(cells, kind="stable")
    cells, counts = cells[order], counts[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]]) if cells.size else cells
    merged = (cells[starts], np.add.reduceat(counts, starts) if cells.size else counts)
    return _combine_meta(parts, merged)


def _key_column(partition: Partition, name: str, attribute: Any, rows: int) -> Encoded:
    """A hive folder value, encoded once and repeated for every row of the file."""
    value = pa.array([partition.key(name)], pa.string())
    one = encode_text(value, attribute, file=partition.path, column=name)
    problems = tuple(Problem(p.reason, np.repeat(p.mask, rows)) for p in one.problems)
    repeated = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), value)
    return Encoded(np.repeat(one.codes, rows), repeated, problems)


def _encode_partition(
    partition: Partition, source: Source, domain: Domain, attributes: Sequence[str]
) -> Policed:
    spec = source.spec
    columns = [spec.column(name) for name in attributes]
    keys = set(source.key_columns)
    text = [c for a, c in zip(attributes, columns, strict=True) if domain[a].labels is not None]
    table = read_partition(
        source, partition, [c for c in columns if c not in keys], text_columns=text
    )
    rows = table.num_rows
    encoded = []
    for name, column in zip(attributes, columns, strict=True):
        if column in keys:
            item = _key_column(partition, column, domain[name], rows)
        else:
            item = encode_column(
                table.column(column), domain[name], file=partition.path, column=column
            )
        encoded.append((name, column, item))
    return apply_policy(encoded, rows, policy=spec.bad_rows, file=partition.path)


def _count_cells(partition: Partition, source: Source, domain: Domain, sparse: bool) -> _Partial:
    kept = _encode_partition(partition, source, domain, domain.attributes)
    index = cell_index(kept.codes, domain.shape)
    if sparse:
        payload: Any = np.unique(index, return_counts=True)
        payload = (payload[0], payload[1].astype(np.int64))
    else:
        payload = np.bincount(index, minlength=domain.size).astype(np.int64, copy=False)
    return _Partial(payload, kept.rows, kept.dropped, kept.dropped_by_attribute)


def _count_tables(
    partition: Partition, source: Source, domain: Domain, sets: Sequence[tuple[str, ...]]
) -> _Partial:
    # Every attribute is read and checked, not only the tables' own: the rows kept
    # (and a rejection) must not depend on which tables were asked for, so tables agree
    # with the histogram of the same data.
    kept = _encode_partition(partition, source, domain, domain.attributes)
    tables = count_codes(kept, domain, sets)
    return _Partial(tables, kept.rows, kept.dropped, kept.dropped_by_attribute)


def count_codes(
    kept: Policed, domain: Domain, sets: Iterable[tuple[str, ...]]
) -> dict[tuple[str, ...], np.ndarray]:
    """The int64 marginal table of each attribute set over the kept rows' codes.

    A table is shaped by its attributes' sizes, in the set's order; ``()`` is the number
    of rows kept (a 0-d array).

    Args:
        kept: The codes of every domain attribute, in domain order (:func:`apply_policy`).
        domain: The domain.
        sets: Tuples of attribute names.

    Example:
        >>> kept = Policed([np.array([0, 1, 1]), np.array([2, 0, 2])], 3, 0, {})
        >>> tables = count_codes(kept, Domain.from_dict({"sex": 2, "age": 3}), [("age",), ()])
        >>> tables[("age",)].tolist(), int(tables[()])
        ([1, 0, 2], 3)
    """
    codes = dict(zip(domain.attributes, kept.codes, strict=True))
    tables = {}
    for names in map(tuple, sets):
        if not names:
            tables[names] = np.array(kept.rows - kept.dropped, np.int64)
            continue
        shape = tuple(domain[n].size for n in names)
        index = cell_index([codes[n] for n in names], shape)
        counts = np.bincount(index, minlength=math.prod(shape))
        tables[names] = counts.astype(np.int64, copy=False).reshape(shape)
    return tables


def _open(source: DataSpec | Source | str | Path, domain: Domain) -> Source:
    if isinstance(source, str | Path):
        source = DataSpec(str(source))
    if isinstance(source, DataSpec):
        source = open_source(source)
    source.spec.check_attributes(domain.attributes)
    return source


def _report(total: _Partial, source: Source, started: float) -> IngestReport:
    if total.rows == 0:
        raise DataError(f"The data at '{source.spec.location}' has no rows")
    return IngestReport(
        partitions=len(source.partitions),
        rows_read=total.rows,
        rows_dropped=total.dropped,
        dropped_by_attribute=dict(total.dropped_by),
        seconds=time.perf_counter() - started,
    )


def _block(cells: np.ndarray, counts: np.ndarray, start: int, size: int) -> np.ndarray:
    out = np.zeros(size, np.int64)
    out[cells - start] = counts
    return out


def _dask_vector(
    cells: np.ndarray, counts: np.ndarray, size: int, chunk_cells: int, client: Any
) -> Any:
    import dask
    import dask.array as da

    starts = range(0, size, chunk_cells)
    bounds = np.searchsorted(cells, [*starts, size])
    blocks = []
    for i, start in enumerate(starts):
        length = min(chunk_cells, size - start)
        lo, hi = bounds[i], bounds[i + 1]
        block = dask.delayed(_block, pure=True)(cells[lo:hi], counts[lo:hi], start, length)
        blocks.append(da.from_delayed(block, shape=(length,), dtype=np.int64))
    vector = da.concatenate(blocks)
    return client.persist(vector) if client is not None else vector.persist(scheduler="threads")


def _without_payload(total: _Partial) -> _Partial:
    return _Partial(None, total.rows, total.dropped, total.dropped_by)


def _block_of(total: _Partial, start: int, size: int) -> np.ndarray:
    cells, counts = total.payload
    lo, hi = np.searchsorted(cells, [start, start + size])
    return _block(cells[lo:hi], counts[lo:hi], start, size)


def _dask_vector_on_workers(total: Any, size: int, chunk_cells: int, client: Any) -> Any:
    """The count vector as a Dask array persisted on the workers, each chunk made there
    from the summed sparse counts (a future on a worker): nothing comes to this process."""
    import dask
    import dask.array as da

    blocks = [
        da.from_delayed(
            dask.delayed(_block_of, pure=True)(total, start, min(chunk_cells, size - start)),
            shape=(min(chunk_cells, size - start),),
            dtype=np.int64,
        )
        for start in range(0, size, chunk_cells)
    ]
    vector = client.persist(da.concatenate(blocks))
    from distributed import wait

    wait(vector)
    return vector


def histogram(
    source: DataSpec | Source | str | Path,
    domain: Domain,
    *,
    client: Any = None,
    progress: Progress | None = None,
    dense_limit: int = DENSE_LIMIT,
    chunk_cells: int = CHUNK_CELLS,
) -> Histogram:
    """Count the records of a dataset in every cell of a domain.

    Args:
        source: A data spec, an opened source, or a path/URL (format from its suffix).
        domain: The domain; every attribute needs a column (or a hive folder key).
        client: A ``distributed.Client``; None runs on the local threaded scheduler.
        progress: Called with ``(partitions done, total)``.
        dense_limit: Histograms of at most this many cells are numpy vectors; larger ones
            are chunked Dask arrays (persisted on the client's cluster).
        chunk_cells: Cells per chunk of such a Dask array.

    Returns:
        The int64 count vector in the domain's C-order cell order, and the ingest report.

    Raises:
        DataError: Unreadable or empty data, missing columns, wrong types, or (with
            ``bad_rows: reject``) a value outside the domain; nothing is counted.
        TooLargeError: The domain has more than ``MAX_CELLS`` cells (use marginal tables).

    Example:
        >>> import pathlib, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "people.parquet"
        >>> pq.write_table(pa.table({"sex": [0, 1, 1], "age": [2, 0, 2]}), path)
        >>> result = histogram(path, Domain.from_dict({"sex": 2, "age": 3}))
        >>> result.counts.tolist(), result.report.rows_read
        ([0, 0, 1, 1, 0, 1], 3)
    """
    started = time.perf_counter()
    if domain.size > MAX_CELLS:
        raise TooLargeError(
            f"The domain has {domain.size} cells, more than the {MAX_CELLS} a histogram "
            "vector may have; ingest marginal tables instead"
        )
    opened = _open(source, domain)
    sparse = domain.size > dense_limit
    task = functools.partial(_count_cells, source=opened, domain=domain, sparse=sparse)
    combine = _add_sparse if sparse else _add_vectors
    on_workers = sparse and client is not None  # the counts never come to this process
    total = map_reduce(
        task, opened.partitions, combine, client=client, progress=progress, keep=on_workers
    )
    if on_workers:
        counts = _dask_vector_on_workers(total, domain.size, chunk_cells, client)
        total = client.submit(_without_payload, total).result()
        return Histogram(counts, domain, _report(total, opened, started))
    report = _report(total, opened, started)
    counts = total.payload
    if sparse:
        counts = _dask_vector(*total.payload, domain.size, chunk_cells, client)
    return Histogram(counts, domain, report)


def _attribute_sets(domain: Domain, sets: Iterable[Iterable[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for names in sets:
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        key = domain.project(names).attributes if names else ()
        cells = math.prod(domain[n].size for n in key)
        if cells > MAX_TABLE_CELLS:
            raise TooLargeError(
                f"The marginal table of {', '.join(key)} has {cells} cells, "
                f"more than {MAX_TABLE_CELLS}"
            )
        if key not in out:
            out.append(key)
    return out


def marginal_tables(
    source: DataSpec | Source | str | Path,
    domain: Domain,
    attribute_sets: Iterable[Iterable[str]],
    *,
    client: Any = None,
    progress: Progress | None = None,
    keep: bool = False,
) -> MarginalTables:
    """Count the records in each marginal table, without ever building the full vector.

    Each partition adds up its own tables, and those are summed as a tree. Every
    attribute's column is read and checked, so the rows kept under ``bad_rows: drop``
    (and a rejection) are the same as for :func:`histogram`, whichever tables are asked for.

    Args:
        source: A data spec, an opened source, or a path/URL.
        domain: The domain.
        attribute_sets: Attribute name lists (any order; ``()`` is the total count).
        client: A ``distributed.Client``; None runs on the local threaded scheduler.
        progress: Called with ``(partitions done, total)``.
        keep: With a client: the tables stay on the worker that summed them, and
            ``tables`` is a future of the mapping (only the report comes here).

    Returns:
        Tables keyed by their attribute names in domain order, each shaped by those
        attributes' sizes, and the ingest report.

    Raises:
        DataError: As for :func:`histogram`.
        DomainError: An attribute set names an attribute the domain lacks.

    Example:
        >>> import pathlib, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "people.parquet"
        >>> pq.write_table(pa.table({"sex": [0, 1, 1], "age": [2, 0, 2]}), path)
        >>> domain = Domain.from_dict({"sex": 2, "age": 3})
        >>> result = marginal_tables(path, domain, [["age"], ["age", "sex"]])
        >>> result.tables[("age",)].tolist(), result.tables[("sex", "age")].tolist()
        ([1, 0, 2], [[0, 0, 1], [1, 0, 1]])
    """
    started = time.perf_counter()
    sets = _attribute_sets(domain, attribute_sets)
    opened = _open(source, domain)
    task = functools.partial(_count_tables, source=opened, domain=domain, sets=sets)
    on_workers = keep and client is not None
    total = map_reduce(
        task, opened.partitions, _add_tables, client=client, progress=progress, keep=on_workers
    )
    if on_workers:
        tables = client.submit(_payload, total)
        total = client.submit(_without_payload, total).result()
        return MarginalTables(tables, _report(total, opened, started))
    return MarginalTables(dict(total.payload), _report(total, opened, started))


def _payload(total: _Partial) -> Any:
    return total.payload
