"""The budget ledger: exact accounting, concurrent reservations, tampering, crashes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from dpmm.errors import DpmmError
from dpmm.privacy.ledger import (
    BudgetExceeded,
    Ledger,
    LedgerError,
    LedgerTampered,
    Reservation,
)
from dpmm.privacy.ledger_schema import COLUMNS, Row, decimal_text, ledger_path
from dpmm.privacy.params import ZCDP, PureDP

THIRD = PureDP("1/3")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    location = tmp_path / "budget.db"
    with Ledger.init(location) as ledger:
        ledger.grant("adult", PureDP(1))
    return location


@pytest.fixture
def ledger(path: Path):
    with Ledger.open(path) as opened:
        yield opened


def test_three_thirds_use_the_grant_exactly(ledger: Ledger) -> None:
    reservations = [ledger.reserve("adult", THIRD, f"release-{i}") for i in range(3)]
    assert ledger.remaining("adult") == Fraction(0)
    assert isinstance(ledger.remaining("adult"), Fraction)
    with pytest.raises(BudgetExceeded) as refused:
        ledger.reserve("adult", THIRD, "release-4")
    message = str(refused.value)
    assert "ε = 1/3" in message and "ε = 0 remaining" in message and "'adult'" in message
    assert "release-4" in message
    assert isinstance(refused.value, DpmmError)
    assert ledger.balance("adult").reserved == 1
    for reservation in reservations:
        ledger.mark_spent(reservation)
    balance = ledger.balance("adult")
    assert (balance.granted, balance.reserved, balance.spent, balance.remaining) == (1, 0, 1, 0)
    assert ledger.verify() == 7


def test_refusal_names_request_and_remaining(ledger: Ledger) -> None:
    ledger.reserve("adult", PureDP("1/2"), "first")
    with pytest.raises(BudgetExceeded, match=r"ε = 1/2 remaining.*ε = 3/5 requested"):
        ledger.reserve("adult", PureDP("0.6"), "second")
    assert ledger.remaining("adult") == Fraction(1, 2)  # refused, not clamped


def test_cancel_releases_and_spent_cannot_be_cancelled(ledger: Ledger) -> None:
    kept = ledger.reserve("adult", PureDP("1/2"), "kept")
    dropped = ledger.reserve("adult", PureDP("1/2"), "dropped")
    assert ledger.remaining("adult") == 0
    ledger.cancel(dropped)
    assert ledger.status(dropped) == "cancelled"
    assert ledger.remaining("adult") == Fraction(1, 2)
    ledger.cancel(dropped)  # cancelling again writes nothing
    ledger.mark_spent(kept)
    with pytest.raises(LedgerError, match="is spent; spent budget can never be released"):
        ledger.cancel(kept)
    with pytest.raises(LedgerError, match="cancelled; its budget was released"):
        ledger.mark_spent(dropped)
    assert ledger.status(kept) == "spent"
    assert ledger.remaining("adult") == Fraction(1, 2)


def test_mark_spent_twice_is_idempotent(ledger: Ledger) -> None:
    reservation = ledger.reserve("adult", THIRD, "release")
    ledger.mark_spent(reservation)
    entries = len(ledger.history("adult"))
    ledger.mark_spent(reservation.id)
    assert len(ledger.history("adult")) == entries
    assert ledger.balance("adult").spent == Fraction(1, 3)


def test_history_records_every_entry_in_order(ledger: Ledger) -> None:
    reservation = ledger.reserve("adult", THIRD, "release")
    ledger.mark_spent(reservation)
    history = ledger.history("adult")
    assert [entry.kind for entry in history] == ["grant", "reserve", "spend"]
    assert [entry.seq for entry in history] == [1, 2, 3]
    assert history[1].budget == THIRD and history[1].reservation_id == reservation.id
    assert history[1].to_dict()["budget"] == {"kind": "pure", "epsilon": "1/3"}
    assert isinstance(reservation, Reservation) and reservation.release_id == "release"
    assert reservation.created.tzinfo is not None
    with pytest.raises(AttributeError):
        reservation.release_id = "other"  # type: ignore[misc]


def test_kinds_do_not_mix(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="pure ε-DP budget; the ρ-zCDP ρ = 1/2 requested"):
        ledger.reserve("adult", ZCDP("1/2"), "release")
    with pytest.raises(LedgerError, match="ρ-zCDP grant cannot be added"):
        ledger.grant("adult", ZCDP(1))
    ledger.grant("census", ZCDP("1/8"))
    ledger.reserve("census", ZCDP("1/16"), "release")
    assert ledger.remaining("census") == Fraction(1, 16)
    assert ledger.balance("census").parameter == "rho"
    assert ledger.datasets() == ["adult", "census"]


def test_grants_add_up_and_bad_input_is_refused(ledger: Ledger) -> None:
    ledger.grant("adult", PureDP("0.1"))
    assert ledger.remaining("adult") == Fraction(11, 10)
    with pytest.raises(BudgetExceeded, match="nothing was granted"):
        ledger.reserve("unknown", THIRD, "release")
    with pytest.raises(LedgerError, match="no budget has been granted to dataset 'unknown'"):
        ledger.remaining("unknown")
    with pytest.raises(LedgerError, match="PureDP"):
        ledger.grant("adult", 1)  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="release id must be a non-empty string"):
        ledger.reserve("adult", THIRD, "")
    with pytest.raises(LedgerError, match="no reservation 'nope'"):
        ledger.cancel("nope")
    assert ledger.verify() == 2


def test_open_and_init_refuse_what_they_cannot_use(tmp_path: Path, path: Path) -> None:
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger.open(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(LedgerError, match="already exists"):
        Ledger.init(path)
    with pytest.raises(LedgerError, match="only SQLite files"):
        Ledger.open("postgresql://host/budget")
    text = tmp_path / "notes.txt"
    text.write_text("not a database, just some text that is long enough " * 40)
    with pytest.raises(LedgerError, match="is not a dpmm ledger"):
        Ledger.open(text)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="schema version '99'; this dpmm reads schema version 2"):
        Ledger.open(path)


def test_sqlite_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'url.db'}"
    with Ledger.init(url) as ledger:
        ledger.grant("adult", ZCDP("1/2"))
    with Ledger.open(url) as ledger:
        assert ledger.remaining("adult") == Fraction(1, 2)
    assert ledger_path("sqlite:///budget.db") == Path("budget.db")


def test_decimal_text() -> None:
    assert decimal_text(Fraction(0)) == "0"
    assert decimal_text(Fraction(3, 8)) == "0.375"
    assert decimal_text(Fraction(10**30)) == "1" + "0" * 30
    assert decimal_text(Fraction(2, 3), digits=4) == "≈ 0.6667"


# --- tampering ---------------------------------------------------------------------------


def _three_entries(ledger: Ledger) -> None:
    ledger.mark_spent(ledger.reserve("adult", THIRD, "release"))


def test_edited_amount_is_named(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE entries SET amount = '1/100' WHERE seq = 2")
    with pytest.raises(LedgerTampered, match=r"entry 2 \(reserve\) does not match its hash") as bad:
        ledger.verify()
    assert (bad.value.seq, bad.value.kind) == (2, "reserve")
    with pytest.raises(LedgerTampered, match="entry 2"):  # no write on a tampered ledger
        ledger.reserve("adult", THIRD, "later")


def test_deleted_middle_entry_is_named(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    ledger.grant("adult", PureDP(1))
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM entries WHERE seq = 2")
    with pytest.raises(LedgerTampered, match=r"entry 2 is missing: entry 3 \(spend\)") as bad:
        ledger.verify()
    assert bad.value.seq == 2


def test_rehashed_entry_breaks_the_chain(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE entries SET hash = ? WHERE seq = 1", ("f" * 64,))
    with pytest.raises(LedgerTampered, match=r"entry 1 \(grant\) does not match its hash"):
        ledger.verify()


def test_another_secret_is_named_as_a_cause(path: Path, ledger: Ledger) -> None:
    """With the key file replaced, the first entry fails: the message says it may be the key."""
    _three_entries(ledger)
    ledger.close()
    path.with_name(path.name + ".secret").write_bytes(bytes(32))
    with Ledger.open(path) as reopened, pytest.raises(LedgerTampered) as bad:
        reopened.verify()
    assert "entry 1 (grant) does not match its hash: its fields were changed, or the " in str(
        bad.value
    )
    assert "secret is not the one it was written with" in str(bad.value)


def test_truncated_ledger_is_detected(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM entries WHERE seq = 3")
    with pytest.raises(LedgerTampered, match=r"entry 3 is missing: the ledger.s head is entry 3"):
        ledger.verify()


def test_forged_entry_with_a_valid_hash_is_caught_by_the_replay(path: Path, ledger: Ledger) -> None:
    reservation = ledger.reserve("adult", THIRD, "release")
    ledger.cancel(reservation)
    head = ledger.history("adult")[-1]
    values = (
        4,
        "spend",
        "adult",
        "pure",
        "1/3",
        reservation.id,
        "release",
        "2026-01-01T00:00:00+00:00",
    )
    # Forged with the ledger's own key: only the replay can tell.
    forged = Row(*values, None, None, prev_hash=head.hash, hash="")
    forged = replace(forged, hash=forged.expected_hash(ledger.secret()))
    with sqlite3.connect(path) as connection:
        connection.execute(
            f"INSERT INTO entries ({COLUMNS}) VALUES ({', '.join('?' * 12)})", forged.values()
        )
        connection.executemany(
            "UPDATE meta SET value = ? WHERE key = ?", [("4", "head_seq"), (forged.hash, "head")]
        )
    with pytest.raises(
        LedgerTampered, match=r"entry 4 \(spend\) spends a reservation that is not reserved"
    ):
        ledger.verify()


class _FailingCommit:
    """A connection whose COMMIT fails as on a read-only file or a full disk."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, *args: object) -> object:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return self._connection.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._connection, name)


