"""Published one-way tables a config declares (``invariants.margins``), read and checked.

A census publishes some counts exactly (the population of each state, say): a release
with ``output: integer`` can hold its tables to them. Each declared margin is the count
of every value of one attribute, public input like the domain file:

* inline, ``{attribute: sex, counts: [480, 520]}``, in the attribute's value order; or
* a CSV or Parquet file, ``{attribute: state, file: states.csv, column: count}`` (the
  path relative to the config's folder; ``column`` defaults to ``count``), with one row
  per value: the attribute's own column holds the value (its label, or its code
  ``0 … size − 1`` for an attribute without labels) and ``column`` its count.

Every count is a whole number ≥ 0, every value has exactly one; the margins and
``invariants.total`` must agree on the total. Anything else is one sentence naming the
file, the column and the row (data rows count from 1), raised when the config loads:
before a plan, and before a release touches its ledger. The file's sha256 is kept with
the margin, and the manifest lists each margin's counts.

Example:
    >>> from dpmm.domain import Domain
    >>> domain = Domain.from_dict({"sex": 2, "age": 3})
    >>> entry = {"attribute": "age", "counts": [1, 0, 2]}
    >>> (m,) = declared_margins([entry], domain, Path("."), None)
    >>> m.attribute, m.counts, m.total
    ('age', (1, 0, 2), 3)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from dpmm.domain import Domain
from dpmm.errors import ConfigError, describe_value
from dpmm.settings import DeclaredMargin
from dpmm.workload.reference import read_table

__all__ = ["COUNT_COLUMN", "declared_margins"]

#: The column of a margin file read when none is named.
COUNT_COLUMN = "count"
MARGIN_KEYS = ("attribute", "counts", "file", "column")


def declared_margins(
    value: object, domain: Domain, base_dir: Path, total: int | None
) -> tuple[DeclaredMargin, ...]:
    """``invariants.margins``, each read and checked (see the module docstring).

    Raises:
        ConfigError: naming ``invariants.margins[i]`` and, for a file, the file, the
            column and the row (the caller adds the config's path).
    """
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ConfigError(
            f"invariants.margins: must be a non-empty list of one-way tables, got "
            f"{describe_value(value)}"
        )
    margins: list[DeclaredMargin] = []
    for index, entry in enumerate(value):
        key = f"invariants.margins[{index}]"
        margin = _margin(entry, key, domain, base_dir)
        if any(m.attribute == margin.attribute for m in margins):
            raise ConfigError(f"{key}.attribute: '{margin.attribute}' is declared twice")
        counts = f"the counts of '{margin.attribute}'"
        if "file" in margin.source:
            path = Path(margin.source["file"]).expanduser()
            path = path if path.is_absolute() else base_dir / path
            counts += f" (the margin file '{path}', column '{margin.source['column']}')"
        first = margins[0] if margins else None
        if first is not None and margin.total != first.total:
            raise ConfigError(
                f"{key}: {counts} add up to {margin.total:,}, and those of "
                f"'{first.attribute}' to {first.total:,}; declared tables must agree"
            )
        if total is not None and margin.total != total:
            raise ConfigError(
                f"{key}: {counts} add up to {margin.total:,}, and invariants.total is "
                f"{total:,}; declared tables must agree"
            )
        margins.append(margin)
    return tuple(margins)


def _margin(entry: object, key: str, domain: Domain, base_dir: Path) -> DeclaredMargin:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{key}: must be a mapping, got {describe_value(entry)}")
    for name in entry:
        if name not in MARGIN_KEYS:
            raise ConfigError(f"{key}.{name}: unknown key (allowed: {', '.join(MARGIN_KEYS)})")
    attribute = entry.get("attribute")
    if not isinstance(attribute, str) or attribute not in domain:
        raise ConfigError(
            f"{key}.attribute: unknown attribute {describe_value(attribute)} (the domain "
            f"has: {', '.join(domain.attributes)})"
        )
    if ("counts" in entry) == ("file" in entry):
        raise ConfigError(f"{key}: give either counts (inline) or file, not both or neither")
    if "counts" in entry:
        if "column" in entry:
            raise ConfigError(f"{key}.column: goes with file, not with inline counts")
        counts = _inline(entry["counts"], f"{key}.counts", domain[attribute].size)
        return DeclaredMargin(attribute, counts)
    column = entry.get("column", COUNT_COLUMN)
    if not isinstance(entry["file"], str) or not isinstance(column, str) or not column:
        raise ConfigError(f"{key}: file and column must be a path and a column name")
    path = Path(entry["file"]).expanduser()
    path = path if path.is_absolute() else base_dir / path
    try:
        counts, digest = _from_file(path, column, domain, attribute)
    except ConfigError as error:
        raise ConfigError(f"{key}: {error}") from None
    return DeclaredMargin(
        attribute, counts, {"file": entry["file"], "column": column, "sha256": digest}
    )


def _whole(value: object) -> int | None:
    """A whole number ≥ 0 (an integral float or digit string too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.isdigit() else None
    if isinstance(value, int | np.integer):
        return int(value) if value >= 0 else None
    if isinstance(value, float | np.floating) and np.isfinite(value) and value >= 0:
        return int(value) if float(value).is_integer() else None
    return None


def _inline(value: object, key: str, size: int) -> tuple[int, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != size:
        raise ConfigError(
            f"{key}: must be a list of {size} counts, one per value, got {describe_value(value)}"
        )
    counts = [_whole(v) for v in value]
    for position, count in enumerate(counts):
        if count is None:
            raise ConfigError(
                f"{key}[{position}]: must be a whole number of records ≥ 0, got "
                f"{describe_value(value[position])}"
            )
    return tuple(int(c) for c in counts)


def _from_file(
    path: Path, column: str, domain: Domain, attribute: str
) -> tuple[tuple[int, ...], str]:
    """The counts per value of ``attribute`` from the file, and the file's sha256."""
    table, digest = read_table(path, text_columns=(attribute,), what="margin file")
    for needed in (attribute, column):
        if needed not in table.column_names:
            raise ConfigError(
                f"the margin file '{path}' has no column '{needed}' (it has: "
                f"{', '.join(table.column_names)})"
            )
    labels = domain[attribute].labels
    names = labels or tuple(str(code) for code in range(domain[attribute].size))
    positions = {name: code for code, name in enumerate(names)}
    values = table[attribute].cast(pa.string()).to_pylist()
    counts = table[column].to_pylist()
    found: dict[int, int] = {}
    for row, (name, count) in enumerate(zip(values, counts, strict=True), start=1):
        where = f"the margin file '{path}', column '{column}', row {row}"
        code = positions.get(str(name).strip()) if name is not None else None
        if code is None:
            raise ConfigError(
                f"{where}: {describe_value(name)} is not a value of '{attribute}' "
                f"(its values are {'its labels' if labels else f'0 … {len(names) - 1}'})"
            )
        if code in found:
            raise ConfigError(f"{where}: repeats the value {describe_value(name)}")
        whole = _whole(count)
        if whole is None:
            raise ConfigError(
                f"{where}: must be a whole number of records ≥ 0, got {describe_value(count)}"
            )
        found[code] = whole
    missing = [names[code] for code in range(len(names)) if code not in found]
    if missing:
        raise ConfigError(
            f"the margin file '{path}' has no row for value {describe_value(missing[0])} of "
            f"'{attribute}' (one row per value)"
        )
    return tuple(found[code] for code in range(len(names))), digest
