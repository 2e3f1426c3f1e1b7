"""NNLS in a release: ``auto`` takes it only where the bootstrap finds it clearly better on the
requested answers, its standard errors come from a parametric bootstrap that covers the
truth (totals included), and a release that never holds the vector refuses it in the plan.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import ConfigError
from dpmm.measure.measurement import measure_strategy
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.strategy_stage import ChosenStrategy, choose_strategy
from dpmm.plan import plan
from tests.pipeline.conftest import kinds, versions, write_config

RANGES = (
    "name: ranges\ndomain: {x: 256}\nprivacy: {epsilon: 1/2}\n"
    "workload: [{name: ranges, kind: all_range, attribute: x}, {name: people, kind: total}]\n"
    "strategy: {method: hierarchical}\n"
)
#: 8 occupied cells of 256: NNLS's home ground for range queries.
SPARSE = np.zeros(256, dtype=np.int64)
SPARSE[[3, 40, 41, 100, 170, 171, 200, 255]] = 300


def _config(folder: Path, body: str, reconstruction: str) -> ReleaseConfig:
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": [0]}), folder / "data" / "p.parquet")
    config = write_config(folder, body, data=folder / "data")
    text = config.path.read_text().replace("least_squares", reconstruction)
    config.path.write_text(text)
    return load_config(config.path)


def _release(
    config: ReleaseConfig, chosen: ChosenStrategy, x: np.ndarray, seed: int, replicates: int
):
    rng = np.random.default_rng(seed)
    record = measure_strategy(chosen.quantized, x, config.measurement_privacy, rng=rng).record
    return reconstruct(config, chosen, record, "vector", replicates=replicates)


@pytest.mark.slow
def test_auto_takes_nnls_only_where_the_bootstrap_finds_it_clearly_better(tmp_path: Path) -> None:
    config = _config(tmp_path, RANGES, "auto")
    chosen = choose_strategy(config)
    dense = np.random.default_rng(1).poisson(400, 256)
    sparse = _release(config, chosen, SPARSE, seed=2, replicates=40)
    assert sparse.method == "nnls"
    assert sparse.standard_errors == "bias-corrected parametric bootstrap, 40 replicates"
    assert not any(group.exact_errors for group in sparse.groups)
    busy = _release(config, chosen, dense, seed=2, replicates=40)
    assert (busy.method, busy.standard_errors) == ("least_squares", "exact")
    # The expected error is the strategy's, whichever solver answered.
    assert [g.expected_rmse for g in sparse.groups] == [g.expected_rmse for g in busy.groups]


@pytest.mark.slow
def test_nnls_standard_errors_cover_the_truth_and_the_total_has_one(tmp_path: Path) -> None:
    config = _config(tmp_path, RANGES, "nnls")
    chosen = choose_strategy(config)
    truths = [group.matrix @ SPARSE for group in config.workload]
    covered, total_errors = [], []
    for seed in range(20):
        result = _release(config, chosen, SPARSE, seed=seed, replicates=30)
        assert result.method == "nnls"
        for group, truth in zip(result.groups, truths, strict=True):
            miss = np.abs(group.values - truth)
            covered.append(miss <= 2 * group.standard_errors)
        total_errors.append(float(result.groups[1].standard_errors[0]))
    coverage = float(np.mean(np.concatenate(covered)))
    assert 0.90 <= coverage <= 0.995, coverage
    assert min(total_errors) > 0  # the total is estimated, never reported as exact


def test_the_bootstrap_is_reproducible_from_the_measurement(tmp_path: Path) -> None:
    config = _config(tmp_path, RANGES, "nnls")
    chosen = choose_strategy(config)
    first = _release(config, chosen, SPARSE, seed=4, replicates=10)
    again = _release(config, chosen, SPARSE, seed=4, replicates=10)
    for a, b in zip(first.groups, again.groups, strict=True):
        np.testing.assert_array_equal(a.standard_errors, b.standard_errors)


def test_nnls_without_the_vector_is_refused_in_the_plan(tmp_path: Path) -> None:
    body = (
        "name: residual\ndomain: {a: 4, b: 3}\nprivacy: {rho: 1/2}\n"
        "workload: [{name: ones, kind: marginals, k: 1}]\nstrategy: {method: residual}\n"
    )
    config = _config(tmp_path, body, "nnls")
    with pytest.raises(ConfigError, match=r"reconstruction: nnls needs the full data vector"):
        plan(config)
    assert kinds(config) == [] and versions(config) == []
