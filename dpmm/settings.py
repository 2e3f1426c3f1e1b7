"""The run sections of a release config: where releases go, which ledger pays, which cluster runs.

::

    release:
      root: releases/          # folder of release folders; default: releases/ beside the config
      reconstruction: auto     # auto, least_squares or nnls
      histogram: auto          # write the reconstructed histogram: auto, always or never
      confidence: 0.95         # the level of every answer's interval (answers.parquet)
      output: real             # real, or integer: non-negative consistent integer counts
    ledger:
      path: budget.db          # the budget ledger (SQLite); required to release
      dataset: adult           # the dataset charged; default: the release name
    cluster:                   # optional; default: a LocalCluster on this machine
      address: tcp://10.0.0.5:8786                 # an existing Dask scheduler, or
      class: dask_jobqueue.SLURMCluster            # a cluster class,
      options: {cores: 8, memory: 32GB}            #   its keyword arguments,
      scale: 4                                     #   and how many workers to ask for, or
      n_workers: 2                                 # LocalCluster options
      processes: true
      threads_per_worker: 1

Relative paths are read relative to the config file's folder. Every problem is a
:class:`~dpmm.errors.ConfigError` naming the key, e.g. ``release.reconstruction: unknown
method 'svd' (expected one of: auto, least_squares, nnls)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmm.errors import ConfigError, describe_value

__all__ = [
    "HISTOGRAM_CHOICES",
    "OUTPUT_CHOICES",
    "RECONSTRUCTION_METHODS",
    "ClusterSettings",
    "DeclaredMargin",
    "Invariants",
    "LedgerSettings",
    "ReleaseSettings",
    "check_keys",
    "cluster_settings",
    "invariants",
    "ledger_settings",
    "release_settings",
]

RECONSTRUCTION_METHODS = ("auto", "least_squares", "nnls")
HISTOGRAM_CHOICES = ("auto", "always", "never")
#: ``release.output``: real-valued estimates, or integer counts (the first is the default).
OUTPUT_CHOICES = ("real", "integer")
DEFAULT_ROOT = "releases"
#: ``release.confidence`` when the config does not set it.
DEFAULT_CONFIDENCE = 0.95
MAX_LEVEL = 0.999999
_CLASS_PATTERN = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+")
_LOCAL_KEYS = ("n_workers", "processes", "threads_per_worker", "memory_limit")
#: Where a release may keep its domain-sized arrays (``cluster.arrays``; the first is the
#: default).
ARRAY_PLACES = ("auto", "flow", "workers")


@dataclass(frozen=True)
class ReleaseSettings:
    """Where a release is written and how it is post-processed.

    Attributes:
        root: The folder holding ``<name>/v0001/`` ...
        reconstruction: ``auto`` (NNLS when the full vector is estimated, least squares
            in the marginal algebra otherwise), ``least_squares`` or ``nnls``.
        histogram: Whether the reconstructed histogram is written (``auto``: when it has
            at most :data:`dpmm.pipeline.HISTOGRAM_LIMIT` cells).
        confidence: The level of the interval published with every answer
            (:mod:`dpmm.reconstruct.intervals`).
        output: ``real`` (the estimate as solved) or ``integer`` (non-negative integer
            counts, consistent across every released table: :mod:`dpmm.reconstruct.integer`).
    """

    root: Path
    reconstruction: str = "auto"
    histogram: str = "auto"
    confidence: float = DEFAULT_CONFIDENCE
    output: str = "real"

    @property
    def integer(self) -> bool:
        """Whether the release publishes integer counts."""
        return self.output == "integer"


@dataclass(frozen=True)
class DeclaredMargin:
    """A published one-way table: the count of every value of one attribute.

    Attributes:
        attribute: The attribute's name.
        counts: One whole count per value, in the attribute's value order.
        source: Empty for inline counts, or the file they were read from:
            ``{"file": PATH, "column": NAME, "sha256": HEX}``.
    """

    attribute: str
    counts: tuple[int, ...]
    source: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """The number of records the table declares."""
        return sum(self.counts)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's form: the attribute, its counts and where they came from."""
        return {"attribute": self.attribute, "counts": list(self.counts), **self.source}


