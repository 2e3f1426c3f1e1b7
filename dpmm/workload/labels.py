"""Human-readable labels for the queries of a workload group, one per matrix row.

A label lists the attributes a query restricts as comma-separated parts, in
domain order; totalled attributes are left out and the grand total is
``"total"``. A part names a value by the attribute's label, else its bin
(``income=[25000, 50000)``; bins are left-closed, the last one also closed on
the right, as :mod:`dpmm.data.encode` reads them), else its integer code:

* one value: ``age=30``;
* a range of values: ``age=20..29`` (or the merged bin ``income=[0, 50000)``);
* a prefix: ``age<=30`` (or ``income<50000`` below a bin edge);
  a prefix sum: ``sum(income<50000)``.

Labels come from the group's spec and the domain alone: nothing is densified,
and building them costs a few string operations per row.

Example:
    >>> from dpmm.domain import Domain
    >>> from dpmm.workload.config import from_config
    >>> domain = Domain.from_dict({"sex": {"size": 2, "labels": ["m", "f"]}, "age": 3})
    >>> group = from_config([{"kind": "prefix", "attribute": "age", "by": ["sex"]}], domain)[0]
    >>> query_labels(group, domain)
    ['sex=m,age<=0', 'sex=m,age<=1', 'sex=m,age<=2', 'sex=f,age<=0', 'sex=f,age<=1', 'sex=f,age<=2']
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpmm.domain import Attribute, Domain
from dpmm.errors import ArgumentError, DpmmError
from dpmm.workload.census import SF1_PRODUCTS, census_factors
from dpmm.workload.config import WorkloadGroup

__all__ = ["query_labels"]

#: A census factor row is described by its values when it holds at most this many.
LISTED_VALUES = 6

#: Per-attribute parts of a Kronecker factor; None marks a total (the attribute is omitted).
Parts = list[str] | None


def _number(edge: float) -> str:
    """A bin edge as short text that still tells distinct edges apart."""
    if edge.is_integer() and abs(edge) < 1e15:
        return str(int(edge))
    return repr(edge)


def _value_texts(attribute: Attribute) -> list[str]:
    if attribute.labels is not None:
        return list(attribute.labels)
    if attribute.bins is not None:
        return _bin_texts(attribute, np.arange(attribute.size), np.arange(attribute.size))
    return [str(code) for code in range(attribute.size)]


def _bin_texts(attribute: Attribute, lows: np.ndarray, highs: np.ndarray) -> list[str]:
    """The merged bins ``low..high``: left-closed, and closed on the right at the top edge."""
    edges = [_number(edge) for edge in attribute.bins]
    top = attribute.size - 1
    return [
        f"[{edges[low]}, {edges[high + 1]}{']' if high == top else ')'}"
        for low, high in zip(lows.tolist(), highs.tolist(), strict=True)
    ]


def _identity_parts(attribute: Attribute) -> list[str]:
    return [f"{attribute.name}={text}" for text in _value_texts(attribute)]


def _range_parts(attribute: Attribute, lows: np.ndarray, highs: np.ndarray) -> list[str]:
    name = attribute.name
    if attribute.bins is not None:
        return [f"{name}={text}" for text in _bin_texts(attribute, lows, highs)]
    values = _value_texts(attribute)
    return [
        f"{name}={values[low]}" if low == high else f"{name}={values[low]}..{values[high]}"
        for low, high in zip(lows.tolist(), highs.tolist(), strict=True)
    ]


def _prefix_parts(attribute: Attribute) -> list[str]:
    name, n = attribute.name, attribute.size
    if attribute.bins is None:
        return [f"{name}<={text}" for text in _value_texts(attribute)]
    edges = [_number(edge) for edge in attribute.bins]
    # Bin i ends below edge i + 1, except the last, which holds its top edge.
    return [f"{name}<{edges[i + 1]}" for i in range(n - 1)] + [f"{name}<={edges[n]}"]


def _factor_parts(attribute: Attribute, factor: object) -> Parts:
    """The row parts of one config factor: a kind name or ``{"ranges": [[low, high], ...]}``."""
    n = attribute.size
    if factor == "total":
        return None
    if factor == "identity":
        return _identity_parts(attribute)
    if factor == "prefix":
        return _prefix_parts(attribute)
    if factor == "prefix_sum":
        return [f"sum({part})" for part in _prefix_parts(attribute)]
    if factor == "sum":
        return [f"sum({attribute.name})"]
    if factor == "all_range":
        lows, highs = np.triu_indices(n)  # AllRange's row order: by low end, then high end
        return _range_parts(attribute, lows, highs)
    if isinstance(factor, Mapping) and "ranges" in factor:
        bounds = np.asarray(factor["ranges"], dtype=np.int64).reshape(-1, 2)
        return _range_parts(attribute, bounds[:, 0], bounds[:, 1])
    raise ArgumentError(f"Workload factor {factor!r} on '{attribute.name}' has no labels")


def _combine(parts: Sequence[Parts]) -> list[str]:
    """Labels of the Kronecker product of per-attribute parts, first attribute slowest."""
    kept = [p for p in parts if p is not None]
    if not kept:
        return ["total"]
    if len(kept) == 1:
        return list(kept[0])
    return [",".join(row) for row in itertools.product(*kept)]


def _spread(domain: Domain, chosen: Mapping[str, object], by: Sequence[str] = ()) -> list[str]:
    """Labels of a Kron with ``chosen`` factors, identities on ``by``, totals elsewhere."""
    parts: list[Parts] = []
    for attribute in domain.attrs:
        if attribute.name in chosen:
            parts.append(_factor_parts(attribute, chosen[attribute.name]))
        elif attribute.name in by:
            parts.append(_identity_parts(attribute))
        else:
            parts.append(None)
    return _combine(parts)


def _one_d(kind: str, spec: Mapping[str, Any], domain: Domain) -> list[str]:
    if "attribute" not in spec:
        return _spread(domain, {name: kind for name in domain.attributes})
    factor: object = {"ranges": spec["intervals"]} if kind == "ranges" else kind
    return _spread(domain, {spec["attribute"]: factor}, spec.get("by", ()))


def _marginal_sets(spec: Mapping[str, Any], domain: Domain) -> list[Sequence[str]]:
    """The attribute sets in the order :func:`~dpmm.workload.builders.marginals` stacks them."""
    if "sets" in spec:
        return [sorted(names, key=domain.index) for names in spec["sets"]]
    scope = sorted(spec.get("attributes", domain.attributes), key=domain.index)
    return list(itertools.combinations(scope, int(spec["k"])))


def _marginals(sets: Sequence[Sequence[str]], domain: Domain) -> list[str]:
    identities = {name: _identity_parts(domain[name]) for name in {n for s in sets for n in s}}
    labels: list[str] = []
    for names in sets:
        labels.extend(_combine([identities[name] for name in names]))
    return labels


def _census_row(attribute: Attribute, factor: str, row: int, support: np.ndarray) -> str:
    """One row of a census factor: a value, a range, a short list of values, or its name."""
    n, name = attribute.size, attribute.name
    values = _value_texts(attribute)
    if support.size == n:
        return ""
    if support.size and support[-1] - support[0] + 1 == support.size:
        return _range_parts(attribute, support[:1], support[-1:])[0]
    if support.size <= LISTED_VALUES:
        return f"{name} in {{{'|'.join(values[v] for v in support.tolist())}}}"
    outside = np.setdiff1d(np.arange(n), support)
    if outside.size <= LISTED_VALUES:
        return f"{name} not in {{{'|'.join(values[v] for v in outside.tolist())}}}"
    return f"{name} in {factor}[{row}]"


def _census_parts(attribute: Attribute, factor: str, factors: Mapping) -> Parts:
    if factor == "T":
        return None
    if factor == "I":
        return _identity_parts(attribute)
    # Census factors are at most 103 × 115: reading one densely is cheap.
    dense = factors[attribute.name][factor].dense()
    parts = [_census_row(attribute, factor, r, np.flatnonzero(row)) for r, row in enumerate(dense)]
    # race2 asks for cell 63 twice (as itself and as "all six flags"): name the repeat's row.
    seen: set[str] = set()
    for r, part in enumerate(parts):
        if part in seen:
            parts[r] = f"{part} ({factor}[{r}])"
        seen.add(parts[r])
    return parts


def _census(domain: Domain) -> list[str]:
    factors = census_factors()
    described: dict[tuple[str, str], Parts] = {}
    labels: list[str] = []
    for index, product in enumerate(SF1_PRODUCTS):
        parts: list[list[str]] = []
        for attribute, factor in zip(domain.attrs, product, strict=True):
            key = (attribute.name, factor)
            if key not in described:
                described[key] = _census_parts(attribute, factor, factors)
            if described[key] is not None:
                parts.append(described[key])
        # Products repeat (P1 is listed five times): the product number keeps labels unique.
        for row in itertools.product(*parts):
            text = ",".join(part for part in row if part)
            labels.append(f"product {index}: {text or 'total'}")
    return labels


def query_labels(group: WorkloadGroup, domain: Domain) -> list[str]:
    """One label per row of ``group.matrix``, in row order (format in the module docstring).

    Args:
        group: A group built by :func:`~dpmm.workload.config.from_config` over ``domain``.
        domain: The domain the group's matrix is over; supplies names, labels and bins.

    Raises:
        DpmmError: The group's spec does not describe its matrix (their row counts differ).

    Example:
        >>> from dpmm.domain import Domain
        >>> from dpmm.workload.config import from_config
        >>> domain = Domain.from_dict({"sex": 2, "age": {"size": 3, "bins": [0, 18, 65, 120]}})
        >>> groups = from_config(
        ...     [{"kind": "ranges", "attribute": "age", "intervals": [[0, 1], [2, 2]]},
        ...      {"kind": "total"}], domain)
        >>> [query_labels(group, domain) for group in groups]
        [['age=[0, 65)', 'age=[65, 120]'], ['total']]
    """
    kind, spec = group.kind, group.spec
    if kind in ("identity", "total", "prefix", "all_range", "ranges", "prefix_sum", "sum"):
        labels = _one_d(kind, spec, domain)
    elif kind == "marginal":
        labels = _marginals([spec["attributes"]], domain)
    elif kind == "marginals":
        labels = _marginals(_marginal_sets(spec, domain), domain)
    elif kind == "kron":
        labels = _spread(domain, spec["factors"])
    elif kind == "census_sf1":
        labels = _census(domain)
    else:
        labels = [f"query {i}" for i in range(group.matrix.shape[0])]
    if len(labels) != group.matrix.shape[0]:
        raise DpmmError(
            f"Workload group '{group.name}' has {group.matrix.shape[0]} queries but its spec "
            f"describes {len(labels)}; was it built over another domain?"
        )
    return labels
