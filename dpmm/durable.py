"""Durable files: an exclusive inter-process lock, atomic writes (replacing or write-once),
and fsync of a folder.

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
    >>> write_once(folder / "z", [b"first"]), write_once(folder / "z", [b"second"])
    (True, False)
    >>> (folder / "z").read_bytes()
    b'first'
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "atomic_write",
    "exclusive_lock",
    "fsync_folder",
    "is_held",
    "try_lock",
    "write_once",
]


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
    _publish(path, chunks, os.replace)


def write_once(path: Path, chunks: Iterable[bytes | memoryview]) -> bool:
    """:func:`atomic_write`, except that an existing ``path`` is never replaced.

    The temporary file is hard-linked to ``path`` (which fails if it exists) instead of
    renamed over it, so of two writers racing for one path exactly one wins, and what a
    reader once saw there never changes.

    Returns:
        True if this call wrote ``path``; False if it existed (nothing was changed).
    """
    try:
        _publish(path, chunks, os.link)
    except FileExistsError:
        return False
    return True


def _publish(
    path: Path, chunks: Iterable[bytes | memoryview], place: Callable[[str, Path], None]
) -> None:
    """Write a hidden temporary file durably, ``place`` it at ``path``, fsync the folder."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        place(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # left only by os.link, or by a failed write
    fsync_folder(path.parent)
