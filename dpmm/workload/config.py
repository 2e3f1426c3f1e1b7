"""Workloads from a release configuration's ``workload:`` section.

The section is a non-empty list of query groups; each becomes a
:class:`WorkloadGroup` whose matrix has one column per cell of the domain::

    workload:
      - name: str          # optional; default "<kind>-<index>"; names are unique
        kind: identity | total | prefix | all_range | ranges | prefix_sum | sum
              | marginal | marginals | kron | census_sf1
        weight: 2.0        # optional positive number, default 1 (scales every query)

Keys by kind (any other key is an error):

* ``prefix``, ``all_range``: ``attribute: name`` (required).
* ``ranges``: ``attribute: name`` and ``intervals: [[low, high], ...]``,
  inclusive value codes within the attribute's size.
* ``identity``, ``total``: ``attribute: name`` (optional; without it the group
  covers the whole domain: the Kron of all identities, or the grand total).
* For the five 1-D kinds the queries apply to ``attribute``; every other
  attribute is totalled, except those in the optional ``by: [names]``, which
  are kept whole (``prefix`` on age ``by: [sex]`` is one age CDF per sex).
  ``by`` needs ``attribute`` and must not contain it.
* ``prefix_sum``: ``attribute`` (numeric bins from 0 up), optional ``by`` and
  ``truncation: {threshold: θ}``: running sums of the attribute's values, each
  record counted at its bucket's upper bound (capped at θ); see
  :mod:`~dpmm.workload.prefix_sum`. ``sum`` takes the same keys: the totals of the
  attribute's values (one per cell of ``by``).
* ``marginal``: ``attributes: [a, b]``: one contingency table.
* ``marginals``: ``k: int`` (all exactly k-way tables) or
  ``sets: [[a, b], [c]]``, and optionally ``attributes: [...]`` to restrict
  which attributes ``k`` combines (or ``sets`` may use).
* ``kron``: ``factors: {attribute: identity | total | prefix | all_range |
  {ranges: [[low, high], ...]}}``; attributes not named are totalled.
* ``census_sf1``: no other key; the domain must have exactly the names and sizes
  of :func:`~dpmm.workload.census.census_domain`.

Errors are :class:`~dpmm.errors.ConfigError` with one sentence that starts with
the key path, e.g. ``workload[2].attribute: unknown attribute 'agee' (the
domain has: sex, age)``.

Example:
    >>> from dpmm.domain import Domain
    >>> domain = Domain.from_dict({"sex": 2, "age": 10})
    >>> groups = from_config(
    ...     [{"kind": "prefix", "attribute": "age", "by": ["sex"]}, {"kind": "total"}], domain
    ... )
    >>> [(group.name, group.matrix.shape) for group in groups]
    [('prefix-0', (20, 20)), ('total-1', (1, 20))]
    >>> stack(groups).shape
    (21, 20)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, NoReturn

from dpmm.domain import Domain
from dpmm.errors import ConfigError, describe_value
from dpmm.linalg import Matrix
from dpmm.linalg.elementary import PREFIX_GRAM_LIMIT
from dpmm.targets import Target, parse_target
from dpmm.workload import builders
from dpmm.workload.attributes import attribute_name, attribute_names, spread
from dpmm.workload.builders import _is_int, _is_list
from dpmm.workload.census import census_domain, census_sf1
from dpmm.workload.prefix_sum import prefix_sum_group, sum_group

__all__ = ["WorkloadGroup", "from_config", "stack"]

ONE_D_KINDS = ("identity", "total", "prefix", "all_range", "ranges")
KINDS = (*ONE_D_KINDS, "prefix_sum", "sum", "marginal", "marginals", "kron", "census_sf1")
COMMON_KEYS = ("name", "kind", "weight", "target")
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "identity": ("attribute", "by"),
    "total": ("attribute", "by"),
    "prefix": ("attribute", "by"),
    "all_range": ("attribute", "by"),
    "ranges": ("attribute", "intervals", "by"),
    "prefix_sum": ("attribute", "by", "truncation", "valuation"),
    "sum": ("attribute", "by", "truncation", "valuation"),
    "marginal": ("attributes",),
    "marginals": ("k", "sets", "attributes"),
    "kron": ("factors",),
    "census_sf1": (),
}
KRON_FACTORS = ("identity", "total", "prefix", "all_range")


@dataclass(frozen=True)
class WorkloadGroup:
    """One named group of queries: its matrix over the whole domain and its normalized spec.

    ``spec`` is the config entry with defaults filled in (``name``, ``weight``)
    and attribute lists in domain order; it is JSON-ready and reads back through
    :func:`from_config` to the same group. ``target`` is its accuracy target, parsed (a
    reference file's values are read by :func:`dpmm.config.load_config`, which knows the
    config's folder).
    """

    name: str
    kind: str
    matrix: Matrix
    spec: dict[str, Any]
    target: Target | None = field(default=None, compare=False)


def _fail(path: str, message: str) -> NoReturn:
    raise ConfigError(f"{path}: {message}")


def _intervals(value: object, domain: Domain, attribute: str, path: str) -> list[list[int]]:
    if not _is_list(value) or not value:
        _fail(path, f"must be a non-empty list of [low, high] pairs, got {describe_value(value)}")
    size = domain[attribute].size
    pairs = []
    for j, pair in enumerate(value):
        if not _is_list(pair) or len(pair) != 2 or not all(_is_int(b) for b in pair):
            _fail(
                f"{path}[{j}]",
                f"must be a pair of integers [low, high], got {describe_value(pair)}",
            )
        low, high = int(pair[0]), int(pair[1])
        if low > high:
            _fail(f"{path}[{j}]", f"interval [{low}, {high}] has low > high")
        if low < 0 or high >= size:
            _fail(
                f"{path}[{j}]",
                f"interval [{low}, {high}] is outside {attribute}'s values 0..{size - 1}",
            )
        pairs.append([low, high])
    return pairs


def _weight(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        _fail(path, f"must be a positive number, got {describe_value(value)}")
    if not math.isfinite(value) or value <= 0:
        _fail(path, f"must be a positive finite number, got {describe_value(value)}")
    return float(value)


#: Most values an ``all_range`` is built over: its n(n+1)/2 intervals and its Gram are
#: formed as arrays (at 32,768 values, 5.4·10⁸ intervals: 17 GiB before the Gram's 8 GiB).
ALL_RANGE_LIMIT = math.isqrt(PREFIX_GRAM_LIMIT)


def _factor(
    kind: str, domain: Domain, attribute: str, path: str, intervals: list[list[int]] | None = None
) -> Matrix:
    n = domain[attribute].size
    if kind == "all_range" and n > ALL_RANGE_LIMIT:
        _fail(
            path,
            f"asks for all {n * (n + 1) // 2:,} ranges over the {n:,} values of '{attribute}'; "
            f"dpmm builds all ranges over at most {ALL_RANGE_LIMIT:,} values: use a coarser "
            "attribute, or list the ranges needed (kind 'ranges')",
        )
    if kind == "ranges":
        return builders.ranges(n, intervals)
    return {
        "identity": builders.identity,
        "total": builders.total,
        "prefix": builders.prefix,
        "all_range": builders.all_range,
    }[kind](n)


def _one_d(entry: Mapping, kind: str, domain: Domain, path: str) -> tuple[Matrix, dict]:
    if "attribute" not in entry:
        if kind not in ("identity", "total"):
            _fail(f"{path}.attribute", f"is required for kind '{kind}'")
        if "by" in entry:
            _fail(f"{path}.by", "needs 'attribute' (without it the group covers every attribute)")
        factors = {a: _factor(kind, domain, a, path) for a in domain.attributes}
        return spread(domain, factors), {}
    attribute = attribute_name(domain, entry["attribute"], f"{path}.attribute")
    spec: dict[str, Any] = {"attribute": attribute}
    intervals = None
    if kind == "ranges":
        if "intervals" not in entry:
            _fail(f"{path}.intervals", "is required for kind 'ranges'")
        intervals = _intervals(entry["intervals"], domain, attribute, f"{path}.intervals")
        spec["intervals"] = intervals
    by: list[str] = []
    if "by" in entry:
        by = attribute_names(domain, entry["by"], f"{path}.by")
        if attribute in by:
            _fail(f"{path}.by", f"contains '{attribute}', the group's own attribute")
        spec["by"] = by
    factor = _factor(kind, domain, attribute, path, intervals)
    return spread(domain, {attribute: factor}, by), spec


def _marginal(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict]:
    if "attributes" not in entry:
        _fail(f"{path}.attributes", "is required for kind 'marginal'")
    attributes = attribute_names(domain, entry["attributes"], f"{path}.attributes")
    return builders.marginal(domain, attributes), {"attributes": attributes}


def _marginals(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict]:
    if ("k" in entry) == ("sets" in entry):
        _fail(path, "kind 'marginals' needs exactly one of 'k' and 'sets'")
    spec: dict[str, Any] = {}
    scope = list(domain.attributes)
    if "attributes" in entry:
        scope = attribute_names(domain, entry["attributes"], f"{path}.attributes")
        spec["attributes"] = scope
    if "k" in entry:
        k = entry["k"]
        if not _is_int(k) or not 1 <= k <= len(scope):
            _fail(
                f"{path}.k",
                f"must be an integer from 1 to {len(scope)} (the number of attributes), "
                f"got {describe_value(k)}",
            )
        spec["k"] = int(k)
        return builders.marginals(domain, k=int(k), attributes=scope), spec
    sets = entry["sets"]
    if not _is_list(sets) or not sets:
        _fail(
            f"{path}.sets",
            f"must be a non-empty list of attribute lists, got {describe_value(sets)}",
        )
    normalized: list[list[str]] = []
    for j, item in enumerate(sets):
        names = attribute_names(domain, item, f"{path}.sets[{j}]")
        outside = [name for name in names if name not in scope]
        if outside:
            _fail(f"{path}.sets[{j}]", f"uses '{outside[0]}', which is not in {path}.attributes")
        if names in normalized:
            _fail(f"{path}.sets[{j}]", f"repeats {path}.sets[{normalized.index(names)}]")
        normalized.append(names)
    spec["sets"] = normalized
    return builders.marginals(domain, sets=normalized), spec


def _kron(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict]:
    if "factors" not in entry:
        _fail(f"{path}.factors", "is required for kind 'kron'")
    factors = entry["factors"]
    if not isinstance(factors, Mapping) or not factors:
        _fail(
            f"{path}.factors",
            f"must be a non-empty mapping of attribute to factor, got {describe_value(factors)}",
        )
    chosen: dict[str, Matrix] = {}
    normalized: dict[str, Any] = {}
    expected = "expected one of: identity, total, prefix, all_range, {ranges: [[low, high], ...]}"
    for key, value in factors.items():
        key_path = f"{path}.factors.{key}"
        attribute = attribute_name(domain, key, key_path)
        if isinstance(value, str):
            if value not in KRON_FACTORS:
                _fail(key_path, f"unknown factor '{value}' ({expected})")
            chosen[attribute] = _factor(value, domain, attribute, key_path)
            normalized[attribute] = value
        elif isinstance(value, Mapping) and list(value) == ["ranges"]:
            intervals = _intervals(value["ranges"], domain, attribute, f"{key_path}.ranges")
            chosen[attribute] = _factor("ranges", domain, attribute, key_path, intervals)
            normalized[attribute] = {"ranges": intervals}
        else:
            _fail(key_path, f"is not a factor, got {describe_value(value)} ({expected})")
    ordered = {name: normalized[name] for name in domain.attributes if name in normalized}
    return spread(domain, chosen), {"factors": ordered}


def _show(domain: Domain) -> str:
    return ", ".join(f"{a} {n}" for a, n in zip(domain.attributes, domain.shape, strict=True))


def _census(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict]:
    census = census_domain()
    if (domain.attributes, domain.shape) != (census.attributes, census.shape):
        _fail(
            f"{path}.kind",
            f"census_sf1 needs the census domain ({_show(census)}), but the domain is "
            f"({_show(domain)})",
        )
    return census_sf1(), {}


def _group(
    entry: object, index: int, domain: Domain
) -> tuple[str | None, str, Matrix, dict, Target | None]:
    path = f"workload[{index}]"
    if not isinstance(entry, Mapping):
        _fail(path, f"must be a mapping with a 'kind' key, got {describe_value(entry)}")
    if "kind" not in entry:
        _fail(f"{path}.kind", f"is required (expected one of: {', '.join(KINDS)})")
    kind = entry["kind"]
    if not isinstance(kind, str) or kind not in KINDS:
        _fail(
            f"{path}.kind",
            f"unknown workload kind {describe_value(kind)} (expected one of: {', '.join(KINDS)})",
        )
    allowed = COMMON_KEYS + KIND_KEYS[kind]
    for key in entry:
        if key not in allowed:
            _fail(
                f"{path}.{key}",
                f"unknown key for kind '{kind}' (allowed: {', '.join(allowed)})",
            )
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        _fail(f"{path}.name", f"must be a non-empty string, got {describe_value(name)}")
    weight = _weight(entry["weight"], f"{path}.weight") if "weight" in entry else 1.0
    if kind in ONE_D_KINDS:
        matrix, details = _one_d(entry, kind, domain, path)
    else:
        build = {
            "prefix_sum": prefix_sum_group,
            "sum": sum_group,
            "marginal": _marginal,
            "marginals": _marginals,
            "kron": _kron,
            "census_sf1": _census,
        }[kind]
        matrix, details = build(entry, domain, path)
    if weight != 1.0:
        matrix = builders.weighted(weight, matrix)
    target = None
    if "target" in entry:  # checked by the plan, not used to build anything
        target = parse_target(entry["target"], f"{path}.target")
        details["target"] = target.to_dict()
    return name, kind, matrix, {"weight": weight, **details}, target


def from_config(section: object, domain: Domain) -> list[WorkloadGroup]:
    """Build the workload groups of a config's ``workload:`` section (schema above).

    Args:
        section: The parsed YAML value of ``workload:``, a non-empty list of groups.
        domain: The release's domain; every matrix gets one column per cell.

    Raises:
        ConfigError: One sentence naming the key path of the first bad value.

    Example:
        >>> from dpmm.domain import Domain
        >>> domain = Domain.from_dict({"sex": 2, "age": 4})
        >>> group = from_config([{"kind": "marginals", "k": 1, "weight": 2}], domain)[0]
        >>> group.name, group.matrix.shape, group.spec
        ('marginals-0', (6, 8), {'name': 'marginals-0', 'kind': 'marginals', 'weight': 2.0, 'k': 1})
    """
    if not isinstance(domain, Domain):
        raise ConfigError(f"workload: needs a Domain to build on, got {type(domain).__name__}")
    if not _is_list(section) or not section:
        _fail(
            "workload",
            f"must be a non-empty list of workload groups, got {describe_value(section)}",
        )
    groups: list[WorkloadGroup] = []
    used: dict[str, int] = {}
    for index, entry in enumerate(section):
        path = f"workload[{index}]"
        try:
            name, kind, matrix, details, target = _group(entry, index, domain)
        except ConfigError:
            raise
        except ValueError as error:  # a builder's check the schema did not anticipate
            raise ConfigError(f"{path}: {error}") from error
        name = f"{kind}-{index}" if name is None else name
        if name in used:
            _fail(
                f"{path}.name",
                f"duplicate group name '{name}' (already used by workload[{used[name]}])",
            )
        used[name] = index
        if matrix.shape[1] != domain.size:
            _fail(path, f"has {matrix.shape[1]} columns but the domain has {domain.size} cells")
        spec = {"name": name, "kind": kind, **details}
        groups.append(WorkloadGroup(name, kind, matrix, spec, target))
    return groups


def stack(groups: Sequence[WorkloadGroup]) -> Matrix:
    """All groups' queries as one matrix, in group order (a single group's matrix as is).

    Example:
        >>> from dpmm.domain import Domain
        >>> domain = Domain.from_dict({"age": 4})
        >>> groups = from_config([{"kind": "total"}, {"kind": "identity"}], domain)
        >>> stack(groups).dense()[:2]
        array([[1., 1., 1., 1.],
               [1., 0., 0., 0.]])
    """
    if not _is_list(groups) or not groups:
        raise ValueError("stack needs a non-empty list of workload groups")
    for index, group in enumerate(groups):
        if not isinstance(group, WorkloadGroup):
            raise ValueError(f"stack item {index} is not a WorkloadGroup")
    if len(groups) == 1:
        return groups[0].matrix
    widths = [group.matrix.shape[1] for group in groups]
    if len(set(widths)) != 1:
        raise ValueError(f"stack needs groups over one domain, got column counts {widths}")
    return builders.vstack([group.matrix for group in groups])
