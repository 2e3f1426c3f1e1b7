"""Residual measurements drawn once and persisted before anything reads them.

:func:`~dpmm.measure.residual_tables.measure_residuals` and
:func:`~dpmm.measure.residual_blocks.measure_blocks` take a ``store``, ``measurement_id``,
``ledger`` and ``reservation`` exactly as :func:`~dpmm.measure.mechanism.measure` does, and
then follow its five steps (:func:`measure_once`): validate and plan the noise (a refusal
spends nothing); reuse a stored record with the same id (no draw, no ledger write); refuse a
reservation that is not *reserved*; mark it spent, compute the answers and draw; write the
record atomically and return the measurement READ BACK from the store. The store's
``.measure.lock`` (the lock :func:`measure` takes) serializes this between processes.

A record is ``<store>/<measurement_id>.measurement``, the same name :func:`measure` uses, so
one id names one measurement in a store whichever path took it; the two formats refuse each
other. The file holds one line of ASCII JSON (the header: what was measured, the exact noise
layout as rational strings, the exact ρ, the theorem, the reservation), a newline, then raw
little-endian int64 arrays: the noisy values, and for a block measurement each distinct
integer block ``Q_S``. The header gives every array's shape and the sha256 of the body, so a
truncated or altered file is refused. Reading uses ``json`` and ``numpy.frombuffer`` only.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.linalg.residuals import ResidualStrategy
    >>> from dpmm.measure.residual_tables import measure_residuals
    >>> from dpmm.privacy.ledger import Ledger
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> ledger = Ledger.init(folder / "ledger.sqlite")
    >>> _ = ledger.grant("survey", ZCDP(1))
    >>> reservation = ledger.reserve("survey", ZCDP("1/2"), release_id="survey-2026")
    >>> A = ResidualStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: 1.0, 0b11: 1.0})
    >>> y = measure_residuals(A, np.array([4, 0, 1, 2, 2, 3]), ZCDP("1/2"), store=folder,
    ...                       measurement_id="residuals", ledger=ledger, reservation=reservation)
    >>> y.rho, y.values.shape, ledger.status(reservation)
    (Fraction(1, 2), (6,), 'spent')
    >>> load_residual_record(folder, "residuals").measurement.values.tolist() == y.values.tolist()
    True
    >>> ledger.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import exclusive_lock, fsync_folder
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.linalg.serialize import matrix_digest
from dpmm.measure.exact import MeasurementError, MeasurementMismatch
from dpmm.measure.record import check_measurement_id, privacy_from_dict, record_path
from dpmm.measure.residual_blocks import BlockMeasurement, QuantizedBlocks
from dpmm.measure.residual_tables import ResidualMeasurement
from dpmm.privacy.accounting import discrete_gaussian_zcdp
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.privacy.params import ZCDP

__all__ = [
    "FORMAT",
    "NoisePlan",
    "ResidualRecord",
    "blocks_fingerprint",
    "blocks_plan",
    "load_residual_measurement",
    "load_residual_record",
    "measure_once",
    "persistence_requested",
    "residual_plan",
    "write_residual_record",
]

#: The format tag of a residual record; a plain measurement record has another one.
FORMAT = "dpmm-residual-measurement/1"
#: The lock file :func:`dpmm.measure.mechanism.measure` takes in a store (same name on
#: purpose: both paths share one id namespace and must serialize on one lock).
LOCK_NAME = ".measure.lock"
RESIDUAL, BLOCKS = "residual", "residual_blocks"
#: Header fields a stored record must share with a request to be reused.
_MATCHED = ("kind", "strategy_fingerprint", "privacy", "rho")
_MATCHED_LAYOUT = {
    RESIDUAL: ("domain_shape", "sets", "sigma2"),
    BLOCKS: ("domain_shape", "sets", "scale", "sigma2", "squared_sensitivity"),
}
#: The longest header read (a residual header lists every set: ~20 bytes a set).
_MAX_HEADER = 1 << 28
_PERSIST_ARGUMENTS = ("store", "measurement_id", "ledger", "reservation")

_HETEROGENEOUS = (
    "; applied with one variance per row (sigma2[S]·c_r, rounded up for the sampler), where "
    "sum_S prod_(i in S)(1 - 1/n_i)/sigma2[S] = 2·rho (an upper bound if rows were rounded)"
)
_BOUND = "; Δ² is the upper bound sum_S max_j ‖(Q_S H_S)[:, j]‖², so ρ is an upper bound"
_RESIDUAL_ROWS = (
    "row r of set S is integer Helmert row H_S[r] with noise variance "
    "sampler_sigma2(sigma2[S]·c_r), c_r = prod_(i in S) k_i(k_i + 1); divide by sqrt(c_r)"
)
_BLOCK_ROWS = (
    "block S is Q_S H_S m_S with noise variance sigma2 on every row; the strategy measured "
    "is (Q_S H_S) / scale"
)

Measurement = ResidualMeasurement | BlockMeasurement


@dataclass(frozen=True)
class NoisePlan:
    """Everything a record holds that follows from the strategy and the budget alone.

    Attributes:
        kind: ``"residual"`` or ``"residual_blocks"``.
        strategy: a short description of the strategy (its repr).
        strategy_fingerprint: sha256 of what is measured (see :func:`blocks_fingerprint`).
        privacy: the budget requested, exactly the reservation's.
        rho: the exact zCDP cost of the noise (or an upper bound), at most ``privacy.rho``.
        guarantee: the theorem the cost rests on, in words.
        layout: the kind's noise layout, JSON-ready (exact rationals as strings).
    """

    kind: str
    strategy: str
    strategy_fingerprint: str
    privacy: ZCDP
    rho: Fraction
    guarantee: str
    layout: dict[str, Any]


@dataclass(frozen=True, eq=False)
class ResidualRecord:
    """A stored residual measurement: its plan, its reservation and the measurement itself."""

    measurement_id: str
    plan: NoisePlan
    reservation_id: str
    release_id: str
    created: str
    measurement: Measurement

    def header(self) -> dict[str, object]:
        """Every field but the arrays, JSON-ready; ``arrays`` gives their shapes in order."""
        return self._contents()[0]

    def _contents(self) -> tuple[dict[str, object], list[np.ndarray]]:
        """The header and the body's arrays: the values, then each distinct integer block."""
        layout, arrays = dict(self.plan.layout), [self.measurement.values]
        if isinstance(self.measurement, ResidualMeasurement):
            layout["rounded_rows"] = int(self.measurement.rounded_rows)
        else:
            # {block bytes: its array's position}: symmetric domains repeat blocks.
            positions: dict[bytes, int] = {}
            blocks = []
            for mask in self.measurement.quantized.sets:
                Q = _int64(self.measurement.quantized.integers[mask])
                key = repr(Q.shape).encode() + Q.tobytes()
                if key not in positions:
                    positions[key] = len(arrays)
                    arrays.append(Q)
                blocks.append(positions[key])
            layout["blocks"] = blocks
            layout["measured_rho"] = str(self.measurement.rho)
        digest = hashlib.sha256()
        for array in arrays:
            digest.update(memoryview(_int64(array)).cast("B"))
        return {
            "format": FORMAT,
            "kind": self.plan.kind,
            "measurement_id": self.measurement_id,
            "strategy": self.plan.strategy,
            "strategy_fingerprint": self.plan.strategy_fingerprint,
            "privacy": self.plan.privacy.to_dict(),
            "rho": str(self.plan.rho),
            "guarantee": self.plan.guarantee,
            "noise": "discrete_gaussian",
            "layout": layout,
            "reservation_id": self.reservation_id,
            "release_id": self.release_id,
            "created": self.created,
            "arrays": [list(array.shape) for array in arrays],
            "body_sha256": digest.hexdigest(),
        }, arrays

    def to_bytes(self) -> bytes:
        """The record's file contents."""
        header, arrays = self._contents()
        return _header_line(header) + b"".join(_int64(a).tobytes() for a in arrays)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResidualRecord):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # holds arrays


