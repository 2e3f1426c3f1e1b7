"""The file format of residual and block measurements, read with ``json`` and numpy only.

A record is ``<store>/<measurement_id>.measurement``, the name
:func:`~dpmm.measure.mechanism.measure` uses, so one id names one measurement in a store
whichever path took it; the two formats refuse each other (MeasurementMismatch). The file
holds one line of ASCII JSON (the header: what was measured, the exact noise layout as
rational strings, the exact ρ, the theorem, the reservation), a newline, then raw
little-endian int64 arrays: the noisy values, and for a block measurement each distinct
integer block ``Q_S``. The header gives every array's shape and the sha256 of the body, so
a truncated or altered file is refused. Records are written by
:func:`~dpmm.measure.residual_persist.measure_once`.

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
    >>> record = load_residual_record(folder, "residuals")
    >>> record.plan.kind, record.reservation_id == reservation.id, record.measurement.rho
    ('residual', True, Fraction(1, 2))
    >>> record.measurement.values.tolist() == y.values.tolist()
    True
    >>> again = measure_residuals(A, np.array([4, 0, 1, 2, 2, 3]), ZCDP("1/2"), store=folder,
    ...                           measurement_id="residuals", ledger=ledger,
    ...                           reservation=reservation)
    >>> again.values.tolist() == y.values.tolist()  # reused: nothing drawn, nothing spent
    True
    >>> ledger.close()
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import atomic_write
from dpmm.linalg.marginals import mask_members
from dpmm.measure.record import (
    RecordFormat,
    header_line,
    int64_view,
    privacy_from_dict,
    read_record,
)
from dpmm.measure.residual_blocks import BlockMeasurement, QuantizedBlocks
from dpmm.measure.residual_tables import ResidualMeasurement
from dpmm.privacy.params import ZCDP

__all__ = [
    "BLOCKS",
    "FORMAT",
    "RESIDUAL",
    "Measurement",
    "NoisePlan",
    "ResidualRecord",
    "load_residual_measurement",
    "load_residual_record",
    "sigma2_to_json",
    "write_residual_record",
]

#: The format tag of a residual record; a plain measurement record has another one.
FORMAT = "dpmm-residual-measurement/1"
RESIDUAL, BLOCKS = "residual", "residual_blocks"
#: The longest header read (a residual header lists every set: ~20 bytes a set).
_MAX_HEADER = 1 << 28

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
                Q = int64_view(self.measurement.quantized.integers[mask])
                key = repr(Q.shape).encode() + Q.tobytes()
                if key not in positions:
                    positions[key] = len(arrays)
                    arrays.append(Q)
                blocks.append(positions[key])
            layout["blocks"] = blocks
            layout["measured_rho"] = str(self.measurement.rho)
        digest = hashlib.sha256()
        for array in arrays:
            digest.update(memoryview(int64_view(array)).cast("B"))
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
        return header_line(header) + b"".join(int64_view(a).tobytes() for a in arrays)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResidualRecord):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # holds arrays


def write_residual_record(record: ResidualRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically (:func:`dpmm.durable.atomic_write`)."""
    header, arrays = record._contents()
    # Each array is passed as a view of itself: no copy of the values.
    chunks = [memoryview(int64_view(array)).cast("B") for array in arrays]
    atomic_write(path, [header_line(header), *chunks])


def load_residual_measurement(store: str | os.PathLike[str], measurement_id: str) -> Measurement:
    """The stored measurement, ready for :mod:`dpmm.reconstruct` (values read-only)."""
    return load_residual_record(store, measurement_id).measurement


def load_residual_record(store: str | os.PathLike[str], measurement_id: str) -> ResidualRecord:
    """Read a stored residual record.

    Raises:
        MeasurementError: There is no such record, or the file is not a complete one.
        MeasurementMismatch: The file is a plain measurement record (taken by ``measure``).
    """
    return read_record(store, measurement_id, _RESIDUAL_FORMAT, _record_from_body)


def sigma2_to_json(sigma2: list[Fraction]) -> dict[str, list]:
    """``{"values": distinct σ² as strings, "index": one position per set}`` (compact)."""
    distinct: dict[Fraction, int] = {}
    index = [distinct.setdefault(s2, len(distinct)) for s2 in sigma2]
    return {"values": [str(s2) for s2 in distinct], "index": index}


# -- reading -------------------------------------------------------------------------------


def _shapes(header: dict[str, Any]) -> list[tuple[int, ...]]:
    return [tuple(int(n) for n in shape) for shape in header["arrays"]]


_RESIDUAL_FORMAT = RecordFormat(
    tag=FORMAT,
    kind="residual measurement",
    max_header=_MAX_HEADER,
    digest_field="body_sha256",
    body_size=lambda header: sum(8 * math.prod(shape) for shape in _shapes(header)),
)


def _record_from_body(header: dict[str, Any], body: memoryview) -> ResidualRecord:
    arrays, start = [], 0
    for shape in _shapes(header):
        size = 8 * math.prod(shape)
        array = np.frombuffer(body[start : start + size], dtype="<i8").reshape(shape)
        arrays.append(array.astype(np.int64, copy=False))
        start += size
    return _record_from_header(header, arrays)


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


def _sigma2_from_json(data: dict[str, list]) -> list[Fraction]:
    values = [Fraction(str(s2)) for s2 in data["values"]]
    return [values[int(t)] for t in data["index"]]


def _zcdp(data: object) -> ZCDP:
    privacy = privacy_from_dict(data)
    if not isinstance(privacy, ZCDP):
        raise ValueError(f"a residual measurement has a zCDP budget, not {privacy}")
    return privacy


def _offsets(rows: list[int]) -> np.ndarray:
    return np.array(list(itertools.accumulate(rows, initial=0)), dtype=np.int64)
