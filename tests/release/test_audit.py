"""The audit: passes on real releases; one changed byte, row or field fails the named check."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from fractions import Fraction

import pytest

from dpmm.audit import AuditReport, Check, audit_release, format_audit
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release import (
    read_answers,
    read_measurements,
    write_measurements,
)
from tests.release.builders import build_release

NAMES = [
    "manifest",
    "files",
    "strategy",
    "sensitivity",
    "noise",
    "measurements",
    "answers",
    "ledger",
]


@pytest.fixture(scope="module", params=[PureDP("1/2"), ZCDP("1/8")], ids=["laplace", "gauss"])
def pristine(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("audit")
    built = build_release(base / "root", base / "ledger.db", privacy=request.param)
    return built, base / "ledger.db"


@pytest.fixture
def release(pristine, tmp_path):
    """A private copy of the release and its ledger, free to damage."""
    built, ledger = pristine
    folder = tmp_path / "v0001"
    shutil.copytree(built.folder, folder)
    for suffix in ("", ".secret"):
        shutil.copy(f"{ledger}{suffix}", tmp_path / f"ledger.db{suffix}")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["ledger"]["location"] = str(tmp_path / "ledger.db")
    _save(folder, manifest, publish=True)  # as its writer would have, for the copy
    return folder, manifest, built


def _save(folder, manifest, *, publish=False):
    text = json.dumps(manifest, sort_keys=True, indent=2) + "\n"
    (folder / "manifest.json").write_text(text)
    if publish:
        with Ledger.open(manifest["ledger"]["location"]) as ledger:
            ledger.publish(manifest["ledger"]["reservation_id"], _sha256(text.encode()))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _failed(report: AuditReport) -> set[str]:
    return {check.name for check in report.checks if not check.ok}


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_good_release_passes_every_check(release):
    folder, _, _ = release
    report = audit_release(folder)
    assert [check.name for check in report.checks] == NAMES
    assert report.ok, format_audit(report)
    assert "spent" in report.checks[-1].detail
    text = format_audit(report, ascii_only=True)
    assert text.count("\nok  ") == len(NAMES) and text.endswith("audit passed")
    assert "✓ files" in format_audit(report, ascii_only=False)


@pytest.mark.parametrize("name", ["answers.parquet", "measurements.parquet", "strategy.npz"])
def test_one_flipped_byte_in_a_file_fails_the_files_check(release, name):
    folder, _, _ = release
    _flip(folder / name, len((folder / name).read_bytes()) // 2)
    report = audit_release(folder)
    assert "files" in _failed(report)
    assert f"{name} does not match its sha256" in report.checks[1].detail
    assert not report.ok and "FAIL files" in format_audit(report, ascii_only=True)


def test_a_changed_manifest_field_fails_its_check(release):
    folder, manifest, _ = release
    text = (folder / "manifest.json").read_text()
    fingerprint = manifest["strategy"]["fingerprint"]
    changed = fingerprint[:-1] + ("0" if fingerprint[-1] != "0" else "1")  # one byte
    (folder / "manifest.json").write_text(text.replace(fingerprint, changed))
    report = audit_release(folder)
    assert _failed(report) == {"strategy", "measurements", "ledger"}
    assert "fingerprint" in report.checks[2].detail
    assert "fingerprint" in report.checks[5].detail
    assert "is not a manifest the ledger recorded" in report.checks[-1].detail


# The tests below forge with the ledger's key, republishing the changed manifest as a
# writer would: each change is still caught by the check that re-derives the fact.


def test_a_changed_sensitivity_fails_sensitivity_and_noise(release):
    folder, manifest, _ = release
    manifest["privacy"]["sensitivity"] = str(Fraction(manifest["privacy"]["sensitivity"]) + 1)
    _save(folder, manifest, publish=True)
    report = audit_release(folder)
    assert {"sensitivity", "measurements"} <= _failed(report)
    assert "the manifest says 5" in report.checks[3].detail


def test_a_scale_changed_consistently_with_its_hashes_fails_the_noise_check(release):
    """Header, file hash and manifest all agree on a smaller noise: only re-derivation sees it."""
    folder, manifest, _ = release
    record = read_measurements(folder / "measurements.parquet")
    key = "scale" if record.scale is not None else "sigma2"
    weaker = getattr(record, key) / 2
    from dataclasses import replace

    write_measurements(folder / "measurements.parquet", replace(record, **{key: weaker}))
    data = (folder / "measurements.parquet").read_bytes()
    manifest["files"]["measurements.parquet"] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    manifest["privacy"][key] = str(weaker)
    _save(folder, manifest, publish=True)
    report = audit_release(folder)
    # The answers' standard errors are those of the recorded noise: they fail as well.
    assert _failed(report) == {"noise", "answers"}
    assert f"the manifest says {weaker}" in report.checks[4].detail


def _with_column(table, column, change):
    """``table`` with ``column`` replaced by ``change(its values)``."""
    import pyarrow as pa

    values = change(table.column(column).to_numpy(zero_copy_only=False).copy())
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values))


def _rewrite(folder, manifest, name, table, *, publish=True):
    """Replace a listed file and update its size and sha256 in the manifest."""
    import pyarrow.parquet as pq

    pq.write_table(table, folder / name)
    data = (folder / name).read_bytes()
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    _save(folder, manifest, publish=publish)


def test_standard_errors_an_earlier_dpmm_made_differently_are_not_compared(release):
    folder, manifest, _ = release
    manifest["reconstruction"]["standard_errors"] = "parametric bootstrap, 100 replicates"
    table = read_answers(folder / "answers.parquet")
    changed = _with_column(table, "standard_error", lambda errors: errors * 1.1)
    _rewrite(folder, manifest, "answers.parquet", changed)
    report = audit_release(folder)
    assert report.ok, format_audit(report)
    assert "standard errors made by parametric bootstrap, 100 replicates" in report.checks[6].detail
    assert "not compared" in report.checks[6].detail


@pytest.mark.parametrize("column", ["estimate", "standard_error", "half_width"])
def test_a_forged_answer_with_its_hash_updated_fails_the_answers_check(release, column):
    import pyarrow as pa

    folder, manifest, _ = release
    table = read_answers(folder / "answers.parquet")
    values = table.column(column).to_numpy().copy()
    values[len(values) // 2] += 1.0
    index = table.schema.get_field_index(column)
    forged = table.set_column(index, column, pa.array(values))
    _rewrite(folder, manifest, "answers.parquet", forged, publish=False)
    assert _failed(audit_release(folder)) == {"answers", "ledger"}
    _rewrite(folder, manifest, "answers.parquet", forged)  # even by the ledger's key holder
    report = audit_release(folder)
    assert _failed(report) == {"answers"}
    assert "are not what its measurement and strategy give" in report.checks[6].detail


def test_an_interval_claimed_exact_or_at_another_level_fails_the_answers_check(release):
    folder, manifest, _ = release
    table = read_answers(folder / "answers.parquet")

    def flip_first(flags):
        flags[0] = not flags[0]
        return flags

    _rewrite(folder, manifest, "answers.parquet", _with_column(table, "exact_interval", flip_first))
    report = audit_release(folder)
    assert _failed(report) == {"answers"}
    assert "exact intervals of group" in report.checks[6].detail
    _rewrite(folder, manifest, "answers.parquet", table)
    assert audit_release(folder).ok
    manifest["intervals"]["level"] = 0.9
    _save(folder, manifest, publish=True)
    report = audit_release(folder)
    assert _failed(report) == {"answers"}
    assert (
        "intervals.level 0.9 is not its config's release.confidence 0.95" in report.checks[6].detail
    )


def test_an_edited_ledger_row_fails_the_ledger_check(release, tmp_path):
    folder, _, built = release
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute(
            "UPDATE entries SET amount = '1/100' WHERE kind = 'reserve' AND reservation_id = ?",
            (built.reservation_id,),
        )
    report = audit_release(folder)
    assert _failed(report) == {"ledger"}
    assert "entry 2 (reserve) does not match its hash" in report.checks[-1].detail


def test_a_deleted_ledger_entry_fails_the_ledger_check(release, tmp_path):
    folder, _, _ = release
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute("DELETE FROM entries WHERE kind = 'spend'")
    report = audit_release(folder)
    assert _failed(report) == {"ledger"}
    assert "entry 3 is missing" in report.checks[-1].detail


def test_the_ledger_must_hold_this_reservation(release, tmp_path):
    folder, _, _ = release
    from dpmm.privacy.ledger import Ledger

    with Ledger.init(tmp_path / "other.db") as other:
        other.grant("survey", PureDP(1))
    report = audit_release(folder, ledger=tmp_path / "other.db")
    assert _failed(report) == {"ledger"}
    assert "has no reservation" in report.checks[-1].detail
    report = audit_release(folder, ledger=tmp_path / "absent.db")
    assert "no ledger at" in report.checks[-1].detail


def test_unlisted_and_missing_files_fail_the_files_check(release):
    folder, _, _ = release
    (folder / "extra.csv").write_text("1,2")
    report = audit_release(folder)
    assert _failed(report) == {"files"}
    assert "does not list: extra.csv" in report.checks[1].detail
    (folder / "extra.csv").unlink()
    (folder / "histogram.parquet").unlink()
    report = audit_release(folder)
    assert _failed(report) == {"files"}
    assert "histogram.parquet is listed in the manifest but missing" in report.checks[1].detail


def test_a_listed_path_outside_the_folder_a_symlink_or_a_new_size_fails_the_files_check(
    release,
):
    folder, manifest, _ = release
    entry = manifest["files"]["histogram.parquet"]
    manifest["files"]["../histogram.parquet"] = entry
    _save(folder, manifest)
    report = audit_release(folder)
    assert "outside the release folder" in report.checks[1].detail
    del manifest["files"]["../histogram.parquet"]
    manifest["files"]["histogram.parquet"] = {**entry, "bytes": entry["bytes"] + 1}
    _save(folder, manifest)
    report = audit_release(folder)
    assert f"histogram.parquet has {entry['bytes']} bytes" in report.checks[1].detail
    manifest["files"]["histogram.parquet"] = entry
    _save(folder, manifest)
    (folder / "histogram.parquet").rename(folder / "elsewhere")
    (folder / "histogram.parquet").symlink_to(folder / "elsewhere")
    report = audit_release(folder)
    assert "files" in _failed(report)
    assert "histogram.parquet is a symlink" in report.checks[1].detail


def test_a_missing_release_fails_without_raising(tmp_path):
    report = audit_release(tmp_path / "nothing")
    assert not report.ok and _failed(report) == set(NAMES)
    assert "there is no release folder" in report.checks[0].detail
    assert all("not checked" in check.detail for check in report.checks[1:])


def test_a_manifest_with_missing_fields_fails_checks_not_the_audit(release):
    folder, manifest, _ = release
    del manifest["privacy"]["noise"]
    manifest["strategy"]["shape"] = ["a", "b"]
    _save(folder, manifest, publish=True)
    report = audit_release(folder)
    assert {"strategy", "noise", "measurements"} <= _failed(report)
    assert "no field privacy.noise" in report.checks[4].detail
    assert report.checks[1] == Check("files", True, report.checks[1].detail)


def test_a_quantized_strategy_file_is_audited_as_its_integer_matrix():
    from dpmm.audit import _integer_strategy
    from dpmm.linalg import Hierarchical, Weighted
    from dpmm.measure import MeasurementError, analyze_strategy

    integer = Hierarchical(4)
    found = _integer_strategy(Weighted(1 / 8, integer), 8)
    assert found.fingerprint() == analyze_strategy(integer).fingerprint()
    with pytest.raises(MeasurementError):
        _integer_strategy(Weighted(1 / 8, integer), 4)


def test_an_unfinished_write_beside_the_release_is_reported(release):
    folder, _, _ = release
    (folder.parent / ".tmp-0123456789abcdef").mkdir()
    report = audit_release(folder)
    assert report.ok
    assert "1 unfinished write beside it (.tmp-0123456789abcdef)" in report.checks[1].detail


def test_a_strategy_archive_damaged_into_an_unreadable_zip_is_a_finding(release):
    """zipfile raises RuntimeError for a member flagged encrypted: a failed check, no crash."""
    folder, _, _ = release
    path = folder / "strategy.npz"
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")  # the first member's central directory entry
    data[central + 8] |= 0x01  # its "encrypted" flag
    path.write_bytes(bytes(data))
    report = audit_release(folder)
    assert {"files", "strategy"} <= _failed(report)
    assert "encrypted" in report.checks[2].detail
