"""The values of a chunked measurement: one write-once file per chunk, checked on reading.

A measurement drawn on a Dask cluster (:mod:`dpmm.measure.chunked`) keeps its noisy
answers in the folder ``<store>/<measurement_id>.chunks/``, beside its record file:

* ``plan.json``: what is measured (strategy, budget, noise, the chunks' bounds), written
  before any noise is drawn; its sha256 is the *plan digest* every chunk names;
* ``<index>.values``, one per chunk: a header line (format, plan digest, the chunk's
  answer range ``[start, stop)`` in C order, the sha256 of its values), then the values as
  raw little-endian int64.

A chunk file is written by :func:`~dpmm.durable.write_once`: of two attempts at one chunk
(a retried task, a task run twice by a cluster that lost a worker) exactly one file
wins, and what was once persisted never changes. The record file lists every chunk's
sha256 (:class:`ValueChunks`), and reading a chunk checks it, so a truncated or altered
chunk is refused like a damaged record.

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "000000.values"
    >>> chunk = write_chunk(path, "plan", 0, np.array([3, -1, 4]))
    >>> chunk.start, chunk.stop, read_chunk(path, "plan", chunk).tolist()
    (0, 3, [3, -1, 4])
    >>> write_chunk(path, "plan", 0, np.array([9, 9, 9])) == chunk  # the first one stays
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import write_once
from dpmm.measure.exact import MeasurementError

__all__ = [
    "CHUNK_FORMAT",
    "ValueChunk",
    "ValueChunks",
    "chunk_folder",
    "chunk_path",
    "existing_chunk",
    "read_chunk",
    "values_array",
    "write_chunk",
]

CHUNK_FORMAT = "dpmm-measurement-chunk/1"
_FOLDER_SUFFIX = ".chunks"
#: The longest chunk header accepted when reading.
_MAX_HEADER = 1 << 12


@dataclass(frozen=True)
class ValueChunk:
    """One persisted chunk: the answers ``[start, stop)`` and the sha256 of their int64 bytes."""

    start: int
    stop: int
    sha256: str


@dataclass(frozen=True)
class ValueChunks:
    """Where a chunked record's values are: the plan they were drawn for and every chunk."""

    plan: str
    parts: tuple[ValueChunk, ...]

    @property
    def count(self) -> int:
        """How many values the chunks hold together."""
        return self.parts[-1].stop if self.parts else 0

    def digest(self) -> str:
        """sha256 of the chunks' sha256 in order: the record's ``values_sha256``."""
        return hashlib.sha256("".join(c.sha256 for c in self.parts).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The ``chunks`` entry of a record's header."""
        return {"plan": self.plan, "parts": [[c.start, c.stop, c.sha256] for c in self.parts]}

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> ValueChunks:
        """Raises ValueError, KeyError, TypeError: a malformed entry."""
        parts = tuple(ValueChunk(int(a), int(b), str(s)) for a, b, s in entry["parts"])
        expected = 0
        for part in parts:
            if part.start != expected or part.stop <= part.start:
                raise ValueError("the chunks do not cover the answers in order")
            expected = part.stop
        return cls(str(entry["plan"]), parts)


def chunk_folder(store: str | os.PathLike[str], measurement_id: str) -> Path:
    """The folder holding the chunks of ``measurement_id`` in ``store``."""
    return Path(store) / (measurement_id + _FOLDER_SUFFIX)


def chunk_path(folder: Path, index: int) -> Path:
    """The file of chunk ``index`` in a chunk folder."""
    return folder / f"{index:06d}.values"


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(values).hexdigest()


def write_chunk(path: Path, plan: str, start: int, values: np.ndarray) -> ValueChunk:
    """Persist a chunk's values unless the chunk exists; describe what is persisted.

    Returns:
        The chunk on disk: these values, or (when another attempt wrote it first) the
        values that attempt persisted, checked.

    Raises:
        MeasurementError: an existing file is not this chunk of this plan, or is damaged.
    """
    values = np.ascontiguousarray(values, dtype="<i8")
    chunk = ValueChunk(start, start + values.size, _digest(values))
    header = {
        "format": CHUNK_FORMAT,
        "plan": plan,
        "start": chunk.start,
        "stop": chunk.stop,
        "values_sha256": chunk.sha256,
    }
    line = json.dumps(header, sort_keys=True).encode("ascii") + b"\n"
    if write_once(path, [line, memoryview(values).cast("B")]):
        return chunk
    return existing_chunk(path, plan, start, chunk.stop)


def existing_chunk(path: Path, plan: str, start: int, stop: int) -> ValueChunk:
    """The chunk persisted at ``path`` for answers ``[start, stop)`` of ``plan``, checked.

    Raises:
        MeasurementError: it is not that chunk, or is damaged.
    """
    header, _ = _read(path, plan, start, stop)
    return ValueChunk(start, stop, str(header["values_sha256"]))


def read_chunk(path: Path, plan: str, chunk: ValueChunk) -> np.ndarray:
    """The values of ``chunk`` (read-only int64), checked against its sha256.

    Raises:
        MeasurementError: the file is missing, is not that chunk, or is damaged.
    """
    header, values = _read(path, plan, chunk.start, chunk.stop)
    if header["values_sha256"] != chunk.sha256:
        raise MeasurementError(f"{path} is not the chunk its measurement record lists")
    return values


def _read(path: Path, plan: str, start: int, stop: int) -> tuple[dict[str, Any], np.ndarray]:
    broken = f"{path} is not a complete chunk of its measurement"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MeasurementError(f"{broken}: the file is missing") from None
    end = data.find(b"\n", 0, _MAX_HEADER)
    try:
        header = json.loads(data[:end].decode("ascii")) if end > 0 else {}
    except (ValueError, UnicodeDecodeError):
        header = {}
    if header.get("format") != CHUNK_FORMAT:
        raise MeasurementError(broken)
    if (header.get("plan"), header.get("start"), header.get("stop")) != (plan, start, stop):
        raise MeasurementError(f"{path} was drawn for another plan or range of answers")
    body = memoryview(data)[end + 1 :]
    if len(body) != 8 * (stop - start) or _digest(body) != header.get("values_sha256"):
        raise MeasurementError(f"{broken}: its values were truncated or changed")
    values = np.frombuffer(body, dtype="<i8").astype(np.int64, copy=False)
    values.setflags(write=False)
    return header, values


def values_array(folder: Path, chunks: ValueChunks) -> Any:
    """The values of a chunked record as a lazy 1-D Dask array, one block per chunk file,
    each read (and checked) by whichever worker computes it."""
    import dask
    import dask.array as da

    blocks = [
        da.from_delayed(
            dask.delayed(read_chunk, pure=True)(chunk_path(folder, index), chunks.plan, chunk),
            shape=(chunk.stop - chunk.start,),
            dtype=np.int64,
        )
        for index, chunk in enumerate(chunks.parts)
    ]
    if not blocks:
        return da.zeros(0, dtype=np.int64)
    return da.concatenate(blocks)
