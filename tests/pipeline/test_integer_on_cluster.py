"""``release.output: integer`` for a release that keeps its arrays on the Dask workers.

Releases of a 3-attribute grid (``cluster.arrays: workers``, a Kronecker strategy, every
group a Kronecker product) with a declared total or two declared margins: every released
table integer, non-negative and consistent, the total and margins exact, the audit passing
(recomputing the integers exactly); on a LocalCluster of two worker processes with little
memory, the integers are the in-memory rounding of the cluster's own non-negative estimate,
and the same recomputed in one process on the synchronous scheduler. A config whose
declared margins cannot be rounded on the workers is refused by the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

from dpmm.cli import main
from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError
from dpmm.measure import chunked as chunked_measurement
from dpmm.pipeline import run_release
from dpmm.pipeline.cluster_answers import ClusterAnswers
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.integer_answers import declared_table, rounding_iterations
from dpmm.pipeline.release import recompute_answers
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.release import read_answers, read_measurements
from tests.pipeline.conftest import kinds, versions
from tests.pipeline.test_integer_release import (
    _check_consistent,
    _check_margins,
    _check_release,
    _random_records,
    _release_config,
    _released_tables,
    _write_records,
)

NAMES, SIZES = ["a", "b", "c"], [16, 8, 6]
WORKLOAD = [
    {"name": "ab", "kind": "marginal", "attributes": ["a", "b"]},
    {"name": "bc", "kind": "marginal", "attributes": ["b", "c"]},
    {"name": "ac", "kind": "marginal", "attributes": ["a", "c"]},
    {"name": "cdf", "kind": "prefix", "attribute": "a", "by": ["b"]},
    {"name": "people", "kind": "total"},
]


def _config(folder: Path, seed: int, declared: str, cluster: dict[str, Any]) -> ReleaseConfig:
    """A grid release on the workers: ``declared`` is ``total`` (the true count plus 13) or
    ``margins`` (b's and c's true counts, each moved by a few records)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    records = _random_records(rng, SIZES, 3_000)
    body: dict[str, Any] = {
        "name": f"grid-{declared}",
        "domain": dict(zip(NAMES, SIZES, strict=True)),
        "privacy": {"rho": 1},
        "workload": WORKLOAD,
        "strategy": {"method": "hierarchical"},
        "cluster": cluster,
    }
    if declared == "total":
        body["invariants"] = {"total": 3_013}
    else:
        margins = []
        for index in (2, 1):  # listed out of domain order
            counts = np.bincount(records[:, index], minlength=SIZES[index])
            counts[int(rng.integers(0, counts.size))] += 9
            margins.append({"attribute": NAMES[index], "counts": [int(c) for c in counts]})
        body["invariants"] = {"margins": margins}
    return _release_config(folder, body, _write_records(folder, NAMES, records))


def _check(config: ReleaseConfig, version: Path, audit: bool = True) -> None:
    """Integer, non-negative, consistent tables; the total and margins exact; the audit
    (recomputing the integers exactly)."""
    total = config.invariants.known_total
    assert total is not None
    if audit:
        _check_release(config, version, total)
    else:
        _check_consistent(_released_tables(config, version), total)
    if config.invariants.margins:
        _check_margins(config, version)


def _published(version: Path, name: str) -> np.ndarray:
    answers = read_answers(version / "answers.parquet").to_pandas()
    return answers[answers["group"] == name].sort_values("query")["estimate"].to_numpy()


def test_integer_output_on_the_workers_holds_declared_margins(tmp_path: Path) -> None:
    """On the default scheduler (threads in this process; the audit, which starts a
    cluster, is in the slow tests)."""
    config = _config(tmp_path, 1, "margins", {"arrays": "workers"})
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "chunked"
    assert "on the Dask workers, chunk by chunk" in result.manifest["reconstruction"]["rounding"]
    _check(config, result.path, audit=False)


@pytest.mark.slow
@pytest.mark.parametrize("declared", ["total", "margins"])
def test_integers_on_worker_processes_are_the_in_memory_rounding(
    tmp_path: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch, declared: str
) -> None:
    monkeypatch.setattr(chunked_measurement, "CHUNK_ANSWERS", 500)  # several chunks
    cluster = {"address": scheduler, "arrays": "workers"}
    config = _config(tmp_path, 2, declared, cluster)
    version = run_release(config).path
    assert len(list((version / "measurements.parquet").glob("part-*.parquet"))) > 2
    _check(config, version)  # its audit on the cluster the config names

    # The cluster's non-negative estimate, gathered here and rounded in memory: the same
    # integers (a declared total: no sum of the estimate enters the rounding).
    from distributed import Client

    with Client(scheduler) as client:
        strategy = choose_strategy(config)
        record = read_measurements(version / "measurements.parquet")
        solved = ClusterAnswers(strategy.quantized.integer, record, config.domain, "least_squares")
        estimate = solved.nonnegative(config.invariants.known_total, rounding_iterations(config))
        estimate = np.asarray(client.compute(estimate).result()).reshape(-1)
    if config.invariants.margins:
        rounded = declared_table(config, estimate)
    else:
        from dpmm.reconstruct.integer import cumulative_rounding

        rounded = cumulative_rounding(estimate, config.invariants.known_total)
    for group in config.workload:
        assert np.array_equal(_published(version, group.name), group.matrix @ rounded)

    # Recomputed in this one process (synchronous scheduler): the same integers.
    with dask.config.set(scheduler="synchronous"):
        recomputed = recompute_answers(config, version)
        for answers in recomputed.groups:
            values = np.asarray(answers.values.compute())
            assert np.array_equal(values, _published(version, answers.name))


def test_declared_margins_too_large_to_round_on_the_workers_are_refused_in_the_plan(
    tmp_path: Path,
) -> None:
    body = {
        "name": "wide-margins",
        "domain": {"a": 400, "b": 300},
        "privacy": {"rho": 1},
        "workload": [{"name": "a", "kind": "marginal", "attributes": ["a"]}],
        "strategy": {"method": "identity"},
        "cluster": {"arrays": "workers"},
        "invariants": {
            "margins": [
                {"attribute": "a", "counts": [1] * 400},
                {"attribute": "b", "counts": [1] * 100 + [3] * 100 + [0] * 100},
            ]
        },
    }
    records = np.zeros((400, 2), dtype=np.int64)
    config = _release_config(tmp_path, body, _write_records(tmp_path, ["a", "b"], records))
    refused = r"invariants\.margins: .* that of a, b has 120,000; declare fewer"
    with pytest.raises(ConfigError, match=refused):
        run_release(config)
    assert kinds(config) == [] and versions(config) == []
    assert main(["plan", str(config.path)]) == 2
