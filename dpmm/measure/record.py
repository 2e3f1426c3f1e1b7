"""Measurement records and their files: one file per measurement, written atomically.

A record file ``<store>/<measurement_id>.measurement`` holds one line of UTF-8 JSON (the
header: every field but the values, with exact fractions as strings), a newline, and then
the noisy answers as raw little-endian int64. The header names the format version, the
number of values and the sha256 of their bytes, so a truncated or altered file is refused
on reading. Reading uses ``json`` and ``numpy.frombuffer`` only: nothing is unpickled.

A file is written to a hidden temporary file in the same folder, flushed and fsynced, then
renamed over the record's name with ``os.replace``, and the folder is fsynced: a reader sees
either no record or the whole record, even across a crash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpmm.durable import fsync_folder
from dpmm.measure.exact import MeasurementError
from dpmm.privacy.params import ZCDP, PureDP

__all__ = [
    "FORMAT",
    "MeasurementRecord",
    "load_measurement",
    "privacy_from_dict",
    "record_from_header",
    "record_path",
]

#: The format tag written in every header; files of another format are refused.
FORMAT = "dpmm-measurement/1"
SUFFIX = ".measurement"
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The longest header accepted when reading (a guard against reading a wrong file whole).
_MAX_HEADER = 1 << 20


@dataclass(frozen=True, eq=False)
class MeasurementRecord:
    """One drawn measurement: what was measured, how, under which guarantee, and the values.

    ``noise`` is ``"discrete_laplace"`` (with ``scale``) or ``"discrete_gaussian"`` (with
    ``sigma2``); the other parameter is None. ``values`` are the noisy answers, read-only.
    """

    measurement_id: str
    strategy: str
    strategy_fingerprint: str
    shape: tuple[int, int]
    norm: str
    sensitivity: Fraction
    noise: str
    scale: Fraction | None
    sigma2: Fraction | None
    privacy: PureDP | ZCDP
    guarantee: str
    reservation_id: str
    release_id: str
    created: str
    values: np.ndarray
    #: The strategy measured is ``integer / quantization_scale`` (1 for integer strategies):
    #: divide the values by it, and reconstruct with that quantized strategy.
    quantization_scale: int = 1

    def header(self) -> dict[str, object]:
        """Every field but the values, JSON-ready, with exact fractions as strings."""
        return {
            "format": FORMAT,
            "measurement_id": self.measurement_id,
            "strategy": self.strategy,
            "strategy_fingerprint": self.strategy_fingerprint,
            "shape": list(self.shape),
            "norm": self.norm,
            "sensitivity": str(self.sensitivity),
            "noise": self.noise,
            "scale": None if self.scale is None else str(self.scale),
            "sigma2": None if self.sigma2 is None else str(self.sigma2),
            "privacy": self.privacy.to_dict(),
            "guarantee": self.guarantee,
            "reservation_id": self.reservation_id,
            "release_id": self.release_id,
            "created": self.created,
            "quantization_scale": self.quantization_scale,
            "count": int(self.values.size),
            "values_sha256": hashlib.sha256(_value_view(self.values)).hexdigest(),
        }

    def to_bytes(self) -> bytes:
        """The record's file contents."""
        return self._header_line() + _value_view(self.values).tobytes()

    def _header_line(self) -> bytes:
        return json.dumps(self.header(), sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeasurementRecord):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # holds an array


def check_measurement_id(measurement_id: object) -> str:
    """``measurement_id`` if it is a safe file-name token, else a MeasurementError."""
    if not isinstance(measurement_id, str) or not _SAFE_ID.fullmatch(measurement_id):
        raise MeasurementError(
            "a measurement id must be 1 to 128 letters, digits, '.', '_' or '-' starting with "
            f"a letter or digit, got {measurement_id!r:.80}"
        )
    return measurement_id


