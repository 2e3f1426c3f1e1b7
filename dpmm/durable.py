"""Durable files: an exclusive inter-process lock, and fsync of a folder after a rename.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with exclusive_lock(folder / ".lock"):
    ...     _ = (folder / "x.tmp").write_text("1")
    ...     _ = (folder / "x.tmp").rename(folder / "x")
    ...     fsync_folder(folder)
    >>> (folder / "x").read_text()
    '1'
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["exclusive_lock", "fsync_folder"]


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


def fsync_folder(folder: Path) -> None:
    """Make the renames and creations inside ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
