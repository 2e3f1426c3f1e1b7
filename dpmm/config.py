"""Release configurations: one YAML file says what to release, over which domain, at what cost.

A config names the release, its domain, its privacy budget, the workload of
query groups to answer and how to pick the strategy (the schema is in
``config/README.md`` and ``config/schema.json``)::

    name: adult-marginals             # letters, digits, '.', '_', '-'
    description: One- and two-way tables of the Adult data.
    domain: {file: adult-domain.json} # or {attributes: [...]} or {age: 85, sex: 2}
    privacy: {epsilon: 1}             # or {rho: 0.5}, or {epsilon: least, at_most: 2}
    workload:
      - {name: one-way, kind: marginals, k: 1}
    strategy: {method: auto}          # optional; default auto (time_budget: 600 seconds)
    data: {path: data/}               # the input records (dpmm.data.spec)
    release: {root: releases/}        # where versions are written (dpmm.settings)
    invariants: {total: 48842}        # public totals published exactly (none by default)
    ledger: {path: budget.db}         # the budget ledger charged
    cluster: {n_workers: 2}           # Dask workers (default: a LocalCluster)

:func:`load_config` validates everything it can without touching data: every
problem is a :class:`~dpmm.errors.ConfigError` with one sentence that starts
with the file name and names the key, e.g. ``config/x.yaml: privacy.epsilon
must be a positive finite number, got -1``.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "tiny.yaml").write_text(
    ...     "name: tiny\\n"
    ...     "domain: {sex: 2, age: 10}\\n"
    ...     "privacy: {epsilon: 0.5}\\n"
    ...     "workload: [{kind: prefix, attribute: age, by: [sex]}]\\n"
    ... )
    >>> config = load_config(folder / "tiny.yaml")
    >>> config.name, config.domain.shape, config.privacy, config.strategy_method
    ('tiny', (2, 10), PureDP(epsilon=Fraction(1, 2)), 'auto')
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import yaml

from dpmm.data.spec import DataSpec, data_spec_from_config
from dpmm.declared_margins import declared_margins
from dpmm.domain import Attribute, Domain
from dpmm.errors import (
    ConfigError,
    DomainError,
    DpmmError,
    PrivacyParameterError,
    describe_value,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.privacy.params import KINDS, LEAST, LeastBudget, release_budget_from_config
from dpmm.settings import (
    ClusterSettings,
    Invariants,
    LedgerSettings,
    ReleaseSettings,
    cluster_settings,
    invariants,
    ledger_settings,
    release_settings,
)
from dpmm.strategy import STRATEGY_METHODS
from dpmm.workload import WorkloadGroup, from_config
from dpmm.workload.prefix_sum import PrivateTruncation, private_truncation
from dpmm.workload.reference import read_reference

__all__ = [
    "DEFAULT_METHOD",
    "DEFAULT_TIME_BUDGET",
    "NAME_PATTERN",
    "TOP_LEVEL_KEYS",
    "ReleaseConfig",
    "load_config",
]

#: Every key a config may have at its top level, required ones first.
TOP_LEVEL_KEYS = (
    "name",
    "domain",
    "privacy",
    "workload",
    "description",
    "strategy",
    "data",
    "release",
    "invariants",
    "ledger",
    "cluster",
)
#: The keys a config must have, each with the example its absence is reported with.
REQUIRED_KEYS = {
    "name": "e.g. name: adult-marginals",
    "domain": "e.g. domain: {file: adult-domain.json}",
    "privacy": "e.g. privacy: {epsilon: 1}",
    "workload": "a list of query groups, e.g. workload: [{kind: marginals, k: 1}]",
}
#: A release name becomes a folder name, so it starts with a letter or digit.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_MAX_LENGTH = 100
DEFAULT_METHOD = "auto"
#: Seconds ``auto``'s candidates after identity may search in all (``strategy.time_budget``).
DEFAULT_TIME_BUDGET = 600.0
ATTRIBUTE_KEYS = ("name", "size", "labels", "bins")


@dataclass(frozen=True)
class ReleaseConfig:
    """A validated release configuration.

    Attributes:
        name: The release name (letters, digits, ``.``, ``_``, ``-``).
        description: Free text; empty when the file has none.
        domain: The data domain.
        privacy: The total privacy budget of the release. With ``least`` it is the budget
            the config is planned at until its plan derives the one it spends (then that
            one: :meth:`spending`).
        workload: The query groups, in file order.
        strategy_method: The strategy method :func:`dpmm.strategy.optimize` is called with.
        strategy_time_budget: Seconds ``auto``'s searches may take in all (the candidates
            still searching then are abandoned, with the reason in the plan).
        raw: The parsed YAML document.
        path: The config file, as given to :func:`load_config`.
        sha256: Hex SHA-256 of the file's bytes.
        data: Where the records are (None: the config names no data; it can be planned,
            not released).
        release: Where versions are written and how they are post-processed.
        ledger: The budget ledger and dataset charged.
        cluster: The Dask workers to use.
        least: The config asks for the least budget meeting its targets, at most a cap
            (None: it gives its budget).
        budget_derived: ``privacy`` is the budget derived from the targets.
        invariants: Public totals published exactly (none by default).
    """

    name: str
    description: str
    domain: Domain
    privacy: PureDP | ZCDP
    workload: tuple[WorkloadGroup, ...]
    strategy_method: str
    raw: dict[str, Any]
    path: Path
    sha256: str
    data: DataSpec | None = None
    release: ReleaseSettings | None = None
    ledger: LedgerSettings | None = None
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    strategy_time_budget: float = DEFAULT_TIME_BUDGET
    least: LeastBudget | None = None
    budget_derived: bool = False
    invariants: Invariants = field(default_factory=Invariants)

    def spending(self, budget: PureDP | ZCDP) -> ReleaseConfig:
        """The config at the budget its plan derived from its targets (``least``)."""
        return dataclasses.replace(self, privacy=budget, budget_derived=True)

    @property
    def private_thresholds(self) -> tuple[tuple[int, PrivateTruncation], ...]:
        """``(group index, method)`` of each group whose truncation θ is chosen from the data."""
        found = ((i, private_truncation(group.spec)) for i, group in enumerate(self.workload))
        return tuple((i, choice) for i, choice in found if choice is not None)

    @property
    def measurement_privacy(self) -> PureDP | ZCDP:
        """The budget left for the strategy's measurement once the thresholds took theirs."""
        share = sum((choice.share for _, choice in self.private_thresholds), Fraction(0))
        if not share:
            return self.privacy
        return PureDP(self.privacy.epsilon * (1 - share))

    def threshold_privacy(self, share: Fraction) -> PureDP:
        """The budget of one private threshold: ``share · ε`` (thresholds need pure ε)."""
        return PureDP(self.privacy.epsilon * share)


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a key repeated in one mapping (the last would silently win)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # keys merged in with `<<:` may be overridden; that is what merging is for
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key; construct_mapping reports it
            continue
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Reader:
    """Validates one parsed document; every error names the file first."""

    def __init__(self, path: Path, references: bool = True) -> None:
        self.path = path
        self.references = references

    def fail(self, key: str, message: str) -> NoReturn:
        raise ConfigError(f"{self.path}: {key}: {message}")

    def wrap(self, error: DpmmError, key: str | None = None) -> NoReturn:
        prefix = f"{self.path}: " if key is None else f"{self.path}: {key}: "
        raise ConfigError(prefix + str(error)) from error

    def document(self, text: str) -> dict[str, Any]:
        try:
            # A SafeLoader subclass: yaml.safe_load plus a check for repeated keys.
            document = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = error.problem or error.context or "cannot be parsed"
            raise ConfigError(f"{self.path}: malformed YAML{where}: {problem}") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{self.path}: malformed YAML: {error}") from None
        except ValueError as error:  # a scalar the loader matched but cannot build (2021-02-30)
            raise ConfigError(f"{self.path}: unreadable YAML value: {error}") from None
        if document is None:
            raise ConfigError(
                f"{self.path}: the file is empty; a config needs {', '.join(REQUIRED_KEYS)}"
            )
        if not isinstance(document, Mapping):
            raise ConfigError(
                f"{self.path}: the top level must be a mapping of keys "
                f"({', '.join(TOP_LEVEL_KEYS)}), got {type(document).__name__}"
            )
        for key in document:
            if not isinstance(key, str) or key not in TOP_LEVEL_KEYS:
                raise ConfigError(
                    f"{self.path}: unknown top-level key {describe_value(key)} "
                    f"(allowed: {', '.join(TOP_LEVEL_KEYS)})"
                )
        for key, example in REQUIRED_KEYS.items():
            if key not in document:
                raise ConfigError(f"{self.path}: {key} is required ({example})")
        return dict(document)

    def name(self, value: object) -> str:
        if not isinstance(value, str):
            hint = ' (quote it: name: "2030")' if isinstance(value, int | float) else ""
            self.fail("name", f"must be a string, got {describe_value(value)}{hint}")
        if not NAME_PATTERN.fullmatch(value):
            self.fail(
                "name",
                "must start with a letter or digit and use only letters, digits, '.', '_' "
                f"and '-', got {describe_value(value)}",
            )
        if len(value) > NAME_MAX_LENGTH:
            self.fail("name", f"must be at most {NAME_MAX_LENGTH} characters, got {len(value)}")
        return value

    def description(self, value: object) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.fail("description", f"must be a string, got {describe_value(value)}")
        return value

    def domain(self, value: object) -> Domain:
        if not isinstance(value, Mapping) or not value:
            self.fail(
                "domain",
                "must be {file: path}, {attributes: [{name, size}, ...]} or a mapping of "
                f"attribute to size, got {describe_value(value)}",
            )
        if list(value) == ["file"] and isinstance(value["file"], str):
            return self._domain_file(value["file"])
        if list(value) == ["attributes"] and isinstance(value["attributes"], list):
            return self._domain_list(value["attributes"])
        attributes = []
        for name, size in value.items():
            if not isinstance(name, str):
                self.fail("domain", f"attribute names must be strings, got {describe_value(name)}")
            key = f"domain.{name}"
            attributes.append(self._attribute({"name": name, "size": size}, key, key))
        return self._join(attributes)

    def _domain_file(self, file: str) -> Domain:
        target = Path(file).expanduser()
        if not target.is_absolute():
            target = self.path.parent / target
        if not target.is_file():
            problem = "is a folder, not a file" if target.is_dir() else "does not exist"
            self.fail("domain.file", f"the domain file '{target}' {problem}")
        try:
            return Domain.from_json(target)
        except DomainError as error:
            self.wrap(error, "domain.file")

    def _domain_list(self, items: list) -> Domain:
        if not items:
            self.fail("domain.attributes", "must list at least one attribute")
        attributes = []
        for index, item in enumerate(items):
            key = f"domain.attributes[{index}]"
            if not isinstance(item, Mapping) or "name" not in item or "size" not in item:
                self.fail(
                    key,
                    f"must be a mapping with 'name' and 'size', got {describe_value(item)}",
                )
            unknown = [k for k in item if k not in ATTRIBUTE_KEYS]
            if unknown:
                self.fail(
                    f"{key}.{unknown[0]}",
                    f"unknown attribute key (allowed: {', '.join(ATTRIBUTE_KEYS)})",
                )
            if not isinstance(item["name"], str):
                self.fail(f"{key}.name", f"must be a string, got {describe_value(item['name'])}")
            attributes.append(self._attribute(item, key, f"{key}.size"))
        return self._join(attributes)

    def _attribute(self, item: Mapping, key: str, size_key: str) -> Attribute:
        size = item["size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            self.fail(
                size_key,
                f"attribute size must be a positive integer, got {describe_value(size)}",
            )
        try:
            return Attribute(item["name"], size, item.get("labels"), item.get("bins"))
        except (DomainError, TypeError, ValueError) as error:
            if isinstance(error, DomainError):
                self.wrap(error, key)
            self.fail(key, f"labels and bins must be lists ({error})")

    def _join(self, attributes: list[Attribute]) -> Domain:
        try:
            return Domain(tuple(attributes))
        except DomainError as error:
            self.wrap(error, "domain")

    def privacy(self, value: object) -> PureDP | ZCDP | LeastBudget:
        try:
            return release_budget_from_config(value, where="privacy")
        except PrivacyParameterError as error:
            self.wrap(error)

    def workload(self, value: object, domain: Domain) -> tuple[WorkloadGroup, ...]:
        """The groups, each relative target's reference file read (public input) unless
        ``references`` is off."""
        try:
            groups = from_config(value, domain)
        except DpmmError as error:
            self.wrap(error)
        for index, group in enumerate(groups):
            reference = group.target.reference if group.target else None
            if self.references and reference is not None and "file" in reference.source:
                try:
                    groups[index] = dataclasses.replace(
                        group, target=read_reference(group, domain, self.path.parent)
                    )
                except ConfigError as error:
                    self.wrap(error, f"workload[{index}].target.relative_to")
        return tuple(groups)

    def margins(
        self, document: Mapping[str, Any], domain: Domain, declared: Invariants
    ) -> Invariants:
        """The declared invariants with their one-way tables read (public input)."""
        section = document.get("invariants")
        value = section.get("margins") if isinstance(section, Mapping) else None
        try:
            margins = declared_margins(value, domain, self.path.parent, declared.total)
        except ConfigError as error:
            self.wrap(error)
        return dataclasses.replace(declared, margins=margins)

    def least(self, least: LeastBudget, workload: tuple[WorkloadGroup, ...]) -> None:
        """A budget derived from the targets needs a target."""
        if not any(group.target is not None for group in workload):
            self.fail(
                f"privacy.{KINDS[least.kind].parameter}",
                f"'{LEAST}' is the least budget meeting the workload's accuracy targets, and "
                "no group has a target; give a group a target or give the budget",
            )

    def thresholds(self, workload: tuple[WorkloadGroup, ...], privacy: PureDP | ZCDP) -> None:
        """Private truncation thresholds spend pure ε, and leave budget for the measurement."""
        total = Fraction(0)
        for index, group in enumerate(workload):
            choice = private_truncation(group.spec)
            if choice is None:
                continue
            key = f"workload[{index}].truncation"
            if not isinstance(privacy, PureDP):
                self.fail(
                    f"{key}.method",
                    f"a threshold chosen from the data ({choice.method}) spends pure ε "
                    "(discrete Laplace); give privacy: {epsilon: ...} instead of rho",
                )
            total += choice.share
            if total >= 1:
                self.fail(
                    f"{key}.share",
                    f"the private thresholds' shares add up to {total}, leaving nothing of ε "
                    "for the measurement; they must add up to less than 1",
                )

    def strategy(self, value: object) -> tuple[str, float]:
        """The strategy method and the seconds ``auto``'s searches may take."""
        if value is None:
            return DEFAULT_METHOD, DEFAULT_TIME_BUDGET
        if not isinstance(value, Mapping):
            self.fail("strategy", f"must be a mapping such as {{method: auto}}, got {value!r}")
        for key in value:
            if key not in ("method", "time_budget"):
                self.fail(f"strategy.{key}", "unknown key (allowed: method, time_budget)")
        method = value.get("method", DEFAULT_METHOD)
        if not isinstance(method, str) or method not in STRATEGY_METHODS:
            self.fail(
                "strategy.method",
                f"unknown strategy method {describe_value(method)} "
                f"(expected one of: {', '.join(STRATEGY_METHODS)})",
            )
        budget = value.get("time_budget", DEFAULT_TIME_BUDGET)
        if (
            isinstance(budget, bool)
            or not isinstance(budget, int | float)
            or not math.isfinite(budget)
            or budget <= 0
        ):
            self.fail(
                "strategy.time_budget",
                f"must be a positive number of seconds, got {describe_value(budget)}",
            )
        return method, float(budget)

    def data_columns(self, data: DataSpec | None, domain: Domain) -> None:
        """``data.columns`` names attributes of the domain, and the person column identifies
        people: it cannot also be an attribute's column."""
        if data is None:
            return
        try:
            data.check_attributes(domain.attributes)
        except ConfigError as error:
            self.wrap(error)
        if data.person is None:
            return
        for attribute in domain.attributes:
            if data.column(attribute) == data.person:
                self.fail(
                    "data.person",
                    f"column '{data.person}' holds attribute '{attribute}'; the person column "
                    "names whose rows are combined and is not itself counted",
                )

    def sections(self, document: Mapping[str, Any], name: str) -> dict[str, Any]:
        """The run sections (data, release, invariants, ledger, cluster), validated."""
        base = self.path.parent
        try:
            data = document.get("data")
            release = release_settings(document.get("release"), base_dir=base)
            return {
                "data": None if data is None else data_spec_from_config(data, base_dir=base),
                "release": release,
                "invariants": invariants(document.get("invariants"), release),
                "ledger": ledger_settings(document.get("ledger"), base_dir=base, release_name=name),
                "cluster": cluster_settings(document.get("cluster")),
            }
        except ConfigError as error:
            self.wrap(error)


