"""Residual and block measurements drawn once, persisted first, reused or refused after."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpmm import durable
from dpmm.linalg import Identity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.measure import residual_blocks, residual_persist, residual_record, residual_tables
from dpmm.measure.exact import MeasurementError, MeasurementMismatch
from dpmm.measure.mechanism import measure
from dpmm.measure.record import record_path
from dpmm.measure.residual_blocks import BlockMeasurement, measure_blocks
from dpmm.measure.residual_record import load_residual_measurement, load_residual_record
from dpmm.measure.residual_tables import ResidualMeasurement, count_marginals, measure_residuals
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP
from dpmm.reconstruct.residual_blocks import block_marginals
from dpmm.reconstruct.residual_marginals import residual_marginals

DATASET = "survey"
SHAPE = (2, 3, 4)
RESIDUAL = ResidualStrategy(SHAPE, {0: 1.0, 0b001: 1.0, 0b010: 2.0, 0b100: 0.5, 0b110: 1.5})
BLOCKS = ResidualBlockStrategy(
    SHAPE, {0: 1.0, 0b001: 1.0, 0b010: np.array([[1.0, 0.5], [0.0, 2.0]]), 0b100: 2.0, 0b110: 0.75}
)
RHO_ONE = ZCDP(1)
QUERIES = [(), (0,), (1,), (2,), (1, 2)]


def records(count: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, n, size=count) for n in SHAPE], axis=1)


def vector(rows: np.ndarray) -> np.ndarray:
    return np.bincount(np.ravel_multi_index(rows.T, SHAPE), minlength=int(np.prod(SHAPE)))


X = vector(records())


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.init(tmp_path / "ledger.sqlite") as opened:
        opened.grant(DATASET, ZCDP(100))
        yield opened


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "measurements"
    folder.mkdir()
    return folder


@pytest.fixture
def sampler(monkeypatch):
    """Counts the sampler's calls in both modules; ``forbid()`` makes any later call fail."""

    class Sampler:
        calls = 0
        forbidden = False

        def forbid(self) -> None:
            self.forbidden = True

    state = Sampler()
    real = residual_tables.discrete_gaussian

    def counted(*args, **kwargs):
        if state.forbidden:
            raise AssertionError("noise was drawn a second time")
        state.calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(residual_tables, "discrete_gaussian", counted)
    monkeypatch.setattr(residual_blocks, "discrete_gaussian", counted)
    return state


def spends(ledger: Ledger) -> int:
    return sum(entry.kind == "spend" for entry in ledger.history(DATASET))


def take(kind, ledger, store, *, A=None, privacy=RHO_ONE, reservation=None, mid="m", seed=5):
    reservation = reservation or ledger.reserve(DATASET, privacy, release_id="r1")
    function = measure_residuals if kind == "residual" else measure_blocks
    return function(
        A if A is not None else (RESIDUAL if kind == "residual" else BLOCKS),
        X,
        privacy,
        store=store,
        measurement_id=mid,
        ledger=ledger,
        reservation=reservation,
        rng=np.random.default_rng(seed),
    )


def in_memory(kind, seed=5):
    if kind == "residual":
        return measure_residuals(RESIDUAL, X, ZCDP(1), rng=np.random.default_rng(seed))
    return measure_blocks(BLOCKS, X, ZCDP(1), rng=np.random.default_rng(seed))


def assert_same(a: ResidualMeasurement | BlockMeasurement, b) -> None:
    assert type(a) is type(b)
    assert np.array_equal(a.values, b.values) and a.values.dtype == b.values.dtype == np.int64
    assert np.array_equal(a.offsets, b.offsets)
    assert a.sigma2 == b.sigma2 and a.rho == b.rho
    if isinstance(a, ResidualMeasurement):
        assert (a.domain_shape, a.sets, a.rounded_rows) == (b.domain_shape, b.sets, b.rounded_rows)
        assert all(type(v) is Fraction for v in a.sigma2.values())
    else:
        qa, qb = a.quantized, b.quantized
        assert (qa.domain_shape, qa.sets, qa.scale) == (qb.domain_shape, qb.sets, qb.scale)
        assert all(np.array_equal(qa.integers[m], qb.integers[m]) for m in qa.sets)
        assert (a.squared_sensitivity, a.sensitivity_exact, a.requested_rho) == (
            b.squared_sensitivity,
            b.sensitivity_exact,
            b.requested_rho,
        )


