"""Residual strategies are released end to end, from marginal tables, as the plan says.

The residual decomposition (ResidualPlanner's marginal optimum, QuerySmasher's blocks for
marginals × prefix) is measured as integer residual blocks read from the marginal tables:
the release never counts the data vector, records one measurement in the one format,
answers every query within 4 standard errors of the truth and passes the audit; a run
killed after its measurement resumes on it, and a later version post-processes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import ReleaseConfig
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.serialize import load_matrix
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.release import rerun_post_processing
from dpmm.plan import plan
from dpmm.privacy.params import ZCDP
from dpmm.release.tables import read_answers, read_histogram
from tests.pipeline.conftest import kill_after_measuring, kinds, versions, write_config

SHAPE = (5, 4, 3, 6)
NAMES = ("a", "b", "c", "d")
RECORDS = 4000
#: Marginals × prefix (QuerySmasher's kind of workload) and all 2-way marginals.
CASES = {
    "prefix-by-marginal": (
        "workload:\n"
        "  - {name: cdf-by-b, kind: kron, factors: {a: prefix, b: identity}}\n"
        "  - {name: cdf-by-cd, kind: kron, factors: {d: prefix, c: identity}}\n"
        "strategy: {method: residual}\n",
        "residual",
    ),
    "two-way": (
        "workload: [{name: two-way, kind: marginals, k: 2}]\n",
        "marginal_optimal",
    ),
}


def _records(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Correlated attributes, so that the marginals are far from uniform.
    base = rng.integers(0, 3, size=RECORDS)
    columns = [np.minimum(base + rng.integers(0, n - 2, size=RECORDS), n - 1) for n in SHAPE]
    return np.stack(columns, axis=1)


@pytest.fixture(params=sorted(CASES))
def case(request, tmp_path: Path) -> tuple[ReleaseConfig, np.ndarray, str]:
    """A config (budget for three releases), the true count vector and the expected method."""
    body, method = CASES[request.param]
    rows = _records(3)
    (tmp_path / "data").mkdir()
    table = pa.table({name: rows[:, i] for i, name in enumerate(NAMES)})
    pq.write_table(table, tmp_path / "data" / "part-0.parquet")
    truth = np.bincount(np.ravel_multi_index(rows.T, SHAPE), minlength=int(np.prod(SHAPE)))
    domain = ", ".join(f"{name}: {n}" for name, n in zip(NAMES, SHAPE, strict=True))
    text = f"name: {request.param}\ndomain: {{{domain}}}\nprivacy: {{rho: 1/2}}\n{body}"
    config = write_config(tmp_path, text, data=tmp_path / "data", budget=ZCDP("3/2"))
    return config, truth, method


def _assert_close_to_the_truth(config: ReleaseConfig, release: Path, truth: np.ndarray) -> None:
    answers = read_answers(release / "answers.parquet")
    estimates = answers.column("estimate").to_numpy()
    errors = answers.column("standard_error").to_numpy()
    exact = np.concatenate([group.matrix @ truth for group in config.workload])
    assert estimates.shape == exact.shape
    assert np.all(errors > 0)
    assert np.all(np.abs(estimates - exact) <= 4 * errors), "answers off by more than 4 s.e."
    # A quantized strategy's discrete Gaussian is wide: its intervals are the normal
    # quantile's plus the lattice's ½‖c‖₁ (here under 10⁻⁴ standard errors), exact.
    widths = answers.column("half_width").to_numpy()
    assert np.all(answers.column("exact_interval").to_numpy(zero_copy_only=False))
    assert np.all((widths / errors > 1.959963) & (widths / errors < 1.9601))


def test_a_residual_strategy_is_released_from_tables_as_planned(case) -> None:
    config, truth, method = case
    report = plan(config)
    assert report.chosen_method == method
    assert isinstance(report.decision.quantized.integer, HelmertBlocks)
    assert counting_plan(config, report.decision) == "tables"  # never the data vector

    result = run_release(config)
    manifest = result.manifest
    assert manifest["strategy"]["selected"] == method
    assert manifest["strategy"]["digest"] == report.strategy_digest
    assert manifest["strategy"]["quantization_scale"] == report.quantization_scale
    released = {g["name"]: g["expected_rmse"] for g in manifest["error"]["groups"]}
    assert released == pytest.approx({g.name: g.rmse for g in report.groups}, rel=1e-9)
    assert manifest["privacy"]["noise"] == "discrete_gaussian"
    # The least-squares histogram answers every query as the released answers do.
    histogram = read_histogram(result.path / "histogram.parquet")
    released_answers = read_answers(result.path / "answers.parquet").column("estimate")
    implied = np.concatenate([group.matrix @ histogram for group in config.workload])
    np.testing.assert_allclose(implied, released_answers.to_numpy(), rtol=1e-9, atol=1e-6)
    assert isinstance(load_matrix(result.path / "strategy.npz"), HelmertBlocks)
    _assert_close_to_the_truth(config, result.path, truth)
    report_of_audit = audit_release(result.path)
    assert report_of_audit.ok, report_of_audit.failed


@pytest.mark.slow
def test_a_killed_residual_release_resumes_on_its_measurement(case) -> None:
    config, truth, _ = case
    kill_after_measuring(config)

    resumed = run_release(config)
    assert resumed.resumed is True
    assert kinds(config) == ["reserve", "spend"]  # spent once
    _assert_close_to_the_truth(config, resumed.path, truth)
    assert audit_release(resumed.path).ok

    again = rerun_post_processing(config, resumed.path)  # no data, no budget
    assert kinds(config) == ["reserve", "spend"]
    assert again.manifest["ledger"]["reused_from"] == str(resumed.path.resolve())
    _assert_close_to_the_truth(config, again.path, truth)
    assert versions(config) == ["v0001", "v0002"]
