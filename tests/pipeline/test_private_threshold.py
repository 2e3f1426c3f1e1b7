"""Releases with a private truncation threshold: θ drawn once, charged its share, persisted."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import load_config
from dpmm.data import DataError
from dpmm.measure.exact import analyze_strategy
from dpmm.pipeline import run_release
from dpmm.pipeline.threshold_stage import COUNT_STAGE, THRESHOLD_STAGE
from dpmm.privacy.params import PureDP
from dpmm.release import format_listing, format_release, list_releases, show_release
from dpmm.workload import from_config
from tests.pipeline.conftest import history, kinds, remaining, run_folders, versions, write_config

SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT = 120
BINS = [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]
PEOPLE = 4000


def _body(truncation: str, privacy: str = "{epsilon: 1}") -> str:
    return (
        "name: sums\n"
        "domain:\n"
        "  attributes:\n"
        "    - {name: site, size: 3}\n"
        f"    - {{name: income, size: 10, bins: {BINS}}}\n"
        f"privacy: {privacy}\n"
        "workload:\n"
        "  - {name: sums, kind: prefix_sum, attribute: income, by: [site], valuation: upper, "
        f"truncation: {truncation}}}\n"
        "strategy: {method: hierarchical}\n"
    )


SVT = "{method: svt, share: 1/10, ratio: 0.9, start: 100}"
RECURSIVE = "{method: recursive, share: 1/4, floor: 150}"


def _write_people(folder: Path, income: np.ndarray, files: int = 2) -> Path:
    """Synthetic records in ``files`` Parquet files (income in the middle of its bucket)."""
    folder.mkdir(parents=True, exist_ok=True)
    site = np.arange(income.size) % 3
    for i, rows in enumerate(np.array_split(np.arange(income.size), files)):
        table = pa.table({"site": site[rows], "income": income[rows]})
        pq.write_table(table, folder / f"part-{i}.parquet")
    return folder


def _skewed_income(seed: int = 0) -> np.ndarray:
    """Mostly low incomes, a thin tail up to the top bucket."""
    buckets = np.minimum(np.random.default_rng(seed).exponential(1.5, PEOPLE).astype(int), 9)
    return buckets * 100 + 50


@pytest.fixture
def people(tmp_path: Path) -> Path:
    return _write_people(tmp_path / "data", _skewed_income())


def _config(tmp_path: Path, data: Path, truncation: str = SVT, sub: str = "a", **options: Any):
    return write_config(tmp_path / sub, _body(truncation), data=data, **options)


def _state(config) -> dict[str, Any]:
    (folder,) = run_folders(config)
    return json.loads((folder / "run.json").read_text())


def test_the_threshold_spends_its_share_and_the_measurement_the_rest(tmp_path, people) -> None:
    config = _config(tmp_path, people)
    result = run_release(config, rng=np.random.default_rng(1))
    entries = [e for e in history(config) if e.kind != "grant"]
    assert [(e.kind, e.budget) for e in entries] == [
        ("reserve", PureDP(Fraction(1, 10))),
        ("reserve", PureDP(Fraction(9, 10))),
        ("spend", PureDP(Fraction(1, 10))),
        ("spend", PureDP(Fraction(9, 10))),
        ("publish", PureDP(Fraction(9, 10))),  # the manifest, under the measurement's
    ]
    assert {e.release_id for e in entries} == {result.release_id}
    assert remaining(config) == 9
    section = result.manifest["thresholds"]
    (chosen,) = section["groups"]
    assert chosen["budget"] == {"kind": "pure", "epsilon": "1/10"}
    assert chosen["reservation_id"] == entries[0].reservation_id
    assert section["measurement_budget"] == {"kind": "pure", "epsilon": "9/10"}
    theta = chosen["threshold"]
    assert chosen["found"] is True and 100 <= theta < 1000 and chosen["note"]
    assert result.manifest["privacy"]["budget"] == {"kind": "pure", "epsilon": "9/10"}
    report = audit_release(result.path)
    assert report.ok, report.checks


def test_noise_scale_is_the_truncated_strategys_sensitivity_over_the_budget_left(
    tmp_path, people
) -> None:
    config = _config(tmp_path, people)
    result = run_release(config, rng=np.random.default_rng(2))
    theta = result.manifest["thresholds"]["groups"][0]["threshold"]
    # The workload measured is the public-θ workload at the drawn θ.
    public = load_config(config.path).raw["workload"]
    public[0]["truncation"] = {"threshold": theta}
    expected = from_config(public, config.domain)[0].matrix.dense()
    spec = result.manifest["workload"]["groups"][0]["spec"]
    assert spec["weights"] == [min(edge, theta) for edge in map(float, BINS[1:])]
    group = next(g for g in result.reconstruction.groups if g.name == "sums")
    assert group.values.size == expected.shape[0]
    sensitivity = Fraction(analyze_strategy(result.strategy.quantized.integer).sensitivity_l1)
    assert Fraction(result.manifest["privacy"]["sensitivity"]) == sensitivity
    assert Fraction(result.manifest["privacy"]["scale"]) == sensitivity / Fraction(9, 10)


def test_theta_is_persisted_before_the_strategy_is_selected(tmp_path, people) -> None:
    config = _config(tmp_path, people)
    seen: dict[str, Any] = {}
    order: list[str] = []

    def stage(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            order.append(name)
            if name == "select-strategy":
                seen.update(_state(config)["thresholds"]["sums"])
                seen["spec"] = args[0].workload[0].spec
            return function(*args, **kwargs)

        return run

    result = run_release(config, stage=stage, rng=np.random.default_rng(3))
    assert order[:5] == [
        "plan-strategy", "reserve-budget", COUNT_STAGE, THRESHOLD_STAGE, "select-strategy"
    ]  # fmt: skip
    assert seen["threshold"] == result.manifest["thresholds"]["groups"][0]["threshold"]
    assert seen["spec"]["truncation"]["threshold"] == seen["threshold"]


def test_a_failure_after_the_draw_keeps_theta_and_the_rerun_spends_nothing_more(
    tmp_path, people
) -> None:
    config = _config(tmp_path, people)

    def failing(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if name == "select-strategy":
                raise KeyboardInterrupt
            return function(*args, **kwargs)

        return run

    with pytest.raises(KeyboardInterrupt):
        run_release(config, stage=failing, rng=np.random.default_rng(4))
    theta = _state(config)["thresholds"]["sums"]["threshold"]
    assert kinds(config) == ["reserve", "reserve", "spend"]
    assert versions(config) == []

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in (COUNT_STAGE, THRESHOLD_STAGE), "the data was counted again"
        return function

    result = run_release(config, stage=counting, rng=np.random.default_rng(5))
    assert result.resumed is True
    assert result.manifest["thresholds"]["groups"][0]["threshold"] == theta
    assert kinds(config) == ["reserve", "reserve", "spend", "spend"]
    assert remaining(config) == 9
    assert audit_release(result.path).ok


def _die_after_threshold(config_path: str, seed: int) -> None:
    """Child: run the release and die right after θ was drawn and written."""

    def stage(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            if name == THRESHOLD_STAGE:
                os._exit(9)
            return result

        return run

    run_release(load_config(config_path), stage=stage, rng=np.random.default_rng(seed))


def test_a_killed_run_is_resumed_with_its_persisted_theta(tmp_path, people) -> None:
    config = _config(tmp_path, people)
    child = SPAWN.Process(target=_die_after_threshold, args=(str(config.path), 6))
    child.start()
    child.join(CHILD_TIMEOUT)
    assert child.exitcode == 9
    persisted = _state(config)["thresholds"]["sums"]
    assert kinds(config) == ["reserve", "reserve", "spend"]

    result = run_release(config, rng=np.random.default_rng(7))
    assert result.resumed is True
    (chosen,) = result.manifest["thresholds"]["groups"]
    assert chosen["threshold"] == persisted["threshold"]
    assert chosen["reservation_id"] == persisted["reservation_id"]
    assert kinds(config) == ["reserve", "reserve", "spend", "spend"]
    assert audit_release(result.path).ok


def test_the_recursive_mechanism_spends_its_share(tmp_path, people) -> None:
    config = _config(tmp_path, people, RECURSIVE)
    result = run_release(config, rng=np.random.default_rng(8))
    (chosen,) = result.manifest["thresholds"]["groups"]
    assert chosen["method"] == "recursive" and chosen["budget"]["epsilon"] == "1/4"
    assert chosen["threshold"] >= 150
    assert result.manifest["privacy"]["budget"]["epsilon"] == "3/4"
    assert remaining(config) == 9
    assert audit_release(result.path).ok


def test_no_svt_candidate_means_the_top_bucket_weight(tmp_path) -> None:
    data = _write_people(tmp_path / "rich", np.full(PEOPLE, 950))
    config = _config(tmp_path, data)
    result = run_release(config, rng=np.random.default_rng(9))
    (chosen,) = result.manifest["thresholds"]["groups"]
    assert chosen["found"] is False and chosen["threshold"] == 1000.0
    assert "top bucket weight" in chosen["note"]
    spec = result.manifest["workload"]["groups"][0]["spec"]
    assert spec["weights"] == [float(edge) for edge in BINS[1:]]
    assert kinds(config) == ["reserve", "reserve", "spend", "spend"]
    assert audit_release(result.path).ok
    shown = format_release(show_release(result.path))
    assert "θ = 1000 for group sums: the top bucket weight, as svt chose none below it" in shown
    assert "spent: ε = 1 of dataset" in shown  # θ's share spent though none was found


def test_bad_data_before_the_draw_cancels_everything(tmp_path) -> None:
    data = _write_people(tmp_path / "bad", np.array([50, 5000]), files=1)
    config = _config(tmp_path, data)
    with pytest.raises(DataError, match="income"):
        run_release(config, rng=np.random.default_rng(10))
    assert kinds(config) == ["reserve", "reserve", "cancel", "cancel"]
    assert remaining(config) == 10
    assert versions(config) == [] and run_folders(config) == []


def test_a_budget_too_small_for_threshold_and_measurement_reserves_nothing(
    tmp_path, people
) -> None:
    config = _config(tmp_path, people, budget=PureDP(Fraction(1, 2)))
    with pytest.raises(Exception, match="nothing was reserved"):
        run_release(config, rng=np.random.default_rng(11))
    assert kinds(config) == ["reserve", "cancel"]
    assert remaining(config) == Fraction(1, 2)
    assert versions(config) == []


def test_the_audit_finds_a_theta_that_is_not_the_groups(tmp_path, people) -> None:
    config = _config(tmp_path, people)
    result = run_release(config, rng=np.random.default_rng(12))
    manifest_path = result.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["thresholds"]["groups"][0]["threshold"] += 1
    os.chmod(manifest_path, 0o644)
    manifest_path.write_text(json.dumps(manifest))
    report = audit_release(result.path)
    assert "sensitivity" in report.failed()


def test_a_bad_threshold_config_spends_and_writes_nothing(tmp_path, people) -> None:
    from dpmm.errors import ConfigError
    from dpmm.privacy.ledger import Ledger

    with pytest.raises(ConfigError, match=r"workload\[0\]\.truncation\.share: must be below 1"):
        _config(tmp_path, people, "{method: svt, share: 3/2, start: 100}")
    with Ledger.open(tmp_path / "a" / "budget.db") as ledger:
        assert [e.kind for e in ledger.history("adult")] == ["grant"]
    assert not (tmp_path / "a" / "releases").exists()


def test_post_processing_again_reuses_theta_and_spends_nothing(tmp_path, people) -> None:
    from dpmm.pipeline import rerun_post_processing

    config = _config(tmp_path, people)
    first = run_release(config, rng=np.random.default_rng(13))
    before = kinds(config)
    again = rerun_post_processing(config, first.path)
    assert again.path.name == "v0002" and kinds(config) == before
    assert again.manifest["thresholds"] == first.manifest["thresholds"]
    spec = again.manifest["workload"]["groups"][0]["spec"]
    assert spec["truncation"]["threshold"] == first.manifest["thresholds"]["groups"][0]["threshold"]
    assert audit_release(again.path).ok
    # Both reports state the errors at the whole budget, θ's share drawn as spent first.
    for version in (first.path, again.path):
        page = (version / "report.html").read_text(encoding="utf-8")
        assert "<dt>budget</dt><dd>ε = 1</dd>" in page
        assert "<dt>measurement</dt><dd>ε = 9/10</dd>" in page
        assert "private truncation thresholds θ take their shares" in page


def test_show_and_list_give_the_whole_spend_theta_and_nothing_for_post_processing(
    tmp_path, people
) -> None:
    from dpmm.pipeline import rerun_post_processing

    config = _config(tmp_path, people)
    first = run_release(config, rng=np.random.default_rng(14))
    again = rerun_post_processing(config, first.path)
    shown = show_release(first.path)
    assert (shown.spend.amount, shown.budget) == (1, "ε = 1")  # not the measurement's 9/10
    assert shown.spend.parts == (
        ("threshold of sums", Fraction(1, 10)),
        ("measurement", Fraction(9, 10)),
    )
    theta = first.manifest["thresholds"]["groups"][0]["threshold"]
    text = format_release(shown)
    assert "spent: ε = 1 of dataset 'adult' (threshold of sums ε = 1/10, measurement ε = 9/10)" in (
        text
    )
    assert f"threshold: θ = {theta:g} for group sums: chosen from the data by svt" in text
    assert "strategy: hierarchical: " in text and "reconstruction: least_squares" in text
    rerun = show_release(again.path)
    assert (rerun.spend.amount, rerun.budget, rerun.spend.parts) == (0, "ε = 0", ())
    assert "no noise drawn" in format_release(rerun) and f"θ = {theta:g}" in format_release(rerun)
    listing = format_listing(list_releases(config.release.root))
    assert "ε = 0 (re-run)" in listing
    # What the versions spent in all is what the ledger spent.
    assert listing.endswith("spent in all: ε = 1 of dataset 'adult'")
    assert 10 - remaining(config) == 1