def record_path(store: str | os.PathLike[str], measurement_id: str) -> Path:
    """Where the record of ``measurement_id`` lives in ``store``."""
    return Path(store) / (check_measurement_id(measurement_id) + SUFFIX)


def load_measurement(store: str | os.PathLike[str], measurement_id: str) -> MeasurementRecord:
    """Read a stored measurement record.

    Raises:
        MeasurementError: There is no such record, or the file is not a complete record.
    """
    path = record_path(store, measurement_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MeasurementError(f"no measurement {measurement_id!r} in {store}") from None
    return _parse(data, path, measurement_id)


def write_record(record: MeasurementRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically and durably (see the module docstring)."""
    header, values = record._header_line(), _value_view(record.values)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(header)
            stream.write(memoryview(values).cast("B"))  # no copy of a large measurement
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_folder(path.parent)


def _value_view(values: np.ndarray) -> np.ndarray:
    """The values as contiguous little-endian int64 (a view when they already are)."""
    return np.ascontiguousarray(values, dtype="<i8")


def _parse(data: bytes, path: Path, measurement_id: str) -> MeasurementRecord:
    broken = f"{path} is not a complete dpmm measurement record"
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise MeasurementError(broken)
    try:
        header = json.loads(data[:end].decode("ascii"))
        if header.get("format") != FORMAT:
            raise MeasurementError(f"{path} is not in the format {FORMAT}")
        body = memoryview(data)[end + 1 :]
        count = int(header["count"])
        if len(body) != 8 * count or hashlib.sha256(body).hexdigest() != header["values_sha256"]:
            raise MeasurementError(f"{broken}: its values were truncated or changed")
        values = np.frombuffer(body, dtype="<i8").astype(np.int64, copy=False)
        record = record_from_header(header, values)
    except MeasurementError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as error:
        raise MeasurementError(f"{broken} ({type(error).__name__}: {error})") from None
    if record.measurement_id != measurement_id:
        raise MeasurementError(f"{path} holds measurement {record.measurement_id!r}")
    return record


def record_from_header(header: dict[str, object], values: np.ndarray) -> MeasurementRecord:
    """A record from its :meth:`MeasurementRecord.header` and values (made read-only).

    Raises:
        ValueError, KeyError, TypeError: A field is missing or malformed.
    """
    values.setflags(write=False)
    shape = header["shape"]
    return MeasurementRecord(
        measurement_id=str(header["measurement_id"]),
        strategy=str(header["strategy"]),
        strategy_fingerprint=str(header["strategy_fingerprint"]),
        shape=(int(shape[0]), int(shape[1])),
        norm=str(header["norm"]),
        sensitivity=Fraction(str(header["sensitivity"])),
        noise=str(header["noise"]),
        scale=_optional_fraction(header["scale"]),
        sigma2=_optional_fraction(header["sigma2"]),
        privacy=privacy_from_dict(header["privacy"]),
        guarantee=str(header["guarantee"]),
        reservation_id=str(header["reservation_id"]),
        release_id=str(header["release_id"]),
        created=str(header["created"]),
        values=values,
        quantization_scale=int(header["quantization_scale"]),
    )


def privacy_from_dict(data: object) -> PureDP | ZCDP:
    """``PureDP`` or ``ZCDP`` from its ``to_dict()`` form; ValueError for anything else.

    Example:
        >>> privacy_from_dict({"kind": "zcdp", "rho": "1/8"})
        ZCDP(rho=Fraction(1, 8))
    """
    if isinstance(data, dict) and data.get("kind") == "pure" and "epsilon" in data:
        return PureDP(Fraction(str(data["epsilon"])))
    if isinstance(data, dict) and data.get("kind") == "zcdp" and "rho" in data:
        return ZCDP(Fraction(str(data["rho"])))
    raise ValueError(f"unknown privacy budget {data!r:.80}")


def _optional_fraction(value: object) -> Fraction | None:
    return None if value is None else Fraction(str(value))
