"""``privacy: {epsilon: least}``: the plan derives the least budget meeting the targets, the
release spends exactly it (its manifest says so), and a cap the targets exceed is refused
before the ledger is touched.

Each release runs through ``dpmm release`` (the pipeline in process, as the default plan
contract sweep runs it; the slow test runs the Prefect flow itself)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dpmm import cli_release
from dpmm.cli import main
from dpmm.config import load_config
from dpmm.errors import ConfigError
from dpmm.pipeline import run_release
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import KINDS

#: The age CDFs within ±20 % of a published 300 at 95 %, and the pairs' RMSE at most 3.
BODY = """name: least
domain: {{sex: 2, age: 16}}
privacy: {privacy}
workload:
  - {{name: cdf, kind: prefix, attribute: age, by: [sex],
     target: {{half_width: 0.2, confidence: 0.95, relative_to: 300}}}}
  - {{name: pairs, kind: marginals, k: 2, target: {{rmse: 3}}}}
  - {{name: people, kind: total}}
strategy: {{method: hierarchical}}
data: {{path: people.parquet}}
ledger: {{path: budget.db, dataset: people}}
release: {{root: releases, reconstruction: least_squares}}
"""
#: What the ledger grants: far more than any budget here derives.
GRANTED = Fraction(50)


def _release_in_process(config_path: Path, from_measurements: str | None) -> Path:
    """What the release flow runs, called directly (no Prefect engine, no Dask cluster)."""
    assert from_measurements is None
    return run_release(load_config(config_path)).path


def _setup(folder: Path, privacy: str, kind: str = "pure") -> Path:
    """A config, its input (synthetic people) and a ledger granting :data:`GRANTED`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(23)
    people = {"sex": rng.integers(0, 2, 2000), "age": rng.integers(0, 16, 2000)}
    pq.write_table(pa.table(people), folder / "people.parquet")
    path = folder / "least.yaml"
    path.write_text(BODY.format(privacy=privacy))
    with Ledger.init(folder / "budget.db") as ledger:
        ledger.grant("people", KINDS[kind].budget_type(GRANTED))
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _dataset(path: Path, capsys) -> dict:
    status, out, _ = _run(["ledger", "show", str(path.parent / "budget.db"), "--json"], capsys)
    assert status == 0
    (dataset,) = json.loads(out)["datasets"]
    return dataset


@pytest.mark.parametrize(
    ("privacy", "kind"),
    [("{epsilon: least, at_most: 5}", "pure"), ("{kind: zcdp, rho: least}", "zcdp")],
)
def test_a_release_spends_exactly_the_least_budget_its_plan_derived(
    tmp_path: Path, capsys, monkeypatch, privacy: str, kind: str
) -> None:
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    path = _setup(tmp_path, privacy, kind)
    status, out, err = _run(["plan", str(path), "--json"], capsys)
    assert status == 0, err
    planned = json.loads(out)
    parameter = KINDS[kind].parameter
    assert planned["budget_derived_from_targets"] is True
    assert planned["budget"] == planned["privacy"] == planned["targets"]["least_budget"]
    assert all(group["met"] for group in planned["targets"]["groups"])
    assert planned["targets"]["binding_group"] in ("cdf", "pairs")
    spent = planned["budget"][parameter]
    assert Fraction(spent) < GRANTED

    text = _run(["plan", str(path)], capsys)[1]
    assert f"the release spends exactly {KINDS[kind].symbol} = {spent}, the least meeting" in text

    status, out, err = _run(["release", str(path)], capsys)
    assert status == 0, err
    dataset = _dataset(path, capsys)
    assert dataset["spent"]["fraction"] == spent  # exactly the plan's budget
    assert dataset["reserved"]["fraction"] == "0"
    (version,) = sorted((tmp_path / "releases" / "least").glob("v*"))
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["config"]["budget"] == {
        "total": planned["budget"],
        "derived_from_targets": True,
        "at_most": planned["budget_at_most"],
    }
    assert manifest["config"]["document"]["privacy"][parameter] == "least"
    assert manifest["privacy"]["budget"] == planned["budget"]
    assert manifest["strategy"]["digest"] == planned["strategy_digest"]
    assert all(group["target_met"] for group in manifest["error"]["groups"] if "target" in group)
    status, out, _ = _run(["audit", str(version)], capsys)
    assert status == 0, out


