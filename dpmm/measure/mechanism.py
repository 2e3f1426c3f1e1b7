"""Measure a strategy on a data vector with exact noise, drawn once and persisted first.

The order of events is what makes the guarantee hold across crashes and retries
(DESIGN §5, rules 3 and 4):

1. everything is validated and the exact answers are computed, so a refusal spends nothing;
2. if the store already holds a record for the id, it is checked against the request and
   returned: no noise is drawn and the ledger is not touched;
3. otherwise the reservation must still be *reserved*: a spent reservation without a record
   means noise was drawn and lost, and drawing again would spend the budget twice;
4. the reservation is marked spent, then the noise is drawn;
5. the record is written atomically, and what is returned is the record read back from disk.

A lock file in the store serializes steps 2 to 5 between processes sharing the store;
:func:`check_reservation` is the budget part of step 1.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpmm.durable import exclusive_lock
from dpmm.linalg import Matrix
from dpmm.measure import record as records
from dpmm.measure.chunked import answer_chunks, draw_chunked, is_chunked, not_reserved
from dpmm.measure.exact import (
    ExactStrategy,
    MeasurementError,
    MeasurementMismatch,
    analyze_strategy,
    exact_answers,
)
from dpmm.measure.noise import add_noise, draw_noise
from dpmm.measure.quantize import QuantizedStrategy
from dpmm.measure.record import (
    LOCK_NAME,
    MeasurementRecord,
    check_measurement_id,
    discrete_noise_variance,
    record_path,
    store_folder,
)
from dpmm.measure.tables import MarginalCounts, TableGroups, marginal_answers
from dpmm.privacy.accounting import discrete_gaussian_zcdp, gaussian_sigma2, laplace_scale
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.privacy.randomness import RandomSource

__all__ = [
    "NoiseModel",
    "check_reservation",
    "draw_noise",
    "measure",
    "planned_noise_variance",
    "planned_record",
    "record_fields",
    "reuse_record",
]

_LAPLACE_THEOREM = (
    "Ghosh, Roughgarden, Sundararajan 2009 (the geometric mechanism): independent discrete "
    "Laplace noise of scale t on an integer query of L1 sensitivity Δ₁ gives (Δ₁/t)-DP"
)
#: What a stored record must share with a request to be reused (the strategy's repr and the
#: theorem's wording may change between versions without changing the measurement).
_MATCHED = ("strategy_fingerprint", "shape", "privacy", "norm", "sensitivity", "noise")
_MATCHED += ("scale", "sigma2", "quantization_scale")
#: The id of a record drawn in memory (neither persisted nor charged).
IN_MEMORY = "in-memory"
_PERSIST_ARGUMENTS = ("store", "measurement_id", "ledger", "reservation")


def _persistence_requested(**arguments: object) -> bool:
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


def measure(
    A: Matrix | QuantizedStrategy,
    x: np.ndarray | MarginalCounts | TableGroups,
    privacy: PureDP | ZCDP,
    *,
    store: str | os.PathLike[str] | None = None,
    measurement_id: str | None = None,
    ledger: Ledger | None = None,
    reservation: Reservation | None = None,
    rng: RandomSource | np.random.Generator | None = None,
    client: Any = None,
) -> MeasurementRecord:
    """``A x`` plus exact discrete noise calibrated to ``privacy``, persisted before returned.

    Pure DP adds discrete Laplace noise of scale ``Δ₁/ε``; zCDP adds discrete Gaussian noise
    of variance parameter ``Δ₂²/(2ρ)``. Calling again with the same ``measurement_id``
    returns the stored record unchanged, drawing nothing, if the request matches it; a fresh
    reservation passed with such a retry (a re-run of the release) is cancelled, unspent.

    Without ``store``, ``measurement_id``, ``ledger`` and ``reservation`` (all four are
    given together or not at all) the record is drawn in memory, not persisted and not
    charged: research use, where the caller accounts for the budget.

    Args:
        A: the strategy: a matrix with integer entries (see :mod:`dpmm.measure.exact`), or a
            real-valued one quantized by :func:`~dpmm.measure.quantize.quantize`, whose
            integer matrix is measured and whose scale the record keeps.
        x: the data vector, a 1-D array of non-negative integer counts of length
            ``A.shape[1]``; or, for a :class:`~dpmm.linalg.Marginals` strategy, the exact
            marginal tables it measures (:class:`~dpmm.measure.tables.MarginalCounts`); or,
            for a Kronecker strategy, a Dask array of the counts held by a cluster, which
            is measured there chunk by chunk (:mod:`dpmm.measure.chunked`; persisted only);
            or, for either strategy read from tables, those tables held by a cluster
            (:class:`~dpmm.measure.tables.TableGroups`), measured there group by group.
        privacy: ``PureDP`` or ``ZCDP``, exactly the reservation's budget.
        store: an existing folder holding the measurement records.
        measurement_id: the record's name in the store: letters, digits, '.', '_', '-'.
        ledger: the open ledger holding ``reservation``.
        reservation: the budget reserved for this measurement; marked spent before drawing.
        rng: tests only: a ``numpy.random.Generator``. The default is the OS CSPRNG (which
            a chunked measurement always uses, on each worker).
        client: A ``distributed.Client`` for a chunked measurement; None: local threads.

    Returns:
        The record as read back from the store.

    Raises:
        MeasurementError: The request is invalid, the strategy is not integer-valued, or the
            reservation is not *reserved* while no record exists; nothing was spent.
        MeasurementMismatch: A record with this id exists for another strategy or privacy,
            or is a dpmm record of another format (a residual measurement).
    """
    persisted = _persistence_requested(
        store=store, measurement_id=measurement_id, ledger=ledger, reservation=reservation
    )
    quantization_scale = 1
    if isinstance(A, QuantizedStrategy):
        A, quantization_scale = A.integer, A.scale
    exact = analyze_strategy(A)
    chunked = is_chunked(x)
    if chunked and not persisted:
        raise MeasurementError("a measurement of counts held by a cluster must be persisted")
    counts = x if isinstance(x, MarginalCounts) or chunked else _counts(x, A.shape[1])
    if persisted:
        check_reservation(privacy, reservation)
    elif not isinstance(privacy, PureDP | ZCDP):
        raise MeasurementError(f"privacy must be PureDP or ZCDP, got {privacy!r:.80}")
    expected = {**record_fields(exact, privacy), "quantization_scale": quantization_scale}

    def answers() -> np.ndarray:
        if isinstance(counts, MarginalCounts):
            return marginal_answers(exact, counts)
        return exact_answers(exact, counts)

    def draw(values: np.ndarray) -> MeasurementRecord:
        return MeasurementRecord(
            measurement_id=measurement_id or IN_MEMORY,
            values=add_noise(expected, values, rng),
            reservation_id=reservation.id if persisted else "",
            release_id=reservation.release_id if persisted else "",
            created=datetime.now(UTC).isoformat(timespec="microseconds"),
            **expected,
        )

    if not persisted:
        return draw(answers())
    measurement_id = check_measurement_id(measurement_id)
    folder = store_folder(store)
    path = record_path(folder, measurement_id)
    with exclusive_lock(folder / LOCK_NAME):  # steps 2 to 5
        if path.exists():
            return reuse_record(folder, measurement_id, expected, ledger, reservation)
        if chunked:
            return draw_chunked(
                exact, x, expected, folder, measurement_id, ledger, reservation, client=client
            )
        values = answers()
        status = ledger.status(reservation)
        if status != "reserved":
            raise not_reserved(status, reservation, measurement_id)
        ledger.mark_spent(reservation)
        record = draw(values)
        del values
        records.write_record(record, path)
        del record  # what is returned is the copy on disk: free the drawn one first
        return records.load_measurement(folder, measurement_id)


def planned_record(
    A: QuantizedStrategy, privacy: PureDP | ZCDP, *, lazy: bool = False
) -> MeasurementRecord:
    """The record :func:`measure` would write for ``A`` under ``privacy``, with every answer
    zero and no noise drawn: not a measurement, but what post-processing can be run on to
    learn, without data, exactly what it computes and how much noise it will face.

    ``lazy``: the zeros as a Dask array chunked as a measurement on the cluster would be
    (:func:`~dpmm.measure.chunked.answer_chunks`), for post-processing planned there.

    Raises:
        MeasurementError: the strategy is not exactly measurable.
    """
    expected = record_fields(analyze_strategy(A.integer), privacy)
    rows = A.integer.shape[0]
    if lazy:
        import dask.array as da

        values = da.zeros(rows, dtype=np.int64, chunks=(answer_chunks(A.integer),))
    else:
        values = np.zeros(rows, dtype=np.int64)
    return MeasurementRecord(
        measurement_id="planned",
        values=values,
        reservation_id="",
        release_id="",
        created="",
        quantization_scale=A.scale,
        **expected,
    )


def planned_noise_variance(A: QuantizedStrategy, privacy: PureDP | ZCDP) -> float:
    """The variance of the noise :func:`measure` adds to each answer of ``A_q``, exactly
    as its record will state it (strategy units: divided by the quantization scale²).

    Raises:
        MeasurementError: the strategy is not exactly measurable.
    """
    return NoiseModel.of(A).variance(privacy)


@dataclass(frozen=True, eq=False)
class NoiseModel:
    """The exact noise :func:`measure` adds to a strategy's answers, as a function of the
    budget, with the strategy's sensitivity computed once (accuracy targets search it).

    Attributes:
        strategy: The quantized strategy measured.
        exact: Its integer matrix's exact norms.
    """

    strategy: QuantizedStrategy
    exact: ExactStrategy

    @classmethod
    def of(cls, A: QuantizedStrategy) -> NoiseModel:
        """Raises MeasurementError: the strategy is not exactly measurable."""
        return cls(A, analyze_strategy(A.integer))

    def variance(self, privacy: PureDP | ZCDP) -> float:
        """:func:`planned_noise_variance` at ``privacy``.

        Raises:
            MeasurementError: the samplers cannot draw this budget's noise.
        """
        plan = record_fields(self.exact, privacy)
        noise = discrete_noise_variance(plan["noise"], plan["scale"], plan["sigma2"])
        return noise / self.strategy.scale**2

    @property
    def gaussian_constant(self) -> Fraction:
        """``Δ₂²/2`` of the integer strategy: under ρ its noise has ``σ² = Δ₂²/(2ρ)``."""
        return Fraction(self.exact.sensitivity_l2_squared) / 2


#: The noise a release can draw and reconstruct with, in the integer strategy's units: a
#: standard deviation up to 2⁵⁶ keeps every draw far inside int64 (a draw beyond 2⁶² has
#: probability below e⁻⁶⁴), and a variance down to 10⁻²⁰⁰ is still a positive float (below
#: it almost every draw is 0 and no standard error can be stated).
NOISE_STD_MAX = 2.0**56
NOISE_VARIANCE_MIN = 1e-200
#: ln(2 / NOISE_VARIANCE_MIN): the largest 1/t (Laplace) or 1/(2σ²) (Gaussian) whose
#: variance, about 2·e^{−(that)}, stays above NOISE_VARIANCE_MIN.
_LEAST_NOISE_RATE = math.log(2 / NOISE_VARIANCE_MIN)


def _check_noise_range(plan: dict[str, object], privacy: PureDP | ZCDP) -> None:
    """Refuse a budget whose noise the samplers cannot draw, or which would be no noise.

    Raises:
        MeasurementError: naming the usable range of the budget for this strategy.
    """
    variance = discrete_noise_variance(plan["noise"], plan["scale"], plan["sigma2"])
    if variance >= NOISE_VARIANCE_MIN and math.sqrt(variance) <= NOISE_STD_MAX:
        return
    sensitivity = float(plan["sensitivity"])  # Δ₁ (t = Δ₁/ε), or Δ₂² (σ² = Δ₂²/2ρ)
    laplace = isinstance(privacy, PureDP)
    name, budget = ("ε", privacy.epsilon) if laplace else ("ρ", privacy.rho)
    low = sensitivity * (math.sqrt(2) / NOISE_STD_MAX if laplace else 0.5 / NOISE_STD_MAX**2)
    raise MeasurementError(
        f"{name} = {float(budget):.3g} gives this strategy noise of variance {variance:.3g} "
        "(in its integer units), outside what the exact samplers draw and a release can "
        f"state; for this strategy use {name} between {low:.3g} and "
        f"{sensitivity * _LEAST_NOISE_RATE:.3g}"
    )


def record_fields(exact: ExactStrategy, privacy: PureDP | ZCDP) -> dict[str, object]:
    """Every record field that follows from the strategy and the privacy alone (but the
    quantization scale).

    Raises:
        MeasurementError: the budget's noise is outside the samplers' range.
    """
    plan = _noise_plan(exact, privacy)
    _check_noise_range(plan, privacy)
    return plan


def _noise_plan(exact: ExactStrategy, privacy: PureDP | ZCDP) -> dict[str, object]:
    common = {
        "strategy": repr(exact.matrix),
        "strategy_fingerprint": exact.fingerprint(),
        "shape": (int(exact.matrix.shape[0]), int(exact.matrix.shape[1])),
        "privacy": privacy,
    }
    if isinstance(privacy, PureDP):
        sensitivity = Fraction(exact.sensitivity_l1)
        scale = laplace_scale(sensitivity, privacy)
        if sensitivity / scale != privacy.epsilon:  # pragma: no cover - exact arithmetic
            raise MeasurementError(f"the Laplace scale {scale} does not give {privacy}")
        return {
            **common,
            "norm": "l1",
            "sensitivity": sensitivity,
            "noise": "discrete_laplace",
            "scale": scale,
            "sigma2": None,
            "guarantee": _LAPLACE_THEOREM,
        }
    sensitivity = Fraction(exact.sensitivity_l2_squared)
    sigma2 = gaussian_sigma2(sensitivity, privacy)
    guarantee = discrete_gaussian_zcdp(sigma2, sensitivity, max(exact.matrix.shape[0], 1))
    if guarantee.privacy.rho > privacy.rho:
        raise MeasurementError(
            f"σ² = {sigma2} gives only {guarantee.privacy} by {guarantee.theorem}, "
            f"weaker than the {privacy} reserved"
        )
    return {
        **common,
        "norm": "l2",
        "sensitivity": sensitivity,
        "noise": "discrete_gaussian",
        "scale": None,
        "sigma2": sigma2,
        "guarantee": guarantee.theorem,
    }


def reuse_record(
    folder: Path,
    measurement_id: str,
    expected: dict[str, object],
    ledger: Ledger,
    reservation: Reservation,
) -> MeasurementRecord:
    """The stored record of ``measurement_id``, which must match the request (its
    :func:`record_fields`); a fresh reservation made for it by a re-run is cancelled.

    Raises:
        MeasurementMismatch: it was taken with another strategy, budget or noise.
    """
    stored = records.load_measurement(folder, measurement_id)
    different = [name for name in _MATCHED if getattr(stored, name) != expected[name]]
    if different:
        raise MeasurementMismatch(
            f"measurement {measurement_id!r} in {folder} was taken with another "
            f"{', '.join(different)}; use a new measurement id for a different request"
        )
    if stored.reservation_id != reservation.id and ledger.status(reservation) == "reserved":
        # A re-run reserved budget for a measurement that already exists: no noise is
        # drawn for it, so release it rather than leave it locked.
        ledger.cancel(reservation)
    return stored


def _counts(x: object, columns: int) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
        described = f"{x.dtype} array of shape {x.shape}" if isinstance(x, np.ndarray) else None
        raise MeasurementError(
            "the data vector must be a 1-D numpy array of integer counts, got "
            f"{described or type(x).__name__}"
        )
    if x.size != columns:
        raise MeasurementError(
            f"the data vector has {x.size} cells but the strategy has {columns} columns"
        )
    if x.size and x.min() < 0:
        raise MeasurementError("the data vector has a negative count")
    return x


def check_reservation(privacy: object, reservation: object) -> None:
    """Refuse a budget that is not exactly the reservation's.

    Args:
        privacy: the budget requested, ``PureDP`` or ``ZCDP``.
        reservation: the ledger reservation the measurement will spend.

    Raises:
        MeasurementError: One of them does not hold; nothing was read or spent.
    """
    if not isinstance(privacy, PureDP | ZCDP):
        raise MeasurementError(f"privacy must be PureDP or ZCDP, got {privacy!r:.80}")
    if not isinstance(reservation, Reservation):
        raise MeasurementError(
            f"a reservation must be a ledger Reservation, got {type(reservation).__name__}"
        )
    if type(reservation.budget) is not type(privacy) or reservation.budget != privacy:
        raise MeasurementError(
            f"privacy {privacy} is not the budget {reservation.budget} of reservation "
            f"{reservation.id!r}; measure with exactly the reserved budget"
        )
