"""The public reference file of a relative accuracy target, matched to its group's queries.

A target ``{half_width: 0.05, confidence: 0.95, relative_to: {file: counties.csv}}`` asks
every query of its group to be within ±5 % of the query's own reference value. The file
(CSV or Parquet, its path relative to the config's folder) is public input, like the
domain file: it holds one row per query of the group, found by the query's **label**,
exactly as ``answers.parquet`` writes it (:mod:`dpmm.workload.labels`: ``sex=male,age<=30``,
``product 3: sex=male``):

* column ``label``: the query's label;
* the value column (``column``, default ``value``): the reference, a number other than 0;
* optionally a column ``group``: then only the rows whose group is this group's name are
  read, so one file (an earlier release's ``answers.parquet`` with ``column: estimate``,
  say) can serve several groups.

Every query needs exactly one row and every row must name a query of the group: anything
else is one sentence naming the file, the column and the row (data rows count from 1).
The file's sha256 is kept with the target: the plan and the manifest record it, and a
release refuses a reference file changed since its plan.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.domain import Domain
    >>> from dpmm.workload.config import from_config
    >>> domain = Domain.from_dict({"sex": {"size": 2, "labels": ["m", "f"]}})
    >>> entry = {"kind": "identity", "attribute": "sex",
    ...          "target": {"rmse": 0.1, "relative_to": {"file": "people.csv"}}}
    >>> (group,) = from_config([entry], domain)
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "people.csv").write_text("label,value\\nsex=f,600\\nsex=m,-400\\n")
    >>> read_reference(group, domain, folder).reference.magnitudes
    array([400., 600.])
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from dpmm.domain import Domain
from dpmm.errors import ConfigError, describe_value
from dpmm.targets import Reference, Target
from dpmm.workload.config import WorkloadGroup
from dpmm.workload.labels import query_parts

__all__ = ["LABEL_COLUMN", "read_reference", "read_table"]

#: The column naming each row's query, and the optional column naming its group.
LABEL_COLUMN, GROUP_COLUMN = "label", "group"
SUFFIXES = (".csv", ".parquet")


def read_reference(group: WorkloadGroup, domain: Domain, base_dir: Path) -> Target:
    """``group``'s target with its reference file read: ``|ref_q|`` per query, in row order.

    Raises:
        ConfigError: the file is missing or unreadable, lacks a column, or its rows are not
            one per query of the group, each a number other than 0 (one sentence naming
            the file, the column and the row; the caller adds the config and key).
    """
    target = group.target
    if target is None or target.reference is None or "file" not in target.reference.source:
        raise ConfigError(f"workload group '{group.name}' has no reference file to read")
    source = target.reference.source
    path = Path(str(source["file"])).expanduser()
    path = path if path.is_absolute() else base_dir / path
    table, digest = read_table(path)
    rows = np.arange(table.num_rows)
    for column in (LABEL_COLUMN, source["column"]):
        if column not in table.column_names:
            raise ConfigError(
                f"the reference file '{path}' has no column '{column}' (it has: "
                f"{', '.join(table.column_names)})"
            )
    if GROUP_COLUMN in table.column_names:
        mine = pc.fill_null(pc.equal(table[GROUP_COLUMN].cast(pa.string()), group.name), False)
        rows = rows[np.asarray(mine)]
        table = table.filter(mine)
    labels = table[LABEL_COLUMN].cast(pa.string())
    where = _Where(path, source["column"], labels, rows)
    values = _numbers(table[source["column"]], where)
    magnitudes = _by_query(group, domain, labels, values, where)
    reference = Reference({**source, "sha256": digest}, magnitudes)
    return replace(target, reference=reference)


def read_table(
    path: Path, text_columns: tuple[str, ...] = (LABEL_COLUMN, GROUP_COLUMN), what: str = ""
) -> tuple[pa.Table, str]:
    """A public CSV or Parquet file's table (``text_columns`` of a CSV read as text) and
    the sha256 of the bytes it was read from; ``what`` names it in a message."""
    what = what or "reference file"
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"the {what} '{path}' must be a .csv or .parquet file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"the {what} '{path}' does not exist") from None
    except OSError as error:
        problem = "is a folder, not a file" if path.is_dir() else f"cannot be read ({error})"
        raise ConfigError(f"the {what} '{path}' {problem}") from None
    try:
        if path.suffix.lower() == ".csv":
            text = pcsv.ConvertOptions(column_types=dict.fromkeys(text_columns, pa.string()))
            table = pcsv.read_csv(io.BytesIO(data), convert_options=text)
        else:
            table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as error:
        kind = path.suffix.lower().lstrip(".").upper().replace("PARQUET", "Parquet")
        raise ConfigError(f"the {what} '{path}' is not readable {kind} ({error})") from None
    return table, hashlib.sha256(data).hexdigest()


class _Where:
    """Names a row of the file in a message: its number (from 1) and label."""

    def __init__(self, path: Path, column: str, labels: pa.Array, rows: np.ndarray) -> None:
        self.path, self.column, self.labels, self.rows = path, column, labels, rows

    def row(self, index: int) -> str:
        label = self.labels[index].as_py()
        named = f" (label {describe_value(label)})" if label is not None else ""
        return f"row {int(self.rows[index]) + 1}{named}"

    def fail(self, index: int, problem: str) -> ConfigError:
        return ConfigError(
            f"the reference file '{self.path}', column '{self.column}', {self.row(index)}: "
            f"{problem}"
        )


def _numbers(column: pa.ChunkedArray, where: _Where) -> np.ndarray:
    """The column as floats: every row a finite number other than 0."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    else:  # text (a CSV column with a word in it) or another type: name the first non-number
        values = np.empty(len(column))
        for index, value in enumerate(column.to_pylist()):
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                number = math.nan if value is None else None
            else:
                try:
                    number = float(value)
                except ValueError:
                    number = None
            if number is None:
                raise where.fail(index, f"{describe_value(value)} is not a number")
            values[index] = number
    for index in np.flatnonzero(~np.isfinite(values) | (values == 0)):
        if column[int(index)].as_py() is None or np.isnan(values[index]):
            raise where.fail(int(index), "has no value")
        if values[index] == 0:
            raise where.fail(int(index), "is 0; a target relative to 0 can never be met")
        raise where.fail(int(index), f"{values[index]} is not a finite number")
    return values


