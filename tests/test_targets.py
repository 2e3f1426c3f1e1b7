"""Accuracy targets: parsed with one sentence per mistake, checked by the plan at its budget,
and the least budget it states meets every target, exactly at the binding one."""

from __future__ import annotations

import hashlib
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpmm.cli import format_plan, main
from dpmm.config import load_config
from dpmm.errors import ConfigError
from dpmm.plan import plan
from dpmm.privacy import ZCDP, PureDP
from dpmm.targets import parse_target

DOMAIN = {"sex": 2, "age": 16}
TARGETS = {
    "age-cdf-by-sex": {"half_width": 30, "confidence": 0.95},
    "pairs": {"rmse": 4},
}
WORKLOAD = [
    {"name": "age-cdf-by-sex", "kind": "prefix", "attribute": "age", "by": ["sex"]},
    {"name": "pairs", "kind": "marginals", "k": 2},
    {"name": "people", "kind": "total"},
]


def _config(
    folder: Path, privacy: dict, targets: dict = TARGETS, method: str = "hierarchical"
) -> Path:
    workload = [
        {**group, "target": targets[group["name"]]} if group["name"] in targets else group
        for group in WORKLOAD
    ]
    document = {
        "name": "targets",
        "domain": DOMAIN,
        "privacy": privacy,
        "workload": workload,
        "strategy": {"method": method},  # hierarchical: the same strategy at any ε
        "release": {"root": str(folder / "releases")},
    }
    path = folder / f"targets-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _amount(budget: PureDP | ZCDP) -> Fraction:
    return budget.epsilon if isinstance(budget, PureDP) else budget.rho


def _privacy(like: PureDP | ZCDP, amount: Fraction) -> dict:
    return {"epsilon": str(amount)} if isinstance(like, PureDP) else {"rho": str(amount)}


@pytest.mark.parametrize("privacy", [{"epsilon": 1}, {"rho": "1/2"}])
def test_the_least_budget_meets_every_target_exactly_at_the_binding_one(
    tmp_path: Path, privacy: dict
) -> None:
    report = plan(load_config(_config(tmp_path, privacy))).targets
    assert [group.name for group in report.groups] == ["age-cdf-by-sex", "pairs"]
    assert report.binding in TARGETS and report.least is not None
    least = _amount(report.least)
    assert least == max(_amount(group.needed) for group in report.groups)

    again = plan(load_config(_config(tmp_path, _privacy(report.least, least)))).targets
    assert all(group.met for group in again.groups)
    binding = next(group for group in again.groups if group.name == report.binding)
    assert binding.achieved >= binding.target.value * (1 - 1e-3)  # met, and only just

    short = plan(load_config(_config(tmp_path, _privacy(report.least, least * 9 / 10)))).targets
    assert not next(group for group in short.groups if group.name == report.binding).met


@pytest.mark.slow
def test_the_plan_says_which_targets_its_budget_meets(tmp_path: Path, capsys) -> None:
    loose = {"pairs": {"rmse": 1000}, "age-cdf-by-sex": {"half_width": 1, "confidence": 0.9}}
    config = _config(tmp_path, {"epsilon": 1}, loose)
    report = plan(load_config(config))
    met = {group.name: group.met for group in report.targets.groups}
    assert met == {"pairs": True, "age-cdf-by-sex": False}
    assert report.targets.binding == "age-cdf-by-sex"
    text = format_plan(report)
    assert "accuracy targets: 1 of 2 met at ε = 1" in text
    # The binding group's binding query is named by its label (public: from the config).
    assert "±1 at 90 %" in text and "(binding: 'age-cdf-by-sex', query 'sex=" in text
    assert main(["plan", str(config), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["targets"]["binding_group"] == "age-cdf-by-sex"
    assert document["targets"]["groups"][0]["target"] == {"half_width": 1.0, "confidence": 0.9}
    # Without targets the plan has none.
    assert plan(load_config(_config(tmp_path, {"epsilon": 1}, {}))).targets is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rmse": -1}, r"w\.target\.rmse: must be a positive finite number"),
        ({"rmse": 1, "half_width": 2}, r"w\.target: needs exactly one of 'rmse' or 'half_width'"),
        ({"half_width": 2}, r"w\.target\.confidence: is required with half_width"),
        ({"half_width": 2, "confidence": 95}, r"w\.target\.confidence: must be between 0 and 1"),
        ({"rmse": 1, "level": 2}, r"w\.target\.level: unknown key for a rmse target"),
        (50, r"w\.target: must be a mapping like \{rmse: 50\}"),
    ],
)
def test_a_bad_target_names_its_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_target(value, "w.target")


def test_a_bad_target_in_a_config_names_the_group(tmp_path: Path) -> None:
    config = _config(tmp_path, {"epsilon": 1}, {"pairs": {"rmse": "small"}})
    with pytest.raises(ConfigError, match=r"workload\[1\]\.target\.rmse: must be a positive"):
        load_config(config)


