"""Tests of dpmm.measure: exact calibration, drawn-once persistence, and crash behaviour."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpmm.linalg import (
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Prefix,
    Product,
    Sparse,
    Weighted,
)
from dpmm.linalg.serialize import load_matrix, save_matrix
from dpmm.measure import (
    MeasurementError,
    MeasurementMismatch,
    analyze_strategy,
    load_measurement,
    measure,
    record_path,
)
from dpmm.measure import record as records
from dpmm.privacy.accounting import gaussian_sigma2, laplace_scale
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.privacy.randomness import RandomSource

from .conftest import INTEGER_STRATEGIES, MEASURED_PURE, reserve

DATASET = MEASURED_PURE


class ExplodingRandom(RandomSource):
    """A random source that fails the test if anything draws from it."""

    def _fresh_bytes(self, count: int) -> bytes:
        raise AssertionError("noise was drawn")


class Untouchable:
    """A stand-in ledger that fails the test if anything uses it."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the ledger was used ({name})")


def retake(store, A, x, privacy, measurement_id, reservation):
    """Measure again where a record must already exist: nothing may draw or use the ledger."""
    return measure(
        A,
        x,
        privacy,
        store=store,
        measurement_id=measurement_id,
        ledger=Untouchable(),
        reservation=reservation,
        rng=ExplodingRandom(),
    )


def take(ledger, store, A, x, privacy, measurement_id="m", *, rng=None, reservation=None):
    reservation = reservation or reserve(ledger, privacy)
    return measure(
        A,
        x,
        privacy,
        store=store,
        measurement_id=measurement_id,
        ledger=ledger,
        reservation=reservation,
        rng=rng if rng is not None else np.random.default_rng(1),
    )


def record_files(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir() if p.name != ".measure.lock")


# --- exact sensitivities --------------------------------------------------------------------


@pytest.mark.parametrize("A", INTEGER_STRATEGIES, ids=repr)
def test_exact_sensitivities_equal_the_dense_matrix(A: Matrix) -> None:
    dense = A.dense()
    exact = analyze_strategy(A)
    assert exact.sensitivity_l1 == int(np.abs(dense).sum(axis=0).max())
    assert exact.sensitivity_l2_squared == int((dense**2).sum(axis=0).max())
    assert np.array_equal(exact.column_l1, np.abs(dense).sum(axis=0))
    assert np.array_equal(exact.column_l2_squared, (dense**2).sum(axis=0))
    assert np.all(np.abs(dense) <= exact.entry_bound)


def test_duplicate_sparse_entries_count_as_their_sum(tmp_path: Path) -> None:
    # Column 0 is stored as two entries 1 and 1: its entry is 2, so Δ₂² is 4, not 2.
    csr = sp.csr_array((np.ones(3), np.array([0, 0, 1]), np.array([0, 3])), shape=(1, 2))
    assert not csr.has_canonical_format
    A = Sparse(csr)
    assert analyze_strategy(A).sensitivity_l2_squared == 4
    assert analyze_strategy(A).sensitivity_l1 == 2
    assert A.column_norms(2).tolist() == [2.0, 1.0]
    assert csr.data.tolist() == [1.0, 1.0, 1.0]  # the caller's array is left as it was
    # A file holding the duplicated form (written before construction summed them, or by
    # hand) loads canonical too.
    stored = Sparse(sp.csr_array((1, 2)))
    stored.matrix = csr
    save_matrix(stored, tmp_path / "duplicates.npz")
    loaded = load_matrix(tmp_path / "duplicates.npz")
    assert analyze_strategy(loaded).sensitivity_l2_squared == 4


@pytest.mark.parametrize(
    "A",
    [
        Dense([[0.5, 1.0], [1.0, 0.0]]),
        Weighted(0.5, Identity(3)),
        Kron([Identity(2), Dense([[1.0, 1.5]])]),
        Product([Prefix(3), Prefix(3)]),
        Prefix(3).T,
    ],
    ids=repr,
)
def test_real_valued_strategies_are_refused_and_nothing_is_spent(ledger, store, A) -> None:
    reservation = reserve(ledger, PureDP(1))
    x = np.ones(A.shape[1], dtype=np.int64)
    with pytest.raises(MeasurementError, match="quantization"):
        take(ledger, store, A, x, PureDP(1), reservation=reservation)
    assert ledger.status(reservation) == "reserved"
    assert record_files(store) == []


# --- calibration and noise distribution --------------------------------------------------------


def laplace_variance(scale: Fraction) -> float:
    q = math.exp(-1 / float(scale))
    return 2 * q / (1 - q) ** 2


def gaussian_variance(sigma2: Fraction) -> float:
    k = np.arange(-60 * math.ceil(math.sqrt(sigma2)), 60 * math.ceil(math.sqrt(sigma2)) + 1)
    weights = np.exp(-(k.astype(float) ** 2) / (2 * float(sigma2)))
    return float((k**2 * weights).sum() / weights.sum())


