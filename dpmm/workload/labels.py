"""What each query of a workload group asks, one description per matrix row.

A query is described by a label and, attribute by attribute, by the part of it on that
attribute. A label lists the attributes a query restricts as comma-separated parts, in
domain order; totalled attributes are left out and the grand total is ``"total"``. A part
names a value by the attribute's label, else its bin (``income=[25000, 50000)``; bins are
left-closed, the last one also closed on the right, as :mod:`dpmm.data.encode` reads
them), else its integer code:

* one value: ``age=30``;
* a range of values: ``age=20..29`` (or the merged bin ``income=[0, 50000)``);
* a prefix: ``age<=30`` (or ``income<50000`` below a bin edge);
  a prefix sum: ``sum(income<50000)``;
* a row of a census table: a value or range as above, ``race in {white|black}``,
  ``race not in {…}``, or the factor's row (``race in race2[12]``); a group's labels
  start with its product's number (``product 3: sex=male``).

Per attribute, a query has the text of its part without the attribute's name (``30``,
``20..29``, ``[0, 50000)``, ``<=30``, ``in {white|black}``; a prefix sum's prefix,
``<50000``) and, when it restricts the attribute to one value, that value's code. An
attribute the query does not restrict has neither.

Descriptions come from the group's spec and the domain alone: nothing is densified. Each
factor's parts are built once, and the rows' descriptions are gathered from them in Arrow,
a run of rows at a time (:meth:`QueryParts.rows`).

Example:
    >>> from dpmm.domain import Domain
    >>> from dpmm.workload.config import from_config
    >>> domain = Domain.from_dict({"sex": {"size": 2, "labels": ["m", "f"]}, "age": 3})
    >>> group = from_config([{"kind": "prefix", "attribute": "age", "by": ["sex"]}], domain)[0]
    >>> query_labels(group, domain)
    ['sex=m,age<=0', 'sex=m,age<=1', 'sex=m,age<=2', 'sex=f,age<=0', 'sex=f,age<=1', 'sex=f,age<=2']
    >>> (rows,) = query_parts(group, domain).rows()
    >>> rows.texts["age"].to_pylist()[:3], rows.codes["sex"].to_pylist()[:4]
    (['<=0', '<=1', '<=2'], [0, 0, 0, 1])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpmm.domain import Attribute, Domain
from dpmm.errors import ArgumentError, DpmmError
from dpmm.workload.census import SF1_PRODUCTS, census_factors
from dpmm.workload.config import WorkloadGroup

__all__ = ["Factor", "QueryParts", "Rows", "query_labels", "query_parts"]

#: A census factor row is described by its values when it holds at most this many.
LISTED_VALUES = 6
#: Rows :meth:`QueryParts.rows` gathers at once, unless told otherwise.
ROWS_AT_ONCE = 2**20


@dataclass(frozen=True, eq=False)
class Factor:
    """One attribute's side of a Kronecker factor, one entry per row of the factor.

    ``parts`` are the label's parts (``age<=30``), ``texts`` the same without the
    attribute's name (``<=30``) and ``codes`` the value's code where a row is one value.
    A null part and text mark a row that does not restrict the attribute (a census row
    over all its values).
    """

    attribute: str
    parts: pa.StringArray
    texts: pa.StringArray
    codes: pa.Int64Array

    def __len__(self) -> int:
        return len(self.parts)


@dataclass(frozen=True, eq=False)
class Rows:
    """Consecutive queries' labels and, for each attribute they may restrict, their texts
    and value codes (null where a query does not restrict it)."""

    labels: pa.StringArray
    texts: dict[str, pa.Array]
    codes: dict[str, pa.Array]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True, eq=False)
class _Block:
    """Consecutive queries of a group: the rows of the Kronecker product of ``factors`` (on
    distinct attributes, the first slowest; none: the one total), each label after
    ``prefix``; or ``listed`` labels that say nothing per attribute."""

    factors: tuple[Factor, ...] = ()
    prefix: str = ""
    listed: pa.StringArray | None = None
    #: The block's queries are rows ``[first, first + count)`` of the product (all: None).
    first: int = 0
    count: int | None = None

    @property
    def full_size(self) -> int:
        if self.listed is not None:
            return len(self.listed)
        return math.prod(len(factor) for factor in self.factors)

    @property
    def size(self) -> int:
        return self.full_size - self.first if self.count is None else self.count

    def between(self, start: int, stop: int) -> _Block:
        """Queries ``[start, stop)`` of this block."""
        first = self.first + start
        return _Block(self.factors, self.prefix, self.listed, first, stop - start)

    def rows(self, start: int, stop: int) -> Rows:
        start, stop = start + self.first, stop + self.first
        if self.listed is not None:
            return Rows(self.listed[start:stop], {}, {})
        positions = np.arange(start, stop, dtype=np.int64)
        stride, picks = self.full_size, {}
        for factor in self.factors:
            stride //= len(factor)
            picks[factor.attribute] = pa.array(positions // stride % len(factor))
        parts = [factor.parts.take(picks[factor.attribute]) for factor in self.factors]
        return Rows(
            _joined_labels(parts, self.prefix, stop - start),
            {f.attribute: f.texts.take(picks[f.attribute]) for f in self.factors},
            {f.attribute: f.codes.take(picks[f.attribute]) for f in self.factors},
        )


def _joined_labels(parts: Sequence[pa.Array], prefix: str, count: int) -> pa.StringArray:
    """Each row's non-null parts joined by commas (``total`` when there are none), after
    ``prefix``."""
    if not parts:
        labels = pa.repeat(pa.scalar("total"), count)
    elif not any(part.null_count for part in parts):
        labels = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, ",")
    else:
        # Arrow's null_handling="skip" drops rows whose parts are all null: join each part
        # with its comma instead, and cut the last one.
        ended = [pc.binary_join_element_wise(part, ",", "") for part in parts]
        joined = pc.binary_join_element_wise(
            *ended, "", null_handling="replace", null_replacement=""
        )
        joined = pc.utf8_slice_codeunits(joined, 0, -1)
        labels = pc.if_else(pc.equal(joined, ""), "total", joined)
    return pc.binary_join_element_wise(prefix, labels, "") if prefix else labels


@dataclass(frozen=True, eq=False)
class QueryParts:
    """The descriptions of a group's queries, in row order (see the module docstring)."""

    blocks: tuple[_Block, ...]

    def __len__(self) -> int:
        return sum(block.size for block in self.blocks)

    @classmethod
    def listed(cls, labels: Sequence[str]) -> QueryParts:
        """Queries described by their labels alone (nothing per attribute)."""
        return cls((_Block(listed=pa.array([str(label) for label in labels], pa.string())),))

    def between(self, start: int, stop: int) -> QueryParts:
        """The descriptions of queries ``[start, stop)`` only (a part of a large group).

        Example:
            >>> parts = QueryParts.listed(["a", "b", "c", "d"])
            >>> parts.between(1, 3).labels()
            ['b', 'c']
        """
        blocks, offset = [], 0
        for block in self.blocks:
            lo, hi = max(start - offset, 0), min(stop - offset, block.size)
            if lo < hi:
                blocks.append(block.between(lo, hi))
            offset += block.size
        return QueryParts(tuple(blocks))

    def rows(self, limit: int = ROWS_AT_ONCE) -> Iterator[Rows]:
        """The descriptions in consecutive runs of at most ``limit`` queries, in row order."""
        for block in self.blocks:
            for start in range(0, block.size, limit):
                yield block.rows(start, min(start + limit, block.size))

    def labels(self) -> list[str]:
        """Every query's label, in row order."""
        return [label for rows in self.rows() for label in rows.labels.to_pylist()]


