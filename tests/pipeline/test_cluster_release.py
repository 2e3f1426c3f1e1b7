"""A release whose arrays stay on the Dask workers (``cluster.arrays: workers``): counted,
measured chunk by chunk, reconstructed and written as Parquet parts there; the same answers
as the flow's own reconstruction of that measurement, error bars that cover the truth, and
an audit that passes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import ConfigError
from dpmm.measure import chunked as chunked_measurement
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.privacy.params import ZCDP
from dpmm.reconstruct.intervals import RESOLUTION
from dpmm.release import read_answers, read_measurements
from dpmm.settings import ClusterSettings
from tests.pipeline.conftest import nudge_part, write_config

SHAPE = (64, 32)
BODY = (
    "name: grid\ndomain: {a: 64, b: 32}\nprivacy: {rho: 1/2}\n"
    "workload: [{name: a-by-b, kind: prefix, attribute: a, by: [b]},\n"
    "  {name: b-ranges, kind: all_range, attribute: b}, {name: a, kind: marginal, "
    "attributes: [a]},\n  {name: people, kind: total}]\n"
    "strategy: {method: hierarchical}\n"
)


def _counts() -> np.ndarray:
    return np.random.default_rng(3).poisson(5.0, size=SHAPE).astype(np.int64)


def _config(folder: Path, arrays: str = "workers", body: str = BODY) -> ReleaseConfig:
    counts = _counts()
    a, b = np.nonzero(counts)
    repeats = counts[a, b]
    (folder / "data").mkdir(parents=True)
    rows = pa.table({"a": np.repeat(a, repeats), "b": np.repeat(b, repeats)})
    pq.write_table(rows, folder / "data" / "part-0.parquet")
    config = write_config(folder, body, data=folder / "data", budget=ZCDP(10))
    text = config.path.read_text() + f"cluster: {{arrays: {arrays}}}\n"
    config.path.write_text(text)
    return load_config(config.path)


@pytest.mark.slow
def test_the_release_on_the_workers_is_the_flow_s_reconstruction_of_its_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunked_measurement, "CHUNK_ANSWERS", 500)  # several chunks
    config = _config(tmp_path)
    result = run_release(config)
    folder = result.path
    assert (folder / "answers.parquet").is_dir() and (folder / "measurements.parquet").is_dir()
    assert len(list((folder / "measurements.parquet").glob("part-*.parquet"))) > 1
    assert result.manifest["reconstruction"]["standard_errors"] == "exact"

    # The same measurement, gathered and reconstructed in one process, gives the same answers.
    record = read_measurements(folder / "measurements.parquet")
    gathered = dataclasses.replace(record, values=np.asarray(record.values.compute()), chunks=None)
    flow = dataclasses.replace(config, cluster=ClusterSettings(arrays="flow"))
    strategy = choose_strategy(flow)
    assert counting_plan(flow, strategy) == "vector"
    expected = reconstruct(flow, strategy, gathered, "vector")
    published = read_answers(folder / "answers.parquet").to_pandas()
    for group in expected.groups:
        rows = published[published["group"] == group.name]
        assert list(rows["query"]) == list(range(group.values.size))
        np.testing.assert_allclose(rows["estimate"], group.values, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(rows["standard_error"], group.standard_errors, rtol=1e-9)
        # Intervals from the factors' multisets, as the vector's published them: the
        # coefficients agree to rounding, so a half-width off their lattice may land a
        # grid cell away (under RESOLUTION standard errors).
        apart = np.abs(rows["half_width"].to_numpy() - group.half_widths)
        assert np.all(apart <= RESOLUTION * group.standard_errors)
        assert list(rows["exact_interval"]) == list(
            np.broadcast_to(group.exact_intervals, (group.values.size,))
        )

    # The error bars are the right size. One release's answers share their noise (2,048
    # correlated prefixes), so the share within 2 standard errors swings widely between
    # releases (0.869 was seen): the coverage itself is measured over 1,000 releases in
    # tests/pipeline/test_interval_coverage.py. Here: no answer is 6 standard errors off
    # (about 10⁻⁵ of releases for every answer together), and most are within 2.
    truth = {g.name: g.matrix @ _counts().reshape(-1).astype(float) for g in config.workload}
    errors = np.concatenate(
        [
            (published[published["group"] == name]["estimate"] - values)
            / published[published["group"] == name]["standard_error"]
            for name, values in truth.items()
        ]
    )
    assert np.max(np.abs(errors)) < 6 and np.mean(np.abs(errors) <= 2) >= 0.5
    report = audit_release(folder)
    assert report.ok, report.failed()

    # An answer changed in one part fails the audit's recomputation (and the files' sha256).
    part = sorted((folder / "answers.parquet").glob("part-0000-*.parquet"))[0]
    nudge_part(part, "estimate", 3, 1.0)
    assert set(audit_release(folder).failed()) == {"files", "answers"}


@pytest.mark.slow
def test_nnls_on_the_workers_is_non_negative_and_states_its_error_bars(tmp_path: Path) -> None:
    config = _config(tmp_path)
    text = config.path.read_text().replace("least_squares", "nnls")
    config.path.write_text(text)
    result = run_release(load_config(config.path))
    assert result.manifest["reconstruction"]["method"] == "nnls"
    stated = result.manifest["reconstruction"]["standard_errors"]
    assert stated == "least-squares standard errors (no bootstrap)"
    published = read_answers(result.path / "answers.parquet").to_pandas()
    assert (published[published["group"] == "a-by-b"]["estimate"] >= -1e-9).all()
    assert audit_release(result.path).ok


def test_the_plan_refuses_what_the_workers_cannot_answer(tmp_path: Path) -> None:
    marginals = BODY.replace("method: hierarchical", "method: marginals")
    config = _config(tmp_path / "m", body=marginals)
    assert counting_plan(config, choose_strategy(config)) == "worker-tables"
    stacked = BODY.replace("method: hierarchical", "method: workload")
    config = _config(tmp_path / "w", body=stacked)
    with pytest.raises(ConfigError, match=r"cluster\.arrays: workers holds the arrays"):
        counting_plan(config, choose_strategy(config))
    config = _config(tmp_path / "a")
    assert counting_plan(config, choose_strategy(config)) == "chunked"


@pytest.mark.slow
def test_a_release_on_two_worker_processes_matches_the_threaded_one(tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    config = _config(tmp_path / "processes")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        result = run_release(config, client=client)
        assert audit_release(result.path).ok
    record = read_measurements(result.path / "measurements.parquet")
    threaded = reconstruct(config, choose_strategy(config), record, "chunked")  # local threads
    published = read_answers(result.path / "answers.parquet").to_pandas()
    for group in threaded.groups:
        rows = published[published["group"] == group.name]
        np.testing.assert_allclose(rows["estimate"], group.values.compute(), rtol=1e-9, atol=1e-9)


def _worker_peak_bytes() -> int:
    """This worker process's peak resident memory (VmHWM starts afresh at exec)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@pytest.mark.slow