NOISE_CASES = [
    (Hierarchical(1024), 10),
    (Marginals((8, 10, 12), {(0,): 1, (0, 1): 2, (1, 2): 1, (0, 1, 2): 1}), 18),
    (Kron([Hierarchical(32), Prefix(16)]), 20),
]


@pytest.mark.parametrize("privacy", [PureDP("1/2"), ZCDP("1/2")], ids=repr)
@pytest.mark.parametrize(("A", "repeats"), NOISE_CASES, ids=lambda v: repr(v))
def test_noise_has_the_calibrated_distribution(ledger, store, A, repeats, privacy) -> None:
    rng = np.random.default_rng(2026)
    x = rng.integers(0, 20, size=A.shape[1])
    truth = np.rint(A.dense() @ x).astype(np.int64)
    noise = []
    for i in range(repeats):
        record = take(ledger, store, A, x, privacy, f"m{i}", rng=rng)
        noise.append(record.values - truth)
    samples = np.concatenate(noise).astype(np.float64)
    dense = A.dense()
    if isinstance(privacy, PureDP):
        sensitivity = Fraction(int(np.abs(dense).sum(axis=0).max()))
        assert record.norm == "l1" and record.noise == "discrete_laplace"
        assert record.sensitivity == sensitivity
        assert record.scale == laplace_scale(sensitivity, privacy) == sensitivity * 2
        assert record.sigma2 is None
        variance = laplace_variance(record.scale)
    else:
        sensitivity = Fraction(int((dense**2).sum(axis=0).max()))
        assert record.norm == "l2" and record.noise == "discrete_gaussian"
        assert record.sensitivity == sensitivity
        assert record.sigma2 == gaussian_sigma2(sensitivity, privacy) == sensitivity
        assert record.scale is None
        assert "Theorem 14" in record.guarantee
        variance = gaussian_variance(record.sigma2)
    assert isinstance(record.sensitivity, Fraction)
    assert record.values.dtype == np.int64 and record.shape == A.shape
    assert samples.size >= 18_000
    assert abs(samples.mean()) < 4 * math.sqrt(variance / samples.size)
    assert samples.var() == pytest.approx(variance, rel=0.05)


# --- drawn once, reused bit for bit ---------------------------------------------------------


def test_a_second_call_returns_the_stored_record_without_drawing_or_spending(ledger, store) -> None:
    A, x = Kron([Hierarchical(8), Identity(3)]), np.arange(24)
    reservation = reserve(ledger, PureDP(1))
    first = take(ledger, store, A, x, PureDP(1), reservation=reservation)
    path = record_path(store, "m")
    stored = path.read_bytes()
    entries = ledger.verify()
    again = retake(store, A, x, PureDP(1), "m", reservation)
    assert again == first
    assert np.array_equal(again.values, first.values)
    assert path.read_bytes() == stored
    assert ledger.verify() == entries
    assert load_measurement(store, "m") == first
    assert first.reservation_id == reservation.id


def test_a_different_strategy_or_privacy_under_the_same_id_is_a_mismatch(ledger, store) -> None:
    x = np.arange(8)
    take(ledger, store, Hierarchical(8), x, PureDP(1))
    before = record_path(store, "m").read_bytes()
    other = reserve(ledger, PureDP(1), "r2")
    with pytest.raises(MeasurementMismatch, match="strategy_fingerprint"):
        take(ledger, store, Haar(8), x, PureDP(1), reservation=other)
    with pytest.raises(MeasurementMismatch, match="privacy"):
        take(ledger, store, Hierarchical(8), x, PureDP(2))
    assert ledger.status(other) == "reserved"
    assert record_path(store, "m").read_bytes() == before
    assert record_files(store) == ["m.measurement"]


# --- the ledger ---------------------------------------------------------------------------


def test_the_reservation_is_spent_after_a_measurement(ledger, store) -> None:
    reservation = reserve(ledger, ZCDP("1/4"))
    take(ledger, store, Prefix(4), np.arange(4), ZCDP("1/4"), reservation=reservation)
    assert ledger.status(reservation) == "spent"


def test_a_spent_reservation_without_a_record_is_refused(ledger, store) -> None:
    reservation = reserve(ledger, PureDP(1))
    ledger.mark_spent(reservation)
    with pytest.raises(MeasurementError, match="spent and no record"):
        take(ledger, store, Identity(3), np.arange(3), PureDP(1), reservation=reservation)
    assert record_files(store) == []


def test_a_cancelled_reservation_is_refused(ledger, store) -> None:
    reservation = reserve(ledger, PureDP(1))
    ledger.cancel(reservation)
    with pytest.raises(MeasurementError, match="cancelled"):
        take(ledger, store, Identity(3), np.arange(3), PureDP(1), reservation=reservation)
    assert ledger.status(reservation) == "cancelled"
    assert record_files(store) == []


