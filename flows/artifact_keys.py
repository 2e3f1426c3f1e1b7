"""Prefect artifact keys made from release and dataset names.

A key may hold only lowercase letters, digits and dashes (Prefect refuses any other key
when the artifact is created), while a release name may also hold ``.`` and ``_`` and a
dataset name is free text. Each run of other characters becomes one dash, so
``Adult_2020.v1`` keys as ``adult-2020-v1-…``, and a name that had to change that way is
followed by the first 10 hex digits of its sha256: ``a_b``, ``a.b`` and ``A-B`` keep
artifact histories of their own. A name already in key form keys as itself. The same name
always gives the same key, and a run's artifacts never fail after its release was written.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["artifact_key"]

_NOT_ALLOWED = re.compile(r"[^a-z0-9-]+")


def artifact_key(*words: str) -> str:
    """The words joined by dashes, lowercased, each run of other characters one dash,
    and, where that changed them, a digest of the words as given.

    Example:
        >>> artifact_key("dpmm-release", "adult-2020-v1", "failure")
        'dpmm-release-adult-2020-v1-failure'
        >>> artifact_key("dpmm-release", "Adult_2020.v1", "failure")
        'dpmm-release-adult-2020-v1-failure-2a0cdb040a'
    """
    joined = "-".join(words)
    key = _NOT_ALLOWED.sub("-", joined.lower()).strip("-")
    if key == joined:
        return key
    digest = hashlib.sha256("\0".join(words).encode()).hexdigest()[:10]
    return f"{key}-{digest}" if key else digest