def _number(edge: float) -> str:
    """A bin edge as short text that still tells distinct edges apart."""
    if edge.is_integer() and abs(edge) < 1e15:
        return str(int(edge))
    return repr(edge)


def _value_texts(attribute: Attribute) -> list[str]:
    if attribute.labels is not None:
        return list(attribute.labels)
    if attribute.bins is not None:
        edges = [_number(edge) for edge in attribute.bins]
        top = attribute.size - 1
        return [f"[{edges[i]}, {edges[i + 1]}{']' if i == top else ')'}" for i in range(top + 1)]
    return [str(code) for code in range(attribute.size)]


def _factor(
    attribute: Attribute,
    texts: Sequence[str] | pa.Array,
    codes: np.ndarray | None = None,
    *,
    head: str = "{}=",
    tail: str = "",
) -> Factor:
    """The factor whose rows have ``texts``; each part is ``head`` (the name put in its
    ``{}``), the text and ``tail``. ``codes`` are the rows' value codes, -1 for none."""
    texts = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    parts = pc.binary_join_element_wise(head.format(attribute.name), texts, tail, "")
    if codes is None:
        codes = np.full(len(texts), -1, dtype=np.int64)
    return Factor(attribute.name, parts, texts, pa.array(codes, pa.int64(), mask=codes < 0))


