"""A release that cannot finish is refused before the ledger is touched, and a release
executes the plan it was given, or refuses when the config changed since.

The preflight runs the release's own post-processing on a data-free measurement, so the
plan's expected errors are the manifest's, and what would fail after spending (the
answers or their standard errors do not fit) fails in ``dpmm plan`` and at the start of
``dpmm release``, with nothing reserved or written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpmm.pipeline.preflight as preflight_module
import dpmm.pipeline.strategy_stage as strategy_stage
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import ConfigError
from dpmm.pipeline import run_release
from dpmm.pipeline.preflight import footprint, preflight
from dpmm.pipeline.strategy_stage import choose_strategy, plan_folder
from dpmm.plan import plan
from dpmm.privacy.params import ZCDP, PureDP
from tests.pipeline.conftest import kinds, run_folders, versions, write_config

GRID = "name: grid\ndomain: {x: 256, y: 256}\nprivacy: {epsilon: 1}\n"
#: Every rectangle of a 256 × 256 grid: 1,082,146,816 answers, about 320 GiB to hold.
ALL_RECTANGLES = (
    GRID
    + "workload: [{name: rectangles, kind: kron, factors: {x: all_range, y: all_range}}]\n"
    + "strategy: {method: hierarchical}\n"
)
PREFIX = "workload: [{name: cdf, kind: prefix, attribute: x}]\nstrategy: {method: hierarchical}\n"


def _data(folder: Path) -> Path:
    rows = np.random.default_rng(5).integers(0, 256, size=(2000, 2))
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": rows[:, 0], "y": rows[:, 1]}), folder / "data" / "p.parquet")
    return folder / "data"


def _untouched(config: ReleaseConfig) -> None:
    """No reservation, no spend, no run and no version."""
    assert kinds(config) == []
    assert run_folders(config) == [] and versions(config) == []


def test_a_release_that_cannot_hold_its_answers_is_refused_by_the_plan_and_the_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preflight_module, "_physical_memory", lambda: 2**50)
    config = write_config(tmp_path, ALL_RECTANGLES, data=_data(tmp_path), budget=PureDP(2))
    needs = footprint(config, choose_strategy(config), "vector")
    assert needs.memory > 1_082_146_816 * 100  # the answers alone
    monkeypatch.setattr(preflight_module, "_physical_memory", lambda: 64 * 2**30)

    def never(W, privacy):
        raise AssertionError("a strategy was searched for answers that cannot be held")

    # Refused before any strategy is searched for: the answers alone do not fit.
    monkeypatch.setitem(strategy_stage.METHODS, "hierarchical", never)
    refusal = r"1,082,146,816 answers need about 201.6 GiB of memory whatever the strategy"
    with pytest.raises(ConfigError, match=refusal + r", and this machine has 64.0 GiB"):
        plan(config)
    with pytest.raises(ConfigError, match=r"201.6 GiB of memory \(1,082,146,816 answers"):
        run_release(config)  # the strategy its plan stored, checked again
    _untouched(config)


def test_the_plans_errors_are_the_release_computation_run_without_data(tmp_path: Path) -> None:
    config = write_config(tmp_path, GRID + PREFIX, data=_data(tmp_path), budget=PureDP(2))
    report = plan(config)
    checked = preflight(config, choose_strategy(config))
    (group,) = checked.reconstruction.groups
    assert not group.values.any()  # a zero measurement: the values mean nothing
    assert report.groups[0].rmse == pytest.approx(group.expected_rmse, rel=1e-12)
    assert report.counting == "vector" and report.footprint == checked.footprint
    _untouched(config)


def _edit(config: ReleaseConfig, old: str, new: str) -> ReleaseConfig:
    text = config.path.read_text()
    assert old in text
    config.path.write_text(text.replace(old, new))
    return load_config(config.path)


@pytest.mark.slow
def test_a_release_refuses_a_config_changed_since_its_plan(tmp_path: Path) -> None:
    config = write_config(tmp_path, GRID + PREFIX, data=_data(tmp_path), budget=PureDP(2))
    plan(config)
    changed = _edit(config, "epsilon: 1", "epsilon: 1/2")
    with pytest.raises(ConfigError, match=r"the config file changed since .* dpmm plan"):
        run_release(changed)
    _untouched(changed)
    plan(changed)  # reviewed: the new plan is the contract
    result = run_release(changed)
    assert result.strategy.source == "plan"
    assert result.manifest["strategy"]["selected"] == "hierarchical"


def test_a_release_refuses_a_changed_domain_file_or_dpmm_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "domain.json").write_text('{"x": 256, "y": 256}')
    body = GRID.replace("{x: 256, y: 256}", "{file: domain.json}") + PREFIX
    config = write_config(tmp_path, body, data=_data(tmp_path), budget=PureDP(2))
    plan(config)
    (tmp_path / "domain.json").write_text('{"x": 256, "y": 512}')
    with pytest.raises(ConfigError, match="its domain changed since"):
        run_release(load_config(config.path))
    (tmp_path / "domain.json").write_text('{"x": 256, "y": 256}')
    monkeypatch.setattr(strategy_stage, "__version__", "99.0")
    with pytest.raises(ConfigError, match=r"dpmm's version \(.* → 99.0\) changed"):
        run_release(config)
    _untouched(config)


@pytest.mark.slow
def test_a_release_without_a_plan_plans_itself_with_the_same_rule(tmp_path: Path) -> None:
    config = write_config(tmp_path, GRID + PREFIX, data=_data(tmp_path), budget=PureDP(2))
    assert not plan_folder(config).exists()
    first = run_release(config)  # selects, keeps its decision as the plan, executes it
    assert first.strategy.source == "plan" and plan_folder(config).is_dir()
    second = run_release(config)
    assert second.strategy.source == "plan"
    assert second.manifest["strategy"]["digest"] == first.manifest["strategy"]["digest"]


@pytest.mark.parametrize(
    ("privacy", "budget", "usable"),
    [
        ("{epsilon: 1e-30}", PureDP("1e-30"), r"ε = 1e-30 gives .* use ε between .* and "),
        ("{epsilon: 1e100}", PureDP("1e100"), r"ε = 1e\+100 gives .* variance 0 "),
        ("{rho: 1000000}", ZCDP(10**6), r"ρ = 1e\+06 gives .* use ρ between "),
    ],
)
def test_a_budget_whose_noise_the_samplers_cannot_draw_is_refused_before_spending(
    tmp_path: Path, privacy: str, budget: PureDP | ZCDP, usable: str
) -> None:
    body = GRID.replace("{epsilon: 1}", privacy) + PREFIX
    config = write_config(tmp_path, body, data=_data(tmp_path), budget=budget)
    with pytest.raises(ConfigError, match=r"release\.yaml: the strategy 'hierarchical' cannot be"):
        plan(config)
    with pytest.raises(ConfigError, match=usable):
        run_release(config)
    _untouched(config)


def test_a_budget_near_the_samplers_limit_releases_what_its_plan_says(tmp_path: Path) -> None:
    # ε = 1000 on a tree: noise of variance ~1e-55, inside the samplers' range.
    body = GRID.replace("{epsilon: 1}", "{epsilon: 1000}") + PREFIX
    config = write_config(tmp_path, body, data=_data(tmp_path), budget=PureDP(1000))
    planned = plan(config).groups[0].rmse
    result = run_release(config)
    (released,) = result.manifest["error"]["groups"]
    assert 0 < released["expected_rmse"] == pytest.approx(planned, rel=1e-9)


WIDE = ", ".join(f"a{i}: 10" for i in range(20))


@pytest.mark.parametrize(
    ("domain", "refusal", "memory"),
    [
        # A Hierarchical(10¹⁰) candidate used to be built interval by interval; now the
        # 10²⁰ answers are refused before any candidate is.
        (
            "{a: 10000000000, b: 10000000000}",
            r"answers need about .* GiB of memory whatever the strategy",
            None,
        ),
        # A marginals Gram over 2²⁰ subsets used to sum 3²⁰ terms (on a machine with the
        # memory for the answers, the selection itself must refuse at once).
        pytest.param(
            f"{{{WIDE}}}",
            r"'auto' cannot build .* more than the limit of 8,388,608",
            2**100,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["two-attributes-of-1e10", "twenty-attributes-of-10"],
)
def test_a_domain_beyond_every_selector_is_refused_at_once_before_spending(
    tmp_path: Path, domain: str, refusal: str, memory: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if memory is not None:
        monkeypatch.setattr(preflight_module, "_physical_memory", lambda: memory)
    body = (
        f"name: huge\ndomain: {domain}\nprivacy: {{epsilon: 1}}\n"
        "workload: [{name: cells, kind: identity}]\n"
    )
    config = write_config(tmp_path, body, data=_data(tmp_path), budget=PureDP(2))
    with pytest.raises(ConfigError, match=refusal):
        plan(config)
    with pytest.raises(ConfigError, match=refusal):
        run_release(config)
    _untouched(config)


@pytest.mark.parametrize(
    "cluster", ["{arrays: workers}", "{arrays: workers, address: 'tcp://10.0.0.7:8786'}"]
)
def test_a_local_cluster_shares_this_machines_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: str
) -> None:
    # The 65,536 cells kept on the workers need ~2.5 MiB together: too much for a
    # LocalCluster on a machine of 1 MiB; of a remote scheduler's workers this machine
    # can tell nothing.
    monkeypatch.setattr(preflight_module, "_physical_memory", lambda: 2**20)
    body = GRID + PREFIX + f"cluster: {cluster}\n"
    config = write_config(tmp_path, body, data=_data(tmp_path), budget=PureDP(2))
    if "address" in cluster:
        assert footprint(config, choose_strategy(config), "chunked").memory > 2**20
        return
    refusal = r"its Dask workers need about 0.0 GiB of memory together for 65,536 cells"
    with pytest.raises(ConfigError, match=refusal + r".* this machine, which has 0.0 GiB"):
        plan(config)
    with pytest.raises(ConfigError, match=refusal):
        run_release(config)
    _untouched(config)
