"""Draw a measurement chunk by chunk on the Dask workers that hold the counts.

:func:`~dpmm.measure.measure` calls :func:`draw_chunked` when the counts are held by a
cluster: the data vector as a Dask array (a Kronecker strategy on a domain too large for
one process), or the marginal tables of a weighted union of marginals or of integer
residual blocks as :class:`~dpmm.measure.tables.TableGroups` (many tables spread across
the workers). The steps of the draw-once rule (DESIGN §5 rule 4)
become, under the store's lock:

1. the counts are checked on the cluster (non-negative, small enough for exact answers);
2. ``plan.json`` is written to the chunk folder: the strategy, budget, noise and the
   chunks' answer ranges; its sha256 (the *plan digest*) is named by every chunk;
3. the reservation is marked spent;
4. each worker computes its chunk of ``B x`` (a Kronecker strategy, factor by factor:
   :class:`~dpmm.linalg.chunked_kron.ChunkedKron`; a strategy read from tables, the
   answers of its group of whole tables, :func:`table_groups`), draws the chunk's noise from its own
   OS CSPRNG and persists the noisy chunk (:func:`~dpmm.measure.chunk_files.write_chunk`,
   write-once) before returning anything: only the chunk's sha256 leaves the worker;
5. the record file, listing every chunk's sha256, is written atomically; what is returned
   is the record read back, its values a lazy Dask array of the chunk files.

A task retried after its worker died finds its chunk persisted and reuses it, checked;
a chunk whose worker died before persisting it was never seen by anything, and is drawn
by the retry. A run that crashed between steps 3 and 5 is resumed the same way: with the
reservation spent and the same plan, the persisted chunks are kept and only the missing
ones drawn. The chunk folder must be on storage every worker and the flow share.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import atomic_write
from dpmm.linalg import Kron, Marginals, Matrix
from dpmm.linalg.chunked_kron import ChunkedKron
from dpmm.measure import record as records
from dpmm.measure.chunk_files import (
    ValueChunk,
    ValueChunks,
    chunk_folder,
    chunk_path,
    existing_chunk,
    values_array,
    write_chunk,
)
from dpmm.measure.exact import FLOAT_EXACT, ExactStrategy, MeasurementError, MeasurementMismatch
from dpmm.measure.noise import add_noise
from dpmm.measure.tables import (
    TableGroups,
    TableStrategy,
    check_exact,
    strategy_part,
    table_answers,
)
from dpmm.privacy.ledger import Ledger, Reservation

__all__ = [
    "CHUNK_ANSWERS",
    "answer_chunks",
    "draw_chunked",
    "is_chunked",
    "not_reserved",
    "table_groups",
]

#: Answers per chunk (2²² int64: 32 MiB), rounded to whole rows of the first axis (or to
#: whole tables, for a strategy answered from marginal tables). Drawing
#: a chunk holds a few copies of it (floats, integers, noise), so a worker of 1 GiB draws
#: one with room to spare.
CHUNK_ANSWERS = 2**22
PLAN_FORMAT = "dpmm-measurement-plan/1"
_PLAN_NAME = "plan.json"


def is_chunked(x: object) -> bool:
    """Whether ``x`` is held by a cluster: a Dask array of counts, or table groups."""
    return isinstance(x, TableGroups) or type(x).__module__.startswith("dask.array")


def draw_chunked(
    exact: ExactStrategy,
    x: Any,
    expected: dict[str, object],
    folder: Path,
    measurement_id: str,
    ledger: Ledger,
    reservation: Reservation,
    *,
    client: Any = None,
) -> records.MeasurementRecord:
    """Steps 1 to 5 of the module docstring, for :func:`~dpmm.measure.measure` (which holds
    the store's lock and has checked the request and the reservation's budget).

    Args:
        exact: The integer strategy: a Kronecker product (or one factor) for counts in a
            Dask array; a weighted union of marginals or integer residual blocks for
            table groups.
        x: The counts as a Dask array, flat or shaped as the domain; or the strategy's
            marginal tables on the cluster, grouped as :func:`table_groups` says.
        expected: The record's fields that follow from the strategy and the budget.
        folder: The measurement store.
        measurement_id: The record's id.
        ledger: The open ledger holding ``reservation``.
        reservation: The budget this measurement spends.
        client: A ``distributed.Client``; None computes on local threads.

    Raises:
        MeasurementError: The strategy is not a Kronecker product (or, for table groups, a
            strategy read from tables), the counts do not fit it or cannot be measured
            exactly, or the reservation was spent without this plan.
        MeasurementMismatch: The chunk folder holds chunks of another plan.
    """
    if isinstance(x, TableGroups):
        blocks, bounds, starts = _table_blocks(exact, x, client)
    else:
        blocks, bounds, starts = _kron_blocks(exact, x, client)
    plan = _plan(expected, bounds, measurement_id, reservation)
    digest = hashlib.sha256(plan).hexdigest()
    chunks = chunk_folder(folder, measurement_id)
    _start_or_resume(chunks, plan, ledger, reservation, measurement_id)
    noise = {key: expected[key] for key in ("noise", "scale", "sigma2")}
    tasks = [
        _chunk_task(block, chunk_path(chunks, index), digest, answers, noise)
        for index, (block, answers) in enumerate(zip(blocks, pairwise(starts), strict=True))
    ]
    parts = _compute(tasks, client)
    record = records.MeasurementRecord(
        measurement_id=measurement_id,
        values=values_array(chunks, ValueChunks(digest, tuple(parts))),
        reservation_id=reservation.id,
        release_id=reservation.release_id,
        created=datetime.now(UTC).isoformat(timespec="microseconds"),
        chunks=ValueChunks(digest, tuple(parts)),
        **expected,
    )
    records.write_record(record, records.record_path(folder, measurement_id))
    return records.load_measurement(folder, measurement_id)


def _kron_blocks(
    exact: ExactStrategy, x: Any, client: Any
) -> tuple[list[Any], list[int], list[int]]:
    """The chunks of a Kronecker strategy's answers on a Dask array of counts: each chunk's
    answers (a lazy block of whole rows of the first axis), the plan's bounds (those
    rows) and the chunks' answer offsets."""
    factors = _factors(exact.matrix)
    tensor = _domain_tensor(x, tuple(int(f.shape[1]) for f in factors))
    _check_counts(tensor, exact, client)
    rows = tuple(int(f.shape[0]) for f in factors)
    bounds = _row_bounds(rows)
    answers = ChunkedKron(Kron(factors)).apply(tensor.astype(np.float64))
    answers = answers.rechunk(((*np.diff(bounds).tolist(),), *[(n,) for n in rows[1:]]))
    width = int(np.prod(rows[1:], dtype=np.int64))
    return list(answers.to_delayed().ravel()), bounds, [bound * width for bound in bounds]