def _identity(attribute: Attribute) -> Factor:
    return _factor(attribute, _value_texts(attribute), np.arange(attribute.size))


def _ranges(attribute: Attribute, lows: np.ndarray, highs: np.ndarray) -> Factor:
    """Ranges ``low..high`` of values, or their merged bins (left-closed, and closed on the
    right at the top edge)."""
    single = lows == highs
    codes = np.where(single, lows, -1)
    if attribute.bins is not None:
        edges = pa.array([_number(edge) for edge in attribute.bins], pa.string())
        right = pa.array(np.where(highs == attribute.size - 1, "]", ")"))
        texts = pc.binary_join_element_wise(
            "[", edges.take(lows), ", ", edges.take(highs + 1), right, ""
        )
        return _factor(attribute, texts, codes)
    values = pa.array(_value_texts(attribute), pa.string())
    low, high = values.take(lows), values.take(highs)
    texts = pc.if_else(pa.array(single), low, pc.binary_join_element_wise(low, high, ".."))
    return _factor(attribute, texts, codes)


def _prefix_texts(attribute: Attribute) -> list[str]:
    n = attribute.size
    if attribute.bins is None:
        return [f"<={text}" for text in _value_texts(attribute)]
    edges = [_number(edge) for edge in attribute.bins]
    # Bin i ends below edge i + 1, except the last, which holds its top edge.
    return [f"<{edges[i + 1]}" for i in range(n - 1)] + [f"<={edges[n]}"]


def _kind_factor(attribute: Attribute, factor: object) -> Factor | None:
    """The factor of one config factor: a kind name or ``{"ranges": [[low, high], ...]}``;
    None for a total (the attribute is omitted)."""
    if factor == "total":
        return None
    if factor == "identity":
        return _identity(attribute)
    if factor == "prefix":
        return _factor(attribute, _prefix_texts(attribute), head="{}")
    if factor == "prefix_sum":
        return _factor(attribute, _prefix_texts(attribute), head="sum({}", tail=")")
    if factor == "sum":
        return _factor(attribute, [f"sum({attribute.name})"], head="")
    if factor == "all_range":
        lows, highs = np.triu_indices(attribute.size)  # AllRange's order: by low, then high
        return _ranges(attribute, lows.astype(np.int64), highs.astype(np.int64))
    if isinstance(factor, Mapping) and "ranges" in factor:
        bounds = np.asarray(factor["ranges"], dtype=np.int64).reshape(-1, 2)
        return _ranges(attribute, bounds[:, 0], bounds[:, 1])
    raise ArgumentError(f"Workload factor {factor!r} on '{attribute.name}' has no labels")


def _block(factors: Sequence[Factor | None], prefix: str = "") -> _Block:
    return _Block(tuple(factor for factor in factors if factor is not None), prefix)


def _spread(domain: Domain, chosen: Mapping[str, object], by: Sequence[str] = ()) -> _Block:
    """The Kron with ``chosen`` factors, identities on ``by``, totals elsewhere."""
    factors: list[Factor | None] = []
    for attribute in domain.attrs:
        if attribute.name in chosen:
            factors.append(_kind_factor(attribute, chosen[attribute.name]))
        elif attribute.name in by:
            factors.append(_identity(attribute))
    return _block(factors)


def _one_d(kind: str, spec: Mapping[str, Any], domain: Domain) -> list[_Block]:
    if "attribute" not in spec:
        return [_spread(domain, {name: kind for name in domain.attributes})]
    factor: object = {"ranges": spec["intervals"]} if kind == "ranges" else kind
    return [_spread(domain, {spec["attribute"]: factor}, spec.get("by", ()))]


def _marginal_sets(spec: Mapping[str, Any], domain: Domain) -> list[Sequence[str]]:
    """The attribute sets in the order :func:`~dpmm.workload.builders.marginals` stacks them."""
    if "sets" in spec:
        return [sorted(names, key=domain.index) for names in spec["sets"]]
    scope = sorted(spec.get("attributes", domain.attributes), key=domain.index)
    return list(itertools.combinations(scope, int(spec["k"])))


def _marginals(sets: Sequence[Sequence[str]], domain: Domain) -> list[_Block]:
    identities = {name: _identity(domain[name]) for name in {n for s in sets for n in s}}
    return [_block([identities[name] for name in names]) for names in sets]


