"""The Parquet tables of a release: answers, measurements and the reconstructed histogram.

* ``answers.parquet`` — one row per workload query, groups in workload order:

  - ``group`` (string), ``query`` (int64, its index within the group), ``label`` (string:
    what the query asks, e.g. ``sex=m,age<=30``; format in :mod:`dpmm.workload.labels`),
    ``estimate`` (float64), ``standard_error`` (float64), ``exact_standard_error`` (bool),
    ``half_width`` (float64: the interval ``estimate ± half_width`` holds the true answer
    with at least the manifest's ``intervals.level``; :mod:`dpmm.reconstruct.intervals`),
    ``exact_interval`` (bool: computed from the noise's exact distribution, or a bound);
  - then, for every attribute of the domain in domain order, ``attr.<name>`` (string) and
    ``code.<name>`` (int64): the part of the query on that attribute as text (``m``,
    ``<=30``, ``20..29``, ``[0, 50000)``), and the attribute's value code when the query
    restricts it to one value. Both are null where the query does not restrict the
    attribute; the code is also null for ranges, prefixes and sets of values. The dot in
    these names keeps them apart from the fixed columns above, whatever an attribute is
    called.
* ``measurements.parquet`` — the noisy integer strategy answers (``row``, ``value``) with the
  measurement record's header as JSON in the schema metadata under ``dpmm.measurement``, so
  that post-processing can be re-run from the release alone without spending budget.
* ``histogram.parquet`` — the reconstructed data vector: ``cell``, ``estimate``.

A release made on the Dask cluster writes ``answers.parquet`` and ``measurements.parquet``
as folders of parts (:mod:`dpmm.release.parts`); they read the same way.

Reading checks the columns and their types and, for measurements, the count and sha256 of
the values against the header (per part, against the chunk the header lists); any
problem is a :class:`ReleaseError` naming the file.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.domain import Domain
    >>> from dpmm.workload import from_config
    >>> from dpmm.workload.labels import query_parts
    >>> domain = Domain.from_dict({"sex": {"size": 2, "labels": ["m", "f"]}, "age": 3})
    >>> (group,) = from_config([{"kind": "prefix", "attribute": "age", "by": ["sex"]}], domain)
    >>> rows = AnswerColumns.for_group(
    ...     group.name, [10.5] * 6, [2.0] * 6, exact=True, labels=query_parts(group, domain),
    ...     half_width=[4.0] * 6, exact_interval=True)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "answers.parquet"
    >>> write_answers(path, [rows], domain.attributes)
    >>> table = read_answers(path)
    >>> table.column_names[8:]
    ['attr.sex', 'code.sex', 'attr.age', 'code.age']
    >>> table.slice(4, 1).to_pylist()[0]["label"], table.slice(4, 1).to_pylist()[0]["attr.age"]
    ('sex=f,age<=1', '<=1')
    >>> table.column("code.sex").to_pylist(), table.column("code.age").null_count
    ([0, 0, 0, 1, 1, 1], 6)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pa_dataset
import pyarrow.parquet as pq

from dpmm.measure.chunk_files import ValueChunk, ValueChunks
from dpmm.measure.record import FORMAT as MEASUREMENT_FORMAT
from dpmm.measure.record import MeasurementRecord, record_from_header
from dpmm.release.errors import ReleaseError
from dpmm.workload.labels import QueryParts

__all__ = [
    "ANSWERS_SCHEMA",
    "ATTRIBUTE_COLUMN",
    "CODE_COLUMN",
    "HISTOGRAM_SCHEMA",
    "MEASUREMENTS_SCHEMA",
    "MEASUREMENT_METADATA_KEY",
    "PART",
    "AnswerColumns",
    "answers_schema",
    "part_files",
    "read_answers",
    "read_histogram",
    "read_measurements",
    "write_answers",
    "write_histogram",
    "write_measurements",
]

#: The schema-metadata key holding a measurement record's header (JSON).
MEASUREMENT_METADATA_KEY = b"dpmm.measurement"

ANSWERS_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("query", pa.int64()),
        ("label", pa.string()),
        ("estimate", pa.float64()),
        ("standard_error", pa.float64()),
        ("exact_standard_error", pa.bool_()),
        ("half_width", pa.float64()),
        ("exact_interval", pa.bool_()),
    ]
)
MEASUREMENTS_SCHEMA = pa.schema([("row", pa.int64()), ("value", pa.int64())])
HISTOGRAM_SCHEMA = pa.schema([("cell", pa.int64()), ("estimate", pa.float64())])
#: The name pattern of the parts of a table written as a folder (:mod:`dpmm.release.parts`).
PART = "part-{}.parquet"
#: Prefixes of the per-attribute columns of ``answers.parquet``: the query's part on the
#: attribute as text, and its value code.
ATTRIBUTE_COLUMN, CODE_COLUMN = "attr.", "code."
#: Rows of ``answers.parquet`` built and written at once (a Parquet row group).
ROWS_AT_ONCE = 2**20


def answers_schema(attributes: Sequence[str] = ()) -> pa.Schema:
    """The schema of ``answers.parquet`` over a domain with these attributes, in order.

    Example:
        >>> answers_schema(["sex"]).names[-3:]
        ['exact_interval', 'attr.sex', 'code.sex']
    """
    fields = list(ANSWERS_SCHEMA)
    for name in attributes:
        fields += [(ATTRIBUTE_COLUMN + name, pa.string()), (CODE_COLUMN + name, pa.int64())]
    return pa.schema(fields)


@dataclass(frozen=True, eq=False)
class AnswerColumns:
    """One query group's rows of ``answers.parquet`` (see the module docstring): the
    estimates, standard errors, interval half-widths and the description of each query."""

    group: str
    estimate: np.ndarray
    standard_error: np.ndarray
    exact_standard_error: np.ndarray
    half_width: np.ndarray
    exact_interval: np.ndarray
    queries: QueryParts
    #: The index within the group of the first of these rows (a part of a large group).
    first_query: int = 0

    def __post_init__(self) -> None:
        lengths = {
            "estimate": len(self.estimate),
            "standard_error": len(self.standard_error),
            "exact_standard_error": len(self.exact_standard_error),
            "half_width": len(self.half_width),
            "exact_interval": len(self.exact_interval),
            "queries": len(self.queries),
        }
        if len(set(lengths.values())) > 1:
            described = ", ".join(f"{name}={length}" for name, length in lengths.items())
            raise ReleaseError(f"the answer columns have different lengths ({described})")

    def __len__(self) -> int:
        return len(self.estimate)

    @classmethod
    def for_group(
        cls,
        group: str,
        estimate: Sequence[float] | np.ndarray,
        standard_error: Sequence[float] | np.ndarray,
        *,
        exact: bool | Sequence[bool] | np.ndarray,
        half_width: Sequence[float] | np.ndarray,
        exact_interval: bool | Sequence[bool] | np.ndarray,
        labels: QueryParts | Sequence[str] | None = None,
        first_query: int = 0,
    ) -> AnswerColumns:
        """The rows of one query group.

        Args:
            group: the group's name.
            estimate: the estimated answers.
            standard_error: their standard errors.
            exact: whether each standard error is exact (one bool for all, or one per query).
            half_width: the half-width of each answer's interval.
            exact_interval: whether each half-width comes from the noise's exact
                distribution (one bool for all, or one per query).
            labels: what each query asks (:func:`~dpmm.workload.labels.query_parts`), or
                labels alone; empty labels when omitted.
            first_query: the index within the group of the first of these queries.
        """
        estimates = np.asarray(estimate, dtype=np.float64).reshape(-1)
        size = estimates.size
        if not isinstance(labels, QueryParts):
            labels = QueryParts.listed([""] * size if labels is None else labels)
        return cls(
            group=group,
            estimate=estimates,
            standard_error=np.asarray(standard_error, dtype=np.float64).reshape(-1),
            exact_standard_error=np.broadcast_to(np.asarray(exact, dtype=bool), (size,)).copy(),
            half_width=np.asarray(half_width, dtype=np.float64).reshape(-1),
            exact_interval=np.broadcast_to(np.asarray(exact_interval, dtype=bool), (size,)).copy(),
            queries=labels,
            first_query=first_query,
        )

    def batches(
        self, attributes: Sequence[str] = (), limit: int = ROWS_AT_ONCE
    ) -> Iterator[pa.RecordBatch]:
        """The group's rows with the columns of :func:`answers_schema` over ``attributes``,
        at most ``limit`` rows at a time.

        Raises:
            ReleaseError: a query restricts an attribute not in ``attributes``.
        """
        schema, start = answers_schema(attributes), 0
        for rows in self.queries.rows(limit):
            first = self.first_query + start
            unknown = sorted(set(rows.texts) - set(attributes))
            if unknown:
                raise ReleaseError(
                    f"the queries of group {self.group!r} restrict {unknown[0]!r}, which is "
                    "not among the answers' attributes"
                )
            stop = start + len(rows)
            count = stop - start
            no_text, no_code = pa.nulls(count, pa.string()), pa.nulls(count, pa.int64())
            columns = [
                pa.repeat(pa.scalar(self.group, pa.string()), count),
                pa.array(np.arange(first, first + count, dtype=np.int64)),
                rows.labels,
                pa.array(self.estimate[start:stop]),
                pa.array(self.standard_error[start:stop]),
                pa.array(self.exact_standard_error[start:stop]),
                pa.array(self.half_width[start:stop]),
                pa.array(self.exact_interval[start:stop]),
            ]
            for name in attributes:
                columns += [rows.texts.get(name, no_text), rows.codes.get(name, no_code)]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
            start = stop


def write_answers(
    path: str | os.PathLike[str], groups: Sequence[AnswerColumns], attributes: Sequence[str] = ()
) -> None:
    """Write ``answers.parquet``: the rows of every group, in order, with a text and a code
    column per attribute of ``attributes`` (the domain's, in order).

    The rows are built and written a row group at a time, so a release of 10⁷ queries never
    holds all their labels at once.

    Raises:
        ReleaseError: a group's queries restrict an attribute not in ``attributes``.
    """
    with pq.ParquetWriter(Path(path), answers_schema(attributes)) as writer:
        pending: list[pa.RecordBatch] = []
        for group in groups:
            for batch in group.batches(attributes, ROWS_AT_ONCE):
                pending.append(batch)
                if sum(len(b) for b in pending) >= ROWS_AT_ONCE:
                    writer.write_table(pa.Table.from_batches(pending))
                    pending = []
        if pending:
            writer.write_table(pa.Table.from_batches(pending))


def read_answers(path: str | os.PathLike[str], columns: Sequence[str] | None = None) -> pa.Table:
    """Read ``answers.parquet`` (only ``columns``, when given), checking the fixed columns
    read and their types, and the types of any per-attribute columns read.

    Raises:
        ReleaseError: The file is missing, is not Parquet, or lacks a column.
    """
    path = Path(path)
    table = _read(path, ANSWERS_SCHEMA, "answers", columns)
    for field in table.schema:
        for prefix, kind in ((ATTRIBUTE_COLUMN, pa.string()), (CODE_COLUMN, pa.int64())):
            if field.name.startswith(prefix) and field.type != kind:
                raise ReleaseError(
                    f"column {field.name!r} of {path} has type {field.type}, expected {kind}"
                )
    return table


def write_histogram(path: str | os.PathLike[str], estimate: np.ndarray) -> None:
    """Write ``histogram.parquet``: the estimate of every cell, in cell order."""
    values = np.asarray(estimate, dtype=np.float64).reshape(-1)
    cells = pa.array(np.arange(values.size, dtype=np.int64))
    table = pa.Table.from_arrays([cells, pa.array(values)], schema=HISTOGRAM_SCHEMA)
    pq.write_table(table, Path(path))


def read_histogram(path: str | os.PathLike[str]) -> np.ndarray:
    """The estimate of every cell, in cell order, from ``histogram.parquet``."""
    path = Path(path)
    table = _read(path, HISTOGRAM_SCHEMA, "histogram")
    cells = table.column("cell").to_numpy()
    if not np.array_equal(cells, np.arange(cells.size)):
        raise ReleaseError(f"{path} does not list the cells 0, 1, 2, ... in order")
    return table.column("estimate").to_numpy().astype(np.float64)


def write_measurements(path: str | os.PathLike[str], record: MeasurementRecord) -> None:
    """Write ``measurements.parquet``: the record's values, its header in the metadata."""
    values = np.ascontiguousarray(record.values, dtype=np.int64)
    header = json.dumps(record.header(), sort_keys=True, ensure_ascii=True)
    schema = MEASUREMENTS_SCHEMA.with_metadata({MEASUREMENT_METADATA_KEY: header.encode()})
    rows = pa.array(np.arange(values.size, dtype=np.int64))
    table = pa.Table.from_arrays([rows, pa.array(values)], schema=schema)
    pq.write_table(table, Path(path))


def read_measurements(path: str | os.PathLike[str]) -> MeasurementRecord:
    """Rebuild the measurement record stored in ``measurements.parquet``.

    Raises:
        ReleaseError: The file is not a measurements table, its header is missing or
            malformed, or its values do not match the header's count and sha256.
    """
    path = Path(path)
    if path.is_dir():
        return _read_measurement_parts(path)
    table = _read(path, MEASUREMENTS_SCHEMA, "measurements")
    raw = (table.schema.metadata or {}).get(MEASUREMENT_METADATA_KEY)
    if raw is None:
        raise ReleaseError(f"{path} has no measurement header in its Parquet metadata")
    if table.column("row").null_count or table.column("value").null_count:
        raise ReleaseError(f"{path} has rows or values missing (nulls)")
    rows = table.column("row").to_numpy()
    if not np.array_equal(rows, np.arange(rows.size)):
        raise ReleaseError(f"{path} does not list the rows 0, 1, 2, ... in order")
    values = np.ascontiguousarray(table.column("value").to_numpy(), dtype="<i8")
    try:
        header = json.loads(raw.decode("ascii"))
        if not isinstance(header, dict) or header.get("format") != MEASUREMENT_FORMAT:
            raise ReleaseError(f"{path} does not hold a {MEASUREMENT_FORMAT} header")
        if int(header["count"]) != values.size:
            raise ReleaseError(
                f"{path} holds {values.size} values but its header says {header['count']}"
            )
        if hashlib.sha256(values.tobytes()).hexdigest() != header["values_sha256"]:
            raise ReleaseError(f"{path} holds values whose sha256 differs from its header's")
        return record_from_header(header, values.astype(np.int64))
    except ReleaseError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as error:
        raise ReleaseError(
            f"{path} has a malformed measurement header ({type(error).__name__}: {error})"
        ) from None


def part_files(folder: Path) -> list[Path]:
    """The parts of a table folder (:mod:`dpmm.release.parts`), in row order.

    Raises:
        ReleaseError: the folder holds no part.
    """
    parts = sorted(folder.glob(PART.format("*")))
    if not parts:
        raise ReleaseError(f"the table folder {folder} holds no part-*.parquet file")
    return parts


def _read(
    path: Path, schema: pa.Schema, what: str, columns: Sequence[str] | None = None
) -> pa.Table:
    """A table file, or a folder of its parts read as one table."""
    if not path.exists():
        raise ReleaseError(f"the {what} table {path} does not exist")
    try:
        if path.is_dir():
            parts = pa_dataset.dataset([str(p) for p in part_files(path)], format="parquet")
            present = parts.schema.names
            wanted = None if columns is None else [name for name in columns if name in present]
            table = parts.to_table(columns=wanted)
        else:
            present = pq.read_schema(path).names
            wanted = None if columns is None else [name for name in columns if name in present]
            table = pq.read_table(path, columns=wanted)
    except (pa.ArrowException, OSError) as error:
        raise ReleaseError(f"{path} is not a readable Parquet file ({error})") from None
    for field in schema:
        if columns is not None and field.name not in columns:
            continue
        if field.name not in table.column_names:
            raise ReleaseError(f"the {what} table {path} has no column {field.name!r}")
        actual = table.schema.field(field.name).type
        if actual != field.type:
            raise ReleaseError(
                f"column {field.name!r} of {path} has type {actual}, expected {field.type}"
            )
    return table


def _read_measurement_parts(folder: Path) -> MeasurementRecord:
    """The chunked record of a ``measurements.parquet`` folder; its values a lazy Dask
    array whose blocks check their parts against the header.

    Raises:
        ReleaseError: a part is missing, has another header, or its header is malformed.
    """
    import dask
    import dask.array as da

    parts = part_files(folder)
    headers = {(pq.read_schema(p).metadata or {}).get(MEASUREMENT_METADATA_KEY) for p in parts}
    if len(headers) != 1 or None in headers:
        raise ReleaseError(f"the parts of {folder} do not share one measurement header")
    try:
        header = json.loads(headers.pop().decode("ascii"))
        chunks = ValueChunks.from_json(header["chunks"])
    except (ValueError, KeyError, TypeError) as error:
        raise ReleaseError(f"{folder} has a malformed measurement header ({error})") from None
    if chunks.digest() != header.get("values_sha256"):
        raise ReleaseError(f"{folder} lists chunks whose sha256 differ from its header's")
    if len(chunks.parts) != len(parts) or chunks.count != int(header["count"]):
        raise ReleaseError(f"{folder} holds {len(parts)} parts for {len(chunks.parts)} chunks")
    blocks = [
        da.from_delayed(
            dask.delayed(_read_measurements, pure=True)(path, chunk),
            shape=(chunk.stop - chunk.start,),
            dtype=np.int64,
        )
        for path, chunk in zip(parts, chunks.parts, strict=True)
    ]
    return record_from_header(header, da.concatenate(blocks), chunks)


def _read_measurements(path: Path, chunk: ValueChunk) -> np.ndarray:
    table = pq.read_table(path)
    rows = table.column("row").to_numpy()
    values = np.ascontiguousarray(table.column("value").to_numpy(), dtype="<i8")
    if not np.array_equal(rows, np.arange(chunk.start, chunk.stop)):
        raise ReleaseError(f"{path} does not hold the rows {chunk.start}..{chunk.stop - 1}")
    if hashlib.sha256(values).hexdigest() != chunk.sha256:
        raise ReleaseError(f"{path} holds values whose sha256 differs from its header's")
    return values.astype(np.int64)
