"""Query labels: one per row, unique in a group, and each describing exactly its dense row."""

from __future__ import annotations

import re
import time
from functools import reduce

import numpy as np
import pytest

from dpmm.domain import Domain
from dpmm.errors import DpmmError
from dpmm.workload import census_domain, from_config
from dpmm.workload.config import WorkloadGroup
from dpmm.workload.labels import query_labels, query_parts

DOMAIN = Domain.from_dict(
    [
        {"name": "sex", "size": 2, "labels": ["male", "female"]},
        {"name": "income", "size": 3, "bins": [0, 25000, 50000, 100000]},
        {"name": "age", "size": 4},
        {"name": "flag", "size": 1},
    ]
)

ENTRIES = [
    {"kind": "identity"},
    {"kind": "identity", "attribute": "age"},
    {"kind": "identity", "attribute": "income", "by": ["sex"]},
    {"kind": "total"},
    {"kind": "total", "attribute": "age"},
    {"kind": "total", "attribute": "age", "by": ["sex", "income"]},
    {"kind": "prefix", "attribute": "age"},
    {"kind": "prefix", "attribute": "income", "by": ["sex"]},
    {"kind": "prefix", "attribute": "sex", "by": ["age"], "weight": 3},
    {"kind": "all_range", "attribute": "age"},
    {"kind": "all_range", "attribute": "income", "by": ["sex", "age"]},
    {"kind": "all_range", "attribute": "sex"},
    {"kind": "ranges", "attribute": "age", "intervals": [[0, 2], [1, 1], [3, 3], [0, 3]]},
    {"kind": "ranges", "attribute": "income", "intervals": [[0, 1], [2, 2], [1, 2]], "by": ["sex"]},
    {"kind": "ranges", "attribute": "sex", "intervals": [[0, 1], [1, 1]], "by": ["age"]},
    {"kind": "marginal", "attributes": ["age", "sex"]},
    {"kind": "marginal", "attributes": ["income"]},
    {"kind": "marginals", "k": 1},
    {"kind": "marginals", "k": 2, "weight": 0.5},
    {"kind": "marginals", "k": 2, "attributes": ["sex", "age", "income"]},
    {"kind": "marginals", "sets": [["age"], ["income", "sex"], ["sex", "income", "age"]]},
    {"kind": "kron", "factors": {"age": "prefix", "sex": "identity"}},
    {"kind": "kron", "factors": {"income": {"ranges": [[0, 0], [0, 2]]}, "age": "all_range"}},
    {"kind": "kron", "factors": {"sex": "total", "income": "prefix", "age": "identity"}},
]


def _groups(domain: Domain = DOMAIN) -> list[WorkloadGroup]:
    return from_config(ENTRIES, domain)


# -- an independent reader of labels: each part back to the set of codes it selects ----------


def _codes_of(domain: Domain, name: str, op: str, text: str) -> set[int]:
    attribute = domain[name]
    n = attribute.size
    if attribute.bins is not None:
        edges = attribute.bins
        if op == "=":
            match = re.fullmatch(r"\[(\S+), (\S+)([)\]])", text)
            assert match, text
            low, high = float(match[1]), float(match[2])
            closed = match[3] == "]"
            assert closed == (high == edges[-1]), text  # only the top bin is closed
            return {i for i in range(n) if edges[i] >= low and edges[i + 1] <= high}
        bound = float(text)
        if op == "<=":
            assert bound == edges[-1], text  # only the last prefix reaches the top edge
        return {i for i in range(n) if edges[i + 1] <= bound}
    values = list(attribute.labels) if attribute.labels else [str(i) for i in range(n)]
    if op == "<=":
        return set(range(values.index(text) + 1))
    if ".." in text:
        low, high = text.split("..")
        assert values.index(low) < values.index(high), text
        return set(range(values.index(low), values.index(high) + 1))
    if text.startswith("{"):  # census: "race in {white|black}"
        return {values.index(v) for v in text[1:-1].split("|")}
    return {values.index(text)}