def _census_row(
    attribute: Attribute, factor: str, row: int, support: np.ndarray
) -> tuple[str, str] | None:
    """One row of a census factor as its part and text: a value, a range, a short list of
    values, or its name; None when it keeps every value."""
    n, name = attribute.size, attribute.name
    values = _value_texts(attribute)
    if support.size == n:
        return None
    if support.size and support[-1] - support[0] + 1 == support.size:
        ranged = _ranges(attribute, support[:1], support[-1:])
        return ranged.parts[0].as_py(), ranged.texts[0].as_py()
    if support.size <= LISTED_VALUES:
        text = f"in {{{'|'.join(values[v] for v in support.tolist())}}}"
    elif (outside := np.setdiff1d(np.arange(n), support)).size <= LISTED_VALUES:
        text = f"not in {{{'|'.join(values[v] for v in outside.tolist())}}}"
    else:
        text = f"in {factor}[{row}]"
    return f"{name} {text}", text


def _census_factor(attribute: Attribute, factor: str, factors: Mapping) -> Factor | None:
    if factor == "T":
        return None
    if factor == "I":
        return _identity(attribute)
    # Census factors are at most 103 × 115: reading one densely is cheap.
    dense = factors[attribute.name][factor].dense()
    supports = [np.flatnonzero(row) for row in dense]
    rows = [_census_row(attribute, factor, r, support) for r, support in enumerate(supports)]
    parts = [None if row is None else row[0] for row in rows]
    texts = [None if row is None else row[1] for row in rows]
    # race2 asks for cell 63 twice (as itself and as "all six flags"): name the repeat's row.
    seen: set[str | None] = set()
    for r, part in enumerate(parts):
        if part is not None and part in seen:
            parts[r], texts[r] = f"{part} ({factor}[{r}])", f"{texts[r]} ({factor}[{r}])"
        seen.add(parts[r])
    codes = np.array([s[0] if s.size == 1 else -1 for s in supports], dtype=np.int64)
    return Factor(
        attribute.name,
        pa.array(parts, pa.string()),
        pa.array(texts, pa.string()),
        pa.array(codes, pa.int64(), mask=codes < 0),
    )


def _census(domain: Domain) -> list[_Block]:
    factors = census_factors()
    described: dict[tuple[str, str], Factor | None] = {}
    blocks = []
    for index, product in enumerate(SF1_PRODUCTS):
        for attribute, factor in zip(domain.attrs, product, strict=True):
            key = (attribute.name, factor)
            if key not in described:
                described[key] = _census_factor(attribute, factor, factors)
        # Products repeat (P1 is listed five times): the product number keeps labels unique.
        chosen = [described[(a.name, f)] for a, f in zip(domain.attrs, product, strict=True)]
        blocks.append(_block(chosen, prefix=f"product {index}: "))
    return blocks


def query_parts(group: WorkloadGroup, domain: Domain) -> QueryParts:
    """The description of every row of ``group.matrix``, in row order (see the module
    docstring).

    Args:
        group: A group built by :func:`~dpmm.workload.config.from_config` over ``domain``.
        domain: The domain the group's matrix is over; supplies names, labels and bins.

    Raises:
        DpmmError: The group's spec does not describe its matrix (their row counts differ).
    """
    kind, spec = group.kind, group.spec
    if kind in ("identity", "total", "prefix", "all_range", "ranges", "prefix_sum", "sum"):
        blocks = _one_d(kind, spec, domain)
    elif kind == "marginal":
        blocks = _marginals([spec["attributes"]], domain)
    elif kind == "marginals":
        blocks = _marginals(_marginal_sets(spec, domain), domain)
    elif kind == "kron":
        blocks = [_spread(domain, spec["factors"])]
    elif kind == "census_sf1":
        blocks = _census(domain)
    else:
        return QueryParts.listed([f"query {i}" for i in range(group.matrix.shape[0])])
    parts = QueryParts(tuple(blocks))
    if len(parts) != group.matrix.shape[0]:
        raise DpmmError(
            f"Workload group '{group.name}' has {group.matrix.shape[0]} queries but its spec "
            f"describes {len(parts)}; was it built over another domain?"
        )
    return parts


def query_labels(group: WorkloadGroup, domain: Domain) -> list[str]:
    """One label per row of ``group.matrix``, in row order (format in the module docstring).

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
    return query_parts(group, domain).labels()
