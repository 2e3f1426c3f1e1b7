"""The Parquet tables of a release: answers, measurements and the reconstructed histogram.

* ``answers.parquet`` — one row per workload query: ``group``, ``query`` (its index within
  the group), ``label``, ``estimate``, ``standard_error``, ``exact_standard_error``.
* ``measurements.parquet`` — the noisy integer strategy answers (``row``, ``value``) with the
  measurement record's header as JSON in the schema metadata under ``dpmm.measurement``, so
  that post-processing can be re-run from the release alone without spending budget.
* ``histogram.parquet`` — the reconstructed data vector: ``cell``, ``estimate``.

Reading checks the columns and their types and, for measurements, the count and sha256 of
the values against the header; any problem is a :class:`ReleaseError` naming the file.

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "answers.parquet"
    >>> rows = AnswerColumns.for_group("total", [10.5], [2.0], exact=True, labels=["all"])
    >>> write_answers(path, rows)
    >>> read_answers(path).column("estimate").to_pylist()
    [10.5]
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.measure.record import FORMAT as MEASUREMENT_FORMAT
from dpmm.measure.record import MeasurementRecord, record_from_header
from dpmm.release.errors import ReleaseError

__all__ = [
    "ANSWERS_SCHEMA",
    "HISTOGRAM_SCHEMA",
    "MEASUREMENT_METADATA_KEY",
    "AnswerColumns",
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
    ]
)
MEASUREMENTS_SCHEMA = pa.schema([("row", pa.int64()), ("value", pa.int64())])
HISTOGRAM_SCHEMA = pa.schema([("cell", pa.int64()), ("estimate", pa.float64())])


@dataclass(frozen=True)
class AnswerColumns:
    """The columns of ``answers.parquet``, all of one length (see the module docstring)."""

    group: Sequence[str]
    query: np.ndarray
    label: Sequence[str]
    estimate: np.ndarray
    standard_error: np.ndarray
    exact_standard_error: np.ndarray

    def __post_init__(self) -> None:
        lengths = {name: len(getattr(self, name)) for name in ANSWERS_SCHEMA.names}
        if len(set(lengths.values())) > 1:
            described = ", ".join(f"{name}={length}" for name, length in lengths.items())
            raise ReleaseError(f"the answer columns have different lengths ({described})")

    def __len__(self) -> int:
        return len(self.query)

    @classmethod
    def for_group(
        cls,
        group: str,
        estimate: Sequence[float] | np.ndarray,
        standard_error: Sequence[float] | np.ndarray,
        *,
        exact: bool | Sequence[bool] | np.ndarray,
        labels: Sequence[str] | None = None,
    ) -> AnswerColumns:
        """The rows of one query group; ``query`` numbers them 0, 1, ... within the group.

        Args:
            group: the group's name.
            estimate: the estimated answers.
            standard_error: their standard errors.
            exact: whether each standard error is exact (one bool for all, or one per query).
            labels: human-readable query labels; empty strings when omitted.
        """
        estimates = np.asarray(estimate, dtype=np.float64).reshape(-1)
        size = estimates.size
        flags = np.broadcast_to(np.asarray(exact, dtype=bool), (size,)).copy()
        return cls(
            group=[group] * size,
            query=np.arange(size, dtype=np.int64),
            label=[""] * size if labels is None else [str(label) for label in labels],
            estimate=estimates,
            standard_error=np.asarray(standard_error, dtype=np.float64).reshape(-1),
            exact_standard_error=flags,
        )

    @classmethod
    def concat(cls, parts: Sequence[AnswerColumns]) -> AnswerColumns:
        """The rows of every part, in order.

        Example:
            >>> a = AnswerColumns.for_group("a", [1.0], [0.5], exact=True)
            >>> b = AnswerColumns.for_group("b", [2.0, 3.0], [0.5, 0.5], exact=False)
            >>> both = AnswerColumns.concat([a, b])
            >>> list(both.group), both.query.tolist()
            (['a', 'b', 'b'], [0, 0, 1])
        """
        return cls(
            group=[name for part in parts for name in part.group],
            query=_join([part.query for part in parts], np.int64),
            label=[label for part in parts for label in part.label],
            estimate=_join([part.estimate for part in parts], np.float64),
            standard_error=_join([part.standard_error for part in parts], np.float64),
            exact_standard_error=_join([part.exact_standard_error for part in parts], bool),
        )

    def to_table(self) -> pa.Table:
        """The columns as a pyarrow table with :data:`ANSWERS_SCHEMA`."""
        arrays = [
            pa.array([str(name) for name in self.group], pa.string()),
            pa.array(np.asarray(self.query, dtype=np.int64)),
            pa.array([str(label) for label in self.label], pa.string()),
            pa.array(np.asarray(self.estimate, dtype=np.float64)),
            pa.array(np.asarray(self.standard_error, dtype=np.float64)),
            pa.array(np.asarray(self.exact_standard_error, dtype=bool)),
        ]
        return pa.Table.from_arrays(arrays, schema=ANSWERS_SCHEMA)


def write_answers(path: str | os.PathLike[str], rows: AnswerColumns) -> None:
    """Write ``answers.parquet``."""
    pq.write_table(rows.to_table(), Path(path))


def read_answers(path: str | os.PathLike[str]) -> pa.Table:
    """Read ``answers.parquet``, checking its columns and their types.

    Raises:
        ReleaseError: The file is missing, is not Parquet, or lacks a column.
    """
    return _read(Path(path), ANSWERS_SCHEMA, "answers")


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


def _join(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    if not arrays:
        return np.zeros(0, dtype=dtype)
    return np.concatenate([np.asarray(array, dtype=dtype).reshape(-1) for array in arrays])


def _read(path: Path, schema: pa.Schema, what: str) -> pa.Table:
    if not path.is_file():
        raise ReleaseError(f"the {what} table {path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise ReleaseError(f"{path} is not a readable Parquet file ({error})") from None
    for field in schema:
        if field.name not in table.column_names:
            raise ReleaseError(f"the {what} table {path} has no column {field.name!r}")
        actual = table.schema.field(field.name).type
        if actual != field.type:
            raise ReleaseError(
                f"column {field.name!r} of {path} has type {actual}, expected {field.type}"
            )
    return table
