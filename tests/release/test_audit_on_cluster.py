"""``dpmm audit`` of a version whose arrays stayed on the Dask workers runs on a cluster.

A LocalCluster of two worker processes with little memory each releases a grid through
the product path (``cluster.arrays: workers``, the cluster opened by
:class:`dpmm.cluster.DaskCluster` as the flow opens it); the CLI's audit then recomputes
the version on the cluster its config names, or on the scheduler given with
``--scheduler``: no Dask graph runs in the auditing process, the workers compare the
answers' parts (their task logs show it), and a tampered part fails with its file named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.cli import main
from dpmm.cluster import DaskCluster
from dpmm.config import ReleaseConfig, load_config
from dpmm.measure import chunked as chunked_measurement
from dpmm.pipeline import run_release
from dpmm.privacy.params import ZCDP
from tests.pipeline.conftest import nudge_part, write_config

BODY = (
    "name: grid\ndomain: {a: 64, b: 32, c: 8}\nprivacy: {rho: 1/2}\n"
    "workload: [{name: a-by-b, kind: prefix, attribute: a, by: [b]},\n"
    "  {name: b-c, kind: marginal, attributes: [b, c]}, {name: people, kind: total}]\n"
    "strategy: {method: hierarchical}\n"
)


def _config(folder: Path, cluster: str) -> ReleaseConfig:
    rng = np.random.default_rng(11)
    size = 20_000
    (folder / "data").mkdir(parents=True)
    rows = pa.table(
        {
            "a": rng.integers(0, 64, size),
            "b": rng.integers(0, 32, size),
            "c": rng.binomial(7, 0.4, size),
        }
    )
    pq.write_table(rows, folder / "data" / "part-0.parquet")
    config = write_config(folder, BODY, data=folder / "data", budget=ZCDP(10))
    config.path.write_text(config.path.read_text() + f"cluster: {cluster}\n")
    return load_config(config.path)


def _release(config: ReleaseConfig, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The release through the product path, on the cluster its config names (opened as
    the release flow opens it); its measurement in several chunks."""
    monkeypatch.setattr(chunked_measurement, "CHUNK_ANSWERS", 3_000)
    with DaskCluster(config.cluster) as cluster:
        result = run_release(config, client=cluster.client)
    assert len(list((result.path / "measurements.parquet").glob("part-*.parquet"))) > 2
    return result.path


def _worker_tasks(address: str) -> set[str]:
    """The name prefixes of the tasks the workers ran (their logs, since they started)."""
    from distributed import Client

    def names(dask_worker) -> set[str]:
        return {str(entry[0]).strip("('").split("-")[0] for entry in dask_worker.state.log}

    with Client(address) as client:
        return set().union(*client.run(names).values())


def _refuse_local_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any Dask graph run by this process's own (threaded or synchronous) scheduler
    fail, so an audit that passes computed everything on the cluster."""
    import dask.local
    import dask.threaded

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Dask graph was computed in the auditing process")

    monkeypatch.setattr(dask.local, "get_async", refuse)
    monkeypatch.setattr(dask.threaded, "get_async", refuse)


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["audit", *argv])
    return status, capsys.readouterr().out


@pytest.mark.slow
def test_the_audit_of_a_version_made_on_the_workers_runs_there(
    tmp_path: Path,
    scheduler: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path / "named", f"{{address: '{scheduler}', arrays: workers}}")
    folder = _release(config, monkeypatch)
    before = _worker_tasks(scheduler)
    assert "_compare_part" not in before

    # The cluster the version's config names; nothing is computed in the audit's process.
    _refuse_local_computing(monkeypatch)
    status, out = _audit(capsys, str(folder))
    assert status == 0, out
    assert out.rstrip().endswith("audit passed")
    assert "_compare_part" in _worker_tasks(scheduler)

    # One value changed in a measurement part: the files check and the recomputation on a
    # worker each fail with one sentence naming the part.
    part = sorted((folder / "measurements.parquet").glob("part-*.parquet"))[1]
    nudge_part(part, "value", 7, 1)
    status, out = _audit(capsys, str(folder))
    assert status == 1
    failed = [line for line in out.splitlines() if line.startswith(("✗", "FAIL"))]
    assert [line.split()[1] for line in failed] == ["files", "answers"]
    for line in failed:
        assert part.name in line and line.count(". ") == 0, line


@pytest.mark.slow
def test_the_operator_names_the_scheduler_the_audit_runs_on(
    tmp_path: Path,
    scheduler: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A release made on a cluster its config does not name (the default is a LocalCluster
    of threads in the flow's process) is audited on the scheduler ``--scheduler`` gives."""
    from distributed import Client

    config = _config(tmp_path / "given", "{arrays: workers}")
    monkeypatch.setattr(chunked_measurement, "CHUNK_ANSWERS", 3_000)
    with Client(scheduler) as client:
        folder = run_release(config, client=client).path
        client.run(lambda dask_worker: dask_worker.state.log.clear())
    _refuse_local_computing(monkeypatch)
    status, out = _audit(capsys, str(folder), "--scheduler", scheduler)
    assert status == 0, out
    assert "_compare_part" in _worker_tasks(scheduler)

    # A caller's client, and what the terminal's bar is told: each check, then each part.
    shown: list[tuple[int, int, str]] = []
    with Client(scheduler) as client:
        report = audit_release(folder, client=client, progress=lambda *step: shown.append(step))
    assert report.ok, report.failed()
    parts = len(list((folder / "answers.parquet").glob("part-*.parquet")))
    assert shown[0] == (0, 8, "manifest") and shown[-1] == (8, 8, "")
    compared = [what for _, _, what in shown if what.startswith("answers: ")]
    assert compared == [f"answers: {done}/{parts} parts" for done in range(1, parts + 1)]

    # An answer changed in a part: named by both checks.
    part = sorted((folder / "answers.parquet").glob("part-0001-*.parquet"))[0]
    nudge_part(part, "estimate", 0, 1.0)
    status, out = _audit(capsys, str(folder), "--scheduler", scheduler)
    assert status == 1
    failed = [line for line in out.splitlines() if line.startswith(("✗", "FAIL"))]
    assert [line.split()[1] for line in failed] == ["files", "answers"]
    assert all(part.name in line for line in failed), failed


def test_a_scheduler_that_is_not_an_address_is_refused_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["audit", str(tmp_path), "--scheduler", "not a scheduler"])
    assert status == 2
    error = capsys.readouterr().err
    assert error.startswith("dpmm: error: cluster.address:") and error.count("\n") == 1


def test_the_audit_never_starts_a_cluster_class_a_release_folder_names(tmp_path: Path) -> None:
    """Any importable callable could be named there (with its options as arguments)."""
    from dpmm import audit as audit_module
    from dpmm.settings import cluster_settings

    named = cluster_settings({"class": "os.system", "options": {"command": "touch x"}})
    state = audit_module._State(tmp_path, None)
    with pytest.raises(audit_module._FailedCheckError, match="--scheduler ADDRESS"):
        audit_module._cluster_client(state, named)
    assert state.client is None
