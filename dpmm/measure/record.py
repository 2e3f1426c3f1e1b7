"""Measurement records and their files: one file per measurement, written atomically.

A record file ``<store>/<measurement_id>.measurement`` holds one line of UTF-8 JSON (the
header: every field but the values, with exact fractions as strings), a newline, and then
the noisy answers as raw little-endian int64. The header names the format version, the
number of values and the sha256 of their bytes, so a truncated or altered file is refused
on reading. Reading uses ``json`` and ``numpy.frombuffer`` only: nothing is unpickled.

A file is written with :func:`dpmm.durable.atomic_write` (temporary file, fsync, rename,
fsync of the folder): a reader sees either no record or the whole record, even across a
crash. The store's lock file :data:`LOCK_NAME` serializes the writers of one store. Every
kind of strategy (a vector strategy, marginal tables, integer residual blocks) is recorded
in this one format. A measurement drawn chunk by chunk on a Dask cluster has the same
header with a ``chunks`` entry, its ``values_sha256`` the sha256 of the chunks' sha256 in
order, and its values in the chunk files the entry lists (:mod:`dpmm.measure.chunk_files`),
not after the header.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import atomic_write
from dpmm.measure.chunk_files import ValueChunks, chunk_folder, values_array
from dpmm.measure.exact import MeasurementError, MeasurementMismatch
from dpmm.privacy.params import ZCDP, PureDP, privacy_from_config

__all__ = [
    "FORMAT",
    "LOCK_NAME",
    "MeasurementRecord",
    "check_measurement_id",
    "discrete_noise_variance",
    "header_line",
    "int64_view",
    "load_measurement",
    "record_from_header",
    "record_path",
    "store_folder",
    "write_record",
]

#: The format tag written in every header; files of another format are refused.
FORMAT = "dpmm-measurement/1"
SUFFIX = ".measurement"
#: The lock file of a store: every path that writes records into it holds this lock.
LOCK_NAME = ".measure.lock"
#: Format tags of dpmm's records start with this: another such tag under an id is a record
#: of another kind, so a request for this one is a mismatch rather than a damaged file.
_DPMM_TAG = "dpmm-"
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The longest header accepted when reading (a guard against reading a wrong file whole).
_MAX_HEADER = 1 << 20
#: Terms of the discrete Gaussian's variance series beyond this many σ are below 1e-300.
_TAIL_SIGMAS = 40
#: Above this σ² the discrete Gaussian's variance is σ² to double precision.
_SERIES_LIMIT = 100.0


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
    #: A measurement drawn on a cluster keeps its values in chunk files
    #: (:mod:`~dpmm.measure.chunk_files`): then ``values`` is a lazy Dask array of them.
    chunks: ValueChunks | None = None

    def in_memory(self) -> MeasurementRecord:
        """This record with its values as a numpy array: a chunked record's chunk files
        read here, each checked against its sha256 (the record's own ``values_sha256`` is
        then that of the values, as for a record drawn in one process)."""
        if self.chunks is None:
            return self
        values = np.asarray(self.values.compute(scheduler="threads"), dtype=np.int64)
        values.setflags(write=False)
        return dataclasses.replace(self, values=values, chunks=None)

    def noise_variance(self) -> float:
        """The exact variance of one noise draw (integer units, before dividing by the
        quantization scale): see :func:`discrete_noise_variance`."""
        return discrete_noise_variance(self.noise, self.scale, self.sigma2)

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
            **self._values_entry(),
        }

    def _values_entry(self) -> dict[str, object]:
        if self.chunks is not None:
            return {"chunks": self.chunks.to_json(), "values_sha256": self.chunks.digest()}
        return {"values_sha256": hashlib.sha256(int64_view(self.values)).hexdigest()}

    def to_bytes(self) -> bytes:
        """The record's file contents (a chunked record's values are in its chunk files)."""
        if self.chunks is not None:
            return header_line(self.header())
        return header_line(self.header()) + int64_view(self.values).tobytes()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeasurementRecord):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # holds an array


def discrete_noise_variance(noise: str, scale: Fraction | None, sigma2: Fraction | None) -> float:
    """The exact variance of one draw of a record's noise.

    Discrete Laplace of scale t: ``2 e^{-1/t} / (1 - e^{-1/t})²``; discrete Gaussian of
    parameter σ²: ``Σ k² e^{-k²/2σ²} / Σ e^{-k²/2σ²}`` (slightly below σ²).

    Example:
        >>> round(discrete_noise_variance("discrete_gaussian", None, Fraction(100)), 6)
        100.0
    """
    if noise == "discrete_laplace":
        # 2q / (1 − q)² with q = e^{−1/t} is 1 / (2 sinh²(1/2t)): 2t² for a huge t and
        # 2e^{−1/t} for a tiny one, where the sinh would overflow.
        rate = 1 / Fraction(scale)
        if rate > 700:
            return 2.0 * math.exp(-float(min(rate, 1000)))
        if rate < Fraction(1, 10**150):
            return math.inf if scale > 10**150 else 2.0 * float(scale) ** 2
        return 0.5 / math.sinh(float(rate) / 2) ** 2
    variance = float(sigma2)
    if variance >= _SERIES_LIMIT:
        # For σ ≥ 10 the variance equals σ² up to a relative e^(−2π²σ²) < 1e-800.
        return variance
    limit = int(_TAIL_SIGMAS * math.sqrt(variance)) + 2
    k = np.arange(-limit, limit + 1, dtype=np.float64)
    weights = np.exp(-(k**2) / (2.0 * variance))
    return float((k**2 * weights).sum() / weights.sum())


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


def store_folder(store: object) -> Path:
    """``store`` as a Path if it names an existing folder, else a MeasurementError."""
    if not isinstance(store, str | os.PathLike):
        raise MeasurementError(f"a measurement store must be a folder path, got {store!r:.80}")
    folder = Path(store)
    if not folder.is_dir():
        raise MeasurementError(f"the measurement store {folder} is not an existing folder")
    return folder


def int64_view(array: np.ndarray) -> np.ndarray:
    """The array as contiguous little-endian int64 (a view when it already is)."""
    return np.ascontiguousarray(array, dtype="<i8")


def header_line(header: dict[str, object]) -> bytes:
    """A record's first line: its header as sorted ASCII JSON, then a newline."""
    return json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n"


