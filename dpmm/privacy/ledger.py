"""The privacy budget ledger: grant, reserve, spend and cancel exact budgets, durably.

A ledger is one SQLite file (a path or a ``sqlite:///path`` URL) holding an
append-only, hash-chained log of entries; every balance and every reservation's
status is derived from that log, never stored beside it. A dataset's budget has
one kind, pure ε or ρ-zCDP, fixed by its first grant; requests of the other kind
are refused (converting between kinds is the accountant's job, not the ledger's).

``remaining = granted − reserved − spent``, in exact fractions. A reservation is
*reserved* (counted against the budget) until :meth:`Ledger.mark_spent` makes it
*spent* forever or :meth:`Ledger.cancel` releases it. Both are idempotent: marking
a spent reservation spent again, or cancelling a cancelled one, writes nothing.
Spending a cancelled reservation and cancelling a spent one are refused.

A process that dies between :meth:`Ledger.reserve` and :meth:`Ledger.mark_spent`
leaves its reservation *reserved*: the budget stays counted against the dataset
until someone cancels the reservation explicitly (see
:meth:`Ledger.active_reservations`). The ledger cannot know whether noise was
drawn before the crash, so it never releases budget on its own.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "budget.db"
    >>> with Ledger.init(path) as ledger:
    ...     _ = ledger.grant("adult", PureDP(1))
    ...     reservation = ledger.reserve("adult", PureDP("1/3"), release_id="adult-2026")
    ...     ledger.mark_spent(reservation)
    ...     ledger.remaining("adult"), ledger.verify()
    (Fraction(2, 3), 3)
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Literal

from dpmm.errors import DpmmError, describe_value
from dpmm.privacy.ledger_schema import (
    COLUMNS,
    CREATE_TABLES,
    GENESIS,
    SCHEMA_VERSION,
    Balance,
    Budget,
    Entry,
    Replay,
    Reservation,
    Row,
    Status,
    ledger_path,
    to_entry,
    to_reservation,
)
from dpmm.privacy.params import KINDS, ZCDP, PureDP, amount_text

__all__ = [
    "Balance",
    "BudgetExceeded",
    "Entry",
    "Ledger",
    "LedgerError",
    "LedgerTampered",
    "Reservation",
]

#: Seconds a write waits for another process's write transaction before giving up.
BUSY_TIMEOUT = 60.0
#: Length of the ledger's secret (see :meth:`Ledger.secret`).
SECRET_BYTES = 32


class LedgerError(DpmmError):
    """A ledger cannot be opened, or an operation on it is not allowed."""


class BudgetExceeded(LedgerError):  # noqa: N818 (the name the API promises)
    """A reservation asks for more than the dataset's remaining budget; nothing was reserved."""


class LedgerTampered(LedgerError):  # noqa: N818 (the name the API promises)
    """The ledger's entries do not form the hash chain dpmm wrote; names the first bad entry."""

    def __init__(self, message: str, seq: int, kind: str | None) -> None:
        super().__init__(message)
        #: The sequence number of the first bad (or missing) entry.
        self.seq = seq
        #: That entry's kind as stored (None when the entry is missing).
        self.kind = kind


def _split(budget: object) -> tuple[str, Fraction]:
    if isinstance(budget, PureDP):
        return "pure", budget.epsilon
    if isinstance(budget, ZCDP):
        return "zcdp", budget.rho
    raise LedgerError(
        f"a budget must be PureDP(epsilon) or ZCDP(rho), got {describe_value(budget)}"
    )


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LedgerError(f"{what} must be a non-empty string, got {describe_value(value)}")
    return value


