"""The ``data`` section of a release config: where the records are and how to read them.

::

    data:
      path: data/adult/             # a file, a folder of partitions, or a URL (s3://, file://, ...)
      format: parquet               # optional: parquet or csv; inferred from the suffix
      columns: {income>50K: income} # optional: attribute -> column; default the attribute name
      bad_rows: reject              # optional: reject (default) or drop
      person: zper                  # optional: the column naming the person of each row

A relative local path is read relative to the config file's folder. With ``person``, a
person's rows are combined into one record before counting (each ``prefix_sum``
attribute summed, every other attribute the same on all of the person's rows; see
:mod:`dpmm.pipeline.persons`); without it, each row is one record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmm.errors import ConfigError, describe_value
from dpmm.settings import check_keys

__all__ = ["BAD_ROWS", "FORMATS", "DataSpec", "data_spec_from_config", "infer_format"]

#: Supported file formats.
FORMATS = ("parquet", "csv")
#: What to do with a row whose value does not fit the domain.
BAD_ROWS = ("reject", "drop")
SECTION_KEYS = ("path", "format", "columns", "bad_rows", "person")
_SUFFIXES = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv"}


def _is_url(location: str) -> bool:
    return "://" in location


def infer_format(location: str) -> str:
    """The format a path's suffix names; a folder (no suffix) holds Parquet partitions.

    Example:
        >>> infer_format("s3://bucket/adult.csv"), infer_format("data/adult/")
        ('csv', 'parquet')
    """
    name = location.rstrip("/").rsplit("/", 1)[-1]
    if name.endswith(".gz"):
        name = name[: -len(".gz")]
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if not suffix:
        return "parquet"
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    raise ConfigError(
        f"data.format: cannot infer the format of '{location}' from its suffix "
        f"'{suffix}'; set data.format to one of: {', '.join(FORMATS)}"
    )


@dataclass(frozen=True)
class DataSpec:
    """Where the input records are, their format, column names and bad-row policy.

    Attributes:
        location: A local path or an fsspec URL (``file://``, ``s3://``, ``memory://``...)
            of one file or of a folder of partitions (``key=value/`` folders allowed).
        format: ``parquet`` or ``csv``.
        columns: ``(attribute, column)`` pairs for attributes whose column has another name.
        bad_rows: ``reject`` raises on the first bad value; ``drop`` skips such rows
            and counts them in the ingest report.
        person: The column naming each row's person (rows combined per person), or None.

    Example:
        >>> spec = DataSpec("adult.csv", columns=(("income>50K", "income"),))
        >>> spec.format, spec.column("income>50K"), spec.column("age"), spec.bad_rows
        ('csv', 'income', 'age', 'reject')
    """

    location: str
    format: str = ""
    columns: tuple[tuple[str, str], ...] = ()
    bad_rows: str = "reject"
    person: str | None = None
    _columns: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.location, str) or not self.location:
            raise ConfigError(
                f"data.path: must be a non-empty path or URL, got {describe_value(self.location)}"
            )
        fmt = self.format or infer_format(self.location)
        if fmt not in FORMATS:
            raise ConfigError(
                f"data.format: unknown format {describe_value(fmt)} "
                f"(expected one of: {', '.join(FORMATS)})"
            )
        object.__setattr__(self, "format", fmt)
        if self.bad_rows not in BAD_ROWS:
            raise ConfigError(
                f"data.bad_rows: must be one of: {', '.join(BAD_ROWS)}, "
                f"got {describe_value(self.bad_rows)}"
            )
        if self.person is not None and (not isinstance(self.person, str) or not self.person):
            raise ConfigError(
                f"data.person: must be the name of the column naming each row's person, "
                f"got {describe_value(self.person)}"
            )
        pairs = tuple((str(a), str(c)) for a, c in dict(self.columns).items())
        object.__setattr__(self, "columns", pairs)
        object.__setattr__(self, "_columns", dict(pairs))

    def column(self, attribute: str) -> str:
        """The column that holds an attribute (its own name unless mapped)."""
        return self._columns.get(attribute, attribute)

    def check_attributes(self, attributes: Sequence[str]) -> None:
        """Refuse a ``columns`` entry for an attribute not among ``attributes`` (the domain's).

        Raises:
            ConfigError: ``data.columns: '<attribute>' is not an attribute of the domain``.
        """
        for attribute, _ in self.columns:
            if attribute not in attributes:
                raise ConfigError(
                    f"data.columns: '{attribute}' is not an attribute of the domain "
                    f"({', '.join(attributes)})"
                )


def _resolve(path: str, base_dir: Path) -> str:
    if _is_url(path):
        return path
    target = Path(path).expanduser()
    if not target.is_absolute():
        target = base_dir / target
    return str(target)


def data_spec_from_config(section: Mapping[str, Any], *, base_dir: Path) -> DataSpec:
    """Validate a config's ``data`` section.

    Args:
        section: The parsed ``data`` mapping.
        base_dir: The folder relative local paths are read from (the config file's folder).

    Returns:
        The validated spec; nothing is read.

    Raises:
        ConfigError: One sentence naming the ``data.<key>`` at fault.

    Example:
        >>> spec = data_spec_from_config({"path": "d/x.parquet", "bad_rows": "drop"},
        ...                              base_dir=Path("/srv"))
        >>> spec.location, spec.format, spec.bad_rows
        ('/srv/d/x.parquet', 'parquet', 'drop')
    """
    if not isinstance(section, Mapping):
        raise ConfigError(f"data: must be a mapping with a path, got {describe_value(section)}")
    check_keys(section, "data", SECTION_KEYS)
    path = section.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(
            "data.path: must be a file, folder or URL of the input data, "
            f"got {describe_value(path)}"
        )
    fmt = section.get("format", "")
    if fmt is None:
        fmt = ""
    if not isinstance(fmt, str):
        raise ConfigError(f"data.format: must be a string, got {describe_value(fmt)}")
    columns = section.get("columns") or {}
    if not isinstance(columns, Mapping):
        raise ConfigError(
            f"data.columns: must map attribute names to column names, got {describe_value(columns)}"
        )
    for attribute, column in columns.items():
        if not isinstance(attribute, str) or not isinstance(column, str) or not column:
            raise ConfigError(
                f"data.columns: {describe_value(attribute)} must map to a column name, "
                f"got {describe_value(column)}"
            )
    person = section.get("person")
    return DataSpec(  # it checks bad_rows and person
        location=_resolve(path.strip(), base_dir),
        format=fmt.lower(),
        columns=tuple(columns.items()),
        bad_rows=section.get("bad_rows", "reject"),
        person=person.strip() if isinstance(person, str) else person,
    )