def persistence_requested(**arguments: object) -> bool:
    """Whether a persisted measurement was asked for: all four arguments, or none of them.

    Raises:
        MeasurementError: Some but not all of them were given.
    """
    given = [name for name in _PERSIST_ARGUMENTS if arguments.get(name) is not None]
    if given and len(given) != len(_PERSIST_ARGUMENTS):
        missing = [name for name in _PERSIST_ARGUMENTS if name not in given]
        raise MeasurementError(
            f"a persisted measurement needs store, measurement_id, ledger and reservation "
            f"together; {', '.join(missing)} missing"
        )
    return bool(given)


def residual_plan(
    A: ResidualStrategy,
    privacy: ZCDP,
    sets: Sequence[int],
    sigma2: Mapping[int, Fraction],
    rho: Fraction,
) -> NoisePlan:
    """The plan of a residual measurement (:mod:`dpmm.measure.residual_tables`).

    Args:
        A: the residual strategy; its serialized digest is the fingerprint.
        privacy: the budget requested.
        sets: the measured sets, in block order.
        sigma2: ``{S: σ_S²}`` for every measured set.
        rho: the exact cost ``Σ_S Π_{i∈S}(1 − 1/n_i) / (2σ_S²)``.
    """
    shape = A.domain_shape
    rows = sum(math.prod(shape[i] - 1 for i in mask_members(mask)) for mask in sets)
    # Theorem 14 bounds Σ_j Δ_j²/σ_j² over the coordinates; in units where every row has
    # variance 1 that sum is the squared sensitivity, 2ρ, so this evaluates the theorem.
    guarantee = discrete_gaussian_zcdp(Fraction(1), 2 * rho, max(rows, 1))
    return NoisePlan(
        kind=RESIDUAL,
        strategy=repr(A),
        strategy_fingerprint=matrix_digest(A),
        privacy=privacy,
        rho=guarantee.privacy.rho,
        guarantee=guarantee.theorem + _HETEROGENEOUS,
        layout={
            "domain_shape": list(shape),
            "sets": [mask_members(mask) for mask in sets],
            "sigma2": _sigma2_to_json([sigma2[mask] for mask in sets]),
            "row_variance": _RESIDUAL_ROWS,
        },
    )