def load_config(path: str | Path, *, references: bool = True) -> ReleaseConfig:
    """Read and validate a release configuration file.

    Args:
        path: The YAML file. A ``domain: {file: ...}`` path is read relative to
            the folder that holds it.
        references: Read the reference files of relative accuracy targets. The audit,
            which recomputes a release's answers and never its targets, loads the
            release's config without them: they are beside the original config, not in
            the release folder.

    Returns:
        The validated configuration, with the workload built over the domain.

    Raises:
        ConfigError: One sentence naming the file and the key of the first problem
            (a missing or unreadable file, malformed YAML, an unknown or missing key,
            a bad value, a workload that does not fit the domain).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: the config file does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config file ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: the config file is not UTF-8 text (byte {error.start})"
        ) from None
    reader = _Reader(path, references)
    document = reader.document(text)
    name = reader.name(document["name"])
    description = reader.description(document.get("description"))
    domain = reader.domain(document["domain"])
    budget = reader.privacy(document["privacy"])
    workload = reader.workload(document["workload"], domain)
    least = budget if isinstance(budget, LeastBudget) else None
    if least is not None:
        reader.least(least, workload)
    privacy = least.planning if least is not None else budget
    reader.thresholds(workload, privacy)
    strategy_method, time_budget = reader.strategy(document.get("strategy"))
    sections = reader.sections(document, name)
    sections["invariants"] = reader.margins(document, domain, sections["invariants"])
    reader.data_columns(sections["data"], domain)
    return ReleaseConfig(
        name=name,
        description=description,
        domain=domain,
        privacy=privacy,
        workload=workload,
        strategy_method=strategy_method,
        strategy_time_budget=time_budget,
        raw=copy.deepcopy(document),
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        least=least,
        **sections,
    )
