"""The exception raised when a release cannot be written, read, listed or compared."""

from __future__ import annotations

from dpmm.errors import DpmmError

__all__ = ["ReleaseError"]


class ReleaseError(DpmmError, ValueError):
    """A release folder or one of its files is missing, malformed or cannot be written."""
