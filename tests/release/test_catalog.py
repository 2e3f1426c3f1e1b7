"""The release catalog: manifests, listing, show and diff of real releases."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dpmm.privacy.params import PureDP
from dpmm.release import (
    ReleaseError,
    diff_releases,
    format_diff,
    format_listing,
    format_release,
    list_releases,
    load_manifest,
    show_release,
)
from tests.release.builders import build_release


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    base = tmp_path_factory.mktemp("catalog")
    root, ledger = base / "root", base / "ledger.db"
    first = build_release(root, ledger, seed=0)
    second = build_release(root, ledger, seed=1, privacy=PureDP("1/4"), groups=("cells",))
    other = build_release(root, ledger, name="abc", seed=2)
    return root, first, second, other


def test_listing_is_sorted_and_ignores_temporary_folders(releases):
    root, first, second, other = releases
    (root / "survey" / ".tmp-deadbeef").mkdir()
    (root / "survey" / ".tmp-deadbeef" / "answers.parquet").write_bytes(b"partial")
    (root / ".hidden").mkdir(exist_ok=True)
    summaries = list_releases(root)
    assert [(s.name, s.version) for s in summaries] == [("abc", 1), ("survey", 1), ("survey", 2)]
    assert [s.path for s in summaries] == [other.folder, first.folder, second.folder]
    assert summaries[1].budget == "ε = 1/2" and summaries[2].budget == "ε = 1/4"
    assert summaries[1].queries == 18 and summaries[2].queries == 16
    assert summaries[1].method == "hierarchical"
    assert summaries[1].reconstruction == "least_squares"
    text = format_listing(summaries)
    assert "survey" in text and "v0002" in text and "ε = 1/4" in text and ".tmp" not in text
    assert text.splitlines()[0].split() == [
        "release", "version", "created", "spent", "strategy", "reconstruction", "queries"
    ]  # fmt: skip
    # Three versions that each drew noise, all charged to the one dataset.
    assert text.endswith("spent in all: ε = 5/4 of dataset 'survey'")


def test_show_release_has_the_error_table(releases):
    _, first, _, _ = releases
    summary = show_release(first.folder)
    expected = first.manifest["error"]["groups"]
    assert [e.name for e in summary.errors] == ["cells", "by_second"]
    assert [e.expected_rmse for e in summary.errors] == [g["expected_rmse"] for g in expected]
    assert summary.errors[1].queries == 2
    text = format_release(summary)
    assert "by_second" in text and f"{expected[0]['expected_rmse']:.4g}" in text
    lines = text.splitlines()
    assert lines[2] == "spent: ε = 1/2 of dataset 'survey' (measurement ε = 1/2)"
    assert lines[3] == f"strategy: hierarchical: {first.manifest['strategy']['description']}"
    assert lines[4] == "reconstruction: least_squares"


def test_a_manifest_of_another_kind_shows_what_it_says(tmp_path, releases):
    """The method asked for and the one chosen, and an unreadable budget as '?'."""
    _, first, _, _ = releases
    manifest = load_manifest(first.folder)
    manifest["strategy"] |= {"method": "auto", "selected": "hdmm_kron"}
    manifest["privacy"]["budget"] = {"kind": "other"}
    folder = tmp_path / "odd" / "v0001"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    summary = show_release(folder)
    assert (summary.method, summary.strategy, summary.budget) == (
        "hdmm_kron",
        "hdmm_kron (auto)",
        "?",
    )
    assert "strategy: hdmm_kron, chosen by 'auto': " in format_release(summary)


def test_diff_reports_fields_and_group_deltas(releases):
    _, first, second, _ = releases
    diff = diff_releases(first.folder, second.folder)
    changed = {change.field for change in diff.changes}
    assert changed == {"workload.sha256", "privacy.budget", "measurement.values_sha256"}
    budget = next(c for c in diff.changes if c.field == "privacy.budget")
    assert budget.before["epsilon"] == "1/2" and budget.after["epsilon"] == "1/4"
    assert [group.name for group in diff.groups] == ["cells"]
    assert diff.only_a == ("by_second",) and diff.only_b == ()
    cells = diff.groups[0]
    a = first.answers[0].estimate[:16]
    b = second.answers[0].estimate[:16]
    assert cells.queries_a == cells.queries_b == 16
    assert cells.mean_abs_delta == pytest.approx(np.mean(np.abs(a - b)), rel=1e-12)
    assert cells.max_abs_delta == pytest.approx(np.max(np.abs(a - b)), rel=1e-12)
    assert cells.mean_abs_delta > 0
    assert cells.mean_standard_error_a == pytest.approx(first.answers[0].standard_error[:16].mean())
    # Half the ε doubles the Laplace scale, hence (up to the discrete noise's 0.1 %, at
    # scales 8 and 16) every standard error.
    assert cells.mean_standard_error_b == pytest.approx(2 * cells.mean_standard_error_a, rel=1e-3)
    text = format_diff(diff)
    assert "privacy.budget" in text and "groups only in a: by_second" in text
    assert f"{cells.max_abs_delta:.4g}" in text


def test_a_release_diffed_with_itself_has_no_changes(releases):
    _, first, _, _ = releases
    diff = diff_releases(first.folder, first.folder)
    assert diff.changes == () and diff.only_a == diff.only_b == ()
    assert all(group.max_abs_delta == 0 for group in diff.groups)


def test_a_version_made_from_anothers_measurements_differs_by_its_origin(tmp_path, releases):
    """Its answers are the same and it spent nothing: the diff says where it came from."""
    _, first, _, _ = releases
    copy = tmp_path / "v0002"
    shutil.copytree(first.folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["ledger"]["reused_from"] = str(first.folder)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    diff = diff_releases(first.folder, copy)
    assert [change.field for change in diff.changes] == ["ledger.reused_from"]
    assert "ledger.reused_from: null -> " in format_diff(diff)
    same = format_diff(diff_releases(first.folder, first.folder))
    assert "none of the compared manifest fields differs (config.sha256, domain" in same


def test_bad_paths_are_one_sentence_release_errors(tmp_path, releases):
    with pytest.raises(ReleaseError, match=r"^there is no release folder .*missing$"):
        load_manifest(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReleaseError, match=r"empty has no manifest\.json; it is not a release$"):
        load_manifest(tmp_path / "empty")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    with pytest.raises(ReleaseError, match=r"manifest\.json is not valid JSON"):
        load_manifest(tmp_path / "broken")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text(json.dumps({"format": "x/9"}))
    with pytest.raises(ReleaseError, match=r"has format 'x/9'; this dpmm reads dpmm-release/1"):
        load_manifest(tmp_path / "other")
    with pytest.raises(ReleaseError, match=r"release root .* is not an existing folder"):
        list_releases(tmp_path / "nowhere")
    with pytest.raises(ReleaseError, match="there is no release folder"):
        diff_releases(releases[1].folder, tmp_path / "missing")