@pytest.mark.parametrize("privacy", [PureDP("1/2"), ZCDP(1)], ids=repr)
def test_a_budget_other_than_the_reserved_one_is_refused(ledger, store, privacy) -> None:
    reservation = reserve(ledger, PureDP(1))
    with pytest.raises(MeasurementError, match="exactly the reserved budget"):
        take(ledger, store, Identity(3), np.arange(3), privacy, reservation=reservation)
    assert ledger.status(reservation) == "reserved"
    assert record_files(store) == []


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.arange(4.0), "integer counts"),
        ([0, 1, 2, 3], "integer counts"),
        (np.arange(4).reshape(2, 2), "integer counts"),
        (np.arange(5), "5 cells but the strategy has 4"),
        (np.array([1, -1, 0, 0]), "negative count"),
    ],
)
def test_bad_data_vectors_are_refused(ledger, store, x, match) -> None:
    reservation = reserve(ledger, PureDP(1))
    with pytest.raises(MeasurementError, match=match):
        take(ledger, store, Prefix(4), x, PureDP(1), reservation=reservation)
    assert ledger.status(reservation) == "reserved"


@pytest.mark.parametrize("bad", ["", "../escape", ".hidden", "a/b", "x" * 200, 7])
def test_unsafe_measurement_ids_are_refused(ledger, store, bad) -> None:
    with pytest.raises(MeasurementError, match="measurement id"):
        take(ledger, store, Identity(2), np.arange(2), PureDP(1), bad)


def test_answers_too_large_for_exact_float_arithmetic_are_refused(ledger, store) -> None:
    reservation = reserve(ledger, PureDP(1))
    x = np.array([2**52, 2**52], dtype=np.int64)
    with pytest.raises(MeasurementError, match="2\\*\\*53"):
        take(ledger, store, Prefix(2), x, PureDP(1), reservation=reservation)
    assert ledger.status(reservation) == "reserved"


def test_a_damaged_record_is_refused(ledger, store) -> None:
    take(ledger, store, Identity(4), np.arange(4), PureDP(1))
    path = record_path(store, "m")
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(MeasurementError, match="truncated or changed"):
        load_measurement(store, "m")
    with pytest.raises(MeasurementError, match="no measurement"):
        load_measurement(store, "other")


# --- crashes --------------------------------------------------------------------------------


def test_a_crash_before_the_record_is_written_leaves_the_budget_spent(
    ledger, store, monkeypatch
) -> None:
    reservation = reserve(ledger, PureDP(1))

    def crash(source: object, target: object) -> None:
        raise OSError("disk gone")

    with monkeypatch.context() as patch:
        patch.setattr(records.os, "replace", crash)
        with pytest.raises(OSError, match="disk gone"):
            take(ledger, store, Identity(4), np.arange(4), PureDP(1), reservation=reservation)
    assert ledger.status(reservation) == "spent"
    assert record_files(store) == []
    with pytest.raises(MeasurementError, match="spent and no record"):
        take(ledger, store, Identity(4), np.arange(4), PureDP(1), reservation=reservation)


def _measure_then_wait(ledger_path, store, reservation, queue) -> None:
    """Child process: measure, report the values, then wait to be killed."""
    ledger = Ledger.open(ledger_path)
    record = measure(
        Kron([Hierarchical(8), Identity(2)]),
        np.arange(16),
        PureDP(1),
        store=store,
        measurement_id="killed",
        ledger=ledger,
        reservation=reservation,
        rng=np.random.default_rng(7),
    )
    queue.put(record.values.tolist())
    while True:
        signal.pause()


def test_a_process_killed_after_measuring_leaves_a_reusable_record(ledger, store) -> None:
    reservation = reserve(ledger, PureDP(1))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(
        target=_measure_then_wait, args=(ledger.path, store, reservation, queue)
    )
    child.start()
    try:
        values = queue.get(timeout=120)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    assert ledger.status(reservation) == "spent"
    stored = record_path(store, "killed").read_bytes()
    record = retake(
        store, Kron([Hierarchical(8), Identity(2)]), np.arange(16), PureDP(1), "killed", reservation
    )
    assert record.values.tolist() == values
    assert record.to_bytes() == stored
    assert record_path(store, "killed").read_bytes() == stored


def test_a_rerun_gets_the_stored_record_and_its_fresh_reservation_back(ledger, store) -> None:
    A, x = Kron([Hierarchical(8), Identity(3)]), np.arange(24)
    first = take(ledger, store, A, x, PureDP(1), reservation=reserve(ledger, PureDP(1)))
    before = ledger.remaining(DATASET)
    rerun = reserve(ledger, PureDP(1))
    assert ledger.remaining(DATASET) == before - 1
    again = measure(
        A,
        x,
        PureDP(1),
        store=store,
        measurement_id="m",
        ledger=ledger,
        reservation=rerun,
        rng=ExplodingRandom(),
    )
    assert again == first
    assert ledger.status(rerun) == "cancelled"
    assert ledger.remaining(DATASET) == before


def test_counts_too_large_for_exact_answers_are_refused_without_their_number() -> None:
    from dpmm.measure.exact import exact_answers

    counts = np.array([2**52, 2**52, 3], dtype=np.int64)
    with pytest.raises(MeasurementError, match="could exceed 2") as refused:
        exact_answers(analyze_strategy(Prefix(3)), counts)
    assert str(int(counts.sum())) not in str(refused.value)  # no count of the data
