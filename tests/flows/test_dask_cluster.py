"""Releases on a real Dask cluster: a scheduler and worker processes, one of them killed.

Counting is submitted from the flow's process, one task per partition, so no worker thread
waits on other tasks: a cluster of one 1-thread worker completes (a counting task that
held the only thread while it waited on its partitions never did), and when a worker and
its nanny are killed during ingest the scheduler gives the lost partitions to the worker
that is left, and the release completes, spends its budget once and audits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP

pytestmark = pytest.mark.slow

FILES = 40
ROWS_PER_FILE = 400_000
#: Longest a release may take here before the test calls it a hang.
RELEASE_TIMEOUT = 600


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(*argv: str, log: Path) -> subprocess.Popen:
    """A Dask process in its own session, so that killing its group takes its children."""
    return subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_" + argv[0], *argv[1:]],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@contextlib.contextmanager
def _scheduler(logs: Path) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """A scheduler, and the list its test adds 1-thread workers to (each with its nanny);
    all of them are killed at the end."""
    address = f"tcp://127.0.0.1:{_free_port()}"
    port = address.rsplit(":", 1)[1]
    argv = ["scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"]
    scheduler = _start(*argv, log=logs / "scheduler.log")
    workers: list[subprocess.Popen] = []
    try:
        yield address, workers
    finally:
        for process in [*workers, scheduler]:
            _kill(process)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    with _scheduler(tmp_path) as started:
        yield started


def _add_workers(address: str, workers: list[subprocess.Popen], count: int, logs: Path) -> None:
    from distributed import Client

    for _ in range(count):
        name = str(len(workers))
        argv = ["worker", address, "--name", name, "--nthreads", "1", "--no-dashboard"]
        workers.append(_start(*argv, log=logs / f"worker-{name}.log"))
    with Client(address, timeout=60) as client:
        client.wait_for_workers(len(workers), timeout=120)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """Partitions big enough that ingest outlasts a kill, and their true counts."""
    folder = tmp_path_factory.mktemp("cluster-data")
    rng = np.random.default_rng(5)
    truth = np.zeros(8 * 6, dtype=np.int64)
    for index in range(FILES):
        a = rng.integers(0, 8, ROWS_PER_FILE, dtype=np.int8)
        b = rng.integers(0, 6, ROWS_PER_FILE, dtype=np.int8)
        truth += np.bincount(a.astype(np.int64) * 6 + b, minlength=truth.size)
        pq.write_table(pa.table({"a": a, "b": b}), folder / f"part-{index:03d}.parquet")
    return folder, truth


def _config(tmp_path: Path, data: Path, address: str) -> Path:
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("cells", ZCDP(1))
    config = tmp_path / "cells.yaml"
    config.write_text(
        "name: cells\ndomain: {a: 8, b: 6}\nprivacy: {rho: 1/2}\n"
        "workload: [{name: cells, kind: marginals, k: 2}]\n"
        "strategy: {method: identity}\n"
        f"data: {{path: {data}}}\nledger: {{path: budget.db}}\n"
        f"cluster: {{address: '{address}'}}\n"
    )
    return config


def _release(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpmm", "release", config.name],
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _check_released(tmp_path: Path, done: subprocess.Popen, truth: np.ndarray) -> None:
    from dpmm.release.tables import read_answers

    _, err = done.communicate(timeout=RELEASE_TIMEOUT)
    assert done.returncode == 0, err
    version = tmp_path / "releases" / "cells" / "v0001"
    answers = read_answers(version / "answers.parquet")
    estimates = answers.column("estimate").to_numpy()
    errors = answers.column("standard_error").to_numpy()
    # Every partition was counted exactly once: the answers sit within 5 s.e. of the truth.
    assert np.all(np.abs(estimates - truth) <= 5 * errors)
    audit = subprocess.run(
        [sys.executable, "-m", "dpmm", "audit", str(version)], capture_output=True, text=True
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    with Ledger.open(tmp_path / "budget.db") as ledger:
        balance = ledger.balance("cells")
    assert balance.spent == ZCDP("1/2").rho and balance.reserved == 0


def test_a_cluster_of_one_single_thread_worker_completes(tmp_path: Path, cluster, data) -> None:
    address, workers = cluster
    _add_workers(address, workers, 1, tmp_path)
    folder, truth = data
    _check_released(tmp_path, _release(_config(tmp_path, folder, address)), truth)


def test_a_worker_killed_during_ingest_leaves_its_partitions_to_the_other(
    tmp_path: Path, cluster, data
) -> None:
    from distributed import Client

    address, workers = cluster
    _add_workers(address, workers, 2, tmp_path)
    folder, truth = data
    with Client(address, timeout=60) as observer:
        victim, about = next(iter(observer.scheduler_info()["workers"].items()))
        release = _release(_config(tmp_path, folder, address))
        killed = threading.Event()

        def kill_when_busy() -> None:
            deadline = time.monotonic() + RELEASE_TIMEOUT
            while time.monotonic() < deadline and release.poll() is None:
                busy = observer.processing().get(victim, ())
                if any("dpmm-ingest-partition" in str(key) for key in busy):
                    _kill(workers[int(about["name"])])  # the worker and its nanny
                    killed.set()
                    return
                time.sleep(0.005)

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        killer.join(RELEASE_TIMEOUT)
        assert killed.is_set(), "the release finished before a partition reached the victim"
        _check_released(tmp_path, release, truth)


def test_a_cluster_left_without_workers_fails_in_one_sentence_and_gives_the_budget_back(
    tmp_path: Path, data, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's no-workers-timeout bounds the wait: the release stops with one
    sentence, nothing reserved or spent, and the run can be started again."""
    from distributed import Client

    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT", "5s")
    with _scheduler(tmp_path) as (address, workers):
        _add_workers(address, workers, 1, tmp_path)
        folder, _ = data
        release = _release(_config(tmp_path, folder, address))
        with Client(address, timeout=60) as observer:
            deadline = time.monotonic() + RELEASE_TIMEOUT
            while time.monotonic() < deadline and release.poll() is None:
                busy = [k for keys in observer.processing().values() for k in keys]
                if any("dpmm-ingest-partition" in str(key) for key in busy):
                    _kill(workers[0])
                    break
                time.sleep(0.005)
        started = time.monotonic()
        _, err = release.communicate(timeout=RELEASE_TIMEOUT)
    assert release.returncode == 2, err[-2000:]
    assert err.count("\n") == 1 and "has had no worker" in err, err[-2000:]
    assert time.monotonic() - started < 120
    with Ledger.open(tmp_path / "budget.db") as ledger:
        balance = ledger.balance("cells")
    assert balance.spent == 0 and balance.reserved == 0
