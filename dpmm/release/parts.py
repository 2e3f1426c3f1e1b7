"""Release tables too large for one process: folders of Parquet parts written on the workers.

A release made on the Dask cluster (the ``chunked`` counting plan) writes
``answers.parquet`` and ``measurements.parquet`` as folders of that name holding
``part-*.parquet`` files in row order, each with the schema of the one-file table
(:mod:`dpmm.release.tables`); the folder reads as one table (an Arrow dataset of the
parts, in name order). Each part is written by the task that computes its rows, where
they are: the flow's process never holds them.

* An answers part holds one block of one group's answers, ``part-<group>-<block>``.
* A measurements part holds one chunk of the measurement (``part-<chunk>``), with the
  record's header in its schema metadata like the one-file table. The header lists every
  chunk's sha256, and reading a part checks its values against it
  (:func:`~dpmm.release.tables.read_measurements`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.measure.chunk_files import ValueChunk
from dpmm.measure.record import MeasurementRecord
from dpmm.release.tables import (
    MEASUREMENT_METADATA_KEY,
    MEASUREMENTS_SCHEMA,
    PART,
    AnswerColumns,
    write_answers,
)
from dpmm.workload.labels import QueryParts

__all__ = [
    "answer_part_tasks",
    "measurement_part_tasks",
    "write_parts",
]


def answer_part_tasks(
    folder: Path,
    number: int,
    group: str,
    values: Any,
    errors: Any,
    exact: bool,
    half_widths: Any,
    exact_intervals: Any,
    queries: QueryParts,
    attributes: Sequence[str],
) -> list[Any]:
    """Tasks writing group ``number``'s answers, one part per block of ``values``.

    Args:
        folder: The ``answers.parquet`` folder.
        number: The group's position in the workload (parts sort in workload order).
        group: The group's name.
        values, errors: Its answers and standard errors, flat Dask arrays chunked alike.
        exact: Whether the standard errors are exact.
        half_widths: Their intervals' half-widths, a flat Dask array of the same length.
        exact_intervals: Whether the half-widths come from the noise's exact distribution:
            one bool for the group, or a flat Dask array of the same length.
        queries: What each of the group's queries asks.
        attributes: The domain's attributes, in order.
    """
    import dask

    errors = errors.rechunk(values.chunks)
    half_widths = half_widths.rechunk(values.chunks)
    blocks = values.numblocks[0]
    flags = (
        exact_intervals.rechunk(values.chunks).to_delayed().ravel()
        if hasattr(exact_intervals, "chunks")
        else [bool(exact_intervals)] * blocks
    )
    starts = np.cumsum((0, *values.chunks[0]))
    return [
        dask.delayed(_write_answers, pure=False)(
            folder / PART.format(f"{number:04d}-{index:06d}"),
            group,
            value_block,
            error_block,
            exact,
            width_block,
            flag_block,
            queries.between(int(lo), int(hi)),
            int(lo),
            tuple(attributes),
        )
        for index, (value_block, error_block, width_block, flag_block, lo, hi) in enumerate(
            zip(
                values.to_delayed().ravel(),
                errors.to_delayed().ravel(),
                half_widths.to_delayed().ravel(),
                flags,
                starts[:-1],
                starts[1:],
                strict=True,
            )
        )
    ]


def _write_answers(
    path: Path,
    group: str,
    values: np.ndarray,
    errors: np.ndarray,
    exact: bool,
    half_widths: np.ndarray,
    exact_intervals: bool | np.ndarray,
    queries: QueryParts,
    first: int,
    attributes: tuple[str, ...],
) -> None:
    columns = AnswerColumns.for_group(
        group,
        values,
        errors,
        exact=exact,
        half_width=half_widths,
        exact_interval=exact_intervals,
        labels=queries,
        first_query=first,
    )
    write_answers(path, [columns], attributes)


def measurement_part_tasks(folder: Path, record: MeasurementRecord) -> list[Any]:
    """Tasks writing a chunked record as ``measurements.parquet`` parts, one per chunk."""
    import dask

    assert record.chunks is not None
    header = json.dumps(record.header(), sort_keys=True, ensure_ascii=True)
    return [
        dask.delayed(_write_measurements, pure=False)(
            folder / PART.format(f"{index:06d}"), block, chunk, header
        )
        for index, (block, chunk) in enumerate(
            zip(record.values.to_delayed().ravel(), record.chunks.parts, strict=True)
        )
    ]


def _write_measurements(path: Path, values: np.ndarray, chunk: ValueChunk, header: str) -> None:
    schema = MEASUREMENTS_SCHEMA.with_metadata({MEASUREMENT_METADATA_KEY: header.encode()})
    rows = pa.array(np.arange(chunk.start, chunk.stop, dtype=np.int64))
    table = pa.Table.from_arrays([rows, pa.array(np.asarray(values, np.int64))], schema=schema)
    pq.write_table(table, path)


def write_parts(folder: Path, tasks: list[Any]) -> None:
    """Make ``folder`` and run the tasks writing its parts (on the default Dask scheduler:
    the cluster's client when the flow has one)."""
    import dask

    folder.mkdir()
    dask.compute(*tasks)