@dataclass(frozen=True)
class Invariants:
    """Facts a config declares public, published exactly and outside the DP guarantee.

    Attributes:
        total: The number of records (a census's known population), or None: estimated
            from the measurement like every other count (unless a margin declares it).
        margins: Published one-way tables (:mod:`dpmm.declared_margins`), each adding up
            to ``total`` when both are declared.
    """

    total: int | None = None
    margins: tuple[DeclaredMargin, ...] = ()

    def __bool__(self) -> bool:
        return self.total is not None or bool(self.margins)

    @property
    def known_total(self) -> int | None:
        """The declared number of records: ``total``, or what the margins add up to."""
        if self.total is not None or not self.margins:
            return self.total
        return self.margins[0].total

    def to_dict(self) -> dict[str, Any]:
        """The declared invariants (none: an empty mapping); ``total`` also when only
        the margins declare it (it is then published exactly too)."""
        total = self.known_total
        found: dict[str, Any] = {} if total is None else {"total": total}
        if self.margins:
            found["margins"] = [margin.to_dict() for margin in self.margins]
        return found


@dataclass(frozen=True)
class LedgerSettings:
    """The budget ledger a release is charged to (None path: the config names none)."""

    path: Path | None
    dataset: str


@dataclass(frozen=True)
class ClusterSettings:
    """How to reach Dask workers; the default is a LocalCluster on this machine.

    Attributes:
        address: An existing scheduler's address, or None.
        cluster_class: A dotted cluster class (``dask_jobqueue.SLURMCluster``), or None.
        options: Keyword arguments of the cluster class, or LocalCluster options.
        scale: Workers to ask a cluster class for (None: its default).
        arrays: Where a release keeps its domain-sized arrays (counts, answers, estimate)
            or, for a strategy read from marginal tables, its tables and measurement:
            ``auto`` (in the flow's process while the vector or the tables fit, else on
            the workers), ``flow`` or ``workers``.
    """

    address: str | None = None
    cluster_class: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    scale: int | None = None
    arrays: str = "auto"


