"""The state of one release run: its reservation, its strategy and its measurement, on disk.

A run lives in ``<root>/<name>/.runs/<release id>/`` until its version is written::

    run.json        config hash, dataset, reservation ids, state (open, released, abandoned),
                    and each private truncation threshold θ once drawn
    run.lock        held (flock) by the process running it
    strategy.npz    the strategy selected for it (a re-run measures exactly this one)
    measurements/   the measurement store (DESIGN §5 rule 4)

Starting a release first looks for an *open* run of the same config: a run that crashed
after reserving, or after measuring, is resumed with its reservation, strategy and
persisted measurement, so the budget is spent once. A run held by a live process is never
shared: the second process stops before reading any data. Otherwise the budget is reserved
in the ledger and a new run folder is created. A config with private truncation thresholds
reserves one share per threshold besides the measurement's budget, all before any data is
read; if one of them is refused, those already made are cancelled.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpmm.config import ReleaseConfig
from dpmm.durable import atomic_write, exclusive_lock, fsync_folder, is_held, try_lock
from dpmm.errors import ConfigError, DpmmError
from dpmm.measure.record import SUFFIX
from dpmm.privacy.ledger import Ledger, LedgerError, Reservation
from dpmm.privacy.params import budget_text

__all__ = [
    "ReleaseBusy",
    "ReleaseRun",
    "RunSummary",
    "cancel_reservation",
    "cancel_reserved",
    "close_run",
    "list_runs",
    "open_run",
    "runs_folder",
]

RUNS = ".runs"
STATE_FILE = "run.json"
LOCK_FILE = "run.lock"
#: The run's measurement record (its measurement id is the release's MEASUREMENT_ID).
RECORD = Path("measurements") / f"strategy{SUFFIX}"


class ReleaseBusy(DpmmError):  # noqa: N818 (reads as a state: the release is busy)
    """Another process is running the same release right now."""


def runs_folder(config: ReleaseConfig) -> Path:
    """``<release root>/<name>/.runs``: the runs of a release, finished or not."""
    return config.release.root / config.name / RUNS


@dataclass
class ReleaseRun:
    """An open run, locked by this process until :meth:`close`.

    Attributes:
        folder: The run's folder.
        release_id: The ledger's release id of the run (``<name>-<time>-<random>``).
        reservation: The budget reserved for its measurement.
        resumed: True when an earlier, interrupted run is being continued.
        thresholds: The budget reserved for each private truncation threshold, by group name.
    """

    folder: Path
    release_id: str
    reservation: Reservation
    resumed: bool
    _lock: int = field(repr=False)
    thresholds: dict[str, Reservation] = field(default_factory=dict)

    @property
    def measurements(self) -> Path:
        """The measurement store of the run."""
        return self.folder / "measurements"

    def state(self) -> dict[str, Any]:
        """The run's ``run.json``."""
        return json.loads((self.folder / STATE_FILE).read_text())

    def update(self, **changes: Any) -> None:
        """Change fields of ``run.json`` atomically."""
        _write_state(self.folder, {**self.state(), **changes})

    def close(self) -> None:
        """Release the run's lock (the folder stays)."""
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def discard(self) -> None:
        """Remove a run that never measured (after its reservation was cancelled)."""
        self.close()
        # The runs folder and its lock stay: another process may be waiting on that lock.
        shutil.rmtree(self.folder, ignore_errors=True)


def _write_state(folder: Path, state: dict[str, Any]) -> None:
    # atomic_write's file is the operator's only (mode 0600, as mkstemp makes it).
    atomic_write(folder / STATE_FILE, [json.dumps(state, indent=2, sort_keys=True).encode()])


def _try_lock(folder: Path) -> int | None:
    return try_lock(folder / LOCK_FILE)


