"""Releases: atomic versioned release folders, their tables, catalog, diff and audit.

* :mod:`~dpmm.release.writer` — ``write_release``: ``<root>/<name>/v0001``, ... never replaced.
* :mod:`~dpmm.release.tables` — answers, measurements and histogram Parquet tables.
* :mod:`~dpmm.release.catalog` — ``load_manifest``, ``list_releases``, ``show_release``,
  ``diff_releases`` and their text formats.

The manifest's fields are documented in ``config/manifest.md``.
"""

from dpmm.release.catalog import (
    FieldChange,
    GroupDelta,
    GroupError,
    ReleaseDiff,
    ReleaseSummary,
    diff_releases,
    format_diff,
    format_listing,
    format_release,
    list_releases,
    load_manifest,
    show_release,
)
from dpmm.release.errors import ReleaseError
from dpmm.release.tables import (
    AnswerColumns,
    read_answers,
    read_histogram,
    read_measurements,
    write_answers,
    write_histogram,
    write_measurements,
)
from dpmm.release.writer import MANIFEST_FORMAT, file_digests, next_version, write_release

__all__ = [
    "MANIFEST_FORMAT",
    "AnswerColumns",
    "FieldChange",
    "GroupDelta",
    "GroupError",
    "ReleaseDiff",
    "ReleaseError",
    "ReleaseSummary",
    "diff_releases",
    "file_digests",
    "format_diff",
    "format_listing",
    "format_release",
    "list_releases",
    "load_manifest",
    "next_version",
    "read_answers",
    "read_histogram",
    "read_measurements",
    "show_release",
    "write_answers",
    "write_histogram",
    "write_measurements",
    "write_release",
]