class Ledger:
    """An open ledger file. Create one with :meth:`init`, open it with :meth:`open`."""

    def __init__(self, connection: sqlite3.Connection, path: Path, key: bytes) -> None:
        self._db = connection
        self.path = path
        self._key = key

    @classmethod
    def init(cls, location: str | Path, *, timeout: float = BUSY_TIMEOUT) -> Ledger:
        """Create a new, empty ledger; refuses to touch a file that already exists."""
        path = _path(location)
        if path.exists():
            raise LedgerError(f"cannot create a ledger at {path}: the file already exists")
        if not path.parent.is_dir():
            raise LedgerError(f"cannot create a ledger at {path}: no folder {path.parent}")
        ledger = cls(_connect(path, "rwc", timeout), path, _secret(path, create=True))
        try:
            with ledger._write():
                tables = ledger._db.execute("SELECT name FROM sqlite_master").fetchall()
                if tables:  # another process created it between the check and the connect
                    raise LedgerError(f"cannot create a ledger at {path}: the file already exists")
                for statement in CREATE_TABLES.split(";"):
                    if statement.strip():
                        ledger._db.execute(statement)
                ledger._db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("head_seq", "0"), ("head", GENESIS)],
                )
            # Persistent in the file: readers never block the writer, and the reverse.
            ledger._db.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            ledger.close()
            raise
        return ledger

    @classmethod
    def open(cls, location: str | Path, *, timeout: float = BUSY_TIMEOUT) -> Ledger:
        """Open an existing ledger; refuses a missing file, a non-ledger or an unknown schema."""
        path = _path(location)
        if path.is_dir():
            raise LedgerError(f"the ledger path {path} is a folder, not a ledger file")
        if not path.is_file():
            raise LedgerError(f"no ledger at {path}; create one with 'dpmm ledger init {path}'")
        connection = _connect(path, "rw", timeout)
        try:
            version = _schema_version(connection, path)
            if version == "1":
                raise LedgerError(
                    f"ledger {path} was written by an earlier dpmm (schema version 1); "
                    f"upgrade it once with 'dpmm ledger upgrade {path}'"
                )
            if version != str(SCHEMA_VERSION):
                raise LedgerError(
                    f"ledger {path} has schema version {version!r}; "
                    f"this dpmm reads schema version {SCHEMA_VERSION} only"
                )
            return cls(connection, path, _secret(path, create=False))
        except BaseException:
            connection.close()
            raise

    @classmethod
    def upgrade(cls, location: str | Path, *, timeout: float = BUSY_TIMEOUT) -> int:
        """Bring a schema-1 ledger to this schema, in one transaction: verify its unkeyed
        chain, then key every entry's hash with the ledger's secret (made now if missing).

        Returns:
            The number of entries re-chained.

        Raises:
            LedgerTampered: the schema-1 chain does not verify (nothing is changed).
            LedgerError: the file is not a schema-1 ledger.
        """
        path = _path(location)
        if not path.is_file():
            raise LedgerError(f"no ledger at {path}")
        connection = _connect(path, "rw", timeout)
        try:
            if _schema_version(connection, path) != "1":
                raise LedgerError(f"ledger {path} is not at schema version 1; nothing to upgrade")
            ledger = cls(connection, path, _secret(path, create=True))
            with ledger._write(replay=False):
                for column in ("run_folder", "digest"):
                    connection.execute(f"ALTER TABLE entries ADD COLUMN {column} TEXT")
                rows = ledger._rows()
                previous = GENESIS
                for expected, row in enumerate(rows, start=1):
                    unkeyed = _schema_1_hash(row, previous)
                    if row.seq != expected or unkeyed != row.hash or row.prev_hash != previous:
                        raise ledger._tampered(
                            f"entry {expected} is missing or does not match its hash",
                            expected,
                            None,
                        )
                    previous = row.hash
                    keyed = replace(row, prev_hash=ledger._head(rows, row.seq - 1), hash="")
                    keyed = replace(keyed, hash=keyed.expected_hash(ledger._key))
                    connection.execute(
                        "UPDATE entries SET prev_hash = ?, hash = ? WHERE seq = ?",
                        (keyed.prev_hash, keyed.hash, row.seq),
                    )
                    rows[row.seq - 1] = keyed
                if ledger._meta().get("head") != previous:
                    raise ledger._tampered("its head is not its last entry", len(rows) + 1, None)
                connection.executemany(
                    "UPDATE meta SET value = ? WHERE key = ?",
                    [
                        (str(SCHEMA_VERSION), "schema_version"),
                        (ledger._head(rows, len(rows)), "head"),
                    ],
                )
                ledger._check(ledger._rows())
            return len(rows)
        finally:
            connection.close()

    def close(self) -> None:
        """Close the database connection (every write is already committed)."""
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def grant(self, dataset: str, budget: Budget) -> Entry:
        """Add ``budget`` to the dataset's total; the first grant fixes the dataset's kind."""
        dataset = _name(dataset, "a dataset name")
        kind, amount = _split(budget)
        with self._write() as replay:
            held = replay.balances.get(dataset)
            if held is not None and held.kind != kind:
                raise LedgerError(
                    f"dataset {dataset!r} in ledger {self.path} holds a "
                    f"{KINDS[held.kind].description} budget; a {KINDS[kind].description} grant "
                    "cannot be added to it"
                )
            row = self._append("grant", dataset, kind, amount, None, None)
        return to_entry(row)

    def reserve(
        self, dataset: str, budget: Budget, release_id: str, run_folder: str | None = None
    ) -> Reservation:
        """Set ``budget`` aside for a release, in one write transaction; never more than remains.

        ``run_folder`` names the folder of the release run that holds the reservation, so that
        ``dpmm ledger cancel`` can tell whether a live process holds it.

        Raises:
            BudgetExceeded: The request is larger than what remains (or nothing was granted).
            LedgerError: The request's kind differs from the dataset's.
        """
        dataset = _name(dataset, "a dataset name")
        release_id = _name(release_id, "a release id")
        kind, amount = _split(budget)
        with self._write() as replay:
            held = replay.balances.get(dataset)
            request = f"{amount_text(kind, amount)} requested for release {release_id!r}"
            if held is None:
                raise BudgetExceeded(
                    f"dataset {dataset!r} has no budget in ledger {self.path} (nothing was "
                    f"granted to it); the {request} was not reserved"
                )
            if held.kind != kind:
                raise LedgerError(
                    f"dataset {dataset!r} in ledger {self.path} holds a "
                    f"{KINDS[held.kind].description} budget; the {KINDS[kind].description} "
                    f"{request} cannot be charged to it"
                )
            if amount > held.remaining:
                raise BudgetExceeded(
                    f"dataset {dataset!r} in ledger {self.path} has "
                    f"{amount_text(kind, held.remaining)} remaining, less than the {request}; "
                    "nothing was reserved"
                )
            reservation_id = uuid.uuid4().hex
            row = self._append(
                "reserve", dataset, kind, amount, reservation_id, release_id, run_folder=run_folder
            )
        return to_reservation(row)

    def publish(self, reservation: Reservation | str, manifest_sha256: str) -> None:
        """Record the sha256 of the manifest of a release version this spent reservation
        paid for, before the version becomes visible. A re-run that writes the version again
        records another; the audit accepts a manifest whose sha256 is one of them.

        Raises:
            LedgerError: The reservation is not spent, or the digest is not a sha256.
        """
        reservation_id = reservation.id if isinstance(reservation, Reservation) else reservation
        with self._write() as replay:
            row, status = replay.reservations.get(reservation_id, (None, None))
            if row is None or status != "spent":
                raise LedgerError(
                    f"ledger {self.path} has no spent reservation {reservation_id!r} "
                    "to publish a release for"
                )
            if not isinstance(manifest_sha256, str) or len(manifest_sha256) != 64:
                raise LedgerError(f"{describe_value(manifest_sha256)} is not a sha256 digest")
            self._append(
                "publish",
                row.dataset,
                row.budget_kind,
                Fraction(row.amount),
                reservation_id,
                row.release_id,
                digest=manifest_sha256.lower(),
            )

    def published(self, reservation: Reservation | str) -> list[str]:
        """The manifest digests recorded for a reservation, oldest first."""
        reservation_id = reservation.id if isinstance(reservation, Reservation) else reservation
        rows = self._rows("WHERE reservation_id = ? AND kind = 'publish'", (reservation_id,))
        return [str(row.digest) for row in rows]

    def spend_entry(self, reservation: Reservation | str) -> Entry:
        """The entry that spent a reservation.

        Raises:
            LedgerError: The reservation is not spent.
        """
        reservation_id = reservation.id if isinstance(reservation, Reservation) else reservation
        rows = self._rows("WHERE reservation_id = ? AND kind = 'spend'", (reservation_id,))
        if not rows:
            raise LedgerError(f"ledger {self.path} has no spent reservation {reservation_id!r}")
        return to_entry(rows[0])

    def anchor(self) -> tuple[int, str]:
        """The head of the chain, ``(sequence number, hash)``: publish it, and
        :meth:`verify` with it later proves that no entry up to it was changed since."""
        meta = self._meta()
        return int(meta["head_seq"]), meta["head"]

    def mark_spent(self, reservation: Reservation | str) -> None:
        """Record the reservation as spent, for good. Marking it again does nothing."""
        self._settle(reservation, "spend")

    def cancel(self, reservation: Reservation | str) -> None:
        """Release a reservation's budget. Refused once spent; cancelling again does nothing."""
        self._settle(reservation, "cancel")

    def status(self, reservation: Reservation | str) -> Status:
        """``"reserved"``, ``"spent"`` or ``"cancelled"``."""
        reservation_id = reservation.id if isinstance(reservation, Reservation) else reservation
        rows = self._rows("WHERE reservation_id = ?", (reservation_id,))
        if not rows:
            raise LedgerError(f"ledger {self.path} has no reservation {reservation_id!r}")
        replay = self._dataset(rows[0].dataset)[1]
        return replay.reservations[reservation_id][1]

    def reservation(self, reservation_id: str) -> Reservation:
        """The reservation with this id, whatever its status.

        Raises:
            LedgerError: The ledger has no such reservation.
        """
        rows = self._rows("WHERE reservation_id = ? AND kind = 'reserve'", (reservation_id,))
        if not rows:
            raise LedgerError(f"ledger {self.path} has no reservation {reservation_id!r}")
        return to_reservation(rows[0])

    def secret(self) -> bytes:
        """32 random bytes kept beside the ledger (``<ledger>.secret``, mode 0600), made with
        it: the key of its hash chain and of the input fingerprints a manifest states. Never
        released; a ledger cannot be verified without it."""
        return self._key

    def datasets(self) -> list[str]:
        """The datasets that have a grant, in the order of their first grant."""
        rows = self._db.execute("SELECT dataset FROM entries GROUP BY dataset ORDER BY MIN(seq)")
        return [dataset for (dataset,) in rows]

    def balance(self, dataset: str) -> Balance:
        """The dataset's kind and exact granted, reserved, spent and remaining amounts."""
        return self._dataset(dataset)[0]

    def remaining(self, dataset: str) -> Fraction:
        """What can still be reserved, exactly, in the dataset's parameter (ε or ρ; may be 0)."""
        return self.balance(dataset).remaining

    def active_reservations(self, dataset: str) -> list[Reservation]:
        """Reservations still *reserved*: in flight, or left behind by a crashed run."""
        replay = self._dataset(dataset)[1]
        return [
            to_reservation(row)
            for row, status in replay.reservations.values()
            if status == "reserved"
        ]

    def history(self, dataset: str) -> list[Entry]:
        """Every entry of the dataset, oldest first."""
        return [to_entry(row) for row in self._dataset(dataset)[2]]

    def verify(self, anchor: tuple[int, str] | None = None) -> int:
        """Recompute the hash chain and replay every entry; returns the number of entries.

        Args:
            anchor: an earlier :meth:`anchor`; the entry it names must still have its hash.

        Raises:
            LedgerTampered: Naming the first entry that was changed, removed or is inconsistent.
        """
        rows = self._rows()
        self._check(rows)
        if anchor is not None:
            seq, digest = anchor
            if not 1 <= seq <= len(rows) or rows[seq - 1].hash != digest:
                raise self._tampered(
                    f"entry {seq} does not have the hash of the anchor {seq}:{digest}; the "
                    "ledger was rewritten after the anchor was taken",
                    seq,
                    rows[seq - 1].kind if 1 <= seq <= len(rows) else None,
                )
        return len(rows)

    def _dataset(self, dataset: str) -> tuple[Balance, Replay, list[Row]]:
        """The dataset's balance, reservations and rows, rebuilt from its entries alone."""
        rows = self._rows("WHERE dataset = ?", (dataset,))
        replay = Replay()
        for row in rows:
            problem = replay.apply(row)
            if problem is not None:
                raise self._tampered(f"entry {row.seq} ({row.kind}) {problem}", row.seq, row.kind)
        balance = replay.balances.get(dataset)
        if balance is None:
            raise LedgerError(
                f"no budget has been granted to dataset {dataset!r} in ledger {self.path}"
            )
        return balance, replay, rows

    def _settle(self, reservation: Reservation | str, kind: Literal["spend", "cancel"]) -> None:
        reservation_id = reservation.id if isinstance(reservation, Reservation) else reservation
        with self._write() as replay:
            row, status = replay.reservations.get(reservation_id, (None, None))
            if row is None:
                raise LedgerError(f"ledger {self.path} has no reservation {reservation_id!r}")
            if isinstance(reservation, Reservation) and reservation != to_reservation(row):
                raise LedgerError(
                    f"reservation {reservation_id!r} does not match the one in ledger {self.path}"
                )
            done = "spent" if kind == "spend" else "cancelled"
            if status == done:
                return
            if status != "reserved":
                raise LedgerError(
                    f"reservation {reservation_id!r} (release {row.release_id!r}) is {status}; "
                    + (
                        "its budget was released, so it cannot be spent"
                        if kind == "spend"
                        else "spent budget can never be released"
                    )
                )
            self._append(
                kind,
                row.dataset,
                row.budget_kind,
                Fraction(row.amount),
                reservation_id,
                row.release_id,
            )

    @contextmanager
    def _write(self, replay: bool = True) -> Iterator[Replay]:
        """One ``BEGIN IMMEDIATE`` transaction over a verified ledger, committed on success."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" in str(error):  # another process held its write lock past the timeout
                raise LedgerError(
                    f"cannot write to ledger {self.path}: another process kept it locked past "
                    "the wait; run the command again when that process has finished"
                ) from None
            raise LedgerError(f"cannot write to ledger {self.path}: {error}") from None
        except sqlite3.Error as error:  # read-only, unreadable
            raise LedgerError(f"cannot write to ledger {self.path}: {error}") from None
        try:
            verified = replay and self._has_entries_table()
            yield self._check(self._rows()) if verified else Replay()
            self._db.execute("COMMIT")
        except BaseException as error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):  # a full disk, a read-only file
                raise LedgerError(f"cannot write to ledger {self.path}: {error}") from None
            raise

    def _has_entries_table(self) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'"
        return self._db.execute(query).fetchone() is not None

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def _rows(self, where: str = "", parameters: tuple[object, ...] = ()) -> list[Row]:
        query = f"SELECT {COLUMNS} FROM entries {where} ORDER BY seq"
        return [Row(*values) for values in self._db.execute(query, parameters)]

    def _check(self, rows: list[Row]) -> Replay:
        replay = Replay()
        previous = GENESIS
        for expected, row in enumerate(rows, start=1):
            name = f"entry {row.seq} ({row.kind})"
            if row.seq != expected:
                raise self._tampered(
                    f"entry {expected} is missing: {name} follows entry {expected - 1}",
                    expected,
                    None,
                )
            if row.prev_hash != previous:
                raise self._tampered(
                    f"{name} does not follow the hash of the entry before it", row.seq, row.kind
                )
            if row.hash != row.expected_hash(self._key):
                # The first entry written with another key fails first: say both causes.
                cause = (
                    "its fields were changed, or the ledger's secret is not the one it was "
                    "written with"
                    if row.seq == 1
                    else "its fields were changed"
                )
                raise self._tampered(f"{name} does not match its hash: {cause}", row.seq, row.kind)
            problem = replay.apply(row)
            if problem is not None:
                raise self._tampered(f"{name} {problem}", row.seq, row.kind)
            previous = row.hash
        meta = self._meta()
        if meta.get("head_seq") != str(len(rows)) or meta.get("head") != previous:
            missing = len(rows) + 1
            raise self._tampered(
                f"entry {missing} is missing: the ledger's head is entry {meta.get('head_seq')} "
                f"but its entries end at entry {len(rows)}",
                missing,
                None,
            )
        return replay

    def _tampered(self, message: str, seq: int, kind: str | None) -> LedgerTampered:
        return LedgerTampered(f"ledger {self.path} was changed outside dpmm: {message}", seq, kind)

    def _append(
        self,
        kind: str,
        dataset: str,
        budget_kind: str,
        amount: Fraction,
        reservation_id: str | None,
        release_id: str | None,
        *,
        run_folder: str | None = None,
        digest: str | None = None,
    ) -> Row:
        meta = self._meta()
        seq = int(meta["head_seq"]) + 1
        created = datetime.now(UTC).isoformat(timespec="microseconds")
        values = (
            seq,
            kind,
            dataset,
            budget_kind,
            str(amount),
            reservation_id,
            release_id,
            created,
            run_folder,
            digest,
            meta["head"],
        )
        row = Row(*values, hash=Row(*values, hash="").expected_hash(self._key))
        marks = ", ".join("?" * len(row.values()))
        self._db.execute(f"INSERT INTO entries ({COLUMNS}) VALUES ({marks})", row.values())
        self._db.executemany(
            "UPDATE meta SET value = ? WHERE key = ?", [(str(seq), "head_seq"), (row.hash, "head")]
        )
        return row

    @staticmethod
    def _head(rows: list[Row], seq: int) -> str:
        return rows[seq - 1].hash if seq else GENESIS


def _schema_version(connection: sqlite3.Connection, path: Path) -> str | None:
    try:
        return dict(connection.execute("SELECT key, value FROM meta").fetchall()).get(
            "schema_version"
        )
    except sqlite3.DatabaseError:
        raise LedgerError(f"{path} is not a dpmm ledger") from None


def _schema_1_hash(row: Row, previous: str) -> str:
    """An entry's hash as schema 1 computed it: sha256, unkeyed, without the new columns."""
    fields = ["dpmm-ledger-entry-v1", *row.values()[:8], previous]
    canonical = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _secret(ledger: Path, *, create: bool) -> bytes:
    """The ledger's key, ``<ledger>.secret`` (32 random bytes, mode 0600)."""
    path = ledger.with_name(ledger.name + ".secret")
    if create and not path.exists():
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(os.urandom(SECRET_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # atomic; another process's secret may win
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        raise LedgerError(
            f"ledger {ledger} has lost its key {path} (made with the ledger; its entries "
            "cannot be verified without it): restore the file from a backup"
        ) from None
    if len(secret) != SECRET_BYTES:
        raise LedgerError(f"{path} is not a dpmm ledger secret ({SECRET_BYTES} bytes)")
    return secret


def _path(location: str | Path) -> Path:
    if not isinstance(location, str | Path):
        raise LedgerError(
            f"a ledger location must be a path or URL, got {describe_value(location)}"
        )
    path = ledger_path(location)
    if path is None:
        raise LedgerError(
            f"cannot open ledger {location!r}: only SQLite files (sqlite:///PATH) are supported"
        )
    return path


def _connect(path: Path, mode: str, timeout: float) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode={mode}",
            uri=True,
            timeout=timeout,
            isolation_level=None,
            # A release's stages may run on different threads of one process, one at a time;
            # sqlite3 serializes access to a shared connection.
            check_same_thread=False,
        )
        # Every commit reaches the disk before it returns (WAL alone would allow losing the last).
        connection.execute("PRAGMA synchronous=FULL")
    except sqlite3.OperationalError as error:
        raise LedgerError(f"cannot open ledger {path}: {error}") from None
    except sqlite3.Error as error:
        raise LedgerError(f"{path} is not a dpmm ledger ({error})") from None
    return connection
