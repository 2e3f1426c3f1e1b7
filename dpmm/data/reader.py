"""Find and read the partitions of a Parquet or CSV dataset with pyarrow.

A dataset is one file or a folder of files, local or behind an fsspec URL.
Folders may be hive-style (``.../sex=1/year=2020/part-0.parquet``): each
``key=value`` folder name becomes a column holding that value for every row of
the files below it. Files and folders whose names start with ``_`` or ``.``
(``_SUCCESS``, ``_metadata``, ``.crc``) are skipped. One file is one
partition, except that a Parquet file larger than ``split_bytes`` is split into
partitions of whole row groups, so that one big file still spreads over
several workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import fsspec
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from dpmm.data.errors import DataError
from dpmm.data.spec import DataSpec

__all__ = ["Partition", "Source", "check_location", "open_source", "read_partition"]

#: Parquet files larger than this are split into partitions of whole row groups.
SPLIT_BYTES = 128 * 2**20
_EXTENSIONS = {"parquet": (".parquet", ".parq", ".pq"), "csv": (".csv", ".csv.gz")}
#: Hive's name for a null partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class Partition:
    """One data file (or some row groups of a large Parquet file) and its hive keys.

    ``keys`` are the ``key=value`` pairs of the folders above the file, values as
    raw folder text (URL-decoded), ``None`` for Hive's null. ``row_groups`` is
    empty for the whole file.
    """

    path: str
    keys: tuple[tuple[str, str | None], ...] = ()
    row_groups: tuple[int, ...] = ()

    def key(self, column: str) -> str | None:
        """The folder value of a hive key column."""
        return dict(self.keys)[column]


@dataclass(frozen=True)
class Source:
    """A dataset's partitions, the filesystem that holds them, and how to parse them.

    It pickles, so tasks on Dask workers can read their partition; with an
    in-process filesystem (``memory://``) only local schedulers see the files.
    """

    spec: DataSpec
    filesystem: pafs.FileSystem
    partitions: tuple[Partition, ...]

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Hive key columns, in folder order."""
        return tuple(name for name, _ in self.partitions[0].keys) if self.partitions else ()


def _filesystem(location: str) -> tuple[Any, pafs.FileSystem, str]:
    """(fsspec filesystem for listing, pyarrow filesystem for reading, path inside it)."""
    try:
        fs, path = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as error:
        raise DataError(f"Cannot open the data location '{location}': {error}") from None
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        return fs, pafs.LocalFileSystem(), path
    return fs, pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def _hidden(part: str) -> bool:
    return part.startswith(("_", ".")) and "=" not in part


def _hive_keys(relative: str, location: str) -> tuple[tuple[str, str | None], ...]:
    keys = []
    for part in relative.split("/")[:-1]:
        if "=" not in part:
            continue
        name, _, value = part.partition("=")
        raw = unquote(value)
        keys.append((unquote(name), None if raw == HIVE_NULL else raw))
    return tuple(keys)


def _arrow_problem(error: Exception) -> str:
    """Arrow's first sentence only, so that a message stays one sentence."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].split(". ")[0].rstrip(".")


def _split(pa_fs: pafs.FileSystem, partition: Partition, split_bytes: int) -> list[Partition]:
    """Row-group pieces of about ``split_bytes`` (uncompressed) each."""
    try:
        with pa_fs.open_input_file(partition.path) as handle:
            metadata = pq.ParquetFile(handle).metadata
    except (pa.ArrowException, OSError) as error:
        raise DataError(
            f"File '{partition.path}' is not a readable parquet file (truncated or corrupt)",
            detail=_arrow_problem(error),
        ) from None
    pieces: list[list[int]] = [[]]
    size = 0
    for group in range(metadata.num_row_groups):
        if pieces[-1] and size >= split_bytes:
            pieces.append([])
            size = 0
        pieces[-1].append(group)
        size += metadata.row_group(group).total_byte_size
    if len(pieces) == 1:
        return [partition]
    return [Partition(partition.path, partition.keys, tuple(piece)) for piece in pieces]


def check_location(spec: DataSpec) -> None:
    """Refuse a data location that does not exist, reading no file: a release checks this
    before it reserves its budget.

    Raises:
        DataError: The location does not exist or cannot be looked up.
    """
    _located(spec)


def _located(spec: DataSpec) -> tuple[Any, pafs.FileSystem, str]:
    fs, pa_fs, root = _filesystem(spec.location)
    try:
        exists = fs.exists(root)
    except OSError as error:
        reason = error.strerror or str(error)
        raise DataError(f"The data path '{spec.location}' cannot be listed ({reason})") from None
    if not exists:
        raise DataError(f"The data path '{spec.location}' does not exist")
    return fs, pa_fs, root


def open_source(spec: DataSpec, *, split_bytes: int = SPLIT_BYTES) -> Source:
    """List a dataset's partitions; only names, sizes and large files' footers are read.

    Args:
        spec: Where the data is.
        split_bytes: Parquet files larger than this are split by row groups.

    Raises:
        DataError: The location does not exist or cannot be listed, holds no data
            file of the format, or its folders do not all use the same hive keys.
    """
    fs, pa_fs, root = _located(spec)
    try:
        if fs.isdir(root):
            found = fs.find(root, withdirs=False, detail=True)
            sizes = {name: info.get("size") or 0 for name, info in found.items()}
        else:
            sizes = {root: fs.size(root) or 0}
    except DataError:
        raise
    except OSError as error:
        reason = error.strerror or str(error)
        raise DataError(f"The data path '{spec.location}' cannot be listed ({reason})") from None
    base = root.rstrip("/")
    partitions: list[Partition] = []
    for name in sorted(sizes):
        relative = name[len(base) :].lstrip("/") if name != root else name.rsplit("/", 1)[-1]
        if any(_hidden(part) for part in relative.split("/")):
            continue
        if name != root and not name.lower().endswith(_EXTENSIONS[spec.format]):
            continue
        partition = Partition(name, _hive_keys(relative, spec.location))
        if spec.format == "parquet" and sizes[name] > split_bytes:
            partitions.extend(_split(pa_fs, partition, split_bytes))
        else:
            partitions.append(partition)
    if not partitions:
        raise DataError(
            f"The data path '{spec.location}' holds no {spec.format} file "
            f"(looked for names ending in {', '.join(_EXTENSIONS[spec.format])})"
        )
    layouts = {tuple(k for k, _ in p.keys) for p in partitions}
    if len(layouts) > 1:
        first, second = sorted(layouts)[:2]
        raise DataError(
            f"The data path '{spec.location}' mixes partition folder keys "
            f"{list(first)} and {list(second)}"
        )
    return Source(spec, pa_fs, tuple(partitions))


def _check_columns(partition: Partition, names: Sequence[str], columns: Sequence[str]) -> None:
    """Every column to read is in the file once, and no file column is also a folder key:
    which of two same-named columns holds the data is not for dpmm to guess."""
    path = partition.path
    missing = [c for c in columns if c not in names]
    if missing:
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise DataError(f"File '{path}' has no column '{missing[0]}' (it has: {shown})")
    repeated = [c for c in columns if names.count(c) > 1]
    if repeated:
        raise DataError(f"File '{path}' has two columns named '{repeated[0]}': rename one")
    shadowed = [name for name, _ in partition.keys if name in names]
    if shadowed:
        raise DataError(
            f"File '{path}' has a column '{shadowed[0]}' that its folder name "
            f"'{shadowed[0]}=…' also sets: keep one of the two"
        )


def _read_parquet(source: Source, partition: Partition, columns: Sequence[str]) -> pa.Table:
    with source.filesystem.open_input_file(partition.path) as handle:
        file = pq.ParquetFile(handle)
        _check_columns(partition, file.schema_arrow.names, columns)
        if partition.row_groups:
            return file.read_row_groups(
                list(partition.row_groups), columns=list(columns), use_threads=False
            )
        return file.read(columns=list(columns), use_threads=False)


def _read_csv(
    source: Source, partition: Partition, columns: Sequence[str], text_columns: Sequence[str]
) -> pa.Table:
    path = partition.path

    def stream() -> Any:
        return source.filesystem.open_input_stream(path, compression="detect")

    with stream() as handle:
        names = pcsv.open_csv(handle).schema.names
    _check_columns(partition, names, columns)
    options = pcsv.ConvertOptions(
        include_columns=list(columns),
        column_types={c: pa.string() for c in text_columns if c in columns},
    )
    with stream() as handle:
        return pcsv.read_csv(handle, convert_options=options)


def read_partition(
    source: Source,
    partition: Partition,
    columns: Sequence[str],
    *,
    text_columns: Sequence[str] = (),
) -> pa.Table:
    """Read the named file columns of one partition (hive key columns are not in the file).

    Args:
        source: The dataset.
        partition: One of ``source.partitions``.
        columns: Columns to read; each must be in the file.
        text_columns: CSV columns to keep as text rather than infer numbers
            (labelled attributes: label ``"01"`` must not become ``1``).

    Raises:
        DataError: The file is missing a column, is truncated or corrupt, or cannot be read.
    """
    path = partition.path
    try:
        if source.spec.format == "parquet":
            return _read_parquet(source, partition, columns)
        return _read_csv(source, partition, columns, text_columns)
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"File '{path}' does not exist (it was listed, then removed)") from None
    except UnicodeDecodeError:
        raise DataError(f"File '{path}' is not UTF-8 text (a csv file must be)") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        # Arrow's message may quote the offending row: the operator's terminal only.
        raise DataError(
            f"File '{path}' is not a readable {source.spec.format} file (truncated or corrupt)",
            detail=_arrow_problem(error),
        ) from None
    except OSError as error:
        reason = error.strerror or str(error).splitlines()[0]
        raise DataError(f"File '{path}' cannot be read ({reason})") from None


def with_keys(table: pa.Table, partition: Partition, columns: Sequence[str]) -> pa.Table:
    """The table plus constant columns for the partition's hive keys among ``columns``."""
    for name, value in partition.keys:
        if name in columns and name not in table.column_names:
            dictionary = pa.array([value], pa.string())
            indices = pa.array([0] * table.num_rows, pa.int32())
            table = table.append_column(name, pa.DictionaryArray.from_arrays(indices, dictionary))
    return table