def _runs(runs: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The run folders and their ``run.json``, by name; a folder being made (``.new-*``:
    hidden) or without a readable state is left out."""
    found = []
    for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            found.append((folder, json.loads((folder / STATE_FILE).read_text())))
        except (OSError, ValueError):
            continue
    return found


def _resumable(config: ReleaseConfig, ledger: Ledger, runs: Path) -> ReleaseRun | None:
    for folder, state in _runs(runs):
        if state.get("state") != "open" or state.get("config_sha256") != config.sha256:
            continue
        lock = _try_lock(folder)
        if lock is None:
            raise ReleaseBusy(
                f"release {config.name!r} is already being run by another process "
                f"(run {folder.name}); wait for it to finish, then run it again"
            )
        reservation = ledger.reservation(state["reservation_id"])
        thresholds = {
            name: ledger.reservation(entry["reservation_id"])
            for name, entry in state.get("thresholds", {}).items()
        }
        if ledger.status(reservation) == "cancelled":
            cancel_reserved(ledger, thresholds.values())
            _write_state(folder, {**state, "state": "abandoned"})
            os.close(lock)
            continue
        return ReleaseRun(folder, state["release_id"], reservation, True, lock, thresholds)
    return None


def cancel_reserved(ledger: Ledger, reservations: Iterable[Reservation]) -> None:
    """Cancel those of the reservations no noise was drawn for (a spent one stays spent)."""
    for reservation in reservations:
        if ledger.status(reservation) == "reserved":
            ledger.cancel(reservation)


def _reserve(
    config: ReleaseConfig, ledger: Ledger, folder: Path
) -> tuple[Reservation, dict[str, Reservation]]:
    """The measurement's reservation and one per private threshold, or none of them, for
    the run in ``folder`` (named by its release id)."""
    dataset, release_id, held_by = config.ledger.dataset, folder.name, str(folder.resolve())
    if config.least is not None and not config.budget_derived:
        raise ConfigError(
            f"{config.path}: privacy: the budget to reserve is derived from the targets by "
            "the plan, and this config was not planned"
        )
    thresholds: dict[str, Reservation] = {}
    try:
        for index, choice in config.private_thresholds:
            budget = config.threshold_privacy(choice.share)
            name = config.workload[index].name
            thresholds[name] = ledger.reserve(dataset, budget, release_id, held_by)
        measurement = ledger.reserve(dataset, config.measurement_privacy, release_id, held_by)
        return measurement, thresholds
    except BaseException:
        cancel_reserved(ledger, thresholds.values())
        raise


def open_run(config: ReleaseConfig, ledger: Ledger) -> ReleaseRun:
    """Resume the open run of this config, or reserve its budget and start a new one.

    Raises:
        ReleaseBusy: A live process holds the open run of this config.
        BudgetExceeded: The dataset has less budget left than the config asks for.
    """
    runs = runs_folder(config)
    runs.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(runs / ".lock"):
        resumed = _resumable(config, ledger, runs)
        if resumed is not None:
            return resumed
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        release_id = f"{config.name}-{stamp}-{uuid.uuid4().hex[:8]}"
        # A refused reservation leaves the (empty) runs folder and its lock file: removing
        # them here would race with another process waiting on that lock.
        folder = runs / release_id
        reservation, thresholds = _reserve(config, ledger, folder)
        temporary = runs / f".new-{uuid.uuid4().hex}"
        try:
            temporary.mkdir(mode=0o700)  # private to the operator, like the ledger
            (temporary / "measurements").mkdir()
            _write_state(
                temporary,
                {
                    "state": "open",
                    "release_id": release_id,
                    "config_sha256": config.sha256,
                    "config": str(config.path),
                    "dataset": config.ledger.dataset,
                    "reservation_id": reservation.id,
                    "thresholds": {
                        name: {"reservation_id": held.id} for name, held in thresholds.items()
                    },
                    "created": datetime.now(UTC).isoformat(timespec="seconds"),
                },
            )
            os.rename(temporary, folder)
            fsync_folder(runs)
        except BaseException:  # no run holds the budget: give it back (a kill: dpmm runs)
            cancel_reserved(ledger, [reservation, *thresholds.values()])
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        lock = _try_lock(folder)
        if lock is None:  # pragma: no cover - the folder is new and the runs are locked
            raise ReleaseBusy(f"run {folder} was taken by another process")
        return ReleaseRun(folder, release_id, reservation, False, lock, thresholds)


@dataclass(frozen=True)
class RunSummary:
    """A run of a release as an operator sees it (no data-derived value).

    Attributes:
        release_id: The run's release id (the ledger's), or the reservation's for a
            reservation that no run folder holds.
        state: ``open``, ``released``, ``abandoned`` or ``closed`` from ``run.json``, or
            ``orphaned`` for a reservation without a run folder.
        reservation: The ledger's status of the measurement's reservation.
        busy: A live process holds the run.
        measured: Its measurement record is persisted (``dpmm release`` resumes it).
        created: When the run (or the reservation) was made, ISO 8601.
        reservation_id: The measurement's reservation.
    """

    release_id: str
    state: str
    reservation: str
    busy: bool
    measured: bool
    created: str
    reservation_id: str


def list_runs(config: ReleaseConfig, ledger: Ledger) -> list[RunSummary]:
    """Every run of the config's release, and every reservation of its dataset made for
    this release that no run folder holds (a kill between reserving and the folder)."""
    runs = runs_folder(config)
    summaries, held = [], set()
    for folder, state in _runs(runs) if runs.is_dir() else []:
        reservation_id = state.get("reservation_id", "")
        held.add(reservation_id)
        summaries.append(
            RunSummary(
                state.get("release_id", folder.name),
                state.get("state", "?"),
                ledger.status(reservation_id) if reservation_id else "?",
                is_held(folder / LOCK_FILE),
                (folder / RECORD).is_file(),
                state.get("created", ""),
                reservation_id,
            )
        )
        held.update(entry["reservation_id"] for entry in state.get("thresholds", {}).values())
    for reservation in ledger.active_reservations(config.ledger.dataset):
        if reservation.id not in held and reservation.release_id.startswith(f"{config.name}-"):
            created = reservation.created.isoformat(timespec="seconds")
            summaries.append(
                RunSummary(
                    reservation.release_id,
                    "orphaned",
                    "reserved",
                    False,
                    False,
                    created,
                    reservation.id,
                )
            )
    return summaries


def close_run(config: ReleaseConfig, ledger: Ledger, run_id: str) -> str:
    """Close an open run (or an orphaned reservation) that cannot or should not resume.

    Budget no noise was drawn for is cancelled; budget that was spent stays spent and
    recorded. A run whose measurement is persisted is not closed: ``dpmm release``
    finishes it without spending again. ``run_id`` is a release id or a reservation id.

    Returns:
        One sentence saying what was done.

    Raises:
        ConfigError: no such open run, or its measurement is persisted.
        ReleaseBusy: a live process holds the run.
    """
    runs = runs_folder(config)
    runs.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(runs / ".lock"):  # no run is being opened meanwhile
        for summary in list_runs(config, ledger):
            if run_id in (summary.release_id, summary.reservation_id):
                break
        else:
            raise ConfigError(f"{config.path}: release {config.name!r} has no run {run_id!r}")
        if summary.state == "orphaned":
            ledger.cancel(summary.reservation_id)
            return f"cancelled reservation {summary.reservation_id}, which no run held"
        if summary.state != "open":
            raise ConfigError(f"{config.path}: run {summary.release_id} is {summary.state}")
        folder = runs / summary.release_id
        lock = _try_lock(folder)
        if lock is None:
            raise ReleaseBusy(f"run {summary.release_id} is held by a live process")
        try:
            if (folder / RECORD).is_file():
                raise ConfigError(
                    f"{config.path}: run {summary.release_id} has its measurement persisted; "
                    f"finish it with: dpmm release {config.path}"
                )
            state = json.loads((folder / STATE_FILE).read_text())
            held = [state["reservation_id"]]
            held += [entry["reservation_id"] for entry in state.get("thresholds", {}).values()]
            spent = [r for r in held if ledger.status(r) == "spent"]
            cancel_reserved(ledger, [ledger.reservation(r) for r in held])
            _write_state(folder, {**state, "state": "closed" if spent else "abandoned"})
        finally:
            os.close(lock)
    if spent:
        return (
            f"closed run {summary.release_id}: its spent budget stays spent (the noise drawn "
            "was never persisted, so nothing was published); the next release opens a new run"
        )
    return f"closed run {summary.release_id}: its reserved budget is cancelled"


def cancel_reservation(ledger: Ledger, reservation_id: str) -> str:
    """Cancel a reservation no noise was drawn for and no live run holds.

    A *reserved* reservation has had no noise drawn (a measurement marks it spent before
    it draws). If a release run holds it, that run must not be live; the next release of
    its config then marks the run abandoned.

    Returns:
        One sentence saying what was done.

    Raises:
        LedgerError: no such reservation, or it is spent (its run can be closed with
            ``dpmm runs close``).
        ReleaseBusy: a live process holds its run.
    """
    reservation = ledger.reservation(reservation_id)
    status = ledger.status(reservation)
    if status == "cancelled":
        return f"reservation {reservation_id} was already cancelled"
    if status == "spent":
        raise LedgerError(
            f"reservation {reservation_id} (release {reservation.release_id!r}) is spent: noise "
            "was drawn for it, so its budget stays spent; close its run with 'dpmm runs close "
            "CONFIG RUN'"
        )
    folder = Path(reservation.run_folder) if reservation.run_folder is not None else None
    if folder is not None and folder.is_dir():  # none: killed before its folder was made
        lock = try_lock(folder / LOCK_FILE)
        if lock is None:
            raise ReleaseBusy(
                f"reservation {reservation_id} is held by a live run "
                f"({reservation.run_folder}); wait for it, or stop it first"
            )
        try:
            ledger.cancel(reservation)
        finally:
            os.close(lock)
    else:
        ledger.cancel(reservation)
    return (
        f"cancelled reservation {reservation_id} of release {reservation.release_id!r}: "
        f"{budget_text(reservation.budget.to_dict())} is available again"
    )
