"""The local Prefect server releases share: started once, reused, stopped by Prefect's CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_API_PORT,
    temporary_settings,
)

from dpmm.errors import EngineError
from flows.prefect_api import prefect_api_url

pytestmark = pytest.mark.slow


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def prefect_home(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A Prefect home and port of this test's own, with no API configured."""
    port = _free_port()
    settings = {PREFECT_HOME: str(tmp_path), PREFECT_SERVER_API_PORT: port, PREFECT_API_URL: None}
    with temporary_settings(settings):
        yield tmp_path, port


def test_the_first_release_starts_a_server_and_later_ones_reuse_it(
    prefect_home: tuple[Path, int],
) -> None:
    home, port = prefect_home
    started = time.perf_counter()
    url = prefect_api_url()
    first = time.perf_counter() - started
    assert url == f"http://127.0.0.1:{port}/api"
    pid = int((home / "server.pid").read_text())
    try:
        started = time.perf_counter()
        assert prefect_api_url() == url
        again = time.perf_counter() - started
        assert int((home / "server.pid").read_text()) == pid  # the same server, not a new one
        print(f"\nstarted in {first:.2f} s, reused in {again:.3f} s")
    finally:
        stop = subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"],
            env={**os.environ, "PREFECT_HOME": str(home)},
            capture_output=True,
            text=True,
        )
    assert stop.returncode == 0, stop.stderr
    assert not (home / "server.pid").exists()
    deadline = time.monotonic() + 30
    while _answers(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _answers(url), "`prefect server stop` left the server running"


def test_a_port_taken_by_something_else_is_one_sentence(prefect_home: tuple[Path, int]) -> None:
    home, port = prefect_home
    with socket.socket() as squatter:  # listens, never answers HTTP
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(EngineError) as refused:
            prefect_api_url()
    message = str(refused.value)
    assert f"No Prefect server answers at http://127.0.0.1:{port}/api" in message
    assert "PREFECT_API_URL" in message and "\n" not in message
    assert not (home / "server.pid").exists()


def test_a_configured_api_is_used_as_it_is(prefect_home: tuple[Path, int]) -> None:
    home, _ = prefect_home
    with temporary_settings({PREFECT_API_URL: "http://prefect.example:4200/api"}):
        assert prefect_api_url() == "http://prefect.example:4200/api"
    assert not (home / "server.pid").exists()


@pytest.mark.usefixtures("restore_logging")
def test_a_release_sends_no_usage_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLI turns off Prefect's anonymous usage data, client and server, unless the
    operator set it: a release sends nothing off the machine."""
    import flows.prefect_api
    import flows.release
    from dpmm.cli_release import _run_flow

    for name in ("DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(flows.prefect_api, "prefect_api_url", lambda: "http://127.0.0.1:9/api")
    monkeypatch.setattr(flows.release, "release_flow", lambda config, measured: str(tmp_path))
    assert _run_flow(tmp_path / "release.yaml", None) == tmp_path
    assert os.environ["DO_NOT_TRACK"] == "1"
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
