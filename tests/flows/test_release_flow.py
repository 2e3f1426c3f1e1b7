"""The release flow and the release commands, end to end through Prefect's engine."""

from __future__ import annotations

import contextlib
import io
import json
from fractions import Fraction
from pathlib import Path

import pytest

from dpmm.cli import main
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP

pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.usefixtures("restore_logging")]


def _release_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("demo-census/v*"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``dpmm demo`` once through the release flow: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("flow") / "demo"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--folder", str(folder), "--rows", "30000"]) == 0
    return folder, out.getvalue()


@pytest.mark.slow
def test_demo_release_through_the_flow_audits(demo: tuple[Path, str]) -> None:
    folder, out = demo
    first = folder / "releases" / "demo-census" / "v0001"
    assert f"release written to {first}" in out and "age-cdf-by-sex" in out
    assert sorted(p.name for p in first.iterdir()) == [
        "answers.parquet",
        "histogram.parquet",
        "manifest.json",
        "measurements.parquet",
        "report.html",
        "strategy.npz",
    ]
    assert main(["audit", str(first)]) == 0


@pytest.mark.slow
def test_rerun_post_processing_and_a_tampered_file(demo: tuple[Path, str], capsys) -> None:
    folder, _ = demo
    first = folder / "releases" / "demo-census" / "v0001"
    before = {p.name: p.read_bytes() for p in first.iterdir()}

    # A second release of the same config: a new version, a second spend, v0001 untouched.
    assert main(["release", str(folder / "census.yaml")]) == 0
    with Ledger.open(folder / "budget.db") as ledger:
        kinds = [entry.kind for entry in ledger.history("demo-census")]
    assert kinds.count("spend") == 2
    # Post-processing again: a third version, nothing reserved or spent; the ledger only
    # records the new manifest it publishes.
    second = folder / "releases" / "demo-census" / "v0002"
    assert main(["release", str(folder / "census.yaml"), "--from-measurements", str(second)]) == 0
    with Ledger.open(folder / "budget.db") as ledger:
        assert [e.kind for e in ledger.history("demo-census")] == [*kinds, "publish"]
    third = folder / "releases" / "demo-census" / "v0003"
    manifest = json.loads((third / "manifest.json").read_text())
    assert manifest["ledger"]["reused_from"] == str(second.resolve())
    assert (
        manifest["measurement"] == json.loads((second / "manifest.json").read_text())["measurement"]
    )
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert _release_dirs(folder / "releases") == [first, second, third]
    capsys.readouterr()

    assert main(["releases", "list", str(folder / "releases")]) == 0
    listing = capsys.readouterr().out
    assert "demo-census" in listing and "v0003" in listing
    # Two measurements spent ρ = 1/2 each; the post-processing version spent nothing.
    assert [line.split()[1] for line in listing.splitlines() if "ρ = 0 (re-run)" in line] == [
        "v0003"
    ]
    assert "spent in all: ρ = 1 of dataset 'demo-census'" in listing
    assert main(["releases", "diff", str(first), str(second)]) == 0
    assert main(["releases", "show", str(third)]) == 0
    shown = capsys.readouterr().out
    assert "spent: ρ = 0 of dataset 'demo-census' (post-processing of the measurement of" in shown

    # One flipped byte: the audit fails and says which file.
    answers = second / "answers.parquet"
    data = bytearray(answers.read_bytes())
    data[len(data) // 2] ^= 0x01
    answers.write_bytes(bytes(data))
    assert main(["audit", str(second)]) == 1
    assert "answers.parquet" in capsys.readouterr().out


def test_a_bad_config_fails_before_the_flow_starts(tmp_path: Path, capsys) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "name: x\ndomain: {a: 2}\nprivacy: {epsilon: -1}\nworkload: [{kind: total}]\n"
    )
    assert main(["release", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("dpmm: error: ") and "privacy.epsilon" in error
    assert error.count("\n") == 1
    assert not (tmp_path / "releases").exists()


@pytest.mark.slow
def test_bad_data_in_the_flow_is_one_line_on_the_terminal(tmp_path: Path) -> None:
    """Dask's failed compute and Prefect's failed task states stay off the terminal (their
    tracebacks are for -v); the operator reads one sentence, with the count and value."""
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    codes = np.random.default_rng(1).integers(0, 8, 300)
    codes[5] = 42
    pq.write_table(pa.table({"x": codes}), tmp_path / "data" / "p.parquet")
    (tmp_path / "r.yaml").write_text(
        "name: r\ndomain: {x: 8}\nprivacy: {epsilon: 1/2}\n"
        "workload: [{name: cdf, kind: prefix, attribute: x}]\n"
        "data: {path: data}\nledger: {path: budget.db}\n"
    )
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("r", PureDP(2))
    done = subprocess.run(
        [sys.executable, "-m", "dpmm", "release", "r.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("dpmm: error: File ") and "[1 row, e.g. 42]" in done.stderr
    with Ledger.open(tmp_path / "budget.db") as ledger:
        assert ledger.remaining("r") == 2  # the reservation was given back


def _grid_release(tmp_path: Path, shape: tuple[int, int], strategy: str) -> Path:
    """A ``cluster.arrays: workers`` config over an ``a × b`` grid of Poisson(5) counts
    (every prefix of ``a`` within each ``b``) on 2 worker processes, its budget granted."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = np.random.default_rng(3).poisson(5.0, size=shape)
    a, b = np.nonzero(counts)
    (tmp_path / "data").mkdir()
    rows = pa.table({"a": np.repeat(a, counts[a, b]), "b": np.repeat(b, counts[a, b])})
    pq.write_table(rows, tmp_path / "data" / "part-0.parquet")
    config = tmp_path / "grid.yaml"
    config.write_text(
        f"name: grid\ndomain: {{a: {shape[0]}, b: {shape[1]}}}\nprivacy: {{rho: 1/2}}\n"
        "workload: [{name: a-by-b, kind: prefix, attribute: a, by: [b]}]\n"
        f"strategy: {{method: {strategy}}}\ndata: {{path: '{tmp_path / 'data'}'}}\n"
        f"ledger: {{path: '{tmp_path / 'budget.db'}'}}\n"
        f"release: {{root: '{tmp_path / 'releases'}'}}\n"
        "cluster: {arrays: workers, n_workers: 2, processes: true, threads_per_worker: 1}\n"
    )
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("grid", ZCDP(1))
    return config


@pytest.mark.slow
def test_a_release_on_two_worker_processes_through_the_flow(tmp_path: Path) -> None:
    """``cluster.arrays: workers`` through Prefect's engine: the measurement stage gets the
    cluster's client (the counts are futures on its workers), and the version audits."""
    config = _grid_release(tmp_path, (64, 32), "hierarchical")
    assert main(["release", str(config)]) == 0
    version = tmp_path / "releases" / "grid" / "v0001"
    assert (version / "answers.parquet").is_dir() and (version / "measurements.parquet").is_dir()
    assert main(["audit", str(version)]) == 0


@pytest.mark.slow
def test_a_worker_killed_while_the_flow_measures_draws_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL one worker process while the flow's measurement stage writes its chunks:
    the nanny restarts it, the release completes with one spend, every chunk persisted
    before the kill is byte-identical in the release, and the version audits."""
    import os
    import signal
    import threading
    import time

    import psutil

    from dpmm.measure import chunked

    monkeypatch.setattr(chunked, "CHUNK_ANSWERS", 2**16)  # 64 chunks of 2²² answers
    config = _grid_release(tmp_path, (64, 2**16), "identity")
    outcome: dict[str, int] = {}
    thread = threading.Thread(target=lambda: outcome.update(code=main(["release", str(config)])))
    thread.start()
    deadline = time.monotonic() + 300
    chunks: list[Path] = []
    while len(chunks) < 2 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
        chunks = list(tmp_path.rglob("*.values"))
    children = psutil.Process().children(recursive=True)
    workers = [p for p in children if "spawn_main" in " ".join(p.cmdline())]
    assert chunks and workers, "the measurement ended before a worker could be killed"
    os.kill(workers[0].pid, signal.SIGKILL)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*.values")}
    thread.join(timeout=600)
    assert outcome == {"code": 0}
    assert 2 <= len(before) < 64, "the worker was killed after the measurement ended"
    assert {path: path.read_bytes() for path in before} == before
    with Ledger.open(tmp_path / "budget.db") as ledger:
        assert ledger.remaining("grid") == Fraction(1, 2)  # one spend of ρ = 1/2
    version = tmp_path / "releases" / "grid" / "v0001"
    assert main(["audit", str(version)]) == 0
