"""Read, list and compare release versions: the library behind ``dpmm releases``.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.release.writer import write_release
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> manifest = {"created": "2026-01-01T00:00:00+00:00",
    ...             "privacy": {"budget": {"kind": "pure", "epsilon": "1/2"}},
    ...             "strategy": {"method": "hierarchical"},
    ...             "workload": {"groups": [{"name": "ranges", "kind": "prefix", "queries": 8}]}}
    >>> folder = write_release(root, "survey", manifest, lambda tmp: None)
    >>> [(s.name, s.version, s.budget, s.method, s.queries) for s in list_releases(root)]
    [('survey', 1, 'ε = 1/2', 'hierarchical', 8)]
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpmm.privacy.params import amount_text, budget_text
from dpmm.release.errors import ReleaseError
from dpmm.release.spend import Spend, spend_of
from dpmm.release.tables import read_answers
from dpmm.release.writer import MANIFEST_FORMAT, MANIFEST_NAME, release_versions

__all__ = [
    "FieldChange",
    "GroupDelta",
    "GroupError",
    "ReleaseDiff",
    "ReleaseSummary",
    "budget_text",
    "diff_releases",
    "format_diff",
    "format_listing",
    "format_release",
    "list_releases",
    "load_manifest",
    "shorten",
    "show_release",
    "text_table",
]

#: The manifest fields a diff compares, as dotted paths.
DIFF_FIELDS = (
    "config.sha256",
    "domain",
    "workload.sha256",
    "strategy.digest",
    "strategy.description",
    "privacy.budget",
    "measurement.values_sha256",
    "ledger.reused_from",
    "reconstruction.method",
)


@dataclass(frozen=True)
class GroupError:
    """One row of a release's error table (the manifest's ``error.groups``)."""

    name: str
    queries: int
    expected_rmse: float | None
    mean_standard_error: float | None
    exact: bool | None


@dataclass(frozen=True)
class ReleaseSummary:
    """What ``dpmm releases list`` shows of one version; ``errors`` only from show_release.

    ``method`` is the strategy method chosen (the config's, unless it asked for ``auto``,
    which is ``requested``), ``reconstruction`` the solver that ran, ``spend`` what the
    version spent (zero for post-processing) and ``thresholds`` one line per private
    truncation threshold θ.
    """

    name: str
    version: int
    path: Path
    created: str
    method: str
    queries: int
    errors: tuple[GroupError, ...] = ()
    spend: Spend | None = None
    requested: str = ""
    description: str = ""
    reconstruction: str = "?"
    thresholds: tuple[str, ...] = ()
    quantization_scale: int = 1

    @property
    def budget(self) -> str:
        """What the version spent, as text (``"ε = 1"``; ``"ε = 0"`` for post-processing)."""
        return "?" if self.spend is None else self.spend.text()

    @property
    def strategy(self) -> str:
        """The method chosen, and the one asked for when they differ: ``hdmm_kron (auto)``."""
        asked = self.requested not in ("", self.method)
        return f"{self.method} ({self.requested})" if asked else self.method


@dataclass(frozen=True)
class FieldChange:
    """A manifest field whose value differs between two releases."""

    field: str
    before: object
    after: object


@dataclass(frozen=True)
class GroupDelta:
    """How the answers of one query group changed between two releases.

    The estimate deltas are None when the group has a different number of queries.
    """

    name: str
    queries_a: int
    queries_b: int
    mean_abs_delta: float | None
    max_abs_delta: float | None
    mean_standard_error_a: float
    mean_standard_error_b: float


@dataclass(frozen=True)
class ReleaseDiff:
    """The differences between releases ``a`` and ``b``."""

    a: Path
    b: Path
    changes: tuple[FieldChange, ...]
    groups: tuple[GroupDelta, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]


def load_manifest(release_dir: str | os.PathLike[str]) -> dict[str, object]:
    """The manifest of a release version folder.

    Raises:
        ReleaseError: The folder or its manifest is missing or unreadable, the manifest is
            not a JSON object, or its format is not ``dpmm-release/1``.
    """
    if not isinstance(release_dir, str | os.PathLike):
        raise ReleaseError(f"a release must be a folder path, got {release_dir!r:.80}")
    folder = Path(release_dir)
    if not folder.is_dir():
        raise ReleaseError(f"there is no release folder {folder}")
    path = folder / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReleaseError(f"{folder} has no {MANIFEST_NAME}; it is not a release") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ReleaseError(f"cannot read {path} ({error})") from None
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReleaseError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise ReleaseError(f"{path} does not hold a JSON object")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ReleaseError(
            f"{path} has format {manifest.get('format')!r:.60}; this dpmm reads {MANIFEST_FORMAT}"
        )
    return manifest


def list_releases(root: str | os.PathLike[str]) -> list[ReleaseSummary]:
    """Every version of every release under ``root``, sorted by name then version.

    Temporary folders of writes in progress (``.tmp-*``) and anything not named like a
    version are ignored.

    Raises:
        ReleaseError: ``root`` is not a folder, or a version's manifest cannot be read.
    """
    if not isinstance(root, str | os.PathLike) or not Path(root).is_dir():
        raise ReleaseError(f"the release root {root} is not an existing folder")
    summaries = []
    for folder in sorted(Path(root).iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        for version in release_versions(folder):
            release_dir = folder / f"v{version:04d}"
            summaries.append(_summary(release_dir, load_manifest(release_dir)))
    return sorted(summaries, key=lambda summary: (summary.name, summary.version))


def show_release(release_dir: str | os.PathLike[str]) -> ReleaseSummary:
    """A version's summary with its error table (expected RMSE and mean standard error)."""
    manifest = load_manifest(release_dir)
    groups = _get(manifest, "error", "groups") or []
    errors = tuple(
        GroupError(
            name=str(group.get("name", "")),
            queries=int(group.get("queries", 0)),
            expected_rmse=_float(group.get("expected_rmse")),
            mean_standard_error=_float(group.get("mean_standard_error")),
            exact=group.get("exact"),
        )
        for group in groups
        if isinstance(group, dict)
    )
    summary = _summary(Path(release_dir), manifest)
    return ReleaseSummary(**{**summary.__dict__, "errors": errors})


