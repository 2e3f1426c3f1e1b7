"""A measurement drawn chunk by chunk on Dask: exact answers, exact noise, each chunk drawn
once (a retry, a crash and resume, a killed worker), chunk files checked on reading."""

from __future__ import annotations

import os
import signal
import threading
import time
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

from dpmm.linalg import Hierarchical, Identity, Kron, Marginals, Prefix
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.measure import (
    MeasurementError,
    MeasurementMismatch,
    analyze_strategy,
    load_measurement,
    measure,
    quantize,
)
from dpmm.measure import chunked as chunked_module
from dpmm.measure.chunk_files import chunk_folder, write_chunk
from dpmm.measure.quantize import QuantizedStrategy
from dpmm.measure.tables import (
    MarginalCounts,
    TableGroups,
    count_marginals,
    marginal_answers,
    strategy_tables,
)
from dpmm.privacy.params import ZCDP, PureDP
from tests.conftest import reserve


def _counts(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).poisson(3.0, size=shape).astype(np.int64).reshape(-1)


def _measure(store, ledger, A, x, privacy, reservation, **options):
    return measure(
        QuantizedStrategy(A, 1),
        x,
        privacy,
        store=store,
        measurement_id="strategy",
        ledger=ledger,
        reservation=reservation,
        **options,
    )


def _chunk_bytes(store: Path) -> dict[str, bytes]:
    folder = chunk_folder(store, "strategy")
    return {path.name: path.read_bytes() for path in sorted(folder.glob("*.values"))}


def test_answers_are_exact_and_the_noise_has_the_recorded_variance(store, ledger, monkeypatch):
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 1000)
    A = Kron([Hierarchical(16), Prefix(8), Identity(32)])
    x = _counts((16, 8, 32))
    reservation = reserve(ledger, ZCDP(Fraction(1, 50)))
    record = measure(
        QuantizedStrategy(A, 1),
        da.from_array(x, chunks=1024),
        ZCDP(Fraction(1, 50)),
        store=store,
        measurement_id="strategy",
        ledger=ledger,
        reservation=reservation,
    )
    assert ledger.status(reservation) == "spent"
    assert record.chunks is not None and len(record.chunks.parts) > 1
    noise = np.asarray(record.values.compute()) - (A.dense() @ x).round().astype(np.int64)
    variance = record.noise_variance()
    assert record.sigma2 == Fraction((A.dense() ** 2).sum(axis=0).max()) / 2 * 50
    assert abs(noise.mean()) < 4 * np.sqrt(variance / noise.size)
    assert noise.var() == pytest.approx(variance, rel=0.12)  # 7 sd of 7,936 draws' variance
    # Read back through the store: the record names each chunk, and every chunk is checked.
    again = load_measurement(store, "strategy")
    assert again == record
    np.testing.assert_array_equal(again.values.compute(), record.values.compute())


def test_chunks_are_whole_rows_of_about_the_requested_size(store, ledger):
    A = Kron([Identity(40), Prefix(25)])
    reservation = reserve(ledger, PureDP(1))
    x = da.from_array(_counts((40, 25)), chunks=100)
    record = measure(
        QuantizedStrategy(A, 1),
        x,
        PureDP(1),
        store=store,
        measurement_id="strategy",
        ledger=ledger,
        reservation=reservation,
    )
    assert record.values.shape == (1000,)
    assert [(c.start, c.stop) for c in record.chunks.parts] == [(0, 1000)]
    assert record.noise == "discrete_laplace" and record.scale == 25


def test_a_measurement_is_drawn_once_and_reused(store, ledger, monkeypatch):
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 64)
    A = Kron([Prefix(8), Identity(64)])
    x = da.from_array(_counts((8, 64)), chunks=128)
    reservation = reserve(ledger, ZCDP(1))
    first = _measure(store, ledger, A, x, ZCDP(1), reservation)
    stored = _chunk_bytes(store)
    assert len(stored) == 8

    def drawn(*args, **kwargs):
        raise AssertionError("noise was drawn again")

    monkeypatch.setattr(chunked_module, "add_noise", drawn)
    again = _measure(store, ledger, A, x, ZCDP(1), reservation)
    np.testing.assert_array_equal(again.values.compute(), first.values.compute())
    assert _chunk_bytes(store) == stored
    rerun = reserve(ledger, ZCDP(1))
    _measure(store, ledger, A, x, ZCDP(1), rerun)  # a re-run's fresh reservation is freed
    assert ledger.status(rerun) == "cancelled"


