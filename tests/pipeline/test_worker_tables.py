"""Marginal and residual releases whose tables stay on the Dask workers (the
``worker-tables`` plan): counted there, measured there group by group of whole tables,
each chunk drawn once; the same counts, strategy, expected error and (from one
measurement) answers as in one process; a killed worker costs nothing twice."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.cli import main
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import ConfigError
from dpmm.measure import chunked
from dpmm.measure.chunk_files import chunk_folder
from dpmm.measure.tables import TableGroups, strategy_tables
from dpmm.pipeline import ingest_stage, run_release
from dpmm.pipeline.ingest_stage import count_input, count_tables, counting_plan
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP
from dpmm.release import read_answers, read_measurements
from dpmm.settings import ClusterSettings
from tests.pipeline.conftest import write_config

SIZES = {"a": 4, "b": 3, "c": 5, "d": 6, "e": 2}
#: Beyond 16,384 cells, where hdmm_union's blocks each read one marginal table.
UNION_SIZES = {"a": 20, "b": 12, "c": 10, "d": 8}


def _sizes(method: str) -> dict[str, int]:
    return UNION_SIZES if method == "hdmm_union" else SIZES


def _body(method: str, sizes: dict[str, int] = SIZES, k: int = 2) -> str:
    domain = ", ".join(f"{name}: {size}" for name, size in sizes.items())
    return (
        f"name: tables\ndomain: {{{domain}}}\nprivacy: {{rho: 1/2}}\n"
        f"workload: [{{name: ways, kind: marginals, k: {k}}}, {{name: people, kind: total}}]\n"
        f"strategy: {{method: {method}}}\n"
    )


def _config(
    folder: Path, method: str, arrays: str = "workers", sizes: dict[str, int] = SIZES, k: int = 2
) -> ReleaseConfig:
    rng = np.random.default_rng(7)
    (folder / "data").mkdir(parents=True)
    for part in range(3):  # correlated attributes, in three partitions
        base = rng.integers(0, 2, 4000)
        columns = {
            name: (base * (size // 2) + rng.integers(0, max(size // 2, 1), base.size)) % size
            for name, size in sizes.items()
        }
        pq.write_table(pa.table(columns), folder / "data" / f"part-{part}.parquet")
    config = write_config(folder, _body(method, sizes, k), data=folder / "data", budget=ZCDP(10))
    config.path.write_text(config.path.read_text() + f"cluster: {{arrays: {arrays}}}\n")
    return load_config(config.path)


def _gathered(tables: TableGroups, client) -> dict[tuple[int, ...], np.ndarray]:
    found: dict[tuple[int, ...], np.ndarray] = {}
    for group in client.gather(list(tables.groups)):
        found.update(group)
    return found


@pytest.mark.parametrize(
    ("method", "flow"),
    [("marginals", "vector"), ("residual", "tables"), ("hdmm_union", "tables")],
)
def test_the_plan_says_the_tables_are_counted_and_measured_on_the_workers(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    flow: str,
) -> None:
    config = _config(tmp_path / "workers", method, sizes=_sizes(method))
    strategy = choose_strategy(config)
    assert counting_plan(config, strategy) == "worker-tables"
    flowing = dataclasses.replace(config, cluster=ClusterSettings(arrays="flow"))
    assert counting_plan(flowing, strategy) == flow
    auto = dataclasses.replace(config, cluster=ClusterSettings(arrays="auto"))
    assert counting_plan(auto, strategy) == flow  # the tables fit the flow's process
    if flow == "tables":  # more cells of tables than the flow's process holds: workers
        monkeypatch.setattr(ingest_stage, "VECTOR_LIMIT", 100)
        assert counting_plan(auto, strategy) == "worker-tables"
        assert counting_plan(flowing, strategy) == "tables"
        monkeypatch.undo()
    assert main(["plan", str(config.path)]) == 0
    out = capsys.readouterr().out
    assert "counts marginal tables on the Dask workers, measured there group by group" in out
    assert main(["plan", str(config.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counting"] == "worker-tables"


def test_what_the_workers_cannot_do_fails_in_the_plan(tmp_path: Path) -> None:
    """NNLS needs the vector, which a release counting tables never has: refused by the
    plan, without data, and by the release before anything is reserved."""
    config = _config(tmp_path, "marginals")
    text = config.path.read_text().replace("least_squares", "nnls")
    config.path.write_text(text)
    assert main(["plan", str(config.path)]) != 0
    with pytest.raises(ConfigError, match="nnls needs the full data vector"):
        run_release(load_config(config.path))
    with Ledger.open(tmp_path / "budget.db") as ledger:
        assert ledger.remaining("adult") == Fraction(10)
    assert not list((tmp_path / "releases").glob("*/v*"))  # the plan's decision only


@pytest.mark.slow
@pytest.mark.parametrize("method", ["marginals", "residual", "hdmm_union"])
def test_a_release_on_two_worker_processes_is_the_one_process_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """The same tables, strategy and expected error as one process (no cluster), several
    chunks of whole tables, and the published answers are this process's reconstruction
    of the release's own measurement; the version audits, and its manifest, plan and logs
    hold nothing counted."""
    from distributed import Client, LocalCluster

    monkeypatch.setattr(chunked, "CHUNK_ANSWERS", 60)
    config = _config(tmp_path / "cluster", method, sizes=_sizes(method))
    alone = _config(tmp_path / "alone", method, sizes=_sizes(method))
    strategy = choose_strategy(config)
    sets = strategy_tables(strategy.quantized.integer)
    names = [tuple(alone.domain.attributes[i] for i in attrs) for attrs in sets]
    here = count_tables(alone, names).tables  # the flow's own counting, on local threads
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        counts = count_input(config, strategy, client=client)
        assert isinstance(counts.tables, TableGroups) and len(counts.tables.groups) > 1
        assert all(type(group).__name__ == "Future" for group in counts.tables.groups)
        tables = _gathered(counts.tables, client)
        del counts
        result = run_release(config, client=client)
        assert audit_release(result.path).ok
    assert set(tables) == set(sets)
    for attrs, key in zip(sets, names, strict=True):
        np.testing.assert_array_equal(tables[attrs], here[key])
    single = run_release(alone)  # a second measurement, in one process
    assert result.manifest["error"] == single.manifest["error"]
    assert result.manifest["strategy"]["fingerprint"] == single.manifest["strategy"]["fingerprint"]

    runs = list((tmp_path / "cluster").rglob("strategy.chunks"))
    assert len(runs) == 1 and len(list(runs[0].glob("*.values"))) > 1
    plan = json.loads((runs[0] / "plan.json").read_text())
    assert set(plan) >= {"bounds", "strategy_fingerprint"} and "count" not in plan
    record = read_measurements(result.path / "measurements.parquet")
    again = reconstruct(config, strategy, record, "tables")  # this process, no cluster
    published = read_answers(result.path / "answers.parquet").to_pandas()
    for group in again.groups:
        rows = published[published["group"] == group.name]
        np.testing.assert_allclose(rows["estimate"], group.values, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(rows["standard_error"], group.standard_errors, rtol=1e-9)

    # Nothing counted leaves: the manifest states no total, the run state no rows.
    rows = sum(pq.read_metadata(p).num_rows for p in (tmp_path / "cluster" / "data").iterdir())
    manifest = (result.path / "manifest.json").read_text()
    assert str(rows) not in manifest and str(rows) not in json.dumps(plan)


def _slow_tables(folder: Path) -> ReleaseConfig:
    """All 3-way tables of 7 attributes of 8 values: 35 tables, 17,920 answers."""
    sizes = {f"x{i:02d}": 8 for i in range(7)}
    return _config(folder, "marginals", sizes=sizes, k=3)


@pytest.mark.slow
def test_a_worker_killed_while_the_tables_are_measured_draws_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL one worker process while the chunks of its tables are drawn: the nanny
    restarts it, the lost tables are counted again from the data, the release completes
    with one spend, every chunk persisted before the kill is byte-identical after, and the
    version audits."""
    from distributed import Client, LocalCluster

    monkeypatch.setattr(chunked, "CHUNK_ANSWERS", 2**9)  # a chunk per table: 35 chunks
    config = _slow_tables(tmp_path)
    outcome: dict[str, object] = {}
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):

        def run() -> None:
            try:
                outcome["result"] = run_release(config, client=client)
            except BaseException as error:  # reported by the test thread
                outcome["error"] = error

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 300
        chunks: list[Path] = []
        while len(chunks) < 2 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
            chunks = list(tmp_path.rglob("*.values"))
        victim = next(iter(client.run(os.getpid).values()))
        os.kill(victim, signal.SIGKILL)
        before = {path: path.read_bytes() for path in tmp_path.rglob("*.values")}
        thread.join(timeout=1200)
        assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    drawn = len(chunked.answer_chunks(result.strategy.quantized.integer))
    assert 2 <= len(before) < drawn, "the worker was killed after the measurement ended"
    assert {path: path.read_bytes() for path in before} == before
    folder = chunk_folder(next(iter(before)).parent.parent, "strategy")
    assert len(list(folder.glob("*.values"))) == drawn
    with Ledger.open(tmp_path / "budget.db") as ledger:
        assert ledger.remaining("adult") == Fraction(19, 2)  # one spend of ρ = 1/2
    assert audit_release(result.path).ok
