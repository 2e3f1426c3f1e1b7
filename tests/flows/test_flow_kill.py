"""Killing the release flow's process after measurement: the re-run spends nothing more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.measure import load_measurement
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import PureDP

pytestmark = pytest.mark.slow

#: 4·10⁶ cells and as many answers: writing the release takes seconds after measuring.
CONFIG = """\
name: ranges
domain: {bin: 2048, group: 2048}
privacy: {epsilon: 1}
workload: [{name: cdf, kind: kron, factors: {bin: prefix, group: identity}}]
strategy: {method: hierarchical}
data: {path: data/}
release: {root: releases, reconstruction: least_squares, histogram: always}
ledger: {path: budget.db, dataset: bins}
"""


def _release(folder: Path) -> subprocess.Popen:
    # Both runs report to the test session's local Prefect server (tests/conftest.py),
    # which the first release to need it starts, outside the release's process group.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "dpmm", "release", str(folder / "ranges.yaml")],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: the kill below takes its children
    )


def test_a_flow_killed_after_measuring_is_resumed_with_its_measurement(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "data").mkdir()
    bins = np.minimum(rng.zipf(1.3, 200_000), 2047).astype(np.int64)
    groups = rng.integers(0, 2048, 200_000)
    pq.write_table(pa.table({"bin": bins, "group": groups}), tmp_path / "data" / "part-0.parquet")
    (tmp_path / "ranges.yaml").write_text(CONFIG)
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("bins", PureDP(1))

    process = _release(tmp_path)
    deadline = time.monotonic() + 240
    records: list[Path] = []
    while not records and process.poll() is None and time.monotonic() < deadline:
        records = list((tmp_path / "releases").glob("ranges/.runs/*/measurements/*.measurement"))
        time.sleep(0.005)
    assert records, "the flow ended or timed out before measuring"
    # The whole group, as a terminal's kill would: the release and its Dask workers.
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not list((tmp_path / "releases" / "ranges").glob("v*")), "killed too late"
    measured = load_measurement(records[0].parent, "strategy")

    rerun = _release(tmp_path)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err.decode()[-2000:]
    version = tmp_path / "releases" / "ranges" / "v0001"
    assert f"release written to {version}" in out.decode()
    with Ledger.open(tmp_path / "budget.db") as ledger:
        kinds = [entry.kind for entry in ledger.history("bins")]
    assert kinds == ["grant", "reserve", "spend", "publish"]  # spent once, one version
    assert np.array_equal(load_measurement(records[0].parent, "strategy").values, measured.values)
    assert (
        subprocess.run(
            [sys.executable, "-m", "dpmm", "audit", str(version)], capture_output=True
        ).returncode
        == 0
    )
    # The killed run no longer shows as running: the re-run marked it crashed.
    # Read back through the REST API of the session's server.
    url = f"http://127.0.0.1:{os.environ['PREFECT_SERVER_API_PORT']}/api/flow_runs/filter"
    body = {"flow_runs": {"tags": {"all_": ["dpmm-release:ranges"]}}, "sort": "START_TIME_ASC"}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        runs = json.loads(response.read())
    config_path = str(tmp_path / "ranges.yaml")
    states = [r["state_type"] for r in runs if r["parameters"]["config_path"] == config_path]
    assert states == ["CRASHED", "COMPLETED"]
