"""deploy/prefect.yaml on a real ``prefect server start``: registered, listed and scheduled.

Read back through the server's REST API. This is what breaks first when the registry
serves a Prefect server dependency dpmm's pins leave out (see pyproject.toml): with
SQLAlchemy 2.1 the scheduler fails on every loop and creates no run; with fastapi 0.151+
``prefect deploy`` and ``prefect deployment ls`` fail with a 422.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from flows.artifact_keys import artifact_key

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "deploy" / "prefect.yaml"
PREFECT = [sys.executable, "-m", "prefect"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(url: str, path: str, body: dict | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}{path}", data=data, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict, Path]]:
    """A real Prefect server with its own home and database: ``(API URL, env, log)``."""
    home = tmp_path_factory.mktemp("prefect-home")
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "1",
    }
    log = home / "server.log"
    port = url.rsplit(":", 1)[1].split("/")[0]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", port],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the kill below takes its uvicorn children too
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _api(url, "/health")
                break
            except OSError:
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the Prefect server did not start"
                time.sleep(0.5)
        yield url, env, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _prefect(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def deployed(server, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    """deploy/prefect.yaml registered as its README says (``prefect deploy --all``), with
    its worker's checkout folder set to this one, as the file says to change it."""
    url, env, log = server
    project = yaml.safe_load(PREFECT_FILE.read_text())
    (step,) = project["pull"]
    step["prefect.deployments.steps.set_working_directory"]["directory"] = str(ROOT)
    prefect_file = tmp_path_factory.mktemp("deploy") / "prefect.yaml"
    prefect_file.write_text(yaml.safe_dump(project, sort_keys=False))
    for pool in {d["work_pool"]["name"] for d in project["deployments"]}:
        done = _prefect(env, "work-pool", "create", pool, "--type", "process")
        assert done.returncode == 0, done.stderr[-2000:]
    done = _prefect(env, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_file))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return url, env, log


def test_deployments_register_list_and_get_scheduled_runs(deployed) -> None:
    url, env, log = deployed
    done = _prefect(env, "deployment", "ls")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "census-monthly" in done.stdout and "audit" in done.stdout

    deployments = {d["name"]: d for d in _api(url, "/deployments/filter", {"limit": None})}
    assert set(deployments) == {"census-monthly", "audit"}
    monthly = deployments["census-monthly"]
    assert monthly["global_concurrency_limit"]["limit"] == 1  # one release at a time
    assert monthly["concurrency_options"]["collision_strategy"] == "ENQUEUE"
    assert monthly["parameters"] == {"config_path": "deploy/configs/census-monthly.yaml"}
    (schedule,) = monthly["schedules"]
    assert schedule["active"]
    assert schedule["schedule"]["cron"] == "0 6 1 * *"
    assert schedule["schedule"]["timezone"] == "America/New_York"

    # The server's scheduler (a loop every second here) creates the coming runs.
    query = {
        "deployments": {"id": {"any_": [monthly["id"]]}},
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
    }
    deadline = time.monotonic() + 90
    runs: list = []
    while not runs and time.monotonic() < deadline:
        runs = _api(url, "/flow_runs/filter", query)
        time.sleep(1)
    assert runs, "the scheduler created no run; its log ends:\n" + log.read_text()[-3000:]
    starts = sorted(
        datetime.fromisoformat(run["expected_start_time"]).astimezone(ZoneInfo("America/New_York"))
        for run in runs
    )
    assert all((s.day, s.hour, s.minute) == (1, 6, 0) for s in starts)
    assert len({(s.year, s.month) for s in starts}) == len(starts)  # one run per month
    assert "Traceback" not in log.read_text()


def _server_text(home: Path) -> str:
    """Every text value stored in the server's database, one per line."""
    import sqlite3

    (database,) = home.glob("*.db")
    connection = sqlite3.connect(database)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
        lines = []
        for table in tables:
            try:
                rows = connection.execute(f'SELECT * FROM "{table}"').fetchall()
            except sqlite3.DatabaseError:
                continue  # an index or a virtual table's shadow
            lines += [str(value) for row in rows for value in row if value is not None]
        return "\n".join(lines)
    finally:
        connection.close()


