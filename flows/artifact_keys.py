"""Prefect artifact keys made from release and dataset names.

A key may hold only lowercase letters, digits and dashes (Prefect refuses any other key
when the artifact is created), while a release name may also hold ``.`` and ``_`` and a
dataset name is free text. Each run of other characters becomes one dash, so
``Adult_2020.v1`` keys as ``adult-2020-v1``: the same name always gives the same key, and a
run's artifacts never fail after its release was written.
"""

from __future__ import annotations

import re

__all__ = ["artifact_key"]

_NOT_ALLOWED = re.compile(r"[^a-z0-9-]+")


def artifact_key(*words: str) -> str:
    """The words joined by dashes, lowercased, each run of other characters one dash.

    Example:
        >>> artifact_key("dpmm-release", "Adult_2020.v1", "failure")
        'dpmm-release-adult-2020-v1-failure'
    """
    return _NOT_ALLOWED.sub("-", "-".join(words).lower()).strip("-")