def test_a_failed_commit_is_one_ledger_error_and_writes_nothing(ledger: Ledger) -> None:
    real = ledger._db
    ledger._db = _FailingCommit(real)
    with pytest.raises(LedgerError, match=r"cannot write to ledger .*readonly database"):
        ledger.reserve("adult", THIRD, "release")
    ledger._db = real
    assert ledger.verify() == 1 and ledger.remaining("adult") == 1


def _rechain(path: Path, key: bytes) -> None:
    """Recompute every entry's hash under ``key``, as someone editing the file would."""
    with sqlite3.connect(path) as connection:
        rows = [Row(*values) for values in connection.execute(f"SELECT {COLUMNS} FROM entries")]
        previous = "0" * 64
        for row in sorted(rows, key=lambda row: row.seq):
            row = replace(row, prev_hash=previous, hash="")
            previous = row.expected_hash(key)
            connection.execute(
                "UPDATE entries SET prev_hash = ?, hash = ? WHERE seq = ?",
                (row.prev_hash, previous, row.seq),
            )
        connection.execute("UPDATE meta SET value = ? WHERE key = 'head'", (previous,))


def test_a_chain_recomputed_without_the_key_is_caught(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE entries SET amount = '100' WHERE seq = 1")
    _rechain(path, os.urandom(32))
    with pytest.raises(LedgerTampered, match=r"entry 1 \(grant\) does not match its hash"):
        ledger.verify()


def test_an_anchor_catches_a_chain_recomputed_with_the_key(path: Path, ledger: Ledger) -> None:
    _three_entries(ledger)
    anchor = ledger.anchor()
    assert anchor[0] == 3 and ledger.verify(anchor) == 3
    ledger.grant("adult", PureDP(1))
    assert ledger.verify(anchor) == 4  # later entries do not change an anchor
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE entries SET amount = '100' WHERE seq = 1")
    _rechain(path, ledger.secret())
    assert ledger.verify() == 4 and ledger.remaining("adult") == Fraction(302, 3)
    with pytest.raises(LedgerTampered, match="rewritten after the anchor was taken") as bad:
        ledger.verify(anchor)
    assert bad.value.seq == 3


def test_a_lost_key_is_named(path: Path) -> None:
    Path(f"{path}.secret").unlink()
    with pytest.raises(LedgerError, match=r"has lost its key .*budget\.db\.secret"):
        Ledger.open(path)


def test_publications_follow_a_spend(ledger: Ledger) -> None:
    reservation = ledger.reserve("adult", THIRD, "release", run_folder="/srv/runs/release")
    assert ledger.reservation(reservation.id).run_folder == "/srv/runs/release"
    with pytest.raises(LedgerError, match="no spent reservation"):
        ledger.publish(reservation, "a" * 64)
    ledger.mark_spent(reservation)
    with pytest.raises(LedgerError, match="is not a sha256"):
        ledger.publish(reservation, "abc")
    ledger.publish(reservation, "a" * 64)
    ledger.publish(reservation.id, "B" * 64)
    assert ledger.published(reservation) == ["a" * 64, "b" * 64]
    assert [entry.kind for entry in ledger.history("adult")][-2:] == ["publish", "publish"]
    assert ledger.history("adult")[-1].to_dict()["digest"] == "b" * 64
    assert ledger.balance("adult").spent == Fraction(1, 3) and ledger.verify() == 5


_SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, dataset TEXT NOT NULL,
    budget_kind TEXT NOT NULL, amount TEXT NOT NULL, reservation_id TEXT, release_id TEXT,
    created TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
"""


def _schema_1_ledger(path: Path, amounts: list[str]) -> None:
    """A ledger as the first schema wrote it: unkeyed sha256 over eight fields."""
    import hashlib
    import json

    with sqlite3.connect(path) as connection:
        connection.executescript(_SCHEMA_1)
        previous = "0" * 64
        for seq, (kind, amount) in enumerate(amounts, start=1):
            fields = [seq, kind, "adult", "pure", amount, None, None]
            fields += ["2026-01-01T00:00:00+00:00", previous]
            if kind != "grant":
                fields[5:7] = ["r1", "release"]
            text = json.dumps(["dpmm-ledger-entry-v1", *fields], separators=(",", ":"))
            digest = hashlib.sha256(text.encode()).hexdigest()
            connection.execute(
                "INSERT INTO entries VALUES (?,?,?,?,?,?,?,?,?,?)", (*fields, digest)
            )
            previous = digest
        connection.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("schema_version", "1"), ("head_seq", str(len(amounts))), ("head", previous)],
        )


def test_a_schema_1_ledger_is_upgraded_once_and_keyed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_1_ledger(path, [("grant", "1"), ("reserve", "1/3"), ("spend", "1/3")])
    with pytest.raises(LedgerError, match=r"schema version 1\); upgrade it once with 'dpmm ledger"):
        Ledger.open(path)
    assert Ledger.upgrade(path) == 3
    with Ledger.open(path) as ledger:
        assert ledger.verify() == 3 and ledger.balance("adult").spent == Fraction(1, 3)
        ledger.publish("r1", "c" * 64)
    with pytest.raises(LedgerError, match="not at schema version 1"):
        Ledger.upgrade(path)


def test_a_tampered_schema_1_ledger_is_not_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_1_ledger(path, [("grant", "1"), ("reserve", "1/3")])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE entries SET amount = '100' WHERE seq = 1")
    before = path.read_bytes()
    with pytest.raises(LedgerTampered, match="entry 1 is missing or does not match its hash"):
        Ledger.upgrade(path)
    assert path.read_bytes() == before


# --- processes ---------------------------------------------------------------------------


def _race(path: str, start: multiprocessing.synchronize.Barrier, results) -> None:
    with Ledger.open(path) as ledger:
        start.wait()
        try:
            reservation = ledger.reserve("adult", THIRD, f"release-{os.getpid()}")
        except BudgetExceeded:
            results.put("refused")
        else:
            results.put(reservation.id)


def test_concurrent_processes_never_exceed_the_grant(path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(8)
    results = context.Queue()
    workers = [context.Process(target=_race, args=(str(path), start, results)) for _ in range(8)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert outcomes.count("refused") == 5
    with Ledger.open(path) as ledger:
        assert ledger.remaining("adult") == Fraction(0)
        assert {r.id for r in ledger.active_reservations("adult")} == set(outcomes) - {"refused"}
        assert ledger.verify() == 4


def _reserve_and_hang(path: str, reserved) -> None:
    with Ledger.open(path) as ledger:
        reservation = ledger.reserve("adult", THIRD, "crashing-release")
        reserved.put(reservation.id)
        signal.pause()  # killed here, before mark_spent


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_killed_process_leaves_its_reservation_reserved(path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    reserved = context.Queue()
    worker = context.Process(target=_reserve_and_hang, args=(str(path), reserved))
    worker.start()
    reservation_id = reserved.get(timeout=120)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    # A stale reservation stays counted until someone cancels it explicitly.
    with Ledger.open(path) as ledger:
        assert ledger.status(reservation_id) == "reserved"
        assert ledger.remaining("adult") == Fraction(2, 3)
        [stale] = ledger.active_reservations("adult")
        assert stale.id == reservation_id and stale.release_id == "crashing-release"
        ledger.cancel(stale)
        assert ledger.remaining("adult") == 1
        assert ledger.verify() == 3
