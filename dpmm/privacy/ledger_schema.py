"""The budget ledger's records: SQLite tables, entry rows, their hash chain, and what they imply.

One table ``entries`` holds the append-only log; one table ``meta`` holds the
schema version and the head of the chain (the last entry's sequence number and
hash), so that cutting entries off the end is detected as well as editing or
deleting one in the middle. Every amount is an exact fraction string such as
``"1/3"``, never a float.

Each entry's hash is HMAC-SHA256, keyed with the ledger's secret (a file beside
it), over a canonical JSON serialization of its fields and the previous entry's
hash; the first entry follows :data:`GENESIS`. Without the key, an edited
ledger's chain cannot be recomputed; with it, an anchor published earlier (an
entry's sequence number and hash, see ``dpmm ledger anchor``) or a manifest's
record of its spend entry still tells. The
state of every dataset (its :class:`Balance`) and of every reservation is rebuilt
from the rows by :class:`Replay`, which also names the first entry that makes no
sense (a spend of a cancelled reservation, a reservation beyond the grant).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Context, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Literal

from dpmm.privacy.params import KINDS, ZCDP, PureDP

__all__ = [
    "ENTRY_KINDS",
    "GENESIS",
    "SCHEMA_VERSION",
    "Balance",
    "Entry",
    "Replay",
    "Reservation",
    "Row",
    "budget_of",
    "decimal_text",
    "ledger_path",
    "to_entry",
    "to_reservation",
]

#: The layout this module reads and writes. A ledger with another version is refused
#: (version 1, unkeyed and without publications, is upgraded by :meth:`Ledger.upgrade`).
SCHEMA_VERSION = 2
#: The "previous hash" of the first entry.
GENESIS = "0" * 64
#: What an entry records: budget granted, reserved for a release, spent, released again, or
#: the sha256 of the manifest of the release version a spent reservation published.
ENTRY_KINDS = ("grant", "reserve", "spend", "cancel", "publish")
#: Prefixed to every serialized entry, so a hash cannot be mistaken for one of another format.
HASH_DOMAIN = "dpmm-ledger-entry-v2"
_SHA256 = re.compile(r"[0-9a-f]{64}")
URL_SCHEME = "sqlite:///"

CREATE_TABLES = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    dataset TEXT NOT NULL,
    budget_kind TEXT NOT NULL,
    amount TEXT NOT NULL,
    reservation_id TEXT,
    release_id TEXT,
    created TEXT NOT NULL,
    run_folder TEXT,
    digest TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX entries_dataset ON entries (dataset, seq);
"""
COLUMNS = (
    "seq, kind, dataset, budget_kind, amount, reservation_id, release_id, created, run_folder, "
    "digest, prev_hash, hash"
)


@dataclass(frozen=True)
class Row:
    """One entry as stored: every field as text, the amount as a fraction string."""

    seq: int
    kind: str
    dataset: str
    budget_kind: str
    amount: str
    reservation_id: str | None
    release_id: str | None
    created: str
    run_folder: str | None
    digest: str | None
    prev_hash: str
    hash: str

    def expected_hash(self, key: bytes) -> str:
        """HMAC-SHA256 under ``key`` of this entry's fields and the previous entry's hash,
        in canonical JSON."""
        fields = [HASH_DOMAIN, *self.values()[:-1]]  # every column but the hash itself
        canonical = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
        return hmac.new(key, canonical.encode("ascii"), hashlib.sha256).hexdigest()

    def values(self) -> tuple[object, ...]:
        """The row's values in the order of :data:`COLUMNS`."""
        return (
            self.seq,
            self.kind,
            self.dataset,
            self.budget_kind,
            self.amount,
            self.reservation_id,
            self.release_id,
            self.created,
            self.run_folder,
            self.digest,
            self.prev_hash,
            self.hash,
        )


#: A budget: pure ε-DP or ρ-zCDP, always positive (a balance may be zero; see Balance).
Budget = PureDP | ZCDP
Status = Literal["reserved", "spent", "cancelled"]


@dataclass(frozen=True)
class Reservation:
    """Budget set aside for one release; counted against the dataset until spent or cancelled.

    ``run_folder`` is the folder of the release run holding it (None for a reservation made
    outside a release run).
    """

    id: str
    dataset: str
    budget: Budget
    release_id: str
    created: datetime
    run_folder: str | None = None


@dataclass(frozen=True)
class Entry:
    """One entry of the log: a grant, a reservation, a spend, a cancellation or a
    publication (``digest``: the sha256 of the published manifest)."""

    seq: int
    kind: str
    dataset: str
    budget: Budget
    reservation_id: str | None
    release_id: str | None
    created: datetime
    hash: str
    digest: str | None = None

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description; the budget's amount is an exact fraction string."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "dataset": self.dataset,
            "budget": self.budget.to_dict(),
            "reservation_id": self.reservation_id,
            "release_id": self.release_id,
            "created": self.created.isoformat(),
            "digest": self.digest,
            "hash": self.hash,
        }


@dataclass(frozen=True)
class Balance:
    """A dataset's budget: its kind and the exact amounts granted, reserved and spent."""

    dataset: str
    kind: str
    granted: Fraction = Fraction(0)
    reserved: Fraction = Fraction(0)
    spent: Fraction = Fraction(0)

    @property
    def remaining(self) -> Fraction:
        """``granted − reserved − spent``: what can still be reserved (zero or more)."""
        return self.granted - self.reserved - self.spent

    @property
    def parameter(self) -> str:
        """The parameter the amounts are in: ``"epsilon"`` or ``"rho"``."""
        return KINDS[self.kind].parameter


