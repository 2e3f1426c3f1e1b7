"""Exception types raised by dpmm.

Every error carries one sentence that names the offending file, key, column or
matrix, so that a user can fix the input without reading a traceback.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ConfigError",
    "DomainError",
    "DpmmError",
    "EngineError",
    "NotIntegerError",
    "PrivacyParameterError",
    "TooLargeError",
    "UnsupportedQueryError",
    "describe_value",
]


class DpmmError(Exception):
    """Base class of every error dpmm raises on purpose."""


class ArgumentError(DpmmError, ValueError):
    """A library function was called with an argument it cannot take; the message names
    the argument."""


class EngineError(DpmmError, RuntimeError):
    """An engine a release runs on cannot run it: the Dask cluster has had no worker for
    longer than its scheduler waits, or no Prefect server answers and none could be
    started; the message names the scheduler or the server's address."""


class ConfigError(DpmmError, ValueError):
    """A release configuration is malformed; the message names the key."""


class DomainError(DpmmError, ValueError):
    """A domain is malformed, or an attribute is not part of it."""


class NotIntegerError(DpmmError, ValueError):
    """A matrix is not known to have integer entries, so it has no exact integer norms."""


class PrivacyParameterError(DpmmError, ValueError):
    """A privacy parameter is not a positive number between 1e-100 and 1e100."""


class TooLargeError(DpmmError, MemoryError):
    """An operation would materialize more entries than the configured limit."""


class UnsupportedQueryError(DpmmError, ValueError):
    """A strategy cannot answer a workload (a query lies outside its row space)."""


def describe_value(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters, for quoting a bad value in a message.

    Example:
        >>> describe_value("agee"), describe_value(list(range(100)), limit=12)
        ("'agee'", '[0, 1, 2,...')
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