def blocks_plan(
    strategy: str,
    quantized: QuantizedBlocks,
    privacy: ZCDP,
    sigma2: Fraction,
    squared_sensitivity: int,
    sensitivity_exact: bool,
) -> NoisePlan:
    """The plan of a block measurement (:mod:`dpmm.measure.residual_blocks`).

    Args:
        strategy: a description of the strategy requested (its repr).
        quantized: the integer strategy measured; its digest is the fingerprint.
        privacy: the budget requested.
        sigma2: the variance parameter of every row, exact.
        squared_sensitivity: ``Δ²`` of the integer strategy (exact or an upper bound).
        sensitivity_exact: whether ``Δ²`` was found by visiting every cell.
    """
    rows = sum(quantized.rows(mask) for mask in quantized.sets)
    guarantee = discrete_gaussian_zcdp(sigma2, Fraction(squared_sensitivity), max(rows, 1))
    bound = "" if sensitivity_exact else _BOUND
    return NoisePlan(
        kind=BLOCKS,
        strategy=strategy,
        strategy_fingerprint=blocks_fingerprint(quantized),
        privacy=privacy,
        rho=guarantee.privacy.rho,
        guarantee=guarantee.theorem + bound,
        layout={
            "domain_shape": list(quantized.domain_shape),
            "sets": [mask_members(mask) for mask in quantized.sets],
            "scale": int(quantized.scale),
            "sigma2": str(sigma2),
            "squared_sensitivity": str(squared_sensitivity),
            "sensitivity_exact": bool(sensitivity_exact),
            "requested_rho": str(privacy.rho),
            "row_variance": _BLOCK_ROWS,
        },
    )


def blocks_fingerprint(quantized: QuantizedBlocks) -> str:
    """sha256 of a quantized block strategy: domain, sets, scale and every integer block."""
    digest = hashlib.sha256(f"blocks;{list(quantized.domain_shape)};{quantized.scale};".encode())
    for mask in quantized.sets:
        Q = _int64(quantized.integers[mask])
        digest.update(f"{mask_members(mask)}:{list(Q.shape)};".encode())
        digest.update(memoryview(Q).cast("B"))
    return digest.hexdigest()


def measure_once(
    plan: NoisePlan,
    *,
    store: str | os.PathLike[str],
    measurement_id: str,
    ledger: Ledger,
    reservation: Reservation,
    answers: Callable[[], np.ndarray],
    draw: Callable[[np.ndarray], Measurement],
) -> Measurement:
    """Reuse the stored measurement ``measurement_id``, or draw it once and persist it first.

    Args:
        plan: what the record must hold, computed before any data is read.
        store: an existing folder holding the measurement records.
        measurement_id: the record's name: letters, digits, '.', '_', '-'.
        ledger: the open ledger holding ``reservation``.
        reservation: the budget reserved, exactly ``plan.privacy``; spent before drawing.
        answers: computes the exact integer answers (reads the data).
        draw: adds the noise to the answers and returns the measurement.

    Returns:
        The measurement as read back from the store.

    Raises:
        MeasurementError: The request is invalid, its cost exceeds the reservation, or the
            reservation is not *reserved* while no record exists; nothing was spent.
        MeasurementMismatch: A record with this id exists for another request.
    """
    measurement_id = check_measurement_id(measurement_id)
    folder = _folder(store)
    _check_reservation(plan, reservation)
    path = record_path(folder, measurement_id)
    with exclusive_lock(folder / LOCK_NAME):
        if path.exists():
            stored = _reuse(folder, measurement_id, plan)
            if stored.reservation_id != reservation.id and ledger.status(reservation) == "reserved":
                # A re-run reserved budget for a measurement that exists: nothing is drawn.
                ledger.cancel(reservation)
            return stored.measurement
        exact = answers()
        status = ledger.status(reservation)
        if status != "reserved":
            lost = " and no record of its measurement exists" if status == "spent" else ""
            raise MeasurementError(
                f"reservation {reservation.id!r} (release {reservation.release_id!r}) is "
                f"{status}{lost}; measurement {measurement_id!r} needs a reserved budget"
            )
        ledger.mark_spent(reservation)
        measurement = draw(exact)
        del exact
        record = ResidualRecord(
            measurement_id=measurement_id,
            plan=plan,
            reservation_id=reservation.id,
            release_id=reservation.release_id,
            created=datetime.now(UTC).isoformat(timespec="microseconds"),
            measurement=measurement,
        )
        write_residual_record(record, path)
        del record, measurement  # what is returned is the copy on disk: free the drawn one
        return load_residual_measurement(folder, measurement_id)