def _table_blocks(
    exact: ExactStrategy, tables: TableGroups, client: Any
) -> tuple[list[Any], list[int], list[int]]:
    """The chunks of a strategy read from tables: each chunk's answers (computed where its
    group of tables is held), the plan's bounds (the tables' positions in block order)
    and the chunks' answer offsets."""
    import dask

    matrix = exact.matrix
    groups = table_groups(matrix) if isinstance(matrix, TableStrategy) else None
    if groups is None or tuple(tables.domain_shape) != tuple(matrix.domain_shape):
        raise MeasurementError(
            f"marginal tables on a cluster are measured by a union of marginals or residual "
            f"blocks over their domain, got {matrix!r:.120}"
        )
    if len(tables.groups) != len(groups):
        raise MeasurementError(
            f"the tables are held in {len(tables.groups)} groups and the strategy measures "
            f"{len(groups)}"
        )
    _check_tables(tables, exact, client)
    blocks = [
        dask.delayed(table_answers, pure=False)(strategy_part(matrix, start, stop), group)
        for (start, stop), group in zip(groups, tables.groups, strict=True)
    ]
    bounds = [start for start, _ in groups] + [groups[-1][1]]
    return blocks, bounds, [int(matrix.offsets[bound]) for bound in bounds]


def table_groups(matrix: TableStrategy) -> list[tuple[int, int]]:
    """The chunks of a strategy read from tables: ``[start, stop)`` of its blocks (one
    table each) in block order, whole tables of about :data:`CHUNK_ANSWERS` answers.

    Example:
        >>> A = Marginals((4, 4, 4), {(0,): 1, (1,): 1, (0, 1): 1, (1, 2): 1})
        >>> table_groups(A) == [(0, 4)]
        True
    """
    rows = np.diff(np.asarray(matrix.offsets, dtype=np.int64)).tolist()
    groups, start, size = [], 0, 0
    for block, answers in enumerate(rows):
        if size and size + answers > CHUNK_ANSWERS:
            groups.append((start, block))
            start, size = block, 0
        size += answers
    return [*groups, (start, len(rows))]