def diff_releases(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> ReleaseDiff:
    """The manifest fields and per-group answers that differ between two versions.

    Raises:
        ReleaseError: Either folder is not a readable release, or its answers table is not.
    """
    manifest_a, manifest_b = load_manifest(a), load_manifest(b)
    changes = []
    for dotted in DIFF_FIELDS:
        before, after = _get(manifest_a, *dotted.split(".")), _get(manifest_b, *dotted.split("."))
        if before != after:
            changes.append(FieldChange(dotted, before, after))
    groups_a = _groups(Path(a) / "answers.parquet")
    groups_b = _groups(Path(b) / "answers.parquet")
    deltas = []
    for name, (estimate_a, error_a) in groups_a.items():
        if name not in groups_b:
            continue
        estimate_b, error_b = groups_b[name]
        same = estimate_a.size == estimate_b.size
        difference = np.abs(estimate_a - estimate_b) if same else None
        deltas.append(
            GroupDelta(
                name=name,
                queries_a=estimate_a.size,
                queries_b=estimate_b.size,
                mean_abs_delta=_mean(difference) if same else None,
                max_abs_delta=float(difference.max(initial=0.0)) if same else None,
                mean_standard_error_a=_mean(error_a),
                mean_standard_error_b=_mean(error_b),
            )
        )
    return ReleaseDiff(
        a=Path(a),
        b=Path(b),
        changes=tuple(changes),
        groups=tuple(deltas),
        only_a=tuple(name for name in groups_a if name not in groups_b),
        only_b=tuple(name for name in groups_b if name not in groups_a),
    )


def text_table(
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    underline: bool = False,
    total_row: bool = False,
) -> list[str]:
    """The lines of a plain-text table: columns padded to their widest cell, two spaces apart.

    Below the header row, the cells of the columns in ``right`` (numbers) are right-aligned;
    all others are left-aligned, and trailing blanks are stripped. ``underline`` rules dashes
    under the header, ``total_row`` also above the last row.

    Example:
        >>> rows = [("group", "n"), ("ranges", "8"), ("total", "10")]
        >>> print("\\n".join(text_table(rows, right=(1,), underline=True, total_row=True)))
        group   n
        ------  --
        ranges   8
        ------  --
        total   10
    """
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    rule = "  ".join("-" * width for width in widths)
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.rjust(width) if index and column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if (underline and index == 0) or (total_row and index == len(rows) - 2):
            lines.append(rule)
    return lines


def number_text(value: float | None) -> str:
    """A figure as the plan's tables print it: two decimals, or three significant digits
    in scientific notation when very large or small; ``n/a`` when missing.

    Example:
        >>> number_text(28.804), number_text(2.564e8), number_text(None)
        ('28.80', '2.564e+08', 'n/a')
    """
    if value is None:
        return "n/a"
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-2):
        return f"{value:.3e}"
    return f"{value:,.2f}"


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was longer.

    Example:
        >>> shorten("Marginals([0], [1])", 12)
        'Marginals([…'
    """
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def format_listing(summaries: list[ReleaseSummary]) -> str:
    """A plain-text table of releases, one line per version, and what they spent in all
    (post-processing versions spent nothing)."""
    if not summaries:
        return "no releases"
    rows = [("release", "version", "created", "spent", "strategy", "reconstruction", "queries")]
    rows += [
        (
            s.name,
            f"v{s.version:04d}",
            s.created,
            s.budget + (" (re-run)" if s.spend and s.spend.reused_from else ""),
            s.strategy,
            s.reconstruction,
            str(s.queries),
        )
        for s in summaries
    ]
    totals: dict[tuple[str, str], Fraction] = {}
    for spend in (s.spend for s in summaries if s.spend is not None):
        key = (spend.dataset, spend.kind)
        totals[key] = totals.get(key, Fraction(0)) + spend.amount
    spent = "; ".join(
        f"{amount_text(kind, amount)} of dataset {dataset!r}"
        for (dataset, kind), amount in sorted(totals.items())
    )
    return "\n".join([*text_table(rows), "", f"spent in all: {spent or '?'}"])


def format_release(summary: ReleaseSummary) -> str:
    """A version's summary and its error table, for ``dpmm releases show``: what it spent
    (in all, and on what), its strategy and solver, any private threshold θ."""
    spend = summary.spend
    spent = "?" if spend is None else f"{spend.text()} of dataset {spend.dataset!r}"
    chosen = f", chosen by {summary.requested!r}" if summary.strategy != summary.method else ""
    scale = summary.quantization_scale
    grid = f", measured on a grid of 1/{scale}" if scale > 1 else ""
    lines = [
        f"{summary.name} v{summary.version:04d}  ({summary.path})",
        f"created {summary.created}; {summary.queries} queries",
        f"spent: {spent}" + (f" ({spend.detail()})" if spend and spend.detail() else ""),
        f"strategy: {summary.method}{chosen}: {shorten(summary.description or '?', 200)}{grid}",
        f"reconstruction: {summary.reconstruction}",
        *(f"threshold: {line}" for line in summary.thresholds),
    ]
    if summary.errors:
        rows = [("group", "queries", "expected RMSE", "mean std. error", "exact")]
        rows += [
            (
                error.name,
                str(error.queries),
                _number(error.expected_rmse),
                _number(error.mean_standard_error),
                {True: "yes", False: "no", None: "?"}.get(error.exact, "?"),
            )
            for error in summary.errors
        ]
        lines += ["", *text_table(rows)]
    return "\n".join(lines)


def format_diff(diff: ReleaseDiff) -> str:
    """A plain-text report of a :class:`ReleaseDiff`."""
    lines = [f"a: {diff.a}", f"b: {diff.b}", ""]
    if diff.changes:
        lines.append("changed manifest fields:")
        for change in diff.changes:
            lines.append(f"  {change.field}: {_short(change.before)} -> {_short(change.after)}")
    else:
        lines.append(f"none of the compared manifest fields differs ({', '.join(DIFF_FIELDS)})")
    if diff.groups:
        rows = [("group", "queries a/b", "mean |Δ|", "max |Δ|", "mean SE a", "mean SE b")]
        rows += [
            (
                group.name,
                f"{group.queries_a}/{group.queries_b}",
                _number(group.mean_abs_delta),
                _number(group.max_abs_delta),
                _number(group.mean_standard_error_a),
                _number(group.mean_standard_error_b),
            )
            for group in diff.groups
        ]
        lines += ["", *text_table(rows)]
    if diff.only_a:
        lines.append(f"groups only in a: {', '.join(diff.only_a)}")
    if diff.only_b:
        lines.append(f"groups only in b: {', '.join(diff.only_b)}")
    return "\n".join(lines)


def _summary(folder: Path, manifest: dict[str, object]) -> ReleaseSummary:
    groups = _get(manifest, "workload", "groups") or []
    queries = sum(int(group.get("queries", 0)) for group in groups if isinstance(group, dict))
    version = manifest.get("version")
    requested = str(_get(manifest, "strategy", "method") or "")
    return ReleaseSummary(
        name=str(manifest.get("name", folder.parent.name)),
        version=version if isinstance(version, int) else _folder_version(folder),
        path=folder,
        created=str(manifest.get("created", "?")),
        method=str(_get(manifest, "strategy", "selected") or requested or "?"),
        queries=queries,
        spend=spend_of(manifest),
        requested=requested,
        description=str(_get(manifest, "strategy", "description") or ""),
        reconstruction=str(_get(manifest, "reconstruction", "method") or "?"),
        thresholds=tuple(_threshold(g) for g in _get(manifest, "thresholds", "groups") or []),
        quantization_scale=int(_get(manifest, "strategy", "quantization_scale") or 1),
    )


def _threshold(entry: object) -> str:
    """One private threshold θ: ``θ = 60 for group sums: chosen from the data by svt``."""
    if not isinstance(entry, dict):
        return "?"
    theta, method = entry.get("threshold"), entry.get("method")
    if isinstance(theta, int | float) and float(theta).is_integer():
        theta = int(theta)
    how = (
        f"chosen from the data by {method}"
        if entry.get("found")
        else f"the top bucket weight, as {method} chose none below it (no truncation)"
    )
    return f"θ = {theta} for group {entry.get('group')}: {how}"


def _folder_version(folder: Path) -> int:
    digits = folder.name[1:]
    return int(digits) if digits.isdigit() else 0


def _groups(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per group, in order of first appearance: estimates and standard errors by query."""
    table = read_answers(path, ("group", "query", "estimate", "standard_error"))
    names = np.asarray(table.column("group").to_pylist(), dtype=object)
    queries = table.column("query").to_numpy()
    estimates = table.column("estimate").to_numpy()
    errors = table.column("standard_error").to_numpy()
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in dict.fromkeys(names.tolist()):
        rows = np.flatnonzero(names == name)
        order = rows[np.argsort(queries[rows], kind="stable")]
        groups[name] = (estimates[order], errors[order])
    return groups


def _get(data: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _float(value: object) -> float | None:
    return None if value is None else float(value)


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else 0.0


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _short(value: object, limit: int = 70) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