def _mapping(section: object, key: str) -> Mapping[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{key}: must be a mapping, got {describe_value(section)}")
    return section


def check_keys(section: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    """Refuse a key of config section ``key`` that is not in ``allowed``, naming it."""
    for name in section:
        if name not in allowed:
            raise ConfigError(
                f"{key}.{name}: unknown key (allowed: {', '.join(allowed)})"
                if isinstance(name, str)
                else f"{key}: unknown key {describe_value(name)}"
            )


def _choice(section: Mapping[str, Any], key: str, name: str, choices: tuple[str, ...]) -> str:
    value = section.get(name, choices[0])
    if value not in choices:
        raise ConfigError(
            f"{key}.{name}: unknown value {describe_value(value)} "
            f"(expected one of: {', '.join(choices)})"
        )
    return value


def _path(value: object, key: str, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: must be a non-empty path, got {describe_value(value)}")
    if "://" in value:
        raise ConfigError(f"{key}: must be a local path, got the URL {value!r}")
    path = Path(value.strip()).expanduser()
    return path if path.is_absolute() else base_dir / path


def _positive_int(value: object, key: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{key}: must be a positive integer, got {describe_value(value)}")
    return value


def release_settings(section: object, *, base_dir: Path) -> ReleaseSettings:
    """Validate a config's ``release`` section.

    Example:
        >>> section = {"root": "out", "reconstruction": "nnls"}
        >>> settings = release_settings(section, base_dir=Path("/srv"))
        >>> settings.root, settings.reconstruction, settings.histogram, settings.confidence
        (PosixPath('/srv/out'), 'nnls', 'auto', 0.95)
        >>> settings.output
        'real'
    """
    section = _mapping(section, "release")
    keys = ("root", "reconstruction", "histogram", "confidence", "output")
    check_keys(section, "release", keys)
    return ReleaseSettings(
        root=_path(section.get("root", DEFAULT_ROOT), "release.root", base_dir),
        reconstruction=_choice(section, "release", "reconstruction", RECONSTRUCTION_METHODS),
        histogram=_choice(section, "release", "histogram", HISTOGRAM_CHOICES),
        confidence=_level(section.get("confidence", DEFAULT_CONFIDENCE), "release.confidence"),
        output=_choice(section, "release", "output", OUTPUT_CHOICES),
    )


def _level(value: object, key: str) -> float:
    """A confidence level: a number above 0 and at most 0.999999 (closer to 1, the
    numerical slack of the intervals would take most of what is left)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_LEVEL:
        raise ConfigError(
            f"{key}: must be a number above 0 and at most {MAX_LEVEL} (e.g. 0.95), got "
            f"{describe_value(value)}"
        )
    return float(value)


def invariants(section: object, release: ReleaseSettings) -> Invariants:
    """Validate a config's ``invariants`` section: public totals the release publishes
    exactly. They constrain integer counts, so they need ``release.output: integer``.
    ``margins`` are read by :func:`dpmm.declared_margins.declared_margins`, which needs
    the domain.

    Example:
        >>> invariants({"total": 48842}, ReleaseSettings(Path("r"), output="integer"))
        Invariants(total=48842, margins=())
    """
    section = _mapping(section, "invariants")
    check_keys(section, "invariants", ("total", "margins"))
    total = section.get("total")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        raise ConfigError(
            f"invariants.total: must be a whole number of records ≥ 0, got {describe_value(total)}"
        )
    declared = Invariants(total)
    if (declared or section.get("margins") is not None) and not release.integer:
        raise ConfigError(
            "invariants: declared totals constrain integer counts; set release.output: integer"
        )
    return declared


def ledger_settings(section: object, *, base_dir: Path, release_name: str) -> LedgerSettings:
    """Validate a config's ``ledger`` section (the path may be absent for ``dpmm plan``).

    Example:
        >>> ledger_settings({"path": "b.db"}, base_dir=Path("/srv"), release_name="adult")
        LedgerSettings(path=PosixPath('/srv/b.db'), dataset='adult')
    """
    section = _mapping(section, "ledger")
    check_keys(section, "ledger", ("path", "dataset"))
    path = section.get("path")
    dataset = section.get("dataset", release_name)
    if not isinstance(dataset, str) or not dataset.strip():
        raise ConfigError(f"ledger.dataset: must be a dataset name, got {describe_value(dataset)}")
    return LedgerSettings(
        path=None if path is None else _path(path, "ledger.path", base_dir),
        dataset=dataset.strip(),
    )


def cluster_settings(section: object) -> ClusterSettings:
    """Validate a config's ``cluster`` section.

    Example:
        >>> cluster_settings({"address": "tcp://10.0.0.5:8786"}).address
        'tcp://10.0.0.5:8786'
        >>> cluster_settings({"n_workers": 2, "processes": False}).options
        {'n_workers': 2, 'processes': False}
    """
    section = _mapping(section, "cluster")
    check_keys(section, "cluster", ("address", "class", "options", "scale", "arrays", *_LOCAL_KEYS))
    address, cluster_class = section.get("address"), section.get("class")
    local = {k: section[k] for k in _LOCAL_KEYS if k in section}
    chosen = [k for k, v in (("address", address), ("class", cluster_class)) if v is not None]
    if len(chosen) > 1 or (chosen and local):
        extra = ", ".join(chosen + list(local))
        raise ConfigError(
            f"cluster: give one of address, class or LocalCluster options, not {extra}"
        )
    if address is not None and (not isinstance(address, str) or "://" not in address):
        raise ConfigError(
            f"cluster.address: must be a scheduler address such as tcp://host:8786, "
            f"got {describe_value(address)}"
        )
    if cluster_class is not None and (
        not isinstance(cluster_class, str) or not _CLASS_PATTERN.fullmatch(cluster_class)
    ):
        raise ConfigError(
            "cluster.class: must be a dotted class name such as dask_jobqueue.SLURMCluster, "
            f"got {describe_value(cluster_class)}"
        )
    options = _mapping(section.get("options"), "cluster.options")
    if options and cluster_class is None:
        raise ConfigError("cluster.options: only a cluster class takes options")
    scale = _positive_int(section.get("scale"), "cluster.scale")
    for key in ("n_workers", "threads_per_worker"):
        _positive_int(local.get(key), f"cluster.{key}")
    if "processes" in local and not isinstance(local["processes"], bool):
        raise ConfigError(
            f"cluster.processes: must be true or false, got {describe_value(local['processes'])}"
        )
    return ClusterSettings(
        address=address,
        cluster_class=cluster_class,
        options=dict(options) if cluster_class else local,
        scale=scale,
        arrays=_choice(section, "cluster", "arrays", ARRAY_PLACES),
    )