def _expected_row(domain: Domain, label: str) -> np.ndarray | None:
    """The 0/1 row a label describes (None for a label naming a factor row it can't read)."""
    label = label.split(": ", 1)[-1]
    if label == "total":
        return np.ones(domain.size)
    names = "|".join(map(re.escape, domain.attributes))
    parts = re.split(rf",(?=(?:{names})(?:=|<| in | not in ))", label)
    selected: dict[str, set[int]] = {}
    for part in parts:
        match = re.fullmatch(rf"({names})( not in |<=|<|=| in )(.+)", part)
        assert match, f"unreadable part {part!r} of {label!r}"
        name, op, text = match[1], match[2].strip(), match[3]
        assert name not in selected, f"{name} appears twice in {label!r}"
        if re.fullmatch(r"\w+\[\d+\]( \(\w+\[\d+\]\))?", text):
            return None
        text = re.sub(r" \(\w+\[\d+\]\)$", "", text)  # a repeated census row's name
        if op == "not in":
            codes = set(range(domain[name].size)) - _codes_of(domain, name, "=", text)
        else:
            codes = _codes_of(domain, name, op if op != "in" else "=", text)
        assert codes, part
        selected[name] = codes
    vectors = []
    for attribute in domain.attrs:
        vector = np.zeros(attribute.size)
        vector[sorted(selected.get(attribute.name, range(attribute.size)))] = 1.0
        vectors.append(vector)
    return reduce(np.kron, vectors)


@pytest.mark.parametrize("index", range(len(ENTRIES)), ids=lambda i: ENTRIES[i]["kind"])
def test_each_label_describes_its_dense_row(index: int) -> None:
    group = _groups()[index]
    labels = query_labels(group, DOMAIN)
    dense = group.matrix.dense()
    assert len(labels) == dense.shape[0]
    assert len(set(labels)) == len(labels)
    weight = group.spec["weight"]
    for label, row in zip(labels, dense, strict=True):
        np.testing.assert_array_equal(weight * _expected_row(DOMAIN, label), row, err_msg=label)


def test_label_texts() -> None:
    groups = {group.name: group for group in _groups()}
    assert query_labels(groups["total-3"], DOMAIN) == ["total"]
    assert query_labels(groups["total-4"], DOMAIN) == ["total"]
    assert query_labels(groups["prefix-7"], DOMAIN)[:3] == [
        "sex=male,income<25000",
        "sex=male,income<50000",
        "sex=male,income<=100000",
    ]
    assert query_labels(groups["ranges-12"], DOMAIN) == ["age=0..2", "age=1", "age=3", "age=0..3"]
    assert query_labels(groups["ranges-13"], DOMAIN)[:3] == [
        "sex=male,income=[0, 50000)",
        "sex=male,income=[50000, 100000]",
        "sex=male,income=[25000, 100000]",
    ]
    assert query_labels(groups["marginal-15"], DOMAIN)[:2] == ["sex=male,age=0", "sex=male,age=1"]
    assert query_labels(groups["prefix-8"], DOMAIN)[:2] == ["sex<=male,age=0", "sex<=male,age=1"]


def test_non_integer_bin_edges_stay_distinct() -> None:
    domain = Domain.from_dict({"x": {"size": 3, "bins": [0.1, 0.15, 0.2, 1e20]}})
    (group,) = from_config([{"kind": "identity"}], domain)
    assert query_labels(group, domain) == ["x=[0.1, 0.15)", "x=[0.15, 0.2)", "x=[0.2, 1e+20]"]


def test_census_labels_are_unique_and_match_sampled_rows() -> None:
    domain = census_domain()
    (group,) = from_config([{"kind": "census_sf1"}], domain)
    labels = query_labels(group, domain)
    assert len(labels) == group.matrix.shape[0] == 4151
    assert len(set(labels)) == len(labels)
    assert labels[0] == "product 0: total"
    rng = np.random.default_rng(7)
    # Rows of W are too costly to read one by one; two random integer data vectors tell
    # any wrong row apart (answers are exact integers in float64).
    data = rng.integers(0, 1000, size=(domain.size, 2)).astype(np.float64)
    answers = group.matrix @ data
    checked = 0
    for row in rng.choice(len(labels), size=200, replace=False):
        expected = _expected_row(domain, labels[row])
        if expected is not None:
            np.testing.assert_array_equal(answers[row], expected @ data, err_msg=labels[row])
            checked += 1
    assert checked >= 150


