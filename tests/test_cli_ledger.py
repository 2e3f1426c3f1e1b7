"""``dpmm ledger``: init, grant, show and verify, and bad input that writes nothing."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from dpmm.cli import main
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import PureDP


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def ledger(tmp_path: Path, capsys: pytest.CaptureFixture) -> str:
    path = str(tmp_path / "budget.db")
    assert run(["ledger", "init", path], capsys)[0] == 0
    return path


def test_round_trip(ledger: str, capsys: pytest.CaptureFixture) -> None:
    status, out, _ = run(["ledger", "grant", ledger, "adult", "--epsilon", "1"], capsys)
    assert status == 0 and "'adult'" in out
    assert run(["ledger", "grant", ledger, "census", "--rho", "1/8"], capsys)[0] == 0
    with Ledger.open(ledger) as opened:
        opened.mark_spent(opened.reserve("adult", PureDP("1/3"), "adult-2026"))
        opened.reserve("adult", PureDP("1/3"), "adult-2027")

    status, out, err = run(["ledger", "show", ledger], capsys)
    assert status == 0 and err == ""
    assert "dataset 'adult': pure ε-DP budget (ε)" in out
    assert "dataset 'census': ρ-zCDP budget (ρ)" in out
    assert "remaining  1/3  ≈ 0.333333333333" in out
    assert "granted    1/8  = 0.125" in out
    assert "1 reservation still reserved" in out and "adult-2027" in out
    assert re.search(r"since \S+ \(\d+ s ago\)", out)

    status, out, _ = run(["ledger", "show", ledger, "adult", "--json"], capsys)
    assert status == 0
    [adult] = json.loads(out)["datasets"]
    assert adult["kind"] == "pure" and adult["parameter"] == "epsilon"
    assert adult["granted"] == {"fraction": "1", "decimal": "1"}
    assert adult["spent"]["fraction"] == "1/3" and adult["reserved"]["fraction"] == "1/3"
    assert adult["remaining"]["fraction"] == "1/3"
    assert [entry["kind"] for entry in adult["history"]] == ["grant", "reserve", "spend", "reserve"]
    assert [r["release_id"] for r in adult["active_reservations"]] == ["adult-2027"]

    status, out, _ = run(["ledger", "verify", ledger], capsys)
    assert (status, out) == (0, "ok, 5 entries\n")


def test_verify_names_the_tampered_entry(ledger: str, capsys: pytest.CaptureFixture) -> None:
    run(["ledger", "grant", ledger, "adult", "--epsilon", "1"], capsys)
    run(["ledger", "grant", ledger, "adult", "--epsilon", "2"], capsys)
    with sqlite3.connect(ledger) as connection:
        connection.execute("UPDATE entries SET amount = '20' WHERE seq = 2")
    status, out, err = run(["ledger", "verify", ledger], capsys)
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("dpmm: error: ")
    assert "entry 2 (grant)" in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--epsilon", "-1", "epsilon must be a positive finite number, got '-1'"),
        ("--epsilon", "0", "epsilon must be a positive finite number, got '0'"),
        ("--rho", "lots", "rho must be a positive finite number, got 'lots'"),
        ("--epsilon", "nan", "epsilon must be a positive finite number, got 'nan'"),
    ],
)
def test_bad_budget_writes_nothing(
    ledger: str, capsys: pytest.CaptureFixture, flag: str, value: str, message: str
) -> None:
    before = Path(ledger).read_bytes()
    status, out, err = run(["ledger", "grant", ledger, "adult", flag, value], capsys)
    assert (status, out) == (2, "")
    assert err == f"dpmm: error: {message}\n"
    assert Path(ledger).read_bytes() == before
    with Ledger.open(ledger) as opened:
        assert opened.datasets() == [] and opened.verify() == 0


def test_errors_are_one_line(ledger: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = str(tmp_path / "missing.db")
    cases = [
        (["ledger", "init", ledger], "already exists"),
        (["ledger", "show", missing], "no ledger at"),
        (["ledger", "grant", missing, "adult", "--epsilon", "1"], "no ledger at"),
        (["ledger", "show", ledger, "nobody"], "no budget has been granted to dataset 'nobody'"),
        (["ledger", "show", str(tmp_path)], "is a folder, not a ledger file"),
    ]
    for argv, message in cases:
        status, out, err = run(argv, capsys)
        assert status == 2 and out == "" and err.count("\n") == 1
        assert err.startswith("dpmm: error: ") and message in err
    assert not Path(missing).exists()
    run(["ledger", "grant", ledger, "adult", "--epsilon", "1"], capsys)
    status, _, err = run(["ledger", "grant", ledger, "adult", "--rho", "1"], capsys)
    assert status == 2 and "ρ-zCDP grant cannot be added" in err


def test_empty_ledger(ledger: str, capsys: pytest.CaptureFixture) -> None:
    status, out, _ = run(["ledger", "show", ledger], capsys)
    assert status == 0 and "no datasets yet" in out
    assert run(["ledger", "verify", ledger], capsys)[1] == "ok, 0 entries\n"
    status, _, err = run(["ledger", "grant", ledger, "adult"], capsys)
    assert status == 2 and "--epsilon" in err  # argparse: one of the two is required


def test_a_ledger_locked_past_the_wait_is_one_line(
    ledger: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock longer than the wait: one sentence, exit 2,
    nothing written."""
    import dpmm.privacy.ledger as ledger_module

    connect = ledger_module._connect
    monkeypatch.setattr(ledger_module, "_connect", lambda path, mode, _: connect(path, mode, 0.2))
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        status, out, err = run(["ledger", "grant", ledger, "adult", "--epsilon", "1"], capsys)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 2 and out == ""
    assert err == (
        f"dpmm: error: cannot write to ledger {ledger}: another process kept it locked past "
        "the wait; run the command again when that process has finished\n"
    )
    assert run(["ledger", "show", ledger], capsys)[1].splitlines()[1].startswith("no datasets yet")