def _check_tables(tables: TableGroups, exact: ExactStrategy, client: Any) -> None:
    """Tables that agree on the number of records, whose answers stay exact (the totals
    are computed on the cluster, gathered here and never shown)."""
    import dask

    found = _gather([dask.delayed(_totals)(group) for group in tables.groups], client, dask)
    totals = set().union(*found)
    if len(totals) > 1:
        raise MeasurementError("the marginal tables disagree on the number of records")
    if isinstance(exact.matrix, Marginals) and totals:
        check_exact(exact, totals.pop())  # residual blocks check their own int64 range


def _totals(tables: dict[tuple[int, ...], np.ndarray]) -> set[int]:
    return {int(np.asarray(table).sum(dtype=np.int64)) for table in tables.values()}


def _factors(matrix: Matrix) -> list[Matrix]:
    """The factors ``B`` is applied by, axis by axis (a one-attribute strategy is its own
    single factor, applied to the whole axis in one task)."""
    return list(matrix.factors) if isinstance(matrix, Kron) else [matrix]


def _domain_tensor(x: Any, shape: tuple[int, ...]) -> Any:
    if not np.issubdtype(x.dtype, np.integer):
        raise MeasurementError(f"the counts must be integers, got a Dask array of {x.dtype}")
    cells = int(np.prod(shape, dtype=np.int64))
    if x.size != cells:
        raise MeasurementError(f"the data has {x.size} cells but the strategy has {cells} columns")
    return x.reshape(shape) if tuple(x.shape) != shape else x


def _check_counts(tensor: Any, exact: ExactStrategy, client: Any) -> None:
    """Counts that are non-negative and whose answers stay exact in float64 (the values
    are computed on the cluster and never shown)."""
    import dask

    low, total = _gather([tensor.min(), tensor.sum(dtype=np.int64)], client, dask)
    if int(low) < 0:
        raise MeasurementError("the data vector has a negative count")
    if exact.entry_bound * int(total) >= FLOAT_EXACT:
        raise MeasurementError(
            f"the answers of {exact.matrix!r:.80} on these records could exceed 2**53, "
            "beyond exact float64 arithmetic; measuring them is not supported"
        )


