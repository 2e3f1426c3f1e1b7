"""The error type of data ingest."""

from __future__ import annotations

from dpmm.errors import DpmmError

__all__ = ["DataError"]


class DataError(DpmmError, ValueError):
    """Input data cannot be read or does not fit the domain; the message names the file and column.

    A message may quote up to five offending raw values so that an operator can
    find them. Such a message is for the operator's terminal only: it must never
    be copied into a release, a manifest, a log line of a published run, or a UI
    artifact.
    """
