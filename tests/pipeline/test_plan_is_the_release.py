"""What ``dpmm plan`` says is what the release does: the same strategy, grid and errors.

A release passes over candidates it cannot count or measure exactly; the plan applies the
same rule (one function), so it never promises a strategy the release then replaces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig
from dpmm.pipeline import run_release
from dpmm.plan import plan
from dpmm.privacy.params import ZCDP, PureDP
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


@pytest.fixture(params=sorted(CASES))
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