def test_spec_that_does_not_match_the_matrix_is_an_error() -> None:
    (group,) = from_config([{"kind": "identity", "attribute": "age"}], DOMAIN)
    other = Domain.from_dict({"sex": 2, "income": 3, "age": 5, "flag": 1})
    with pytest.raises(DpmmError, match="4 queries but its spec describes 5"):
        query_labels(group, other)


def test_a_million_labels_in_seconds() -> None:
    domain = Domain.from_dict({"a": 100, "b": 100, "c": {"size": 100, "bins": list(range(101))}})
    (group,) = from_config([{"kind": "identity"}], domain)
    start = time.perf_counter()
    labels = query_labels(group, domain)
    elapsed = time.perf_counter() - start
    assert len(labels) == 10**6
    assert labels[123456] == "a=12,b=34,c=[56, 57)"
    assert elapsed < 10.0


def _parts_of(domain: Domain, label: str) -> dict[str, tuple[str, str]]:
    """Each attribute a label restricts: its operator and text, as the label shows them."""
    label = label.split(": ", 1)[-1]
    if label == "total":
        return {}
    names = "|".join(map(re.escape, domain.attributes))
    found = {}
    for part in re.split(rf",(?=(?:sum\()?(?:{names})(?:=|<| in | not in ))", label):
        part = part.removeprefix("sum(").removesuffix(")") if part.startswith("sum(") else part
        match = re.fullmatch(rf"({names})(=|<=|<| in | not in )(.+)", part)
        assert match, f"unreadable part {part!r} of {label!r}"
        found[match[1]] = (match[2], match[3])
    return found


def _expected_column(domain: Domain, name: str, op: str, text: str) -> tuple[str, int | None]:
    """The text and code an attribute's columns hold for a part ``name{op}{text}``."""
    if op != "=":
        return (f"{op.strip()} {text}" if op.startswith(" ") else f"{op}{text}"), None
    codes = _codes_of(domain, name, "=", re.sub(r" \(\w+\[\d+\]\)$", "", text))
    return text, (min(codes) if len(codes) == 1 else None)


def _check_parts(group: WorkloadGroup, domain: Domain) -> int:
    """Every row's per-attribute texts and codes are what its label says; returns the rows."""
    names = domain.attributes
    labels, columns = [], {name: [] for name in names}
    for rows in query_parts(group, domain).rows(limit=7):  # runs cut blocks anywhere
        labels += rows.labels.to_pylist()
        for name in names:
            if name in rows.texts:
                texts, codes = rows.texts[name].to_pylist(), rows.codes[name].to_pylist()
                pairs = zip(texts, codes, strict=True)
                columns[name] += list(pairs)
            else:
                columns[name] += [(None, None)] * len(rows)
    assert labels == query_labels(group, domain)
    for row, label in enumerate(labels):
        restricted = _parts_of(domain, label)
        for name in names:
            expected = (None, None)
            if name in restricted:
                expected = _expected_column(domain, name, *restricted[name])
            assert columns[name][row] == expected, (label, name)
    return len(labels)


@pytest.mark.parametrize("index", range(len(ENTRIES)), ids=lambda i: ENTRIES[i]["kind"])
def test_each_attribute_column_is_the_labels_part_and_code(index: int) -> None:
    assert _check_parts(_groups()[index], DOMAIN) == _groups()[index].matrix.shape[0]


def test_census_attribute_columns_are_the_labels_parts_and_codes() -> None:
    domain = census_domain()
    (group,) = from_config([{"kind": "census_sf1"}], domain)
    assert _check_parts(group, domain) == 4151


def test_a_group_of_another_kind_is_numbered_and_restricts_nothing() -> None:
    group = WorkloadGroup("custom", "custom", _groups()[0].matrix, {})
    (rows,) = query_parts(group, DOMAIN).rows()
    assert rows.labels.to_pylist()[:2] == ["query 0", "query 1"]
    assert rows.texts == {} and rows.codes == {}