def _release_files(folder: Path, env: dict, name: str, codes: object, budget: str) -> Path:
    """The config of a prefix workload over ``codes`` (one attribute x of 16 values), its
    data, and a new ledger granting ``budget`` (``{epsilon: 1}`` or ``{rho: 1/8}``) twice."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "data").mkdir()
    pq.write_table(pa.table({"x": codes}), folder / "data" / "part.parquet")
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\ndomain: {{x: 16}}\nprivacy: {budget}\n"
        "workload: [{name: cdf, kind: prefix, attribute: x}]\n"
        "strategy: {method: hierarchical}\ndata: {path: data}\nledger: {path: budget.db}\n"
    )
    kind, amount = budget.strip("{}").split(": ")
    dpmm = [sys.executable, "-m", "dpmm"]
    grant = ["ledger", "grant", "budget.db", name, f"--{kind}", str(2 * Fraction(amount))]
    for args in (["ledger", "init", "budget.db"], grant):
        assert subprocess.run([*dpmm, *args], cwd=folder, env=env, timeout=60).returncode == 0
    return folder / f"{name}.yaml"


def _cli_release(
    folder: Path, env: dict, name: str, codes: object, budget: str
) -> subprocess.CompletedProcess:
    """``dpmm release`` of :func:`_release_files`' config."""
    config = _release_files(folder, env, name, codes, budget)
    return subprocess.run(
        [sys.executable, "-m", "dpmm", "release", config.name],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_data_error_reaches_the_server_without_a_value_from_the_data(
    server, tmp_path: Path
) -> None:
    import numpy as np

    url, env, _ = server
    codes = np.random.default_rng(8).integers(0, 16, 400)
    codes[[5, 50, 60, 70, 80, 90, 99]] = 9135771  # 7 rows outside the domain
    done = _cli_release(tmp_path, env, "bad", codes, "{epsilon: 1}")
    assert done.returncode == 2
    # The operator's terminal has the count and the value, on the error's one line.
    assert done.stderr.splitlines()[-1].endswith("[7 rows, e.g. 9135771]"), done.stderr[-2000:]
    runs = _api(url, "/flow_runs/filter", {"flow_runs": {"name": {"like_": ""}}})
    assert runs, "the release left no flow run on the server"
    stored = _server_text(Path(env["PREFECT_HOME"]))
    assert "column 'x': rows have codes outside 0..15" in stored  # the error did reach it
    assert "9135771" not in stored and "7 rows" not in stored
    artifacts = {a["key"]: a for a in _api(url, "/artifacts/filter", {}) if a.get("key")}
    failure = artifacts["dpmm-release-bad-failure"]["data"]
    assert "rows have codes outside 0..15" in failure and "9135771" not in failure


def test_a_cli_release_logs_and_leaves_labelled_artifacts_and_no_data_value(
    server, tmp_path: Path
) -> None:
    """A CLI release's log and artifacts, read back through the REST API: the log has the
    stages, the strategy, the expected errors and the absolute folder; the budget table's
    rows are labelled and exact (as ``dpmm ledger show`` prints them); the release artifact
    gives the absolute folder; and nothing holds a count of the data."""
    import numpy as np

    url, env, _ = server
    codes = np.random.default_rng(9).integers(0, 16, 1_000_003, dtype=np.int8)
    done = _cli_release(tmp_path, env, "good", codes, "{rho: 1/8}")
    assert done.returncode == 0, done.stderr[-2000:]
    every = _api(url, "/artifacts/filter", {})
    artifacts = {a["key"]: a for a in every if a.get("key")}
    run = artifacts["dpmm-release-good"]["flow_run_id"]
    progress = {
        a["description"]: a["data"]
        for a in every
        if a["type"] == "progress" and a["flow_run_id"] == run
    }
    assert progress["Progress of stage ingest-histogram"] == 100.0
    assert progress["Progress of stage reconstruct"] == 100.0
    budget = json.loads(artifacts["dpmm-budget-good"]["data"])
    assert [row["budget"] for row in budget] == [
        "granted", "this release", "reserved", "spent", "remaining"
    ]  # fmt: skip
    assert [row["exact"] for row in budget] == ["1/4", "1/8", "0", "1/8", "1/8"]
    assert [row["decimal"] for row in budget] == ["0.25", "0.125", "0", "0.125", "0.125"]
    folder = (tmp_path / "releases" / "good" / "v0001").resolve()
    assert str(folder) in artifacts["dpmm-release-good"]["data"]
    assert "Dask cluster's dashboard was at <http://" in artifacts["dpmm-release-good"]["data"]
    # The report's figures, as PNG image artifacts: the very images of its report.html.
    images = {a["key"]: a["data"] for a in every if a["type"] == "image"}
    figures = ("error-vs-budget", "budget-shares", "answers")
    assert set(images) == {f"dpmm-report-good-{figure}" for figure in figures}
    page = (folder / "report.html").read_text(encoding="utf-8")
    for image in images.values():
        assert image.startswith("data:image/png;base64,") and f'src="{image}"' in page
        assert base64.b64decode(image.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    # The stages are task runs of the release's flow run itself.
    body = {"flow_runs": {"id": {"any_": [run]}}}
    stages = {t["name"].rsplit("-", 1)[0] for t in _api(url, "/task_runs/filter", body)}
    assert {"reserve-budget", "ingest-histogram", "measure-strategy", "write-release"} <= stages
    # The CLI run's log reached the server: stages with durations, strategy, errors, folder.
    messages = [entry["message"] for entry in _api(url, "/logs/filter", {"limit": 200})]
    assert "stage ingest-histogram: started" in messages
    assert any(m.startswith("stage write-release: done in ") for m in messages)
    assert "stage plan-strategy: hierarchical" in messages  # the candidate being tried
    assert "strategy hierarchical, reconstruction least_squares" in messages
    assert any(m.startswith("group cdf: expected RMSE ") for m in messages)
    assert f"release written to {folder}" in messages
    stored = _server_text(Path(env["PREFECT_HOME"]))
    assert "1000003" not in stored and "1,000,003" not in stored  # the row count


def test_a_deployment_run_completes_on_a_worker_and_leaves_its_artifacts(
    deployed, tmp_path: Path
) -> None:
    """The monthly deployment, run now on the documented worker, with its config pointed
    at a small dataset: the run completes and its artifacts are on the server."""
    import numpy as np

    url, env, _ = deployed
    codes = np.random.default_rng(10).integers(0, 16, 5_000)
    config = _release_files(tmp_path, env, "deployed", codes, "{epsilon: 1}")
    run = _prefect(
        env, "deployment", "run", "dpmm-release/census-monthly", "--param", f"config_path={config}"
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-2000:]
    worker = _prefect(env, "worker", "start", "--pool", "dpmm-process", "--run-once")
    assert worker.returncode == 0, (worker.stdout + worker.stderr)[-3000:]
    runs = _api(url, "/flow_runs/filter", {"sort": "START_TIME_DESC"})
    (flow_run,) = [r for r in runs if r["parameters"].get("config_path") == str(config)]
    assert flow_run["state_type"] == "COMPLETED", (worker.stdout + worker.stderr)[-3000:]
    body = {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}}
    artifacts = {a["key"]: a for a in _api(url, "/artifacts/filter", body) if a.get("key")}
    folder = (tmp_path / "releases" / "deployed" / "v0001").resolve()
    assert str(folder) in artifacts["dpmm-release-deployed"]["data"]
    budget = json.loads(artifacts["dpmm-budget-deployed"]["data"])
    assert [row["exact"] for row in budget] == ["2", "1", "0", "1", "1"]


def test_the_plan_flow_leaves_its_accuracy_targets_in_an_artifact(server, tmp_path: Path) -> None:
    url, env, _ = server
    config = tmp_path / "targets.yaml"
    config.write_text(
        "name: Targets_2030.v1\ndomain: {sex: 2, age: 16}\nprivacy: {epsilon: 1}\nworkload:\n"
        "  - {name: cdf, kind: prefix, attribute: age, by: [sex], "
        "target: {half_width: 30, confidence: 0.95}}\n"
        "  - {name: pairs, kind: marginals, k: 2, target: {rmse: 4}}\n"
        "  - {name: people, kind: total}\n"
        f"strategy: {{method: hierarchical}}\nrelease: {{root: {tmp_path / 'releases'}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"from flows.plan import plan_flow; plan_flow({str(config)!r})"],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    artifacts = {a["key"]: a for a in _api(url, "/artifacts/filter", {}) if a.get("key")}
    key = artifact_key("dpmm-plan", "Targets_2030.v1")
    assert key.startswith("dpmm-plan-targets-2030-v1-")  # the name's digest after it
    rows = json.loads(artifacts[key]["data"])
    by_group = {row["group"]: row for row in rows}
    assert by_group["cdf"]["target"] == "±30 at 95 %" and by_group["pairs"]["target"] == "RMSE ≤ 4"
    assert by_group["pairs"]["least budget"]["kind"] == "pure"
    assert isinstance(by_group["cdf"]["met"], bool) and "target" not in by_group["people"]