KINDS = ["residual", "blocks"]


@pytest.mark.parametrize("kind", KINDS)
def test_persisted_measurement_equals_the_in_memory_one_and_reloads(kind, ledger, store) -> None:
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    persisted = take(kind, ledger, store, reservation=reservation)
    assert_same(persisted, in_memory(kind))  # same seed, same draws: nothing lost on disk
    assert_same(load_residual_measurement(store, "m"), persisted)
    assert not persisted.values.flags.writeable  # read back from disk, not the drawn array
    assert ledger.status(reservation) == "spent" and spends(ledger) == 1
    record = load_residual_record(store, "m")
    assert record.reservation_id == reservation.id and record.release_id == "r1"
    assert record.plan.privacy == ZCDP(1) and type(record.plan.rho) is Fraction
    assert record.plan.rho == persisted.rho <= 1
    assert "Theorem 14" in record.plan.guarantee
    header = record.header()
    assert header["format"] == residual_record.FORMAT
    assert record == load_residual_record(store, "m")
    assert record_path(store, "m").read_bytes() == record.to_bytes()


def test_residual_header_holds_the_exact_noise_layout(ledger, store) -> None:
    m = take("residual", ledger, store)
    layout = load_residual_record(store, "m").header()["layout"]
    assert layout["domain_shape"] == list(SHAPE)
    assert [sum(1 << i for i in attrs) for attrs in layout["sets"]] == list(m.sets)
    values = [Fraction(v) for v in layout["sigma2"]["values"]]
    assert [values[t] for t in layout["sigma2"]["index"]] == [m.sigma2[s] for s in m.sets]
    # The cost is Σ_S Π(1 − 1/n_i) / (2σ_S²), recomputed from the stored layout.
    cost = sum(
        Fraction(math.prod(SHAPE[i] - 1 for i in attrs), math.prod(SHAPE[i] for i in attrs))
        / (2 * values[t])
        for attrs, t in zip(layout["sets"], layout["sigma2"]["index"], strict=True)
    )
    assert cost == m.rho


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_call_reuses_the_record_without_drawing(kind, ledger, store, sampler) -> None:
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    first = take(kind, ledger, store, reservation=reservation, seed=1)
    assert sampler.calls >= 1
    before = record_path(store, "m").read_bytes()
    sampler.forbid()
    again = take(kind, ledger, store, reservation=reservation, seed=2)
    assert_same(again, first)
    assert spends(ledger) == 1
    # A re-run with a fresh reservation gets the record and its reservation back unspent.
    remaining = ledger.remaining(DATASET)
    rerun = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    assert_same(take(kind, ledger, store, reservation=rerun, seed=3), first)
    assert ledger.status(rerun) == "cancelled" and ledger.remaining(DATASET) == remaining
    assert spends(ledger) == 1 and record_path(store, "m").read_bytes() == before


@pytest.mark.parametrize(
    ("kind", "request_"),
    [
        ("residual", {"privacy": ZCDP(2)}),
        ("residual", {"A": ResidualStrategy(SHAPE, {0: 1.0, 0b001: 1.0, 0b010: 1.0})}),
        ("blocks", {"privacy": ZCDP("1/2")}),
        ("blocks", {"A": ResidualBlockStrategy(SHAPE, {0: 1.0, 0b001: 2.0})}),
        ("blocks", {"A": residual_blocks.quantize_blocks(BLOCKS, bits=8)}),
    ],
    ids=["residual-rho", "residual-strategy", "blocks-rho", "blocks-strategy", "blocks-bits"],
)
def test_another_request_under_the_same_id_is_a_mismatch(
    kind, request_, ledger, store, sampler
) -> None:
    take(kind, ledger, store)
    sampler.forbid()
    fresh = ledger.reserve(DATASET, request_.get("privacy", ZCDP(1)), release_id="r2")
    with pytest.raises(MeasurementMismatch, match="another"):
        take(kind, ledger, store, reservation=fresh, **request_)
    assert ledger.status(fresh) == "reserved" and spends(ledger) == 1


