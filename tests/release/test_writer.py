"""The release writer: ordered versions, atomic writes, no overwrite, concurrent writers."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from dpmm.durable import try_lock
from dpmm.release import ReleaseError, next_version, write_release
from dpmm.release import writer as writer_module


def _files(contents: dict[str, bytes]):
    def write(folder: Path) -> None:
        for relative, data in contents.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    return write


def _leftovers(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if entry.name != ".lock")


def test_versions_are_written_in_order_with_file_digests(tmp_path):
    contents = {"answers.parquet": b"abc", "sub/histogram.parquet": b"0123456789"}
    first = write_release(tmp_path, "survey", {"created": "t"}, _files(contents))
    manifest = {"created": "t2"}
    second = write_release(tmp_path, "survey", manifest, _files({"answers.parquet": b"x"}))
    assert (first.name, second.name) == ("v0001", "v0002")
    assert next_version(tmp_path, "survey") == 3
    text = (first / "manifest.json").read_text()
    stored = json.loads(text)
    assert text.endswith("}\n") and text == json.dumps(stored, sort_keys=True, indent=2) + "\n"
    assert stored["version"] == 1 and stored["format"] == "dpmm-release/1"
    assert stored["name"] == "survey"
    assert stored["files"] == {
        relative: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for relative, data in sorted(contents.items())
    }
    assert manifest["version"] == 2 and set(manifest["files"]) == {"answers.parquet"}
    assert _leftovers(tmp_path / "survey") == ["v0001", "v0002"]


def test_many_parts_are_hashed_side_by_side_each_to_its_own_entry(tmp_path, monkeypatch):
    # Parts of different sizes, nested, more than the threads: each entry is its file's.
    monkeypatch.setattr(writer_module, "owned_cores", lambda: 3)
    contents = {
        f"answers/part-{k:03d}.parquet": os.urandom(k * 997 + (k % 5) * 2**16) for k in range(40)
    }
    contents["histogram.parquet"] = b""
    write_release(tmp_path, "survey", manifest := {}, _files(contents))
    assert list(manifest["files"]) == sorted(contents)
    assert manifest["files"] == {
        relative: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for relative, data in contents.items()
    }


def test_an_existing_version_is_never_overwritten(tmp_path, monkeypatch):
    first = write_release(tmp_path, "survey", {}, _files({"a": b"first"}))
    (tmp_path / "survey" / "v0007").mkdir()  # a version written by hand: the next is 8
    assert write_release(tmp_path, "survey", {}, _files({"a": b"x"})).name == "v0008"
    # A writer that computes a stale number finds the folder taken and refuses.
    monkeypatch.setattr(writer_module, "next_version", lambda root, name: 1)
    with pytest.raises(ReleaseError, match=r"v0001 already exists; a release version is never"):
        write_release(tmp_path, "survey", {}, _files({"a": b"second"}))
    assert (first / "a").read_bytes() == b"first"
    assert _leftovers(tmp_path / "survey") == ["v0001", "v0007", "v0008"]


def test_a_crash_inside_write_files_leaves_nothing(tmp_path):
    def crash(folder: Path) -> None:
        (folder / "answers.parquet").write_bytes(b"partial")
        raise RuntimeError("worker lost")

    with pytest.raises(RuntimeError, match="worker lost"):
        write_release(tmp_path, "survey", {}, crash)
    assert _leftovers(tmp_path / "survey") == []
    assert write_release(tmp_path, "survey", {}, _files({"a": b"ok"})).name == "v0001"


def test_symlinks_and_a_written_manifest_are_refused(tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("secret")

    def link(folder: Path) -> None:
        os.symlink(target, folder / "answers.parquet")

    with pytest.raises(ReleaseError, match=r"answers\.parquet is a symlink"):
        write_release(tmp_path, "survey", {}, link)
    with pytest.raises(ReleaseError, match=r"include manifest\.json"):
        write_release(tmp_path, "survey", {}, _files({"manifest.json": b"{}"}))
    assert _leftovers(tmp_path / "survey") == []


def test_bad_names_and_manifests_are_refused(tmp_path):
    for name in ["../up", ".hidden", "a/b", "v0003", ""]:
        with pytest.raises(ReleaseError, match="a release name must be"):
            write_release(tmp_path, name, {}, _files({}))
    with pytest.raises(ReleaseError, match="format is 'other/1'"):
        write_release(tmp_path, "s", {"format": "other/1"}, _files({}))
    with pytest.raises(ReleaseError, match="names release 'other'"):
        write_release(tmp_path, "s", {"name": "other"}, _files({}))
    with pytest.raises(ReleaseError, match="not JSON-serializable"):
        write_release(tmp_path, "s", {"x": object()}, _files({}))
    assert not (tmp_path / "s").exists() or _leftovers(tmp_path / "s") == []


def _write_many(root: str, count: int, queue) -> None:
    for index in range(count):
        folder = write_release(
            Path(root), "survey", {"writer": os.getpid()}, _files({"n": str(index).encode()})
        )
        queue.put(folder.name)


@pytest.mark.slow
def test_concurrent_writers_get_distinct_versions(tmp_path):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_write_many, args=(str(tmp_path), 4, queue)) for _ in "ab"]
    for worker in workers:
        worker.start()
    names = [queue.get(timeout=60) for _ in range(8)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert sorted(names) == [f"v{version:04d}" for version in range(1, 9)]
    assert _leftovers(tmp_path / "survey") == sorted(names)
    writers = {
        json.loads((tmp_path / "survey" / n / "manifest.json").read_text())["writer"] for n in names
    }
    assert len(writers) == 2


def test_a_killed_writers_folder_is_removed_by_the_next_write_and_a_live_ones_kept(tmp_path):
    write_release(tmp_path, "survey", {}, _files({"a": b"1"}))
    killed = tmp_path / "survey" / ".tmp-0123456789abcdef"
    killed.mkdir()
    (killed / "answers.parquet").write_bytes(b"partial")
    live = tmp_path / "survey" / ".tmp-fedcba9876543210"
    live.mkdir()
    claim = try_lock(live)  # a writer still at work holds its folder
    try:
        assert writer_module.leftovers(tmp_path / "survey") == [killed]
        assert write_release(tmp_path, "survey", {}, _files({"a": b"2"})).name == "v0002"
        assert _leftovers(tmp_path / "survey") == [live.name, "v0001", "v0002"]
    finally:
        os.close(claim)