def load_measurement(store: str | os.PathLike[str], measurement_id: str) -> MeasurementRecord:
    """Read a stored measurement record: check its header and values, then build it.

    Raises:
        MeasurementError: There is no such record, or the file is not a complete record.
        MeasurementMismatch: The file is a dpmm record of another format (a residual one).
    """
    path = record_path(store, measurement_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MeasurementError(f"no measurement {measurement_id!r} in {store}") from None
    broken = f"{path} is not a complete dpmm measurement record"
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise MeasurementError(broken)
    try:
        header = json.loads(data[:end].decode("ascii"))
        found = header.get("format")
        if found != FORMAT:
            if isinstance(found, str) and found.startswith(_DPMM_TAG):
                raise MeasurementMismatch(
                    f"{path} is a {found!r} record, not a measurement; use a new measurement id"
                )
            raise MeasurementError(f"{path} is not in the format {FORMAT}")
        body = memoryview(data)[end + 1 :]
        if "chunks" in header:
            chunks = ValueChunks.from_json(header["chunks"])
            counted = chunks.count != int(header["count"])
            if len(body) or counted or chunks.digest() != header["values_sha256"]:
                raise MeasurementError(f"{broken}: its chunks do not hold its values")
            values = values_array(chunk_folder(store, measurement_id), chunks)
            return _named(record_from_header(header, values, chunks), measurement_id, path)
        digest = header["values_sha256"]
        if len(body) != 8 * int(header["count"]) or hashlib.sha256(body).hexdigest() != digest:
            raise MeasurementError(f"{broken}: its values were truncated or changed")
        values = np.frombuffer(body, dtype="<i8").astype(np.int64, copy=False)
        record = record_from_header(header, values)
    except MeasurementError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, ZeroDivisionError) as e:
        raise MeasurementError(f"{broken} ({type(e).__name__}: {e})") from None
    return _named(record, measurement_id, path)


def _named(record: MeasurementRecord, measurement_id: str, path: Path) -> MeasurementRecord:
    if record.measurement_id != measurement_id:
        raise MeasurementError(f"{path} holds measurement {record.measurement_id!r}")
    return record


def write_record(record: MeasurementRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically and durably (see the module docstring); a
    chunked record's header only, its chunks being persisted already."""
    if record.chunks is not None:
        atomic_write(path, [record.to_bytes()])
        return
    values = int64_view(record.values)
    # The values are passed as a view of themselves: no copy of a large measurement.
    atomic_write(path, [header_line(record.header()), memoryview(values).cast("B")])


def record_from_header(
    header: dict[str, object], values: Any, chunks: ValueChunks | None = None
) -> MeasurementRecord:
    """A record from its :meth:`MeasurementRecord.header` and values (a numpy array, made
    read-only, or a chunked record's lazy Dask array and its chunks).

    Raises:
        ValueError, KeyError, TypeError: A field is missing or malformed.
    """
    if chunks is None:
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
        privacy=privacy_from_config(header["privacy"]),
        guarantee=str(header["guarantee"]),
        reservation_id=str(header["reservation_id"]),
        release_id=str(header["release_id"]),
        created=str(header["created"]),
        values=values,
        quantization_scale=int(header["quantization_scale"]),
        chunks=chunks,
    )


def _optional_fraction(value: object) -> Fraction | None:
    return None if value is None else Fraction(str(value))
