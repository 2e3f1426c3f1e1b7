"""Durable files: an exclusive inter-process lock, atomic writes, and fsync of a folder.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with exclusive_lock(folder / ".lock"):
    ...     _ = (folder / "x.tmp").write_text("1")
    ...     _ = (folder / "x.tmp").rename(folder / "x")
    ...     fsync_folder(folder)
    >>> (folder / "x").read_text()
    '1'
    >>> atomic_write(folder / "y", [b"a", memoryview(b"bc")])
    >>> (folder / "y").read_bytes()
    b'abc'
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_write", "exclusive_lock", "fsync_folder", "is_held", "try_lock"]


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block.

    Other processes block until it is released; closing the descriptor releases it, so a
    process that dies never leaves it held.
    """
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def try_lock(path: Path) -> int | None:
    """A descriptor holding an exclusive ``flock`` on ``path`` (a folder, or a file created
    private if missing), or None when another descriptor holds it. Closing the descriptor
    releases it; so does the death of its process."""
    flags = os.O_RDONLY if path.is_dir() else os.O_RDWR | os.O_CREAT
    descriptor = os.open(path, flags, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def is_held(path: Path) -> bool:
    """Whether a live process holds the lock of :func:`try_lock` on ``path``."""
    descriptor = try_lock(path)
    if descriptor is not None:
        os.close(descriptor)
    return descriptor is None


def fsync_folder(folder: Path) -> None:
    """Make the renames and creations inside ``folder`` durable (for a file: its contents)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write(path: Path, chunks: Iterable[bytes | memoryview]) -> None:
    """Write ``chunks`` to ``path`` so that a reader sees no file or the whole one.

    The chunks go to a hidden temporary file in the same folder, which is flushed and
    fsynced, renamed over ``path`` with ``os.replace``, and the folder is fsynced: the file
    survives a crash once this returns, and a crash before leaves no partial file.
    Chunks are written as they come, so a large array can be passed as a memoryview of
    itself without a copy.
    """
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_folder(path.parent)