def test_weights_toward_the_binding_target_lower_the_least_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = {"pairs": {"rmse": 1}, "age-cdf-by-sex": {"half_width": 200, "confidence": 0.95}}
    config = _config(tmp_path, {"epsilon": 1}, targets, method="hdmm")
    weighted = plan(load_config(config))
    monkeypatch.setattr("dpmm.pipeline.target_weights.ROUNDS", 1)  # the plain selection only
    plain = plan(load_config(_config(tmp_path, {"epsilon": 1}, targets, method="hdmm")))
    assert plain.decision.weights == {"age-cdf-by-sex": 1.0, "pairs": 1.0}
    assert weighted.decision.weights["pairs"] > weighted.decision.weights["age-cdf-by-sex"]
    assert _amount(weighted.targets.least) < 0.9 * _amount(plain.targets.least)
    assert "selected for the accuracy targets, with group weights: age-cdf-by-sex" in format_plan(
        weighted
    )


def test_a_single_target_gains_weight_against_the_groups_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One targeted group among untargeted ones: its weight doubles each round (the
    balancing update would keep it at 1)."""
    targets = {"age-cdf-by-sex": {"half_width": 200, "confidence": 0.95}}
    weighted = plan(load_config(_config(tmp_path, {"epsilon": 1}, targets, method="hdmm")))
    monkeypatch.setattr("dpmm.pipeline.target_weights.ROUNDS", 1)
    plain = plan(load_config(_config(tmp_path, {"epsilon": 1}, targets, method="hdmm")))
    assert plain.decision.weights == {"age-cdf-by-sex": 1.0}
    assert weighted.decision.weights["age-cdf-by-sex"] in (2.0, 4.0, 8.0)
    # Kept only when it beat its own plain round; HDMM's random restarts differ between
    # the two plans by a few per cent (on the Adult example the least ε fell 2.4-fold).
    assert _amount(weighted.targets.least) < 1.05 * _amount(plain.targets.least)


def test_weights_that_repeat_stop_the_rounds() -> None:
    """Targets met alike by every group: the update gives the same weights, so one round."""
    from dpmm.linalg import Identity
    from dpmm.pipeline.target_weights import select_for_targets
    from dpmm.workload import WorkloadGroup

    groups = [
        WorkloadGroup(name, "marginal", Identity(2), {"target": {"rmse": 1}}) for name in "ab"
    ]
    calls = []
    kept = select_for_targets(
        groups, lambda w: calls.append(w) or ("s", None), lambda _: {"a": 2.0, "b": 2.0}
    )
    assert len(calls) == 1 and kept[2].weights == {"a": 1.0, "b": 1.0}


def test_a_release_states_its_targets_and_meets_them_as_its_plan_said(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpmm.pipeline import run_release
    from tests.pipeline.conftest import write_config

    rng = np.random.default_rng(4)
    (tmp_path / "data").mkdir()
    people = {"sex": rng.integers(0, 2, 3000), "age": rng.integers(0, 16, 3000)}
    pq.write_table(pa.table(people), tmp_path / "data" / "people.parquet")
    body = (
        "name: targets\ndomain: {sex: 2, age: 16}\nprivacy: {epsilon: 1}\nworkload:\n"
        "  - {name: cdf, kind: prefix, attribute: age, by: [sex], "
        "target: {half_width: 30, confidence: 0.95}}\n"
        "  - {name: pairs, kind: marginals, k: 2, target: {rmse: 1}}\n"
        "strategy: {method: hierarchical}\n"
    )
    config = write_config(tmp_path / "release", body, data=tmp_path / "data")
    planned = {group.name: group for group in plan(config).targets.groups}
    result = run_release(config, rng=np.random.default_rng(5))
    stated = {group["name"]: group for group in result.manifest["error"]["groups"]}
    for name, group in planned.items():
        assert stated[name]["target"] == group.target.to_dict()
        assert stated[name]["target_figure"] == pytest.approx(group.achieved, rel=1e-9)
        assert stated[name]["target_met"] is group.met
    assert {stated["cdf"]["target_met"], stated["pairs"]["target_met"]} == {True, False}


def _reference_file(folder: Path) -> dict:
    """A public reference of the age CDFs: one row per query, by label, in no set order
    (the smallest prefixes have the smallest references, so one of them binds)."""
    rows = [f'"sex={s},age<={a}",{(a + 1) * (60 + 20 * s)}' for a in range(16) for s in (1, 0)]
    (folder / "cdf-reference.csv").write_text("label,people\n" + "\n".join(rows) + "\n")
    return {"file": "cdf-reference.csv", "column": "people"}


def _binding_figure(report, config, budget) -> tuple[float, float]:
    """The binding query's figure at ``budget``, recomputed from the strategy alone, and
    what its target allows there: a half-width target's figure is the half-width a release
    publishes (from the query's own row of ``W (BᵀB)⁺ Bᵀ`` on the integer noise of the
    law the samplers draw at ``budget``), an RMSE target's the standard error (the
    per-query variance of least squares, times the exact discrete noise over the
    continuous noise of the same sensitivity)."""
    from dpmm.error import noise_variance, per_query_variance
    from dpmm.measure.mechanism import NoiseModel, planned_noise_variance, record_fields
    from dpmm.reconstruct.intervals import Intervals, NoiseLaw, coefficient_rows
    from dpmm.workload.labels import query_labels

    group = next(g for g in config.workload if g.name == report.targets.binding)
    index = query_labels(group, config.domain).index(report.targets.binding_query)
    quantized = report.decision.quantized
    target = group.target
    magnitudes = target.reference.magnitudes
    reference = magnitudes[index] if magnitudes.size > 1 else magnitudes[0]
    if target.kind == "half_width":
        fields = record_fields(NoiseModel.of(quantized).exact, budget)
        laplace = fields["noise"] == "discrete_laplace"
        law = NoiseLaw(fields["noise"], Fraction(fields["scale" if laplace else "sigma2"]))
        rows = np.vstack(
            [r for _, r in coefficient_rows(group.matrix, quantized.matrix, quantized.scale)]
        )
        (width,), _ = Intervals(law, target.confidence).from_rows(rows[index][None, :])
        return float(width), target.value * reference
    A = quantized.matrix
    variances = per_query_variance(group.matrix, A, budget)
    variances = variances * planned_noise_variance(quantized, budget) / noise_variance(A, budget)
    return float(np.sqrt(variances[index])), target.value * reference


@pytest.mark.parametrize("privacy", [{"epsilon": 1}, {"rho": "1/2"}])
@pytest.mark.parametrize("reference", ["file", pytest.param("number", marks=pytest.mark.slow)])
def test_the_least_budget_meets_every_relative_target_exactly_at_the_binding_query(
    tmp_path: Path, privacy: dict, reference: str
) -> None:
    relative_to = _reference_file(tmp_path) if reference == "file" else 2000
    targets = {
        "age-cdf-by-sex": {"half_width": 0.1, "confidence": 0.95, "relative_to": relative_to},
        "pairs": {"rmse": 0.02, "relative_to": 5000},
    }
    config = load_config(_config(tmp_path, privacy, targets))
    report = plan(config).targets
    assert report.binding == "age-cdf-by-sex" and report.least is not None
    # The query that binds is named by its label: the smallest reference's, or (one number
    # for every query) the query with the largest standard error.
    assert report.binding_query.startswith("sex=")
    if reference == "file":
        assert report.binding_query in ("sex=0,age<=0", "sex=1,age<=0")
    least = _amount(report.least)

    again_config = load_config(_config(tmp_path, _privacy(report.least, least), targets))
    again = plan(again_config)
    assert all(group.met for group in again.targets.groups)
    figure, allowed = _binding_figure(again, again_config, again.privacy)
    assert figure <= allowed  # recomputed: met
    # ... and only just: the budget one unit of its last digit less misses it (a published
    # half-width of small discrete noise moves in steps, so it need not be near the target).
    unit = Fraction(10) ** (math.floor(math.log10(least)) - 3)
    lower = type(report.least)(least - unit)
    if least % unit == 0:
        assert _binding_figure(again, again_config, lower)[0] > allowed

    short = load_config(_config(tmp_path, _privacy(report.least, least * 9 / 10), targets))
    missed = plan(short)
    assert not next(g for g in missed.targets.groups if g.name == report.binding).met
    figure, allowed = _binding_figure(missed, short, missed.privacy)
    assert figure > allowed


def test_a_relative_target_is_stated_with_its_reference_in_the_plan(tmp_path: Path, capsys) -> None:
    relative_to = _reference_file(tmp_path)
    targets = {
        "age-cdf-by-sex": {"half_width": 0.1, "confidence": 0.95, "relative_to": relative_to}
    }
    config = _config(tmp_path, {"epsilon": 1}, targets)
    text = format_plan(plan(load_config(config)))
    assert "±10 % of cdf-reference.csv at 95 %" in text
    assert "(binding: 'age-cdf-by-sex', query 'sex=0,age<=0')" in text
    assert main(["plan", str(config), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    digest = hashlib.sha256((tmp_path / "cdf-reference.csv").read_bytes()).hexdigest()
    (stated,) = document["targets"]["groups"]
    assert stated["target"]["relative_to"] == {
        "file": "cdf-reference.csv",
        "column": "people",
        "sha256": digest,
    }
    assert document["targets"]["binding_query"] == stated["binding_query"] == "sex=0,age<=0"
