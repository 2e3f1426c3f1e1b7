"""Exception types raised by dpmm.

Every error carries one sentence that names the offending file, key, column or
matrix, so that a user can fix the input without reading a traceback.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DomainError",
    "DpmmError",
    "PrivacyParameterError",
    "TooLargeError",
    "UnsupportedQueryError",
]


class DpmmError(Exception):
    """Base class of every error dpmm raises on purpose."""


class ConfigError(DpmmError, ValueError):
    """A release configuration is malformed; the message names the key."""


class DomainError(DpmmError, ValueError):
    """A domain is malformed, or an attribute is not part of it."""


class PrivacyParameterError(DpmmError, ValueError):
    """A privacy parameter is not a positive finite number."""


class TooLargeError(DpmmError, MemoryError):
    """An operation would materialize more entries than the configured limit."""


class UnsupportedQueryError(DpmmError, ValueError):
    """A strategy cannot answer a workload (a query lies outside its row space)."""