def test_a_crash_after_spending_resumes_with_the_persisted_chunks(store, ledger, monkeypatch):
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 32)
    A = Kron([Prefix(16), Identity(32)])
    x = da.from_array(_counts((16, 32)), chunks=64)
    reservation = reserve(ledger, ZCDP(1))
    real = chunked_module.add_noise
    calls = iter(range(100))
    lock = threading.Lock()

    def crash_on_the_fifth(noise, values, rng):
        with lock:
            if next(calls) == 4:
                raise OSError("the worker's disk failed")
        return real(noise, values, rng)

    monkeypatch.setattr(chunked_module, "add_noise", crash_on_the_fifth)
    with pytest.raises(OSError):
        _measure(store, ledger, A, x, ZCDP(1), reservation)
    assert ledger.status(reservation) == "spent"  # noise was drawn: the budget is spent
    persisted = _chunk_bytes(store)
    assert 0 < len(persisted) < 16
    monkeypatch.setattr(chunked_module, "add_noise", real)
    record = _measure(store, ledger, A, x, ZCDP(1), reservation)
    after = _chunk_bytes(store)
    assert len(after) == 16
    assert {name: after[name] for name in persisted} == persisted
    assert len(record.chunks.parts) == 16


def test_a_spent_reservation_without_a_plan_is_refused(store, ledger):
    A = Kron([Prefix(4), Identity(4)])
    reservation = reserve(ledger, ZCDP(1))
    ledger.mark_spent(reservation)
    with pytest.raises(MeasurementError, match="is spent and no record"):
        _measure(store, ledger, A, da.from_array(_counts((4, 4))), ZCDP(1), reservation)


def test_chunks_of_another_plan_are_refused(store, ledger):
    A = Kron([Prefix(4), Identity(4)])
    x = da.from_array(_counts((4, 4)))
    first = reserve(ledger, ZCDP(1))
    folder = chunk_folder(store, "strategy")
    folder.mkdir()
    (folder / "plan.json").write_text("{}\n")
    with pytest.raises(MeasurementMismatch, match="another measurement plan"):
        _measure(store, ledger, A, x, ZCDP(1), first)
    assert ledger.status(first) == "reserved"


def test_a_damaged_chunk_is_refused_on_reading(store, ledger, monkeypatch):
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 16)
    A = Kron([Prefix(8), Identity(8)])
    x = da.from_array(_counts((8, 8)))
    reservation = reserve(ledger, ZCDP(1))
    _measure(store, ledger, A, x, ZCDP(1), reservation)
    path = sorted(chunk_folder(store, "strategy").glob("*.values"))[1]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(MeasurementError, match="truncated or changed"):
        load_measurement(store, "strategy").values.compute()


