"""Write a release version atomically: ``<root>/<name>/v0001``, ``v0002``, ... never overwritten.

The files are written into a hidden temporary folder ``<root>/<name>/.tmp-<hex>`` first;
their sizes and sha256 go into the manifest, and then, under an exclusive lock on
``<root>/<name>/.lock``, the next version number is chosen, ``manifest.json`` is written,
every file and folder is fsynced, and the temporary folder is renamed to ``v{version:04d}``.
A reader therefore sees either no version or a complete one, even across a crash; two
writers of the same release name get distinct versions; and a failure at any step removes
the temporary folder and leaves no version behind. A writer holds an flock on its temporary
folder; one left by a killed writer (unheld) is removed by the next write of that release.

Example:
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> def files(folder):
    ...     (folder / "notes.txt").write_text("hello")
    >>> manifest = {"format": "dpmm-release/1", "name": "survey"}
    >>> write_release(root, "survey", manifest, files).name, manifest["version"]
    ('v0001', 1)
    >>> manifest["files"]["notes.txt"]["bytes"], next_version(root, "survey")
    (5, 2)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dpmm.blas_threads import owned_cores
from dpmm.durable import exclusive_lock, fsync_folder, is_held, try_lock
from dpmm.release.errors import ReleaseError

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "file_digests",
    "leftovers",
    "next_version",
    "release_versions",
    "write_release",
]

#: The format tag of every manifest this module writes.
MANIFEST_FORMAT = "dpmm-release/1"
MANIFEST_NAME = "manifest.json"
TMP_PREFIX = ".tmp-"
LOCK_NAME = ".lock"
_VERSION = re.compile(r"v(\d{4,})")
#: A release name is one path component that is neither hidden nor a version folder's name.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def write_release(
    root: str | os.PathLike[str],
    name: str,
    manifest: dict[str, object],
    write_files: Callable[[Path], None],
    publish: Callable[[str], None] | None = None,
) -> Path:
    """Write the next version of release ``name`` under ``root``; returns its folder.

    ``manifest`` is completed in place: ``files`` (size and sha256 of every file that
    ``write_files`` wrote), ``version``, and ``format``/``name`` when missing.
    ``publish``, if given, is called with the sha256 of ``manifest.json`` once it is on
    disk and before the version becomes visible (a release records it in its ledger); if
    it raises, no version is written.

    Args:
        root: the folder holding every release (created if needed).
        name: the release name: letters, digits, '.', '_', '-', starting with a letter or digit.
        manifest: the manifest, JSON-serializable (see ``config/manifest.md``).
        write_files: called with the temporary folder; writes the release's files into it.

    Raises:
        ReleaseError: The name or manifest is invalid, ``write_files`` left a symlink or a
            ``manifest.json``, or the version folder appeared meanwhile. Any exception from
            ``write_files`` propagates unchanged; in every case no version is written.
    """
    folder = _release_folder(root, name)
    _complete_header(manifest, name)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    with exclusive_lock(folder / LOCK_NAME):  # no other writer is between mkdir and claim
        for left in leftovers(folder):
            shutil.rmtree(left, ignore_errors=True)
        tmp.mkdir()
        claim = try_lock(tmp)  # held while this writer writes into it
    try:
        write_files(tmp)
        if (tmp / MANIFEST_NAME).exists() or (tmp / MANIFEST_NAME).is_symlink():
            raise ReleaseError(
                f"the release files of {name!r} include {MANIFEST_NAME}, which is written last "
                "by the release writer"
            )
        manifest["files"] = file_digests(tmp)
        with exclusive_lock(folder / LOCK_NAME):
            version = next_version(folder.parent, name)
            target = folder / f"v{version:04d}"
            manifest["version"] = version
            text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
            with open(tmp / MANIFEST_NAME, "x", encoding="utf-8") as stream:
                stream.write(text)
            _fsync_tree(tmp)
            if target.exists() or target.is_symlink():
                raise ReleaseError(f"{target} already exists; a release version is never replaced")
            if publish is not None:
                publish(hashlib.sha256(text.encode("utf-8")).hexdigest())
            os.rename(tmp, target)
            fsync_folder(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if claim is not None:
            os.close(claim)
    return target


def leftovers(folder: Path) -> list[Path]:
    """The temporary folders under a release's folder that no live writer holds (a writer
    killed while writing leaves one)."""
    found = []
    for tmp in sorted(folder.glob(f"{TMP_PREFIX}*")) if folder.is_dir() else []:
        if tmp.is_dir() and not tmp.is_symlink() and not is_held(tmp):
            found.append(tmp)
    return found


def next_version(root: str | os.PathLike[str], name: str) -> int:
    """The version the next write of ``name`` would get (for display; writers take a lock)."""
    versions = release_versions(_release_folder(root, name))
    return max(versions, default=0) + 1


def release_versions(folder: str | os.PathLike[str]) -> list[int]:
    """The version numbers present in a release's folder, ascending (none if it is missing).

    Temporary folders and anything not named ``v`` and four or more digits are ignored.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    versions = []
    for entry in folder.iterdir():
        match = _VERSION.fullmatch(entry.name)
        if match:
            versions.append(int(match.group(1)))
    return sorted(versions)