def _row_bounds(rows: tuple[int, ...]) -> list[int]:
    """Chunk boundaries along the answers' first axis: whole rows, about
    :data:`CHUNK_ANSWERS` answers per chunk."""
    width = int(np.prod(rows[1:], dtype=np.int64))
    step = max(1, CHUNK_ANSWERS // max(width, 1))
    return [*range(0, rows[0], step), rows[0]]


def answer_chunks(matrix: Matrix) -> tuple[int, ...]:
    """How many answers each chunk of a measurement of ``matrix`` on the cluster holds."""
    if isinstance(matrix, TableStrategy):
        offsets = np.asarray(matrix.offsets, dtype=np.int64)
        return tuple(int(offsets[stop] - offsets[start]) for start, stop in table_groups(matrix))
    rows = tuple(int(f.shape[0]) for f in _factors(matrix))
    width = int(np.prod(rows[1:], dtype=np.int64))
    return tuple(int(n) * width for n in np.diff(_row_bounds(rows)))


def _plan(
    expected: dict[str, object], bounds: list[int], measurement_id: str, reservation: Reservation
) -> bytes:
    """``plan.json``: what the chunks measure, in canonical JSON (its sha256 is the digest)."""
    fields = {
        key: (str(value) if isinstance(value, Fraction) else value)
        for key, value in expected.items()
        if key not in ("strategy", "guarantee", "privacy")
    }
    plan = {
        **fields,
        "format": PLAN_FORMAT,
        "measurement_id": measurement_id,
        "privacy": expected["privacy"].to_dict(),
        "reservation_id": reservation.id,
        "release_id": reservation.release_id,
        "shape": list(expected["shape"]),
        "bounds": bounds,
    }
    return json.dumps(plan, sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n"


def _start_or_resume(
    chunks: Path, plan: bytes, ledger: Ledger, reservation: Reservation, measurement_id: str
) -> None:
    """Write the plan and spend the reservation; or, for a run that crashed after spending
    it, check the persisted plan is this one.

    Raises:
        MeasurementMismatch: The folder holds another plan's chunks.
        MeasurementError: The reservation is not reserved, and no chunk of it was drawn.
    """
    path = chunks / _PLAN_NAME
    stored = path.read_bytes() if path.exists() else None
    if stored is not None and stored != plan:
        raise MeasurementMismatch(
            f"{chunks} holds the chunks of another measurement plan; use a new measurement id"
        )
    status = ledger.status(reservation)
    if status == "spent" and stored is not None:
        return  # resumed: the persisted chunks are reused, the missing ones drawn
    if status != "reserved":
        raise not_reserved(status, reservation, measurement_id)
    chunks.mkdir(exist_ok=True)
    atomic_write(path, [plan])
    ledger.mark_spent(reservation)


def _chunk_task(
    block: Any, path: Path, plan: str, answers: tuple[int, int], noise: dict[str, Any]
) -> Any:
    """The task persisting chunk ``answers = (start, stop)``: drawn now, or (persisted by a
    run that crashed) only checked, without computing its answers."""
    import dask

    if path.exists():
        return dask.delayed(existing_chunk, pure=False)(path, plan, *answers)
    return dask.delayed(_noisy_chunk, pure=False)(block, path, plan, answers[0], noise)


def _noisy_chunk(
    answers: np.ndarray, path: Path, plan: str, start: int, noise: dict[str, Any]
) -> ValueChunk:
    """On a worker: the chunk's exact integer answers plus fresh noise, persisted once."""
    if path.exists():  # a retry of a task whose worker died after persisting the chunk
        return existing_chunk(path, plan, start, start + answers.size)
    flat = answers.reshape(-1)
    if not np.issubdtype(flat.dtype, np.integer):  # a Kronecker product's, in floats
        integers = np.rint(flat)
        if not np.array_equal(flat, integers):
            raise MeasurementError("the strategy's answers on the counts are not integers")
        flat = integers.astype(np.int64)
    values = add_noise(noise, flat, None)
    return write_chunk(path, plan, start, values)


def _compute(tasks: list[Any], client: Any) -> list[ValueChunk]:
    import dask

    return list(_gather(tasks, client, dask))


def _gather(items: list[Any], client: Any, dask: Any) -> tuple[Any, ...]:
    if client is not None:
        return tuple(client.gather(client.compute(items)))
    return dask.compute(*items, scheduler="threads")


def not_reserved(status: str, reservation: Reservation, measurement_id: str) -> MeasurementError:
    """The refusal to draw on a reservation that is not *reserved*."""
    lost = " and no record of its measurement exists" if status == "spent" else ""
    return MeasurementError(
        f"reservation {reservation.id!r} (release {reservation.release_id!r}) is "
        f"{status}{lost}; measurement {measurement_id!r} needs a reserved budget"
    )
