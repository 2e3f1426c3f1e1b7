"""An operator can see a release's runs and close one that cannot resume.

Budget reserved for a run that never drew noise is given back: at once when the run
folder cannot be written, by ``dpmm runs close`` after a kill. Budget spent for noise that
was never persisted stays spent, and closing the run lets the next release start afresh.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpmm.measure.mechanism as mechanism
import dpmm.pipeline.ingest_stage as ingest_stage
import dpmm.pipeline.run_state as run_state
from dpmm.cli import main
from dpmm.config import ReleaseConfig
from dpmm.data import open_source
from dpmm.errors import ConfigError
from dpmm.pipeline import run_release
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import PureDP
from tests.pipeline.conftest import kinds, remaining, versions, write_config

BODY = (
    "name: grid\ndomain: {x: 16}\nprivacy: {epsilon: 1/2}\n"
    "workload: [{name: cdf, kind: prefix, attribute: x}]\nstrategy: {method: hierarchical}\n"
)


@pytest.fixture
def config(tmp_path: Path) -> ReleaseConfig:
    (tmp_path / "data").mkdir()
    codes = np.random.default_rng(3).integers(0, 16, 500)
    pq.write_table(pa.table({"x": codes}), tmp_path / "data" / "part.parquet")
    return write_config(tmp_path, BODY, data=tmp_path / "data", budget=PureDP(2))


def _runs(config: ReleaseConfig, capsys: pytest.CaptureFixture) -> str:
    assert main(["runs", "list", str(config.path)]) == 0
    return capsys.readouterr().out


def test_a_run_folder_that_cannot_be_written_gives_its_reservation_back(
    config: ReleaseConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(folder: Path, state: dict) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_state, "_write_state", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_release(config)
    assert kinds(config) == ["reserve", "cancel"]
    assert remaining(config) == 2


def test_an_orphaned_reservation_is_listed_and_cancelled(
    config: ReleaseConfig, capsys: pytest.CaptureFixture
) -> None:
    # A kill between the reservation and the run folder: the ledger holds the budget.
    with Ledger.open(config.ledger.path) as ledger:
        held = ledger.reserve("adult", PureDP("1/2"), "grid-20261125T000000Z-0123abcd")
    assert "orphaned" in _runs(config, capsys)
    assert main(["runs", "close", str(config.path), held.id]) == 0
    assert "which no run held" in capsys.readouterr().out
    assert remaining(config) == 2
    assert run_release(config).manifest["release_id"] != held.release_id
    assert remaining(config) == Fraction(3, 2)


def test_a_run_folder_killed_before_it_was_named_is_not_resumed(
    config: ReleaseConfig, capsys: pytest.CaptureFixture
) -> None:
    # A kill between writing a new run's state and renaming its folder into place leaves a
    # hidden .new-* folder: no run (resumed, listed or closed), its reservation an orphan.
    release_id = "grid-20261125T000000Z-0123abcd"
    runs = run_state.runs_folder(config)
    with Ledger.open(config.ledger.path) as ledger:
        held = ledger.reserve("adult", PureDP("1/2"), release_id, str(runs / release_id))
    half = runs / ".new-0123abcd"
    (half / "measurements").mkdir(parents=True)
    state = {"state": "open", "release_id": release_id, "config_sha256": config.sha256}
    run_state._write_state(half, {**state, "reservation_id": held.id, "thresholds": {}})
    assert "orphaned" in _runs(config, capsys)
    assert run_release(config).manifest["release_id"] != release_id
    assert remaining(config) == 1
    assert main(["runs", "close", str(config.path), held.id]) == 0
    assert "which no run held" in capsys.readouterr().out
    assert remaining(config) == Fraction(3, 2)


def test_ledger_cancel_gives_back_what_no_live_run_holds(
    config: ReleaseConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    ledger_path = str(config.ledger.path)
    # A kill between the reservation and its run folder: no folder holds it.
    with Ledger.open(ledger_path) as ledger:
        orphan = ledger.reserve("adult", PureDP("1/2"), "grid-x", "/nowhere/grid-x")
    assert main(["ledger", "cancel", ledger_path, orphan.id]) == 0
    assert "ε = 1/2 is available again" in capsys.readouterr().out
    assert main(["ledger", "cancel", ledger_path, orphan.id]) == 0
    assert "already cancelled" in capsys.readouterr().out
    # A run killed before measuring holds its reservation; a live one refuses the cancel.
    with monkeypatch.context() as patched:
        patched.setattr(run_state, "_try_lock", lambda folder: None)
        with pytest.raises(run_state.ReleaseBusy):
            run_release(config)  # the new run is "held by another process" at once
    (held,) = Ledger.open(ledger_path).active_reservations("adult")
    assert held.run_folder is not None and Path(held.run_folder).is_dir()
    lock = run_state._try_lock(Path(held.run_folder))
    assert main(["ledger", "cancel", ledger_path, held.id]) == 2
    assert "is held by a live run" in capsys.readouterr().err
    os.close(lock)
    assert main(["ledger", "cancel", ledger_path, held.id]) == 0
    assert remaining(config) == 2
    result = run_release(config)  # the cancelled run is abandoned; a new one spends
    assert result.manifest["release_id"] != held.release_id and remaining(config) == Fraction(3, 2)
    spent = result.manifest["ledger"]["reservation_id"]
    assert main(["ledger", "cancel", ledger_path, spent]) == 2
    assert "is spent: noise was drawn for it" in capsys.readouterr().err
    assert remaining(config) == Fraction(3, 2)


def test_a_run_spent_without_a_persisted_measurement_is_closed_and_the_next_starts_afresh(
    config: ReleaseConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def killed(*args: object) -> None:  # the process dies while drawing, after the spend
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(mechanism, "add_noise", killed)
        with pytest.raises(KeyboardInterrupt):
            run_release(config)
    with pytest.raises(Exception, match="no record of its measurement"):
        run_release(config)  # refusing to draw again is right; it stays refused
    listing = _runs(config, capsys)
    assert "open" in listing and "spent" in listing
    run_id = listing.splitlines()[1].split()[0]
    assert main(["runs", "close", str(config.path), run_id]) == 0
    assert "stays spent" in capsys.readouterr().out
    assert remaining(config) == Fraction(3, 2)  # the loss is recorded
    with pytest.raises(ConfigError, match="is closed"):
        run_state.close_run(config, Ledger.open(config.ledger.path), run_id)
    result = run_release(config)
    assert versions(config) == ["v0001"] and result.manifest["release_id"] != run_id
    assert remaining(config) == 1


def test_the_input_fingerprint_is_keyed_with_the_ledgers_secret(config: ReleaseConfig) -> None:
    stated = run_release(config).manifest["input"]["fingerprint"]
    secret = Path(f"{config.ledger.path}.secret")
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_bytes()) == 32
    # Unkeyed, the digest of paths and sizes would give the file's size away.
    unkeyed = ingest_stage._fingerprint(open_source(config.data))
    keyed = hmac.new(secret.read_bytes(), unkeyed.encode(), hashlib.sha256).hexdigest()
    assert stated == keyed != unkeyed
    assert run_release(config).manifest["input"]["fingerprint"] == stated  # the same input
