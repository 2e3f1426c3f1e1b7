"""What ``dpmm plan`` says is what the release does: the same strategy, grid and errors.

A release passes over candidates it cannot count or measure exactly; the plan applies the
same rule (one function), so it never promises a strategy the release then replaces.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig
from dpmm.linalg import Weighted
from dpmm.linalg.serialize import load_matrix, save_matrix
from dpmm.pipeline import rerun_post_processing, run_release
from dpmm.pipeline.strategy_stage import plan_folder, planned_strategy
from dpmm.plan import plan
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release import ReleaseError, show_release
from tests.pipeline.conftest import write_config

SIX = ", ".join(f"{a}: 10" for a in "abcdef")
CASES = {
    # auto stops at the proven optimum, which a release cannot measure: every candidate is
    # then tried, and plan and release take the best measurable one.
    "two-way-marginals-rho": (
        f"domain: {{{SIX}}}\nprivacy: {{rho: 1/2}}\n"
        "workload: [{name: two-way, kind: marginals, k: 2}]\n",
        ZCDP(1),
    ),
    # Fitted Kron factors that are measured on a coarser grid than the default.
    "prefix-kron-hdmm": (
        "domain: {a0: 6, a1: 6, a2: 6}\nprivacy: {rho: 1/2}\n"
        "workload: [{name: cdf, kind: kron, factors: {a0: prefix, a1: prefix, a2: prefix}}]\n"
        "strategy: {method: hdmm_kron}\n",
        ZCDP(1),
    ),
    # OPT_0's p-Identity, quantized to a diagonal stacked on its integer Θ rows (whose Gram
    # keeps the Woodbury inverse).
    "ranges-pidentity-pure": (
        "domain: {a: 32}\nprivacy: {epsilon: 1}\n"
        "workload:\n"
        "  - {name: prefix, kind: prefix, attribute: a}\n"
        "  - {name: ranges, kind: all_range, attribute: a}\n"
        "strategy: {method: hdmm_kron}\n",
        PureDP(2),
    ),
    "ranges-and-counts-pure": (
        "domain: {a: 32, b: 4}\nprivacy: {epsilon: 1}\n"
        "workload:\n"
        "  - {name: ranges, kind: kron, factors: {a: all_range, b: identity}}\n"
        "  - {name: total, kind: total}\n",
        PureDP(2),
    ),
}


def _data(folder: Path, sizes: dict[str, int]) -> Path:
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True)
    table = pa.table({name: rng.integers(0, n, 3000) for name, n in sizes.items()})
    pq.write_table(table, folder / "part-0.parquet")
    return folder


#: Cases whose release takes over ~10 s (the exact intervals of every range's answer), and
#: the pure-ε ranges (6 s; the contract sweep releases ranges under ε in the default suite).
SLOW_CASES = {"ranges-pidentity-pure", "ranges-and-counts-pure"}


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_CASES else name
        for name in sorted(CASES)
    ]
)
def config(request, tmp_path: Path) -> ReleaseConfig:
    body, budget = CASES[request.param]
    probe = write_config(tmp_path / "probe", f"name: {request.param}\n{body}", data=None)
    sizes = {a.name: a.size for a in probe.domain.attrs}
    data = _data(tmp_path / "data", sizes)
    return write_config(tmp_path, f"name: {request.param}\n{body}", data=data, budget=budget)


def test_the_release_measures_the_plans_strategy_with_the_plans_errors(config) -> None:
    report = plan(config)
    result = run_release(config)
    strategy = result.manifest["strategy"]
    assert strategy["selected"] == report.chosen_method
    assert strategy["digest"] == report.strategy_digest
    assert strategy["quantization_scale"] == report.quantization_scale
    released = {g["name"]: g["expected_rmse"] for g in result.manifest["error"]["groups"]}
    planned = {g.name: g.rmse for g in report.groups}
    assert released == pytest.approx(planned, rel=1e-9)
    # One description and one expected error per strategy: the plan's, the release's and a
    # re-run's of its measurement; the description is the strategy as selected.
    rerun = rerun_post_processing(config, result.path)
    chosen = next(c for c in report.candidates if c.method == report.chosen_method)
    described = {report.strategy_repr, strategy["description"]}
    assert described == {rerun.manifest["strategy"]["description"], repr(chosen.strategy)}
    assert report.to_dict()["strategy"] == strategy["description"]
    again = {g["name"]: g["expected_rmse"] for g in rerun.manifest["error"]["groups"]}
    assert again == pytest.approx(planned, rel=1e-9)
    basis = {result.manifest["error"]["basis"], rerun.manifest["error"]["basis"]}
    assert basis == {report.to_dict()["expected_error_basis"]}
    assert show_release(rerun.path).description == strategy["description"]


@pytest.mark.slow
def test_a_rerun_refuses_a_strategy_file_that_was_not_measured(tmp_path: Path) -> None:
    body, budget = CASES["ranges-and-counts-pure"]
    config = write_config(
        tmp_path, f"name: swap\n{body}", data=_data(tmp_path / "data", {"a": 32, "b": 4}),
        budget=budget,
    )  # fmt: skip
    first = run_release(config).path
    copy = tmp_path / "copy" / "v0001"
    shutil.copytree(first, copy)
    integer = load_matrix(copy / "strategy.npz")
    save_matrix(Weighted(2.0, integer), copy / "strategy.npz")
    with pytest.raises(ReleaseError, match="fingerprints differ"):
        rerun_post_processing(config, copy)


def test_a_decision_kept_without_a_description_describes_its_matrix(config) -> None:
    report = plan(config)
    facts_file = plan_folder(config) / "decision.json"
    facts = json.loads(facts_file.read_text())
    assert facts["description"] == report.strategy_repr
    del facts["description"]
    facts_file.write_text(json.dumps(facts))
    kept = planned_strategy(config)
    assert kept is not None and kept.description == repr(kept.quantized.matrix)