def test_workers_with_little_memory_release_a_tensor_several_times_theirs(tmp_path: Path) -> None:
    """2²² cells measured by a hierarchy over three attributes: 3.3·10⁷ answers, 268 MB of
    floats per copy. Each step of the Kronecker product is cut into blocks of at most
    BLOCK_ELEMENTS, so workers of 700 MiB never hold more than a few blocks (as one block
    the first worker to run it was killed, then every other, after the budget was spent)."""
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(5)
    (tmp_path / "data").mkdir()
    size = 200_000
    rows = pa.table(
        {
            "a": rng.integers(0, 64, size),
            "b": rng.integers(0, 256, size),
            "c": rng.binomial(255, 0.3, size),
        }
    )
    pq.write_table(rows, tmp_path / "data" / "part-0.parquet")
    body = (
        "name: grid\ndomain: {a: 64, b: 256, c: 256}\nprivacy: {rho: 1/2}\n"
        "workload: [{name: a, kind: marginal, attributes: [a]},\n"
        "  {name: b-c, kind: marginal, attributes: [b, c]}, {name: people, kind: total}]\n"
        "strategy: {method: hierarchical}\n"
    )
    config = write_config(tmp_path, body, data=tmp_path / "data", budget=ZCDP(10))
    config.path.write_text(config.path.read_text() + "cluster: {arrays: workers}\n")
    config = load_config(config.path)
    limit = 700 * 2**20
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, memory_limit=limit, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        result = run_release(config, client=client)
        peaks = client.run(_worker_peak_bytes).values()
    assert max(peaks) < limit
    assert audit_release(result.path).ok
    published = read_answers(result.path / "answers.parquet").to_pandas()
    people = published[published["group"] == "people"]["estimate"].iloc[0]
    standard_error = published[published["group"] == "people"]["standard_error"].iloc[0]
    assert abs(people - size) < 6 * standard_error


def test_an_hdmm_kron_strategy_releases_on_the_workers(tmp_path: Path) -> None:
    """HDMM's fitted factors (``[I; T]``, p-Identity) have no closed-form Gram inverse: small
    ones are inverted densely, so OPT_⊗'s strategies release on the workers too."""
    config = _config(tmp_path, body=BODY.replace("method: hierarchical", "method: hdmm_kron"))
    result = run_release(config)
    assert result.strategy.selected == "hdmm_kron"
    assert (result.path / "answers.parquet").is_dir()
    assert audit_release(result.path).ok


@pytest.mark.parametrize(
    "method", [pytest.param("hierarchical", marks=pytest.mark.slow), "hdmm_kron"]
)
def test_a_kron_strategy_beyond_the_vector_is_planned_on_the_workers(tmp_path, method) -> None:
    """2²⁹ cells, past the vector's 2²⁸: selection passed Kronecker strategies over as
    needing the vector although cluster.arrays: workers holds their arrays there; with
    flow, or auto (which counts such a domain as tables), the plan still refuses them."""
    from dpmm.plan import plan

    body = (
        "name: big\ndomain: {a: 1024, b: 1024, c: 512}\nprivacy: {rho: 1/2}\n"
        "workload: [{name: a, kind: marginal, attributes: [a]},\n"
        "  {name: b-c, kind: marginal, attributes: [b, c]}, {name: people, kind: total}]\n"
        f"strategy: {{method: {method}}}\n"
    )

    def written(folder: Path, arrays: str) -> ReleaseConfig:
        path = write_config(folder, body, data=None).path
        path.write_text(path.read_text() + f"cluster: {{arrays: {arrays}}}\n")
        return load_config(path)

    config = written(tmp_path, "workers")
    report = plan(config)
    assert report.decision.selected == method
    assert counting_plan(config, choose_strategy(config)) == "chunked"
    for arrays in ("flow", "auto"):
        with pytest.raises(ConfigError, match="more than the 268,435,456 a release counts"):
            plan(written(tmp_path / arrays, arrays))
