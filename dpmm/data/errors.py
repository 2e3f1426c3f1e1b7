"""The error type of data ingest."""

from __future__ import annotations

from dpmm.errors import DpmmError

__all__ = ["DataError"]


class DataError(DpmmError, ValueError):
    """Input data cannot be read or does not fit the domain; the message names the file,
    the column and the kind of problem, and never a value read from the data.

    What an operator needs to find the rows (how many, up to five offending raw values)
    is in :attr:`detail`, which is not part of the message: the message may reach Prefect
    (task and flow states, logs), the detail is for the operator's terminal only, and
    must never be copied into a release, a manifest, a log line or a UI artifact.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail
