"""Draw a measurement chunk by chunk on the Dask workers that hold the counts.

:func:`~dpmm.measure.measure` calls :func:`draw_chunked` when the counts are a Dask array:
a domain too large for one process. The steps of the draw-once rule (DESIGN §5 rule 4)
become, under the store's lock:

1. the counts are checked on the cluster (non-negative, small enough for exact answers);
2. ``plan.json`` is written to the chunk folder: the strategy, budget, noise and the
   chunks' answer ranges; its sha256 (the *plan digest*) is named by every chunk;
3. the reservation is marked spent;
4. each worker computes its chunk of ``B x`` (a Kronecker strategy, factor by factor:
   :class:`~dpmm.linalg.chunked_kron.ChunkedKron`), draws the chunk's noise from its own
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
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import atomic_write
from dpmm.linalg import Kron, Matrix
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
from dpmm.privacy.ledger import Ledger, Reservation

__all__ = ["CHUNK_ANSWERS", "answer_chunks", "draw_chunked", "is_chunked", "not_reserved"]

#: Answers per chunk (2²² int64: 32 MiB), rounded to whole rows of the first axis. Drawing
#: a chunk holds a few copies of it (floats, integers, noise), so a worker of 1 GiB draws
#: one with room to spare.
CHUNK_ANSWERS = 2**22
PLAN_FORMAT = "dpmm-measurement-plan/1"
_PLAN_NAME = "plan.json"


def is_chunked(x: object) -> bool:
    """Whether ``x`` is a Dask array (counts held by a cluster)."""
    return type(x).__module__.startswith("dask.array")


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
        exact: The integer strategy, a Kronecker product (or one factor).
        x: The counts as a Dask array, flat or shaped as the domain.
        expected: The record's fields that follow from the strategy and the budget.
        folder: The measurement store.
        measurement_id: The record's id.
        ledger: The open ledger holding ``reservation``.
        reservation: The budget this measurement spends.
        client: A ``distributed.Client``; None computes on local threads.

    Raises:
        MeasurementError: The strategy is not a Kronecker product, the counts do not fit it
            or cannot be measured exactly, or the reservation was spent without this plan.
        MeasurementMismatch: The chunk folder holds chunks of another plan.
    """
    factors = _factors(exact.matrix)
    tensor = _domain_tensor(x, tuple(int(f.shape[1]) for f in factors))
    _check_counts(tensor, exact, client)
    rows = tuple(int(f.shape[0]) for f in factors)
    bounds = _row_bounds(rows)
    plan = _plan(expected, bounds, measurement_id, reservation)
    digest = hashlib.sha256(plan).hexdigest()
    chunks = chunk_folder(folder, measurement_id)
    _start_or_resume(chunks, plan, ledger, reservation, measurement_id)
    answers = ChunkedKron(Kron(factors)).apply(tensor.astype(np.float64))
    answers = answers.rechunk(((*np.diff(bounds).tolist(),), *[(n,) for n in rows[1:]]))
    noise = {key: expected[key] for key in ("noise", "scale", "sigma2")}
    width = int(np.prod(rows[1:], dtype=np.int64))
    tasks = [
        _chunk_task(block, chunk_path(chunks, index), digest, (lo * width, hi * width), noise)
        for index, (block, lo, hi) in enumerate(
            zip(answers.to_delayed().ravel(), bounds[:-1], bounds[1:], strict=True)
        )
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
    integers = np.rint(flat)
    if not np.array_equal(flat, integers):
        raise MeasurementError("the strategy's answers on the counts are not integers")
    values = add_noise(noise, integers.astype(np.int64), None)
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