def test_the_same_quantization_passed_quantized_is_the_same_request(ledger, store, sampler) -> None:
    first = take("blocks", ledger, store)
    sampler.forbid()
    again = take("blocks", ledger, store, A=residual_blocks.quantize_blocks(BLOCKS))
    assert_same(again, first)
    assert spends(ledger) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_spent_reservation_without_a_record_is_refused(kind, ledger, store, sampler) -> None:
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    ledger.mark_spent(reservation)
    sampler.forbid()
    with pytest.raises(MeasurementError, match="spent and no record"):
        take(kind, ledger, store, reservation=reservation)
    assert not record_path(store, "m").exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["write", "draw"])
def test_a_crash_after_spending_leaves_it_spent_and_a_rerun_refuses(
    kind, where, ledger, store, monkeypatch
) -> None:
    def crash(*args, **kwargs):
        raise KeyboardInterrupt("the process died")

    if where == "write":
        monkeypatch.setattr(residual_persist, "write_residual_record", crash)
    else:
        monkeypatch.setattr(residual_tables, "discrete_gaussian", crash)
        monkeypatch.setattr(residual_blocks, "discrete_gaussian", crash)
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    with pytest.raises(KeyboardInterrupt):
        take(kind, ledger, store, reservation=reservation)
    assert ledger.status(reservation) == "spent"
    assert [p.name for p in store.iterdir()] == [".measure.lock"]  # no record, no temporary
    monkeypatch.undo()

    def forbidden(*args, **kwargs):
        raise AssertionError("noise was drawn twice for one reservation")

    monkeypatch.setattr(residual_tables, "discrete_gaussian", forbidden)
    monkeypatch.setattr(residual_blocks, "discrete_gaussian", forbidden)
    with pytest.raises(MeasurementError, match="spent and no record"):
        take(kind, ledger, store, reservation=reservation)
    assert spends(ledger) == 1 and not record_path(store, "m").exists()