def _by_query(
    group: WorkloadGroup, domain: Domain, labels: pa.Array, values: np.ndarray, where: _Where
) -> np.ndarray:
    """``|value|`` per query of the group, in row order, from the rows named by label."""
    queries = pa.chunked_array(
        [rows.labels for rows in query_parts(group, domain).rows()], pa.string()
    )
    positions = pc.index_in(labels, value_set=queries.combine_chunks())
    unknown = np.flatnonzero(np.asarray(positions.is_null()))
    if unknown.size:
        index = int(unknown[0])
        raise ConfigError(
            f"the reference file '{where.path}', {where.row(index)}: "
            + (
                "has no label"
                if labels[index].as_py() is None
                else f"is not a query of group '{group.name}' (labels as in answers.parquet, "
                f"e.g. {describe_value(queries[0].as_py())})"
            )
        )
    found = np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(found, kind="stable")
    repeats = np.flatnonzero(found[order][1:] == found[order][:-1])
    if repeats.size:
        earlier, index = (int(order[i]) for i in (repeats[0], repeats[0] + 1))
        raise ConfigError(
            f"the reference file '{where.path}', {where.row(index)}: repeats the query of "
            f"row {int(where.rows[earlier]) + 1}"
        )
    first = np.full(len(queries), -1, dtype=np.int64)
    first[found] = np.arange(len(found))
    missing = np.flatnonzero(first < 0)
    if missing.size:
        raise ConfigError(
            f"the reference file '{where.path}' has {len(found):,} rows for group "
            f"'{group.name}', which has {len(queries):,} queries: none for query "
            f"{describe_value(queries[int(missing[0])].as_py())}"
        )
    return np.abs(values[first])
