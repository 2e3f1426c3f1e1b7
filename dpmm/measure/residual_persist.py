"""Residual measurements drawn once and persisted before anything reads them.

:func:`~dpmm.measure.residual_tables.measure_residuals` and
:func:`~dpmm.measure.residual_blocks.measure_blocks` take a ``store``, ``measurement_id``,
``ledger`` and ``reservation`` exactly as :func:`~dpmm.measure.mechanism.measure` does, and
follow its five steps through the same code (:func:`measure_once`, which calls
:func:`~dpmm.measure.mechanism.check_reservation` and
:func:`~dpmm.measure.mechanism.draw_once`): validate and plan the noise (a refusal spends
nothing); reuse a stored record with the same id (no draw, no ledger write); refuse a
reservation that is not *reserved*; mark it spent, compute the answers and draw; write the
record atomically and return the measurement READ BACK from the store. The store's lock
serializes this between processes. A :class:`~dpmm.measure.residual_record.NoisePlan`
(:func:`residual_plan`, :func:`blocks_plan`) is everything the record holds that follows
from the strategy and the budget; a stored record is reused only if its plan matches.

The example in :mod:`dpmm.measure.residual_record` persists, reuses and reloads one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.linalg.serialize import matrix_digest
from dpmm.measure.exact import MeasurementError, MeasurementMismatch
from dpmm.measure.mechanism import check_reservation, draw_once
from dpmm.measure.record import check_measurement_id, int64_view, store_folder
from dpmm.measure.residual_blocks import QuantizedBlocks
from dpmm.measure.residual_record import (
    BLOCKS,
    RESIDUAL,
    Measurement,
    NoisePlan,
    ResidualRecord,
    load_residual_record,
    sigma2_to_json,
    write_residual_record,
)
from dpmm.privacy.accounting import discrete_gaussian_zcdp
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.privacy.params import ZCDP

__all__ = [
    "blocks_fingerprint",
    "blocks_plan",
    "measure_once",
    "persistence_requested",
    "residual_plan",
]

#: Header fields a stored record must share with a request to be reused.
_MATCHED = ("kind", "strategy_fingerprint", "privacy", "rho")
_MATCHED_LAYOUT = {
    RESIDUAL: ("domain_shape", "sets", "sigma2"),
    BLOCKS: ("domain_shape", "sets", "scale", "sigma2", "squared_sensitivity"),
}
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
            "sigma2": sigma2_to_json([sigma2[mask] for mask in sets]),
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
        Q = int64_view(quantized.integers[mask])
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
    folder = store_folder(store)
    check_reservation(plan.privacy, reservation, plan.rho)

    def record(exact: np.ndarray) -> ResidualRecord:
        return ResidualRecord(
            measurement_id=measurement_id,
            plan=plan,
            reservation_id=reservation.id,
            release_id=reservation.release_id,
            created=datetime.now(UTC).isoformat(timespec="microseconds"),
            measurement=draw(exact),
        )

    stored = draw_once(
        folder,
        measurement_id,
        ledger,
        reservation,
        reuse=lambda: _reuse(folder, measurement_id, plan),
        answers=answers,
        draw=record,
        write=write_residual_record,
        load=lambda: load_residual_record(folder, measurement_id),
    )
    return stored.measurement


# -- helpers -------------------------------------------------------------------------------


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
