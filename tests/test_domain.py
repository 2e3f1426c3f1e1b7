import json

import pytest

from dpmm.domain import Attribute, Domain
from dpmm.errors import DomainError


def test_domain_from_private_pgm_mapping_keeps_order_and_sizes():
    domain = Domain.from_dict({"age": 85, "sex": 2, "race": 5})
    assert domain.attributes == ("age", "sex", "race")
    assert domain.shape == (85, 2, 5)
    assert domain.size == 850
    assert domain.index("race") == 2
    assert "sex" in domain and "income" not in domain


def test_size_is_exact_beyond_int64():
    domain = Domain.from_dict({f"a{i}": 100 for i in range(12)})
    assert domain.size == 100**12  # 10^24 > 2^63


def test_project_keeps_domain_order():
    domain = Domain.from_dict({"a": 2, "b": 3, "c": 4})
    assert domain.project(["c", "a"]).attributes == ("a", "c")
    assert domain.project(["c", "a"]).shape == (2, 4)


def test_labels_and_bins_round_trip(tmp_path):
    spec = [
        {"name": "sex", "size": 2, "labels": ["male", "female"]},
        {"name": "income", "size": 3, "bins": [0, 10, 20, 50]},
    ]
    domain = Domain.from_dict(spec)
    assert domain["sex"].labels == ("male", "female")
    assert domain["income"].bins == (0.0, 10.0, 20.0, 50.0)
    path = tmp_path / "domain.json"
    path.write_text(json.dumps(domain.to_dict()))
    assert Domain.from_json(path) == domain


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"age": 0}, "Attribute 'age' must have a positive integer size, got 0"),
        ({"age": -3}, "positive integer size"),
        ({"age": 2.5}, "positive integer size"),
        ({"age": True}, "positive integer size"),
        ({}, "at least one attribute"),
        ([{"name": "a", "size": 2}, {"name": "a", "size": 3}], "duplicate attribute 'a'"),
        ({"sex": {"size": 2, "labels": ["m"]}}, "has 1 labels for size 2"),
        ({"sex": {"size": 2, "labels": ["m", "m"]}}, "duplicate labels"),
        ({"x": {"size": 2, "bins": [0, 1]}}, "needs 3 bin edges"),
        ({"x": {"size": 2, "bins": [0, 2, 1]}}, "finite and increasing"),
        ({"x": {"size": 2, "colour": "red"}}, "unknown key 'colour'"),
        ([{"size": 2}], "needs 'name' and 'size'"),
    ],
)
def test_bad_domains_are_one_clear_sentence(spec, message):
    with pytest.raises(DomainError, match=message):
        Domain.from_dict(spec)


def test_unknown_attribute_lists_the_known_ones():
    domain = Domain.from_dict({"sex": 2, "age": 5})
    with pytest.raises(DomainError, match=r"Unknown attribute 'agee' \(the domain has: sex, age\)"):
        domain.index("agee")


def test_domain_file_errors_name_the_file(tmp_path):
    with pytest.raises(DomainError, match="does not exist"):
        Domain.from_json(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(DomainError, match=r"broken\.json' is not valid JSON"):
        Domain.from_json(broken)


def test_attribute_is_frozen():
    attribute = Attribute("age", 5)
    with pytest.raises(AttributeError):
        attribute.size = 6  # type: ignore[misc]