@dataclass
class Replay:
    """The state the entries imply, rebuilt one entry at a time; ``apply`` names what is wrong."""

    balances: dict[str, Balance] = field(default_factory=dict)
    reservations: dict[str, tuple[Row, Status]] = field(default_factory=dict)

    def apply(self, row: Row) -> str | None:
        """Take ``row`` into the state; or, leaving the state as it was, say what is wrong with it.

        A row dpmm wrote is never wrong: every check here fails only for a row that was
        written or rewritten behind the ledger's back (even with a recomputed hash chain).
        """
        if row.kind not in ENTRY_KINDS or row.budget_kind not in KINDS:
            return f"has an unknown kind {row.kind!r}/{row.budget_kind!r}"
        try:
            amount = Fraction(row.amount)
            created = datetime.fromisoformat(row.created)
        except (ValueError, ZeroDivisionError):
            return f"has an unreadable amount {row.amount!r} or time {row.created!r}"
        if amount <= 0 or str(amount) != row.amount or created.tzinfo is None:
            return f"has a malformed amount {row.amount!r} or time {row.created!r}"
        if (row.digest is not None) != (row.kind == "publish") or (
            row.run_folder is not None and row.kind != "reserve"
        ):
            return "has a manifest digest or run folder its kind does not have"
        balance = self.balances.get(row.dataset)
        if balance is not None and balance.kind != row.budget_kind:
            return f"charges a {row.budget_kind} amount to a {balance.kind} budget"
        if row.kind == "grant":
            balance = balance or Balance(row.dataset, row.budget_kind)
            self.balances[row.dataset] = _add(balance, granted=amount)
            return None
        if row.reservation_id is None or row.release_id is None or balance is None:
            return "names no reservation or release, or a dataset without a grant"
        if row.kind == "reserve":
            if row.reservation_id in self.reservations or amount > balance.remaining:
                return "reuses a reservation id or reserves more than the remaining budget"
            self.reservations[row.reservation_id] = (row, "reserved")
            self.balances[row.dataset] = _add(balance, reserved=amount)
            return None
        reserve, status = self.reservations.get(row.reservation_id, (None, None))
        if reserve is None or reserve.dataset != row.dataset or reserve.amount != row.amount:
            return f"{row.kind}s no reservation of this dataset and amount"
        if row.kind == "publish":
            if status != "spent" or not _SHA256.fullmatch(str(row.digest)):
                return "publishes a manifest for a reservation that is not spent, or no sha256"
            return None
        if status != "reserved":
            return f"{row.kind}s a reservation that is not reserved"
        status = "spent" if row.kind == "spend" else "cancelled"
        self.reservations[row.reservation_id] = (reserve, status)
        spent = amount if row.kind == "spend" else Fraction(0)
        self.balances[row.dataset] = _add(balance, reserved=-amount, spent=spent)
        return None


def _add(balance: Balance, **amounts: Fraction) -> Balance:
    return replace(
        balance, **{name: getattr(balance, name) + value for name, value in amounts.items()}
    )


def budget_of(kind: str, amount: Fraction) -> Budget:
    """``PureDP(amount)`` for kind ``"pure"``, ``ZCDP(amount)`` for ``"zcdp"``."""
    return KINDS[kind].budget_type(amount)


def to_entry(row: Row) -> Entry:
    """The entry a stored row records (the row must have passed :meth:`Replay.apply`)."""
    return Entry(
        seq=row.seq,
        kind=row.kind,
        dataset=row.dataset,
        budget=budget_of(row.budget_kind, Fraction(row.amount)),
        reservation_id=row.reservation_id,
        release_id=row.release_id,
        created=datetime.fromisoformat(row.created),
        hash=row.hash,
        digest=row.digest,
    )


def to_reservation(row: Row) -> Reservation:
    """The reservation a stored ``reserve`` row records."""
    return Reservation(
        id=str(row.reservation_id),
        dataset=row.dataset,
        budget=budget_of(row.budget_kind, Fraction(row.amount)),
        release_id=str(row.release_id),
        created=datetime.fromisoformat(row.created),
        run_folder=row.run_folder,
    )


def ledger_path(location: str | Path) -> Path | None:
    """The file a ledger location names (a path or a ``sqlite:///path`` URL), or None.

    ``None`` means the location is a URL of a scheme this module cannot open. As in
    SQLAlchemy, ``sqlite:///ledger.db`` is relative and ``sqlite:////srv/ledger.db`` absolute.

    Example:
        >>> ledger_path("sqlite:///budget.db"), ledger_path("postgresql://host/db")
        (PosixPath('budget.db'), None)
    """
    if isinstance(location, Path):
        return location
    if location.startswith(URL_SCHEME):
        return Path(location[len(URL_SCHEME) :])
    if "://" in location:
        return None
    return Path(location)


def decimal_text(value: Fraction, digits: int = 12) -> str:
    """``value`` as a decimal: exact when it has at most ``digits`` digits, else ``≈`` rounded.

    Example:
        >>> decimal_text(Fraction(1, 4)), decimal_text(Fraction(1, 3), digits=6)
        ('0.25', '≈ 0.333333')
    """
    rounded = Context(prec=digits).divide(Decimal(value.numerator), Decimal(value.denominator))
    text = format(rounded.normalize(), "f") if rounded else "0"
    return text if Fraction(rounded) == value else f"≈ {text}"