def test_a_crash_during_the_write_leaves_no_partial_record(ledger, store, monkeypatch) -> None:
    def crash(descriptor):
        raise KeyboardInterrupt("the process died during fsync")

    monkeypatch.setattr(durable.os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        take("residual", ledger, store)
    assert [p.name for p in store.iterdir()] == [".measure.lock"]


@pytest.mark.parametrize("kind", KINDS)
def test_reconstruction_from_disk_equals_reconstruction_in_memory(kind, ledger, store) -> None:
    persisted = take(kind, ledger, store)
    reloaded = load_residual_measurement(store, "m")
    reconstruct = residual_marginals if kind == "residual" else block_marginals
    expected = reconstruct(in_memory(kind), QUERIES)
    for measurement in (persisted, reloaded):
        result = reconstruct(measurement, QUERIES)
        assert sorted(result) == sorted(expected)
        for attrs, table in expected.items():
            assert np.array_equal(result[attrs].values, table.values)
            spread = "variance" if kind == "residual" else "variances"
            assert np.array_equal(getattr(result[attrs], spread), getattr(table, spread))
    # And it is the least-squares estimate: close to the truth at this budget.
    assert abs(float(expected[(0,)].values.sum()) - X.sum()) < 60


def test_tables_and_vector_give_the_same_persisted_record(ledger, store, tmp_path) -> None:
    counts = count_marginals([records()], SHAPE, [(), (0,), (1,), (2,), (1, 2)])
    other = tmp_path / "other"
    other.mkdir()
    from_vector = take("residual", ledger, store)
    from_tables = measure_residuals(
        RESIDUAL,
        counts,
        ZCDP(1),
        store=other,
        measurement_id="m",
        ledger=ledger,
        reservation=ledger.reserve(DATASET, ZCDP(1), release_id="r1"),
        rng=np.random.default_rng(5),
    )
    assert_same(from_tables, from_vector)


@pytest.mark.parametrize("kind", KINDS)
def test_plain_and_residual_records_refuse_each_other(kind, ledger, store, sampler) -> None:
    plain = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    measure(Identity(4), np.arange(4), ZCDP(1), store=store, measurement_id="plain",
            ledger=ledger, reservation=plain, rng=np.random.default_rng(0))  # fmt: skip
    take(kind, ledger, store, mid="residual")
    sampler.forbid()
    fresh = ledger.reserve(DATASET, ZCDP(1), release_id="r2")
    with pytest.raises(MeasurementMismatch, match="not a residual measurement"):
        take(kind, ledger, store, mid="plain", reservation=fresh)
    # measure() finds another dpmm format under its id: a mismatched request, no draw.
    with pytest.raises(MeasurementMismatch, match=r"dpmm-residual-measurement/1.*new measurement"):
        measure(Identity(4), np.arange(4), ZCDP(1), store=store, measurement_id="residual",
                ledger=ledger, reservation=fresh, rng=np.random.default_rng(0))  # fmt: skip
    assert ledger.status(fresh) == "reserved" and spends(ledger) == 2


@pytest.mark.parametrize("tag", ["other-format/1", None])
def test_a_file_of_no_dpmm_format_is_refused_but_not_a_mismatch(tag, ledger, store) -> None:
    path = record_path(store, "m")
    path.write_bytes(b'{"format": ' + (b"null" if tag is None else f'"{tag}"'.encode()) + b"}\n")
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")

    def plain() -> None:
        measure(Identity(4), np.arange(4), ZCDP(1), store=store, measurement_id="m",
                ledger=ledger, reservation=reservation)  # fmt: skip

    refusals = [plain, lambda: take("residual", ledger, store, reservation=reservation)]
    for refused in refusals:
        with pytest.raises(MeasurementError, match="not in the format") as raised:
            refused()
        assert not isinstance(raised.value, MeasurementMismatch)
    assert ledger.status(reservation) == "reserved" and spends(ledger) == 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "header"])
def test_a_damaged_record_is_refused(damage, ledger, store) -> None:
    take("blocks", ledger, store)
    path = record_path(store, "m")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-8]
    elif damage == "flip":
        data[-3] ^= 1
    else:
        data[: data.index(b"\n")] = b'{"format": "' + residual_record.FORMAT.encode() + b'"}'
    path.write_bytes(bytes(data))
    with pytest.raises(MeasurementError, match="not a complete"):
        load_residual_measurement(store, "m")


def test_refusals_spend_nothing(ledger, store, sampler, monkeypatch) -> None:
    sampler.forbid()
    reservation = ledger.reserve(DATASET, ZCDP(1), release_id="r1")
    with pytest.raises(MeasurementError, match="together; ledger, reservation missing"):
        measure_residuals(RESIDUAL, X, ZCDP(1), store=store, measurement_id="m")
    with pytest.raises(MeasurementError, match="exactly the reserved budget"):
        take("residual", ledger, store, privacy=ZCDP(2), reservation=reservation)
    with pytest.raises(MeasurementError, match="measurement id"):
        take("blocks", ledger, store, reservation=reservation, mid="../escape")
    with pytest.raises(MeasurementError, match="not an existing folder"):
        take("blocks", ledger, store / "missing", reservation=reservation)
    with pytest.raises(MeasurementError, match="was not counted"):
        measure_blocks(BLOCKS, count_marginals([records()], SHAPE, [()]), ZCDP(1), store=store,
                       measurement_id="m", ledger=ledger, reservation=reservation)  # fmt: skip
    # A plan whose cost exceeds the reservation is refused before anything is read or drawn.
    real = residual_tables.residual_sigma2
    monkeypatch.setattr(
        residual_tables,
        "residual_sigma2",
        lambda A, privacy: (real(A, privacy)[0], privacy.rho + Fraction(1, 10**9)),
    )
    with pytest.raises(MeasurementError, match="more than"):
        take("residual", ledger, store, reservation=reservation)
    assert ledger.status(reservation) == "reserved" and spends(ledger) == 0
    assert [p.name for p in store.iterdir()] in ([], [".measure.lock"])
