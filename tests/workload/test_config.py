"""Each config kind against the builder it should produce; each bad entry against its message."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from functools import reduce

import numpy as np
import pytest
import yaml

from dpmm.domain import Domain
from dpmm.errors import ConfigError
from dpmm.linalg import Weighted
from dpmm.workload import (
    WorkloadGroup,
    all_range,
    census_domain,
    census_sf1,
    from_config,
    identity,
    kron,
    marginal,
    marginals,
    prefix,
    ranges,
    stack,
    total,
)

DOMAIN = Domain.from_dict({"sex": 2, "race": 3, "age": 5})
I2, I3, I5 = np.eye(2), np.eye(3), np.eye(5)
T2, T3, T5 = np.ones((1, 2)), np.ones((1, 3)), np.ones((1, 5))
P5 = np.tril(np.ones((5, 5)))


def build(entry: dict, domain: Domain = DOMAIN) -> WorkloadGroup:
    (group,) = from_config([entry], domain)
    return group


def dense(*factors: np.ndarray) -> np.ndarray:
    return reduce(np.kron, factors)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"kind": "identity"}, np.eye(30)),
        ({"kind": "total"}, np.ones((1, 30))),
        ({"kind": "identity", "attribute": "race"}, dense(T2, I3, T5)),
        ({"kind": "identity", "attribute": "race", "by": ["age"]}, dense(T2, I3, I5)),
        ({"kind": "total", "attribute": "age"}, np.ones((1, 30))),
        ({"kind": "total", "attribute": "age", "by": ["sex"]}, dense(I2, T3, T5)),
        ({"kind": "prefix", "attribute": "age"}, dense(T2, T3, P5)),
        ({"kind": "prefix", "attribute": "age", "by": ["sex"]}, dense(I2, T3, P5)),
        ({"kind": "prefix", "attribute": "age", "by": ["race", "sex"]}, dense(I2, I3, P5)),
        ({"kind": "all_range", "attribute": "race"}, dense(T2, all_range(3).dense(), T5)),
        (
            {"kind": "ranges", "attribute": "age", "intervals": [[1, 3], [4, 4]], "by": ["sex"]},
            dense(I2, T3, np.array([[0, 1, 1, 1, 0], [0, 0, 0, 0, 1]])),
        ),
    ],
)
def test_one_d_kinds_match_hand_built_products(entry, expected):
    group = build(entry)
    assert group.kind == entry["kind"]
    np.testing.assert_array_equal(group.matrix.dense(), expected)


def test_one_d_kinds_match_their_builders():
    cases = [
        ({"kind": "prefix", "attribute": "age", "by": ["sex"]}, [identity(2), total(3), prefix(5)]),
        ({"kind": "all_range", "attribute": "age"}, [total(2), total(3), all_range(5)]),
        (
            {"kind": "ranges", "attribute": "race", "intervals": [[0, 1], [2, 2]]},
            [total(2), ranges(3, [[0, 1], [2, 2]]), total(5)],
        ),
    ]
    for entry, factors in cases:
        np.testing.assert_array_equal(build(entry).matrix.dense(), kron(factors).dense())


def test_marginal_kind_matches_the_builder():
    group = build({"kind": "marginal", "attributes": ["age", "sex"]})
    np.testing.assert_array_equal(group.matrix.dense(), marginal(DOMAIN, ["sex", "age"]).dense())
    np.testing.assert_array_equal(group.matrix.dense(), dense(I2, T3, I5))
    assert group.spec["attributes"] == ["sex", "age"]


@pytest.mark.parametrize(
    ("entry", "kwargs"),
    [
        ({"kind": "marginals", "k": 1}, {"k": 1}),
        ({"kind": "marginals", "k": 2}, {"k": 2}),
        ({"kind": "marginals", "k": 3}, {"k": 3}),
        (
            {"kind": "marginals", "k": 2, "attributes": ["age", "sex"]},
            {"k": 2, "attributes": ["sex", "age"]},
        ),
        (
            {"kind": "marginals", "sets": [["age"], ["race", "sex"]]},
            {"sets": [["age"], ["sex", "race"]]},
        ),
    ],
)
def test_marginals_kind_matches_the_builder(entry, kwargs):
    got = build(entry).matrix
    np.testing.assert_array_equal(got.dense(), marginals(DOMAIN, **kwargs).dense())


def test_marginals_k2_is_the_three_two_way_tables():
    got = build({"kind": "marginals", "k": 2}).matrix.dense()
    expected = np.vstack([dense(I2, I3, T5), dense(I2, T3, I5), dense(T2, I3, I5)])
    np.testing.assert_array_equal(got, expected)


def test_kron_kind_matches_the_builder():
    entry = {
        "kind": "kron",
        "factors": {"age": "prefix", "sex": "identity", "race": {"ranges": [[0, 1]]}},
    }
    group = build(entry)
    expected = kron([identity(2), ranges(3, [[0, 1]]), prefix(5)])
    np.testing.assert_array_equal(group.matrix.dense(), expected.dense())
    # The spec lists the factors in domain order.
    assert list(group.spec["factors"]) == ["sex", "race", "age"]


def test_kron_kind_totals_unnamed_attributes():
    group = build({"kind": "kron", "factors": {"race": "all_range"}})
    np.testing.assert_array_equal(group.matrix.dense(), dense(T2, all_range(3).dense(), T5))
    group = build({"kind": "kron", "factors": {"age": "total"}})
    np.testing.assert_array_equal(group.matrix.dense(), np.ones((1, 30)))


def test_census_sf1_kind_is_the_census_workload():
    group = build({"kind": "census_sf1", "weight": 2}, census_domain())
    expected = census_sf1()
    assert group.matrix.shape == expected.shape == (4151, 500_480)
    assert group.matrix.gram().trace() == pytest.approx(4 * expected.gram().trace())
    x = np.random.default_rng(3).random(500_480)
    np.testing.assert_allclose(group.matrix @ x, 2 * (expected @ x))


def test_weight_wraps_the_group():
    group = build({"kind": "prefix", "attribute": "age", "weight": 0.5})
    assert isinstance(group.matrix, Weighted)
    np.testing.assert_array_equal(group.matrix.dense(), 0.5 * dense(T2, T3, P5))
    assert group.spec["weight"] == 0.5
    assert not isinstance(build({"kind": "total", "weight": 1}).matrix, Weighted)


def test_names_default_to_kind_and_index_and_specs_are_normalized():
    section = [
        {"kind": "total"},
        {"name": "age cdf by sex", "kind": "prefix", "attribute": "age", "by": ["sex"]},
        {"kind": "marginals", "sets": [["age", "race"]], "weight": 3},
    ]
    groups = from_config(section, DOMAIN)
    assert [group.name for group in groups] == ["total-0", "age cdf by sex", "marginals-2"]
    assert groups[0].spec == {"name": "total-0", "kind": "total", "weight": 1.0}
    assert groups[1].spec == {
        "name": "age cdf by sex",
        "kind": "prefix",
        "weight": 1.0,
        "attribute": "age",
        "by": ["sex"],
    }
    assert groups[2].spec["sets"] == [["race", "age"]]
    json.dumps([group.spec for group in groups])  # JSON-ready


def test_specs_read_back_to_the_same_groups():
    section = [
        {"kind": "identity", "attribute": "race", "by": ["age"]},
        {"kind": "ranges", "attribute": "age", "intervals": [(0, 2)], "weight": 2},
        {"kind": "marginals", "k": 1, "attributes": ["age", "sex"]},
        {"kind": "kron", "factors": {"age": {"ranges": [[1, 1]]}, "sex": "prefix"}},
        {"kind": "marginal", "attributes": ["race"]},
    ]
    first = from_config(section, DOMAIN)
    again = from_config([group.spec for group in first], DOMAIN)
    assert [group.spec for group in again] == [group.spec for group in first]
    for old, new in zip(first, again, strict=True):
        np.testing.assert_array_equal(old.matrix.dense(), new.matrix.dense())


def test_a_yaml_section():
    text = """
    workload:
      - kind: prefix
        attribute: age
        by: [sex]
      - name: race by sex
        kind: marginal
        attributes: [sex, race]
        weight: 2
    """
    groups = from_config(yaml.safe_load(text)["workload"], DOMAIN)
    assert [group.matrix.shape for group in groups] == [(10, 30), (6, 30)]
    assert all(group.matrix.shape[1] == DOMAIN.size for group in groups)


def test_stack():
    groups = from_config([{"kind": "total"}, {"kind": "prefix", "attribute": "age"}], DOMAIN)
    expected = np.vstack([np.ones((1, 30)), dense(T2, T3, P5)])
    np.testing.assert_array_equal(stack(groups).dense(), expected)
    assert stack(groups[:1]) is groups[0].matrix
    with pytest.raises(ValueError, match="stack needs a non-empty list of workload groups"):
        stack([])
    with pytest.raises(ValueError, match="stack item 1 is not a WorkloadGroup"):
        stack([groups[0], groups[1].matrix])
    other = from_config([{"kind": "total"}], Domain.from_dict({"age": 4}))[0]
    with pytest.raises(ValueError, match="stack needs groups over one domain"):
        stack([groups[0], other])


KINDS = (
    "identity, total, prefix, all_range, ranges, prefix_sum, sum, marginal, marginals, kron, "
    "census_sf1"
)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (None, "workload: must be a non-empty list of workload groups, got None"),
        ([], "workload: must be a non-empty list of workload groups, got []"),
        ({"kind": "total"}, "workload: must be a non-empty list of workload groups"),
        ("total", "workload: must be a non-empty list of workload groups, got 'total'"),
        ([{"kind": "total"}, "prefix"], "workload[1]: must be a mapping with a 'kind' key"),
        ([{"name": "x"}], f"workload[0].kind: is required (expected one of: {KINDS})"),
        (
            [{"kind": "total"}, {"kind": "x"}],
            f"workload[1].kind: unknown workload kind 'x' (expected one of: {KINDS})",
        ),
        ([{"kind": 3}], "workload[0].kind: unknown workload kind 3"),
        (
            [{"kind": "prefix", "attribute": "age", "intervals": [[0, 1]]}],
            "workload[0].intervals: unknown key for kind 'prefix' "
            "(allowed: name, kind, weight, target, attribute, by)",
        ),
        ([{"kind": "census_sf1", "k": 1}], "workload[0].k: unknown key for kind 'census_sf1'"),
        ([{"kind": "total", "name": ""}], "workload[0].name: must be a non-empty string"),
        ([{"kind": "total", "name": 5}], "workload[0].name: must be a non-empty string, got 5"),
        (
            [{"kind": "total", "name": "a"}, {"kind": "identity", "name": "a"}],
            "workload[1].name: duplicate group name 'a' (already used by workload[0])",
        ),
        (
            [{"kind": "identity", "name": "total-1"}, {"kind": "total"}],
            "workload[1].name: duplicate group name 'total-1' (already used by workload[0])",
        ),
        ([{"kind": "total", "weight": 0}], "workload[0].weight: must be a positive finite number"),
        ([{"kind": "total", "weight": -2}], "workload[0].weight: must be a positive finite number"),
        ([{"kind": "total", "weight": ".5"}], "workload[0].weight: must be a positive number"),
        ([{"kind": "total", "weight": True}], "workload[0].weight: must be a positive number"),
        (
            [{"kind": "total", "weight": float("nan")}],
            "workload[0].weight: must be a positive finite number",
        ),
        ([{"kind": "prefix"}], "workload[0].attribute: is required for kind 'prefix'"),
        ([{"kind": "all_range"}], "workload[0].attribute: is required for kind 'all_range'"),
        (
            [{"kind": "total"}, {"kind": "total"}, {"kind": "prefix", "attribute": "agee"}],
            "workload[2].attribute: unknown attribute 'agee' (the domain has: sex, race, age)",
        ),
        (
            [{"kind": "prefix", "attribute": ["age"]}],
            "workload[0].attribute: must be an attribute name, got ['age']",
        ),
        (
            [{"kind": "prefix", "attribute": "age", "by": "sex"}],
            "workload[0].by: must be a non-empty list of attribute names, got 'sex'",
        ),
        (
            [{"kind": "prefix", "attribute": "age", "by": []}],
            "workload[0].by: must be a non-empty list of attribute names",
        ),
        (
            [{"kind": "prefix", "attribute": "age", "by": ["sex", "rac"]}],
            "workload[0].by[1]: unknown attribute 'rac' (the domain has: sex, race, age)",
        ),
        (
            [{"kind": "prefix", "attribute": "age", "by": ["sex", "sex"]}],
            "workload[0].by[1]: lists attribute 'sex' twice",
        ),
        (
            [{"kind": "prefix", "attribute": "age", "by": ["age"]}],
            "workload[0].by: contains 'age', the group's own attribute",
        ),
        ([{"kind": "total", "by": ["sex"]}], "workload[0].by: needs 'attribute'"),
        (
            [{"kind": "ranges", "attribute": "age"}],
            "workload[0].intervals: is required for kind 'ranges'",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": []}],
            "workload[0].intervals: must be a non-empty list of [low, high] pairs",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": [[0, 1], [0, 5]]}],
            "workload[0].intervals[1]: interval [0, 5] is outside age's values 0..4",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": [[-1, 2]]}],
            "workload[0].intervals[0]: interval [-1, 2] is outside age's values 0..4",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": [[3, 1]]}],
            "workload[0].intervals[0]: interval [3, 1] has low > high",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": [[0.5, 2]]}],
            "workload[0].intervals[0]: must be a pair of integers [low, high], got [0.5, 2]",
        ),
        (
            [{"kind": "ranges", "attribute": "age", "intervals": [[1, 2, 3]]}],
            "workload[0].intervals[0]: must be a pair of integers [low, high]",
        ),
        ([{"kind": "marginal"}], "workload[0].attributes: is required for kind 'marginal'"),
        (
            [{"kind": "marginal", "attributes": []}],
            "workload[0].attributes: must be a non-empty list of attribute names, got []",
        ),
        (
            [{"kind": "marginal", "attributes": ["sex", "agee"]}],
            "workload[0].attributes[1]: unknown attribute 'agee'",
        ),
        (
            [{"kind": "marginals"}],
            "workload[0]: kind 'marginals' needs exactly one of 'k' and 'sets'",
        ),
        (
            [{"kind": "marginals", "k": 1, "sets": [["sex"]]}],
            "workload[0]: kind 'marginals' needs exactly one of 'k' and 'sets'",
        ),
        (
            [{"kind": "marginals", "k": 0}],
            "workload[0].k: must be an integer from 1 to 3 (the number of attributes), got 0",
        ),
        ([{"kind": "marginals", "k": 4}], "workload[0].k: must be an integer from 1 to 3"),
        ([{"kind": "marginals", "k": "2"}], "workload[0].k: must be an integer from 1 to 3"),
        ([{"kind": "marginals", "k": True}], "workload[0].k: must be an integer from 1 to 3"),
        (
            [{"kind": "marginals", "k": 2, "attributes": ["age"]}],
            "workload[0].k: must be an integer from 1 to 1 (the number of attributes), got 2",
        ),
        (
            [{"kind": "marginals", "k": 1, "attributes": []}],
            "workload[0].attributes: must be a non-empty list of attribute names",
        ),
        (
            [{"kind": "marginals", "sets": []}],
            "workload[0].sets: must be a non-empty list of attribute lists, got []",
        ),
        (
            [{"kind": "marginals", "sets": [["sex"], []]}],
            "workload[0].sets[1]: must be a non-empty list of attribute names",
        ),
        (
            [{"kind": "marginals", "sets": [["sex"], ["age", "rac"]]}],
            "workload[0].sets[1][1]: unknown attribute 'rac'",
        ),
        (
            [{"kind": "marginals", "sets": [["sex", "age"], ["age", "sex"]]}],
            "workload[0].sets[1]: repeats workload[0].sets[0]",
        ),
        (
            [{"kind": "marginals", "sets": [["sex", "age"]], "attributes": ["sex", "race"]}],
            "workload[0].sets[0]: uses 'age', which is not in workload[0].attributes",
        ),
        ([{"kind": "kron"}], "workload[0].factors: is required for kind 'kron'"),
        (
            [{"kind": "kron", "factors": {}}],
            "workload[0].factors: must be a non-empty mapping of attribute to factor",
        ),
        (
            [{"kind": "kron", "factors": ["age"]}],
            "workload[0].factors: must be a non-empty mapping of attribute to factor",
        ),
        (
            [{"kind": "kron", "factors": {"agee": "prefix"}}],
            "workload[0].factors.agee: unknown attribute 'agee' (the domain has: sex, race, age)",
        ),
        (
            [{"kind": "kron", "factors": {"age": "prefx"}}],
            "workload[0].factors.age: unknown factor 'prefx' (expected one of: identity, total, "
            "prefix, all_range, {ranges: [[low, high], ...]})",
        ),
        (
            [{"kind": "kron", "factors": {"age": {"range": [[0, 1]]}}}],
            "workload[0].factors.age: is not a factor, got {'range': [[0, 1]]}",
        ),
        (
            [{"kind": "kron", "factors": {"age": 3}}],
            "workload[0].factors.age: is not a factor, got 3",
        ),
        (
            [{"kind": "kron", "factors": {"race": {"ranges": [[0, 3]]}}}],
            "workload[0].factors.race.ranges[0]: interval [0, 3] is outside race's values 0..2",
        ),
        (
            [{"kind": "census_sf1"}],
            "workload[0].kind: census_sf1 needs the census domain (sex 2, hispanic 2, race 64, "
            "relationship 17, age 115), but the domain is (sex 2, race 3, age 5)",
        ),
    ],
)
def test_bad_configs_name_the_key_path(section, message):
    with pytest.raises(ConfigError) as caught:
        from_config(section, DOMAIN)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_census_sf1_needs_the_census_sizes_not_only_names():
    census = census_domain()
    sizes = dict(zip(census.attributes, census.shape, strict=True))
    smaller = Domain.from_dict({**sizes, "age": 5})
    with pytest.raises(ConfigError, match=r"but the domain is \(.*age 5\)"):
        from_config([{"kind": "census_sf1"}], smaller)


def test_from_config_needs_a_domain():
    with pytest.raises(ConfigError, match="workload: needs a Domain to build on, got dict"):
        from_config([{"kind": "total"}], {"age": 5})


INCOME = Domain.from_dict(
    {
        "sex": 2,
        "income": {"size": 4, "bins": [0, 10, 20, 40, 80]},
        "age": {"size": 2, "bins": [-1, 0, 1]},
    }
)


def test_prefix_sum_weights_buckets_by_their_truncated_upper_bounds():
    group = build(
        {
            "kind": "prefix_sum",
            "attribute": "income",
            "by": ["sex"],
            "truncation": {"threshold": 30},
            "valuation": "upper",
        },
        INCOME,
    )
    weights = np.array([10.0, 20.0, 30.0, 30.0])
    factor = np.tril(np.ones((4, 4))) * weights
    np.testing.assert_allclose(group.matrix.dense(), dense(I2, factor, np.ones((1, 2))))
    assert group.spec["weights"] == weights.tolist()
    assert group.spec["truncation"] == {"threshold": 30.0}
    x = np.arange(16.0)
    np.testing.assert_allclose(group.matrix @ x, group.matrix.dense() @ x)


def test_a_record_is_counted_at_its_buckets_midpoint_unless_told_upper():
    entry = {"kind": "prefix_sum", "attribute": "income", "truncation": {"threshold": 50}}
    assert build(entry, INCOME).spec["weights"] == [5.0, 15.0, 30.0, 50.0]
    assert build(entry, INCOME).spec["valuation"] == "midpoint"
    upper = build({**entry, "valuation": "upper"}, INCOME)
    assert upper.spec["weights"] == [10.0, 20.0, 40.0, 50.0]
    with pytest.raises(ConfigError, match=r"workload\[0\]\.valuation: must be one of midpoint"):
        build({**entry, "valuation": "lower"}, INCOME)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "prefix_sum"}, "workload[0].attribute: is required for kind 'prefix_sum'"),
        ({"kind": "prefix_sum", "attribute": "sex"}, "attribute 'sex' has no numeric bins"),
        ({"kind": "prefix_sum", "attribute": "age"}, "a sum adds non-negative values"),
        (
            {"kind": "prefix_sum", "attribute": "income", "truncation": {"threshold": 0}},
            "workload[0].truncation.threshold: must be a positive number, got 0",
        ),
        (
            {"kind": "prefix_sum", "attribute": "income", "truncation": {"method": "svt"}},
            "workload[0].truncation.start: must be an integer from 5 to below the top bucket "
            "weight 60, got 50000",
        ),
        (
            {"kind": "prefix_sum", "attribute": "income", "truncation": {"method": "median"}},
            "workload[0].truncation.method: unknown method 'median'",
        ),
        (
            {"kind": "prefix_sum", "attribute": "income", "truncation": {"theta": 5}},
            "workload[0].truncation.theta: unknown key (allowed: threshold, or method)",
        ),
        (
            {"kind": "prefix_sum", "attribute": "income", "by": ["income"]},
            "workload[0].by: contains 'income', the group's own attribute",
        ),
    ],
)
def test_prefix_sum_bad_entries(entry, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(entry, INCOME)


def test_prefix_sum_with_a_private_threshold_is_untruncated_until_theta_is_drawn():
    from dpmm.workload.prefix_sum import private_truncation

    truncation = {"method": "recursive", "share": "1/4", "floor": 15, "shift": 1}
    entry = {"kind": "prefix_sum", "attribute": "income", "truncation": truncation}
    group = build({**entry, "valuation": "upper"}, INCOME)
    weights = np.array([10.0, 20.0, 40.0, 80.0])
    factor = np.tril(np.ones((4, 4))) * weights
    np.testing.assert_allclose(
        group.matrix.dense(), dense(np.ones((1, 2)), factor, np.ones((1, 2)))
    )
    assert group.spec["truncation"] == {
        "method": "recursive",
        "share": "1/4",
        "floor": 15,
        "shift": 1.0,
    }
    choice = private_truncation(group.spec)
    assert choice.method == "recursive" and choice.share == Fraction(1, 4) and choice.floor == 15
    public = build(
        {"kind": "prefix_sum", "attribute": "income", "truncation": {"threshold": 30}}, INCOME
    )
    assert private_truncation(public.spec) is None


@pytest.mark.parametrize(
    "entry, path",
    [
        ({"kind": "all_range", "attribute": "income"}, "workload[0]"),
        ({"kind": "kron", "factors": {"income": "all_range"}}, "workload[0].factors.income"),
    ],
)
def test_all_ranges_beyond_the_limit_are_refused_before_anything_is_built(entry, path):
    """32,768 values: 5.4·10⁸ intervals, which took the machine's memory before the plan
    could say anything; a prefix over as many values stays a workload."""
    wide = Domain.from_dict({"income": 32_768, "sex": 2})
    with pytest.raises(ConfigError) as caught:
        from_config([entry], wide)
    assert str(caught.value) == (
        f"{path}: asks for all 536,887,296 ranges over the 32,768 values of 'income'; dpmm "
        "builds all ranges over at most 16,384 values: use a coarser attribute, or list the "
        "ranges needed (kind 'ranges')"
    )
    (group,) = from_config([{"kind": "prefix", "attribute": "income"}], wide)
    assert group.matrix.shape == (32_768, 65_536)
