"""The Prefect server a release run reports to.

A configured ``PREFECT_API_URL`` (the environment or the Prefect profile) is used as it is.
Without one, releases share a local server on ``127.0.0.1`` at Prefect's port
(``PREFECT_SERVER_API_PORT``, 4200 unless set): the first release that finds none answering
starts ``prefect server start`` in the background, and every later release reuses it, so a
run pays for the server's start-up once, not each time (Prefect's temporary per-run server
costs about 5 s of every run and, under load, timed out). Its log is
``$PREFECT_HOME/dpmm-server.log``, its UI is at the printed address, and ``prefect server
stop`` stops it: it is recorded where that command looks.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.cli._server_utils import SERVER_PID_FILE_NAME  # where `prefect server stop` looks
from prefect.settings import PREFECT_API_URL, PREFECT_HOME, PREFECT_SERVER_API_PORT

from dpmm.errors import EngineError

__all__ = ["prefect_api_url"]

#: How long a starting server may take to answer (its first start creates its database).
STARTUP_SECONDS = 120.0
HOST = "127.0.0.1"


def prefect_api_url() -> str:
    """The configured Prefect API, or the shared local server's, started if none answers.

    Raises:
        EngineError: no server answers at the local address and none could be started there.
    """
    configured = PREFECT_API_URL.value()
    if configured:
        return str(configured)
    url = f"http://{HOST}:{PREFECT_SERVER_API_PORT.value()}/api"
    if _answers(url):
        return url
    home = Path(PREFECT_HOME.value())
    home.mkdir(parents=True, exist_ok=True)
    with _exclusive(home / "dpmm-server.lock"):  # one starter among concurrent releases
        if not _answers(url):
            _start(url, home)
    return url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as response:
            return response.status == 200
    except OSError:  # refused, timed out, or an HTTP error status
        return False


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start(url: str, home: Path) -> None:
    """Start the server detached from this process (it outlives the release) and wait until
    it answers."""
    address = url.removesuffix("/api")
    port = address.rsplit(":", 1)[1]
    log_path = home / "dpmm-server.log"
    sys.stderr.write(
        f"starting a local Prefect server at {address} for this and later releases "
        "(its UI; `prefect server stop` stops it)\n"
    )
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", port],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the release does not stop the server
            env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"},
        )
    (home / SERVER_PID_FILE_NAME).write_text(str(server.pid))
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if _answers(url):
            return
        if server.poll() is not None:
            break
        time.sleep(0.2)
    else:
        server.terminate()
    (home / SERVER_PID_FILE_NAME).unlink(missing_ok=True)
    raise EngineError(
        f"No Prefect server answers at {url} and one could not be started there "
        f"(see {log_path}); start one with `prefect server start` or set PREFECT_API_URL."
    )