def file_digests(folder: str | os.PathLike[str]) -> dict[str, dict[str, object]]:
    """``{relative POSIX path: {"sha256": hex, "bytes": size}}`` for every file in ``folder``.

    ``manifest.json`` at the top is left out (it holds this table). Symlinks and special
    files are refused, so that what is hashed is exactly what a reader will open.

    Raises:
        ReleaseError: ``folder`` holds a symlink or something other than files and folders.
    """
    folder = Path(folder)
    paths = {path.relative_to(folder).as_posix(): path for path in _walk(folder)}
    paths.pop(MANIFEST_NAME, None)
    # hashlib leaves the GIL while it hashes, so the parts of a large release are hashed
    # side by side, one thread per core this process owns.
    with ThreadPoolExecutor(max_workers=owned_cores()) as pool:
        entries = pool.map(_file_entry, paths.values())
        return dict(sorted(zip(paths, entries, strict=True)))


def _file_entry(path: Path) -> dict[str, object]:
    """A file's manifest entry: its sha256 and its size in bytes."""
    with open(path, "rb") as stream:
        digest = hashlib.file_digest(stream, "sha256").hexdigest()
        return {"sha256": digest, "bytes": stream.tell()}


def _walk(folder: Path) -> Iterator[Path]:
    """Every regular file under ``folder``; a ReleaseError for a symlink or special file."""
    for entry in sorted(folder.iterdir()):
        mode = entry.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise ReleaseError(f"{entry} is a symlink; a release holds regular files only")
        if stat.S_ISDIR(mode):
            yield from _walk(entry)
        elif stat.S_ISREG(mode):
            yield entry
        else:
            raise ReleaseError(f"{entry} is not a regular file; a release holds regular files only")


def _release_folder(root: object, name: object) -> Path:
    if not isinstance(root, str | os.PathLike):
        raise ReleaseError(f"a release root must be a folder path, got {root!r:.80}")
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or _VERSION.fullmatch(name):
        raise ReleaseError(
            "a release name must be 1 to 128 letters, digits, '.', '_' or '-' starting with a "
            f"letter or digit (and not a version folder name), got {name!r:.80}"
        )
    return Path(root) / name


def _complete_header(manifest: object, name: str) -> None:
    if not isinstance(manifest, dict):
        raise ReleaseError(f"a release manifest must be a dict, got {type(manifest).__name__}")
    if manifest.setdefault("format", MANIFEST_FORMAT) != MANIFEST_FORMAT:
        raise ReleaseError(
            f"the manifest's format is {manifest['format']!r:.80}; this writer writes "
            f"{MANIFEST_FORMAT!r}"
        )
    if manifest.setdefault("name", name) != name:
        raise ReleaseError(
            f"the manifest names release {manifest['name']!r:.80} but it is written as {name!r}"
        )
    try:
        json.dumps(manifest, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise ReleaseError(f"the manifest of {name!r} is not JSON-serializable ({error})") from None


def _fsync_tree(folder: Path) -> None:
    """fsync every file, then its folder, bottom-up, so the rename publishes durable data."""
    for current, _, files in os.walk(folder, topdown=False):
        for name in files:
            fsync_folder(Path(current, name))
        fsync_folder(Path(current))