def write_residual_record(record: ResidualRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically: temporary file, fsync, rename, fsync folder."""
    header, arrays = record._contents()
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(_header_line(header))
            for array in arrays:
                stream.write(memoryview(_int64(array)).cast("B"))  # no copy of the values
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_folder(path.parent)


def load_residual_measurement(store: str | os.PathLike[str], measurement_id: str) -> Measurement:
    """The stored measurement, ready for :mod:`dpmm.reconstruct` (values read-only)."""
    return load_residual_record(store, measurement_id).measurement


def load_residual_record(store: str | os.PathLike[str], measurement_id: str) -> ResidualRecord:
    """Read a stored residual record.

    Raises:
        MeasurementError: There is no such record, or the file is not a complete one.
        MeasurementMismatch: The file is a plain measurement record (taken by ``measure``).
    """
    path = record_path(store, measurement_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MeasurementError(f"no measurement {measurement_id!r} in {store}") from None
    broken = f"{path} is not a complete dpmm residual measurement record"
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise MeasurementError(broken)
    try:
        header = json.loads(data[:end].decode("ascii"))
        if header.get("format") != FORMAT:
            raise MeasurementMismatch(
                f"{path} is a {header.get('format')!r} record, not a residual measurement; "
                "use a new measurement id"
            )
        body = memoryview(data)[end + 1 :]
        shapes = [tuple(int(n) for n in shape) for shape in header["arrays"]]
        sizes = [8 * math.prod(shape) for shape in shapes]
        if len(body) != sum(sizes) or hashlib.sha256(body).hexdigest() != header["body_sha256"]:
            raise MeasurementError(f"{broken}: its values were truncated or changed")
        arrays, start = [], 0
        for shape, size in zip(shapes, sizes, strict=True):
            array = np.frombuffer(body[start : start + size], dtype="<i8").reshape(shape)
            arrays.append(array.astype(np.int64, copy=False))
            start += size
        record = _record_from_header(header, arrays)
    except MeasurementError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        raise MeasurementError(f"{broken} ({type(error).__name__}: {error})") from None
    if record.measurement_id != measurement_id:
        raise MeasurementError(f"{path} holds measurement {record.measurement_id!r}")
    return record


# -- helpers -------------------------------------------------------------------------------


def _record_from_header(header: dict[str, Any], arrays: list[np.ndarray]) -> ResidualRecord:
    layout = dict(header["layout"])
    shape = tuple(int(n) for n in layout["domain_shape"])
    sets = tuple(sum(1 << int(i) for i in attrs) for attrs in layout["sets"])
    values = arrays[0]
    if header["kind"] == RESIDUAL:
        rows = [math.prod(shape[i] - 1 for i in mask_members(mask)) for mask in sets]
        measurement: Measurement = ResidualMeasurement(
            domain_shape=shape,
            sets=sets,
            offsets=_offsets(rows),
            values=values,
            sigma2=dict(zip(sets, _sigma2_from_json(layout["sigma2"]), strict=True)),
            rho=Fraction(header["rho"]),
            rounded_rows=int(layout.pop("rounded_rows")),
        )
    elif header["kind"] == BLOCKS:
        integers = {
            mask: arrays[int(t)] for mask, t in zip(sets, layout.pop("blocks"), strict=True)
        }
        for Q in integers.values():
            if Q.ndim not in (1, 2):
                raise ValueError(f"an integer block has {Q.ndim} dimensions")
        quantized = QuantizedBlocks(shape, sets, integers, int(layout["scale"]))
        measurement = BlockMeasurement(
            quantized=quantized,
            offsets=_offsets([quantized.rows(mask) for mask in sets]),
            values=values,
            sigma2=Fraction(layout["sigma2"]),
            squared_sensitivity=int(layout["squared_sensitivity"]),
            sensitivity_exact=bool(layout["sensitivity_exact"]),
            rho=Fraction(layout.pop("measured_rho")),
            requested_rho=Fraction(layout["requested_rho"]),
        )
    else:
        raise ValueError(f"unknown residual measurement kind {header['kind']!r}")
    if values.ndim != 1 or values.size != int(measurement.offsets[-1]):
        raise ValueError(f"{values.size} values for {int(measurement.offsets[-1])} rows")
    for array in arrays:
        array.setflags(write=False)
    plan = NoisePlan(
        kind=str(header["kind"]),
        strategy=str(header["strategy"]),
        strategy_fingerprint=str(header["strategy_fingerprint"]),
        privacy=_zcdp(header["privacy"]),
        rho=Fraction(header["rho"]),
        guarantee=str(header["guarantee"]),
        layout=layout,
    )
    return ResidualRecord(
        measurement_id=str(header["measurement_id"]),
        plan=plan,
        reservation_id=str(header["reservation_id"]),
        release_id=str(header["release_id"]),
        created=str(header["created"]),
        measurement=measurement,
    )


def _sigma2_to_json(sigma2: list[Fraction]) -> dict[str, list]:
    """``{"values": distinct σ² as strings, "index": one position per set}`` (compact)."""
    distinct: dict[Fraction, int] = {}
    index = [distinct.setdefault(s2, len(distinct)) for s2 in sigma2]
    return {"values": [str(s2) for s2 in distinct], "index": index}


def _sigma2_from_json(data: dict[str, list]) -> list[Fraction]:
    values = [Fraction(str(s2)) for s2 in data["values"]]
    return [values[int(t)] for t in data["index"]]


def _reuse(folder: Path, measurement_id: str, plan: NoisePlan) -> ResidualRecord:
    stored = load_residual_record(folder, measurement_id)
    expected, found = _matched(plan), _matched(stored.plan)
    different = [name for name in expected if found.get(name) != expected[name]]
    if different:
        raise MeasurementMismatch(
            f"measurement {measurement_id!r} in {folder} was taken with another "
            f"{', '.join(different)}; use a new measurement id for a different request"
        )
    return stored


def _matched(plan: NoisePlan) -> dict[str, object]:
    fields = {name: getattr(plan, name) for name in _MATCHED}
    # Compare the layout as JSON, the form a stored plan was read from.
    layout = json.loads(json.dumps(plan.layout))
    fields.update({name: layout.get(name) for name in _MATCHED_LAYOUT.get(plan.kind, ())})
    return fields


def _check_reservation(plan: NoisePlan, reservation: object) -> None:
    if not isinstance(reservation, Reservation):
        raise MeasurementError(
            f"a reservation must be a ledger Reservation, got {type(reservation).__name__}"
        )
    if type(reservation.budget) is not ZCDP or reservation.budget != plan.privacy:
        raise MeasurementError(
            f"privacy {plan.privacy} is not the budget {reservation.budget} of reservation "
            f"{reservation.id!r}; measure with exactly the reserved budget"
        )
    if plan.rho > reservation.budget.rho:
        raise MeasurementError(
            f"the noise costs rho = {plan.rho}, more than the {reservation.budget} of "
            f"reservation {reservation.id!r}; nothing was drawn"
        )


def _folder(store: object) -> Path:
    if not isinstance(store, str | os.PathLike):
        raise MeasurementError(f"a measurement store must be a folder path, got {store!r:.80}")
    folder = Path(store)
    if not folder.is_dir():
        raise MeasurementError(f"the measurement store {folder} is not an existing folder")
    return folder


def _zcdp(data: object) -> ZCDP:
    privacy = privacy_from_dict(data)
    if not isinstance(privacy, ZCDP):
        raise ValueError(f"a residual measurement has a zCDP budget, not {privacy}")
    return privacy


def _offsets(rows: list[int]) -> np.ndarray:
    return np.array(list(itertools.accumulate(rows, initial=0)), dtype=np.int64)


def _int64(array: np.ndarray) -> np.ndarray:
    """The array as contiguous little-endian int64 (a view when it already is)."""
    return np.ascontiguousarray(array, dtype="<i8")


def _header_line(header: dict[str, object]) -> bytes:
    return json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n"