def test_a_cap_below_the_least_budget_is_refused_before_the_ledger(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    path = _setup(tmp_path, '{epsilon: least, at_most: "1/100"}')
    with Ledger.open(tmp_path / "budget.db") as ledger:
        before = ledger.history("people")
    for command in ("plan", "release"):
        status, out, err = _run([command, str(path)], capsys)
        assert (status, out) == (2, "")
        assert err.startswith(f"dpmm: error: {path}: privacy.at_most: the targets need ε ≥ ")
        assert "(binding: 'cdf', query 'sex=" in err or "(binding: 'pairs')" in err
        assert err.endswith("more than the cap ε = 1/100; relax the targets or raise the cap\n")
    with Ledger.open(tmp_path / "budget.db") as ledger:
        assert ledger.history("people") == before  # no reservation, nothing spent
    assert not list((tmp_path / "releases" / "least").glob("v*"))


def test_a_release_never_planned_derives_the_budget_its_plan_then_shows(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    path = _setup(tmp_path, "{epsilon: least}")
    status, _, err = _run(["release", str(path)], capsys)
    assert status == 0, err
    spent = _dataset(path, capsys)["spent"]["fraction"]
    status, out, _ = _run(["plan", str(path), "--json"], capsys)
    assert json.loads(out)["budget"] == {"kind": "pure", "epsilon": spent}


def test_a_reference_file_changed_since_the_plan_is_refused_and_a_relative_one_audits(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    path = _setup(tmp_path, "{epsilon: least}")
    labels = [f"sex={s},age<={a}" for s in range(2) for a in range(16)]
    reference = tmp_path / "cdf.csv"
    reference.write_text(
        "label,value\n" + "".join(f'"{q}",{100 + i}\n' for i, q in enumerate(labels))
    )
    path.write_text(path.read_text().replace("relative_to: 300", "relative_to: {file: cdf.csv}"))
    assert _run(["plan", str(path)], capsys)[0] == 0
    reference.write_text(reference.read_text().replace(",100\n", ",101\n"))
    status, _, err = _run(["release", str(path)], capsys)
    assert status == 2
    assert "a reference file of its accuracy targets changed since the release was planned" in err
    assert _dataset(path, capsys)["spent"]["fraction"] == "0"
    # Planned again, it releases; its audit passes without the reference file, which lies
    # beside the config and not in the release (the audit recomputes answers, not targets).
    assert _run(["plan", str(path)], capsys)[0] == 0
    assert _run(["release", str(path)], capsys)[0] == 0
    (version,) = sorted((tmp_path / "releases" / "least").glob("v*"))
    status, out, err = _run(["audit", str(version)], capsys)
    assert status == 0 and "audit passed" in out, out + err


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ("{epsilon: 1, at_most: 2}", r"privacy\.at_most: caps a budget derived from the targets"),
        ("{epsilon: least, at_most: -1}", r"privacy\.at_most must be a positive finite number"),
        ("{rho: least, at_most: 1, delta: 2}", r"privacy\.delta: unknown key"),
    ],
)
def test_a_bad_least_budget_names_its_key(tmp_path: Path, privacy: str, message: str) -> None:
    path = _setup(tmp_path, privacy)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_least_without_targets_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    path = _setup(tmp_path, "{epsilon: least}")
    body = path.read_text()
    body = body.replace(", target: {rmse: 3}", "").replace(
        ",\n     target: {half_width: 0.2, confidence: 0.95, relative_to: 300}", ""
    )
    path.write_text(body)
    with pytest.raises(ConfigError, match=r"least\.yaml: privacy\.epsilon: 'least' is the least"):
        load_config(path)


@pytest.mark.slow
@pytest.mark.usefixtures("restore_logging")
def test_a_least_release_through_the_flow_spends_the_planned_budget(tmp_path: Path, capsys) -> None:
    path = _setup(tmp_path, "{epsilon: least, at_most: 5}")
    status, out, err = _run(["plan", str(path), "--json"], capsys)
    assert status == 0, err
    spent = json.loads(out)["budget"]["epsilon"]
    status, _, err = _run(["release", str(path)], capsys)
    assert status == 0, err[-600:]
    assert _dataset(path, capsys)["spent"]["fraction"] == spent


#: Absolute half-width targets on a release of the full vector (a tree under small
#: discrete noise: half-widths on a lattice), on one of marginal tables (a domain of
#: 10⁹ cells: the tables' half-widths come through the marginal algebra), on one whose
#: arrays stay on the Dask workers (through the strategy's Kronecker factors) and on
#: residual blocks (ρ: each answer's own coefficients per residual set).
PUBLISHED = {
    "vector": """name: published
domain: {sex: 2, age: 16}
privacy: {epsilon: least, at_most: 20}
workload:
  - {name: cdf, kind: prefix, attribute: age, by: [sex],
     target: {half_width: 12, confidence: 0.95}}
  - {name: pairs, kind: marginals, k: 2}
strategy: {method: hierarchical}
""",
    "tables": """name: published
domain: {a: 10, b: 10, c: 10, d: 10, e: 10, f: 10, g: 10, h: 10, i: 10}
privacy: {epsilon: least, at_most: 20}
workload:
  - {name: pairs, kind: marginals, k: 2, attributes: [a, b, c],
     target: {half_width: 25, confidence: 0.95}}
  - {name: singles, kind: marginals, k: 1}
strategy: {method: marginals}
""",
    "workers": """name: published
domain: {sex: 2, age: 16}
privacy: {epsilon: least, at_most: 20}
workload:
  - {name: cdf, kind: prefix, attribute: age, by: [sex],
     target: {half_width: 12, confidence: 0.95}}
  - {name: pairs, kind: marginal, attributes: [sex, age]}
strategy: {method: hierarchical}
cluster: {arrays: workers}
""",
    "residual": """name: published
domain: {a: 4, b: 5, c: 6}
privacy: {rho: least, at_most: 20}
workload:
  - {name: pairs, kind: marginals, k: 2, target: {half_width: 25, confidence: 0.95}}
  - {name: cdf, kind: prefix, attribute: a, by: [b]}
strategy: {method: residual}
""",
}


#: Countings whose release runs with the slow tests (the default suite's time bar).
SLOW_COUNTINGS = {"workers", "residual"}


@pytest.mark.parametrize(
    "counting",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_COUNTINGS else name
        for name in sorted(PUBLISHED)
    ],
)
def test_the_published_half_widths_meet_the_target_the_plan_derived(
    tmp_path: Path, capsys, monkeypatch, counting: str
) -> None:
    """The plan's least budget, its printed half-width and the published ``half_width``
    column agree: the binding group's largest published half-width is the plan's figure
    and within the target, and 10 % less budget misses it."""
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    rng = np.random.default_rng(31)
    domain = yaml.safe_load(PUBLISHED[counting])["domain"]
    rows = {name: rng.integers(0, size, 2000) for name, size in domain.items()}
    pq.write_table(pa.table(rows), tmp_path / "people.parquet")
    path = tmp_path / "published.yaml"
    path.write_text(
        PUBLISHED[counting]
        + "data: {path: people.parquet}\nledger: {path: budget.db, dataset: people}\n"
        + "release: {root: releases}\n"
    )
    kind = "zcdp" if "rho: least" in PUBLISHED[counting] else "pure"
    parameter = KINDS[kind].parameter
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("people", KINDS[kind].budget_type(GRANTED))
    status, out, err = _run(["plan", str(path), "--json"], capsys)
    assert status == 0, err
    targets = json.loads(out)["targets"]
    (binding,) = [g for g in targets["groups"] if g["group"] == targets["binding_group"]]
    least = Fraction(targets["least_budget"][parameter])
    text = _run(["plan", str(path)], capsys)[1]
    assert f"{binding['achieved']:,.4g}" in text  # the figure the plan prints

    assert _run(["release", str(path)], capsys)[0] == 0
    (version,) = sorted((tmp_path / "releases" / "published").glob("v*"))
    answers = pq.read_table(version / "answers.parquet").to_pandas()
    published = answers[answers["group"] == binding["group"]]["half_width"].to_numpy()
    assert published.max() <= binding["target"]["half_width"]
    assert published.max() == pytest.approx(binding["achieved"], rel=1e-9)
    assert counting == "vector" or answers["exact_interval"].all()
    assert (version / "answers.parquet").is_dir() == (counting == "workers")
    assert _run(["audit", str(version)], capsys)[0] == 0

    shorter = tmp_path / "shorter.yaml"
    shorter.write_text(
        path.read_text().replace(
            f"{{{parameter}: least, at_most: 20}}", f"{{{parameter}: {least * 9 / 10}}}"
        )
    )
    status, out, err = _run(["plan", str(shorter), "--json"], capsys)
    assert status == 0, err
    (missed,) = [g for g in json.loads(out)["targets"]["groups"] if g["group"] == binding["group"]]
    assert not missed["met"] and missed["achieved"] > binding["target"]["half_width"]