def test_two_attempts_at_one_chunk_persist_one(tmp_path):
    path = tmp_path / "000000.values"
    results = []

    def attempt(value: int) -> None:
        results.append(write_chunk(path, "plan", 0, np.full(1000, value)))

    threads = [threading.Thread(target=attempt, args=(value,)) for value in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({chunk.sha256 for chunk in results}) == 1
    with pytest.raises(MeasurementError, match="another plan"):
        write_chunk(path, "other", 0, np.zeros(1000))


def test_counts_that_do_not_fit_are_refused_before_spending(store, ledger):
    A = Kron([Prefix(4), Identity(4)])
    reservation = reserve(ledger, ZCDP(1))
    with pytest.raises(MeasurementError, match="15 cells but the strategy has 16"):
        _measure(store, ledger, A, da.from_array(np.ones(15, np.int64)), ZCDP(1), reservation)
    negative = da.from_array(-np.ones(16, np.int64))
    with pytest.raises(MeasurementError, match="negative count"):
        _measure(store, ledger, A, negative, ZCDP(1), reservation)
    with pytest.raises(MeasurementError, match="must be persisted"):
        measure(QuantizedStrategy(A, 1), da.from_array(np.ones(16, np.int64)), ZCDP(1))
    assert ledger.status(reservation) == "reserved"


@pytest.mark.slow
def test_a_killed_worker_does_not_draw_a_persisted_chunk_again(store, ledger, monkeypatch):
    from distributed import Client, LocalCluster

    A = Kron([Prefix(64), Identity(2**18)])
    x = (np.arange(2**24, dtype=np.int64) * 7919 + 13) % 7
    reservation = reserve(ledger, ZCDP(1))
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 2**19)
    folder = chunk_folder(store, "strategy")
    outcome: dict[str, object] = {}
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        cells = da.arange(2**24, chunks=2**20, dtype=np.int64)
        counts = client.persist((cells * 7919 + 13) % 7)  # made on the workers

        def run() -> None:
            try:
                outcome["record"] = _measure(
                    store, ledger, A, counts, ZCDP(1), reservation, client=client
                )
            except BaseException as error:  # reported by the test thread
                outcome["error"] = error

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 120
        while len(list(folder.glob("*.values"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        victim = next(iter(client.run(os.getpid).values()))
        os.kill(victim, signal.SIGKILL)
        persisted = _chunk_bytes(store)
        thread.join(timeout=300)
        assert "error" not in outcome, outcome.get("error")
        assert 2 <= len(persisted) < 32, "the worker was killed after the measurement ended"
    record = outcome["record"]
    after = _chunk_bytes(store)
    assert len(after) == 32 and {name: after[name] for name in persisted} == persisted
    noise = np.asarray(record.values.compute()) - (A @ x.astype(np.float64)).round()
    assert noise.var() == pytest.approx(record.noise_variance(), rel=0.05)


def _table_groups(A, counts: MarginalCounts) -> TableGroups:
    """The tables of ``counts`` grouped as a measurement of ``A`` on a cluster draws them."""
    sets = strategy_tables(A)
    return TableGroups(
        counts.domain_shape,
        tuple(
            {attrs: counts.tables[attrs] for attrs in sets[start:stop]}
            for start, stop in chunked_module.table_groups(A)
        ),
    )


@pytest.mark.parametrize("residual", [False, True])
def test_tables_are_measured_group_by_group_in_whole_tables(store, ledger, monkeypatch, residual):
    """Chunks of whole tables in block order: the exact answers of the flow's measurement
    from the same tables, noise of the recorded variance, each chunk drawn once."""
    monkeypatch.setattr(chunked_module, "CHUNK_ANSWERS", 40)
    shape = (4, 3, 5, 2)
    sets = [(), (0,), (1, 2), (0, 3), (2, 3), (0, 1, 2)]
    if residual:
        strategy = quantize(
            ResidualBlockStrategy(shape, {sum(1 << i for i in s): 1.0 + len(s) for s in sets})
        )
    else:
        strategy = QuantizedStrategy(Marginals(shape, {s: 1 + len(s) for s in sets}), 1)
    A = strategy.integer
    records = np.random.default_rng(2).integers(0, shape, size=(500, len(shape)))
    counts = count_marginals([records], shape, strategy_tables(A))
    counts = MarginalCounts(shape, {k: v.astype(np.int64) for k, v in counts.tables.items()})
    groups = chunked_module.table_groups(A)
    assert len(groups) > 1 and groups[0][0] == 0 and groups[-1][1] == len(strategy_tables(A))
    assert all(a[1] == b[0] for a, b in pairwise(groups))
    reservation = reserve(ledger, ZCDP(Fraction(1, 50)))
    record = measure(
        strategy,
        _table_groups(A, counts),
        ZCDP(Fraction(1, 50)),
        store=store,
        measurement_id="strategy",
        ledger=ledger,
        reservation=reservation,
    )
    assert ledger.status(reservation) == "spent"
    sizes = tuple(part.stop - part.start for part in record.chunks.parts)
    assert sizes == chunked_module.answer_chunks(A) and sum(sizes) == A.shape[0]
    exact = marginal_answers(analyze_strategy(A), counts)
    noise = np.asarray(record.values.compute()) - exact
    assert abs(noise.mean()) < 5 * np.sqrt(record.noise_variance() / noise.size)
    stored = _chunk_bytes(store)

    def drawn(*args, **kwargs):
        raise AssertionError("noise was drawn again")

    monkeypatch.setattr(chunked_module, "add_noise", drawn)
    again = load_measurement(store, "strategy")
    np.testing.assert_array_equal(again.in_memory().values, record.values.compute())
    assert _chunk_bytes(store) == stored


def test_tables_that_disagree_are_refused_before_spending(store, ledger):
    shape = (3, 4)
    A = Marginals(shape, {(0,): 1, (1,): 1})
    tables = {(0,): np.array([1, 2, 3]), (1,): np.array([1, 1, 1, 1])}
    reservation = reserve(ledger, ZCDP(1))
    with pytest.raises(MeasurementError, match="disagree on the number of records"):
        _measure(store, ledger, A, TableGroups(shape, (tables,)), ZCDP(1), reservation)
    with pytest.raises(MeasurementError, match="held in 2 groups"):
        _measure(store, ledger, A, TableGroups(shape, (tables, tables)), ZCDP(1), reservation)
    huge = {(0,): np.array([2**53, 0, 0]), (1,): np.array([2**53, 0, 0, 0])}
    with pytest.raises(MeasurementError, match=r"could exceed 2\*\*53") as refused:
        _measure(store, ledger, A, TableGroups(shape, (huge,)), ZCDP(1), reservation)
    assert str(2**53) not in str(refused.value)  # no count of the data in the message
    assert ledger.status(reservation) == "reserved"
