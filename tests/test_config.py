"""Release configs: the examples load and match the schema; each bad config names file and key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dpmm.config import (
    DEFAULT_TIME_BUDGET,
    REQUIRED_KEYS,
    TOP_LEVEL_KEYS,
    ReleaseConfig,
    load_config,
)
from dpmm.domain import Domain
from dpmm.errors import ConfigError
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import STRATEGY_METHODS
from dpmm.workload import census_domain
from dpmm.workload.config import KINDS

from .conftest import EXAMPLES, ROOT

SCHEMA = json.loads((ROOT / "config" / "schema.json").read_text())

VALID = {
    "name": "tiny",
    "description": "A small release.",
    "domain": {"sex": 2, "age": 10},
    "privacy": {"epsilon": 1},
    "workload": [{"name": "cdf", "kind": "prefix", "attribute": "age", "by": ["sex"]}],
    "strategy": {"method": "hierarchical", "time_budget": 90},
}


def write(folder: Path, document: object, name: str = "release.yaml") -> Path:
    path = folder / name
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def with_changes(**changes: object) -> dict:
    document = json.loads(json.dumps(VALID))
    for key, value in changes.items():
        if value is None:
            document.pop(key)
        else:
            document[key] = value
    return document


def test_there_are_examples() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"adult-marginals.yaml", "adult-3way.yaml", "census-sf1.yaml", "ranges-1d.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_loads(path: Path) -> None:
    config = load_config(path)
    assert config.name == path.stem
    assert config.workload
    assert config.strategy_method in STRATEGY_METHODS
    assert config.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    for group in config.workload:
        assert group.matrix.shape[1] == config.domain.size


def test_adult_examples_use_the_shared_adult_domain() -> None:
    domain = load_config(ROOT / "config" / "examples" / "adult-marginals.yaml").domain
    copied = json.loads((ROOT / "config" / "examples" / "adult-domain.json").read_text())
    assert dict(zip(domain.attributes, domain.shape, strict=True)) == copied
    assert len(domain) == 14


def test_census_example_has_the_census_domain() -> None:
    config = load_config(ROOT / "config" / "examples" / "census-sf1.yaml")
    census = census_domain()
    assert (config.domain.attributes, config.domain.shape) == (census.attributes, census.shape)
    assert config.privacy == PureDP(1)
    assert config.strategy_method == "auto"


def test_ranges_example_is_zcdp() -> None:
    config = load_config(ROOT / "config" / "examples" / "ranges-1d.yaml")
    assert config.privacy == ZCDP("1/2")
    assert [group.kind for group in config.workload] == ["prefix", "all_range"]


# -- the schema ------------------------------------------------------------------------------


def test_schema_lists_exactly_the_keys_the_loader_accepts() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(SCHEMA["properties"]) == set(TOP_LEVEL_KEYS)
    assert set(SCHEMA["required"]) == set(REQUIRED_KEYS)
    assert SCHEMA["additionalProperties"] is False
    group = SCHEMA["$defs"]["group"]["properties"]
    assert tuple(group["kind"]["enum"]) == KINDS
    assert SCHEMA["properties"]["strategy"]["properties"]["method"]["enum"] == list(
        STRATEGY_METHODS
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_matches_the_schema(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    assert set(document) <= set(SCHEMA["properties"])
    assert set(SCHEMA["required"]) <= set(document)
    group_keys = set(SCHEMA["$defs"]["group"]["properties"])
    for group in document["workload"]:
        assert set(group) <= group_keys
    try:
        import jsonschema
    except ImportError:  # the structural checks above still ran
        return
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)


def test_schema_rejects_what_the_loader_rejects() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert validator.is_valid(VALID)
    assert not validator.is_valid(with_changes(color="blue"))
    assert not validator.is_valid(with_changes(privacy=None))
    assert not validator.is_valid(with_changes(privacy={"epsilon": -1}))
    assert not validator.is_valid(with_changes(domain={"age": 0}))
    assert not validator.is_valid(with_changes(workload=[{"kind": "histogram"}]))
    assert not validator.is_valid(with_changes(strategy={"method": "magic"}))


def test_readme_example_loads(tmp_path: Path) -> None:
    readme = (ROOT / "config" / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.DOTALL)
    complete = next(block for block in blocks if block.startswith("name:"))
    (tmp_path / "adult-domain.json").write_bytes(
        (ROOT / "config" / "examples" / "adult-domain.json").read_bytes()
    )
    config = load_config(write(tmp_path, complete))
    assert [group.name for group in config.workload] == ["one-way", "age-cdf-by-sex"]
    workload = next(block for block in blocks if block.startswith("workload:"))
    document = {
        **yaml.safe_load(complete),
        "domain": {"sex": 2, "race": 3, "age": 10, "income": 4},
        **yaml.safe_load(workload),
    }
    config = load_config(write(tmp_path, document, "workload.yaml"))
    assert len(config.workload) == 6


# -- what a loaded config holds --------------------------------------------------------------


def test_loaded_config_holds_every_section(tmp_path: Path) -> None:
    document = with_changes(
        data={"path": "people.parquet"},
        ledger={"path": "ledger.sqlite", "dataset": "people"},
        release={"root": "out", "reconstruction": "nnls"},
        cluster={"address": "tcp://10.0.0.5:8786"},
    )
    path = write(tmp_path, document)
    config = load_config(path)
    assert isinstance(config, ReleaseConfig)
    assert config.name == "tiny"
    assert config.description == "A small release."
    assert config.domain == Domain.from_dict({"sex": 2, "age": 10})
    assert config.privacy == PureDP(1)
    assert config.strategy_method == "hierarchical"
    assert config.strategy_time_budget == 90.0
    assert config.raw == document
    assert config.path == path
    assert config.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert config.data.location == str(tmp_path / "people.parquet")
    assert (config.ledger.path, config.ledger.dataset) == (tmp_path / "ledger.sqlite", "people")
    assert (config.release.root, config.release.reconstruction) == (tmp_path / "out", "nnls")
    assert config.cluster.address == "tcp://10.0.0.5:8786" and config.cluster.cluster_class is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"  # type: ignore[misc]


def test_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, with_changes(description=None, strategy=None)))
    assert config.description == ""
    assert config.strategy_method == "auto"
    assert config.strategy_time_budget == DEFAULT_TIME_BUDGET
    assert config.data is None and config.ledger.path is None
    assert config.cluster.address is None and config.cluster.cluster_class is None
    assert config.ledger.dataset == config.name
    assert config.release.root == tmp_path / "releases"


@pytest.mark.parametrize(
    ("domain", "shape"),
    [
        ({"sex": 2, "age": 10}, (2, 10)),
        (
            {
                "attributes": [
                    {"name": "sex", "size": 2, "labels": ["m", "f"]},
                    {"name": "age", "size": 10},
                ]
            },
            (2, 10),
        ),
        ({"file": "domains/people.json"}, (2, 10)),
        ({"file": 3, "age": 10}, (3, 10)),  # 'file' is an attribute here, not a path
    ],
)
def test_domain_forms(tmp_path: Path, domain: dict, shape: tuple) -> None:
    (tmp_path / "domains").mkdir()
    (tmp_path / "domains" / "people.json").write_text(json.dumps({"sex": 2, "age": 10}))
    workload = [{"kind": "prefix", "attribute": "age"}]
    config = load_config(write(tmp_path, with_changes(domain=domain, workload=workload)))
    assert config.domain.shape == shape


def test_domain_file_is_relative_to_the_config_not_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "domain.json").write_text(json.dumps({"sex": 2, "age": 10}))
    path = write(tmp_path / "configs", with_changes(domain={"file": "../shared/domain.json"}))
    monkeypatch.chdir(tmp_path / "shared")
    assert load_config(path).domain.shape == (2, 10)


def test_fractional_budget_is_exact(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, with_changes(privacy={"rho": "1/3"})))
    assert config.privacy == ZCDP("1/3")


# -- bad configs -----------------------------------------------------------------------------

BAD = {
    "unknown top-level key": (with_changes(colour="blue"), "colour"),
    "missing privacy": (with_changes(privacy=None), "privacy"),
    "missing workload": (with_changes(workload=None), "workload"),
    "missing name": (with_changes(name=None), "name"),
    "negative epsilon": (with_changes(privacy={"epsilon": -1}), "privacy.epsilon"),
    "zero epsilon": (with_changes(privacy={"epsilon": 0}), "privacy.epsilon"),
    "non-numeric epsilon": (with_changes(privacy={"epsilon": "lots"}), "privacy.epsilon"),
    "infinite rho": (with_changes(privacy={"rho": float("inf")}), "privacy.rho"),
    "both budgets": (with_changes(privacy={"epsilon": 1, "rho": 1}), "privacy"),
    "unknown privacy kind": (
        with_changes(privacy={"kind": "approx", "epsilon": 1}),
        "privacy.kind",
    ),
    "unknown attribute": (
        with_changes(workload=[{"kind": "total"}, {"kind": "prefix", "attribute": "agee"}]),
        "workload[1].attribute",
    ),
    "zero attribute size": (with_changes(domain={"sex": 2, "age": 0}), "domain.age"),
    "negative attribute size": (
        with_changes(domain={"attributes": [{"name": "age", "size": -3}]}),
        "domain.attributes[0].size",
    ),
    "duplicate attribute": (
        with_changes(
            domain={"attributes": [{"name": "age", "size": 3}, {"name": "age", "size": 3}]}
        ),
        "domain",
    ),
    "unknown attribute key": (
        with_changes(domain={"attributes": [{"name": "age", "size": 3, "unit": "years"}]}),
        "domain.attributes[0].unit",
    ),
    "unknown workload kind": (with_changes(workload=[{"kind": "histogram"}]), "workload[0].kind"),
    "empty workload": (with_changes(workload=[]), "workload"),
    "unknown strategy method": (with_changes(strategy={"method": "magic"}), "strategy.method"),
    "unknown strategy key": (with_changes(strategy={"method": "auto", "seed": 1}), "strategy.seed"),
    "zero time budget": (with_changes(strategy={"time_budget": 0}), "strategy.time_budget"),
    "time budget as text": (
        with_changes(strategy={"time_budget": "1 hour"}),
        "strategy.time_budget",
    ),
    "bad name": (with_changes(name="my release"), "name"),
    "hidden name": (with_changes(name=".."), "name"),
    "numeric name": (with_changes(name=2030), "name"),
    "description not text": (with_changes(description=["a"]), "description"),
    "data not a mapping": (with_changes(data="people.parquet"), "data"),
    "data without path": (with_changes(data={"format": "csv"}), "data.path"),
    "data unknown key": (with_changes(data={"path": "x.csv", "sep": ";"}), "data.sep"),
    "bad rows policy": (with_changes(data={"path": "x.csv", "bad_rows": "skip"}), "data.bad_rows"),
    "release unknown key": (with_changes(release={"folder": "x"}), "release.folder"),
    "reconstruction": (with_changes(release={"reconstruction": "svd"}), "release.reconstruction"),
    "histogram choice": (with_changes(release={"histogram": True}), "release.histogram"),
    "confidence of 1": (with_changes(release={"confidence": 1}), "release.confidence"),
    "confidence as text": (with_changes(release={"confidence": "95%"}), "release.confidence"),
    "ledger url": (with_changes(ledger={"path": "s3://b/l.db"}), "ledger.path"),
    "ledger dataset": (with_changes(ledger={"dataset": ""}), "ledger.dataset"),
    "cluster both": (
        with_changes(cluster={"address": "tcp://h:1", "n_workers": 2}),
        "cluster",
    ),
    "cluster address": (with_changes(cluster={"address": "h:8786"}), "cluster.address"),
    "cluster class": (with_changes(cluster={"class": "SLURM Cluster"}), "cluster.class"),
    "cluster workers": (with_changes(cluster={"n_workers": 0}), "cluster.n_workers"),
    "cluster processes": (with_changes(cluster={"processes": "yes"}), "cluster.processes"),
    "cluster options": (with_changes(cluster={"options": {"cores": 2}}), "cluster.options"),
    "missing domain file": (with_changes(domain={"file": "nowhere.json"}), "domain.file"),
    "labels not a list": (
        with_changes(domain={"attributes": [{"name": "sex", "size": 2, "labels": "mf"}]}),
        "domain.attributes[0]: Attribute 'sex' labels must be a list",
    ),
    "bins not numbers": (
        with_changes(domain={"attributes": [{"name": "age", "size": 1, "bins": ["a", "b"]}]}),
        "domain.attributes[0]: Attribute 'age' bins must be a list of numbers",
    ),
    "epsilon beyond the range": (
        with_changes(privacy={"epsilon": "1e999999999"}),
        "privacy.epsilon must be between 1e-100 and 1e100",
    ),
    "privacy kind not a name": (
        with_changes(privacy={"kind": ["zcdp"], "rho": 1}),
        "privacy.kind: unknown privacy kind",
    ),
    "impossible date": ("name: tiny\ndescription: 2021-02-30\n", "unreadable YAML value"),
    "malformed YAML": ("name: tiny\nprivacy: {epsilon: 1\nworkload: []\n", "malformed YAML"),
    "tab-indented YAML": ("name: tiny\ndomain:\n\tage: 3\n", "malformed YAML"),
    "repeated key": (
        "name: tiny\ndomain: {age: 3}\nprivacy: {epsilon: 1}\nprivacy: {epsilon: 100}\n"
        "workload: [{kind: total}]\n",
        "duplicate key 'privacy'",
    ),
    "repeated nested key": (
        "name: tiny\ndomain: {age: 3}\nprivacy: {epsilon: 1}\n"
        "workload: [{kind: total, kind: identity}]\n",
        "duplicate key 'kind'",
    ),
    "empty file": ("", "empty"),
    "top level is a list": ("- name: tiny\n", "top level"),
}


@pytest.mark.parametrize(("document", "key"), BAD.values(), ids=BAD.keys())
def test_bad_config_names_file_and_key(tmp_path: Path, document: object, key: str) -> None:
    path = write(tmp_path, document)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert key in message
    assert "\n" not in message


def test_yaml_merge_keys_may_override(tmp_path: Path) -> None:
    text = (
        "name: tiny\ndomain: {sex: 2, age: 10}\nprivacy: {epsilon: 1}\nworkload:\n"
        "  - &cdf {name: cdf, kind: prefix, attribute: age}\n"
        "  - {<<: *cdf, name: cdf-by-sex, by: [sex]}\n"
    )
    config = load_config(write(tmp_path, text))
    assert [group.name for group in config.workload] == ["cdf", "cdf-by-sex"]
    assert config.workload[1].spec["by"] == ["sex"]


def test_malformed_yaml_gives_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: tiny\ndomain: {age: 3}\nprivacy: [epsilon: 1\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+"):
        load_config(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'[{"name": "age", "size": 2, "bins": ["a", "b", "c"]}]', "bins must be a list of"),
        (b'[{"name": "age", "size": 2, "labels": 5}]', "labels must be a list, got 5"),
        (b'\xff\xfe{"age": 2}', "is not UTF-8 text (byte 0)"),
        (None, "is a folder, not a file"),
    ],
    ids=["bins", "labels", "encoding", "folder"],
)
def test_bad_domain_file_is_a_config_error(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    target = tmp_path / "domain.json"
    if content is None:
        target.mkdir()
    else:
        target.write_bytes(content)
    path = write(tmp_path, with_changes(domain={"file": "domain.json"}))
    with pytest.raises(ConfigError, match=r"domain\.file: ") as caught:
        load_config(path)
    assert problem in str(caught.value)


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"absent\.yaml: the config file does not exist"):
        load_config(path)


def test_a_folder_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="folder"):
        load_config(tmp_path)


def test_epsilon_message_reads_as_documented(tmp_path: Path) -> None:
    path = write(tmp_path, with_changes(privacy={"epsilon": -1}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: privacy.epsilon must be a positive finite number, got -1"


def test_a_huge_epsilon_is_quoted_in_a_line_not_in_full(tmp_path: Path) -> None:
    path = write(tmp_path, with_changes(privacy={"epsilon": "9" * 5000 + "/1" + "0" * 5000}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "privacy.epsilon must be a positive finite number, got '999" in message
    assert len(message) < len(str(path)) + 150


# -- private truncation thresholds and person-level bounding ---------------------------------

INCOME_DOMAIN = {
    "attributes": [
        {"name": "site", "size": 2},
        {"name": "income", "size": 4, "bins": [0, 100, 200, 400, 800]},
    ]
}


def _sums(truncation: object, privacy: object = None, **more: object) -> dict:
    group = {"name": "sums", "kind": "prefix_sum", "attribute": "income", "truncation": truncation}
    group["valuation"] = "upper"  # seed 003's buckets, whose upper edges these tests use
    return with_changes(
        domain=INCOME_DOMAIN,
        privacy=privacy or {"epsilon": 1},
        workload=[group],
        strategy={"method": "auto"},
        **more,
    )


def test_a_private_threshold_splits_the_budget_exactly(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, _sums({"method": "svt", "share": "1/10", "start": 100})))
    ((index, choice),) = config.private_thresholds
    assert index == 0 and choice.method == "svt" and choice.share == Fraction(1, 10)
    assert config.measurement_privacy == PureDP("9/10")
    assert config.threshold_privacy(choice.share) == PureDP("1/10")
    # Until θ is drawn the group is untruncated: the top bucket weight bounds a record.
    assert config.workload[0].spec["weights"] == [100.0, 200.0, 400.0, 800.0]


def test_the_defaults_are_seed_003s(tmp_path: Path) -> None:
    from dpmm.sums import thresholds

    domain = {"attributes": [{"name": "income", "size": 2, "bins": [0, 50_000, 100_000]}]}
    document = with_changes(
        domain=domain,
        workload=[{"kind": "prefix_sum", "attribute": "income", "truncation": {"method": "svt"}}],
    )
    ((_, svt),) = load_config(write(tmp_path, document)).private_thresholds
    assert (svt.share, svt.ratio, svt.growth, svt.start) == (
        Fraction(1, 10),
        thresholds.SVT_RATIO,
        thresholds.SVT_GROWTH,
        thresholds.SVT_START,
    )
    document["workload"][0]["truncation"] = {"method": "recursive"}
    ((_, recursive),) = load_config(write(tmp_path, document)).private_thresholds
    assert (recursive.floor, recursive.shift) == (
        thresholds.RECURSIVE_FLOOR,
        thresholds.RECURSIVE_SHIFT,
    )


def test_a_public_threshold_spends_the_whole_budget_on_the_measurement(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, _sums({"threshold": 300})))
    assert config.private_thresholds == () and config.measurement_privacy == PureDP(1)


SUMS = "workload[0].truncation"
BAD_THRESHOLDS = {
    "unknown method": ({"method": "median"}, f"{SUMS}.method: unknown method 'median'"),
    "share of one": ({"method": "svt", "share": 1, "start": 100}, f"{SUMS}.share: must be below 1"),
    "negative share": ({"method": "svt", "share": -0.1, "start": 100}, f"{SUMS}.share"),
    "share not a number": ({"method": "svt", "share": "some", "start": 100}, f"{SUMS}.share"),
    "ratio of one": ({"method": "svt", "ratio": 1, "start": 100}, f"{SUMS}.ratio"),
    "growth of one": ({"method": "svt", "growth": 1, "start": 100}, f"{SUMS}.growth"),
    "start at the top": ({"method": "svt", "start": 800}, f"{SUMS}.start: must be an integer"),
    "start below every bucket": ({"method": "svt", "start": 50}, f"{SUMS}.start"),
    "start not an integer": ({"method": "svt", "start": 150.5}, f"{SUMS}.start"),
    "floor at the top": ({"method": "recursive", "floor": 900}, f"{SUMS}.floor"),
    "shift not finite": (
        {"method": "recursive", "floor": 100, "shift": float("nan")},
        f"{SUMS}.shift",
    ),
    "svt key on recursive": (
        {"method": "recursive", "floor": 100, "start": 100},
        f"{SUMS}.start: unknown key for method recursive",
    ),
    "threshold beside a method": (
        {"method": "svt", "start": 100, "threshold": 300},
        f"{SUMS}.threshold: unknown key for method svt",
    ),
}


@pytest.mark.parametrize(("truncation", "message"), BAD_THRESHOLDS.values(), ids=BAD_THRESHOLDS)
def test_a_bad_private_threshold_names_its_key(tmp_path: Path, truncation, message) -> None:
    path = write(tmp_path, _sums(truncation))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_private_thresholds_need_pure_epsilon(tmp_path: Path) -> None:
    path = write(tmp_path, _sums({"method": "svt", "start": 100}, privacy={"rho": 1}))
    with pytest.raises(ConfigError, match=re.escape(f"{SUMS}.method: a threshold chosen")):
        load_config(path)


def test_the_shares_must_leave_budget_for_the_measurement(tmp_path: Path) -> None:
    document = _sums({"method": "svt", "share": "1/2", "start": 100})
    second = {
        **document["workload"][0],
        "name": "again",
        "truncation": {"method": "recursive", "share": "1/2", "floor": 100},
    }
    document["workload"].append(second)
    with pytest.raises(ConfigError, match=re.escape("workload[1].truncation.share: the private")):
        load_config(write(tmp_path, document))


def test_the_schema_takes_private_thresholds_and_person(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    good = _sums({"method": "svt", "share": "1/10", "ratio": 0.998, "start": 100})
    good["data"] = {"path": "x.parquet", "person": "zper"}
    validator.validate(good)
    validator.validate(_sums({"method": "recursive", "share": 0.25, "floor": 100}))
    for bad in (
        {"method": "svt", "floor": 100},
        {"method": "median"},
        {"threshold": 1, "share": 1},
    ):
        assert not validator.is_valid(_sums(bad)), bad


def test_data_person_is_read(tmp_path: Path) -> None:
    document = _sums({"threshold": 300}, data={"path": "x.parquet", "person": " zper "})
    assert load_config(write(tmp_path, document)).data.person == "zper"
    assert (
        load_config(
            write(tmp_path, _sums({"threshold": 300}, data={"path": "x.parquet"}))
        ).data.person
        is None
    )


@pytest.mark.parametrize(
    ("person", "message"),
    [
        ("", "data.person: must be the name of the column"),
        (["zper"], "data.person: must be the name of the column"),
        ("income", "data.person: column 'income' holds attribute 'income'"),
    ],
)
def test_a_bad_person_column_names_the_key(tmp_path: Path, person, message) -> None:
    path = write(tmp_path, _sums({"threshold": 300}, data={"path": "x.parquet", "person": person}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_data_columns_naming_no_attribute_is_refused_by_the_config(tmp_path: Path) -> None:
    """Found when the config is read (by the plan, before any ledger entry), not by the
    reader after the budget is reserved."""
    data = {"path": "x.parquet", "columns": {"incme": "salary"}}
    path = write(tmp_path, _sums({"threshold": 300}, data=data))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: data.columns: 'incme' is not an attribute")
