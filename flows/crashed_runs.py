"""Mark the Prefect runs of releases whose process was killed as crashed.

A flow process killed with SIGKILL (an out-of-memory kill, ``kill -9``, a lost node)
cannot report its end, and its run stays "Running" in the UI forever. Each release flow
run is tagged with its release's name and with the process that runs it (host, pid and
the pid's start time, so a reused pid is not mistaken for it). When the next run of that
release starts (which also resumes the killed run's work), every other run of the release
still "Running" whose process is gone from this host is set to Crashed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
    FlowRunFilterTags,
)
from prefect.client.schemas.objects import StateType
from prefect.context import FlowRunContext
from prefect.states import Crashed

__all__ = ["mark_crashed_runs"]

RELEASE_TAG = "dpmm-release:"
PROCESS_TAG = "dpmm-process:"


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19]  # field 22 of stat(5), counted after the command name


def _process_tag(pid: int) -> str:
    return f"{PROCESS_TAG}{socket.gethostname()}:{pid}:{_started(pid)}"


def _is_gone(tag: str) -> bool:
    """Whether the process a run's tag names is no longer running on this host (False
    when the run belongs to another host: its liveness cannot be told from here)."""
    host, pid, started = tag.removeprefix(PROCESS_TAG).rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit() or started == "None":
        return False
    return _started(int(pid)) != started


def mark_crashed_runs(release: str) -> None:
    """Tag the current flow run with its release and process, then set to Crashed every
    other run of ``release`` still running whose process on this host is gone."""
    run = FlowRunContext.get().flow_run
    release_tag = f"{RELEASE_TAG}{release}"
    running = FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
    with get_client(sync_client=True) as client:
        tags = sorted({*run.tags, release_tag, _process_tag(os.getpid())})
        client.update_flow_run(run.id, tags=tags)
        others = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[release_tag]), state=running)
        )
        for other in others:
            process = [t for t in other.tags if t.startswith(PROCESS_TAG)]
            if other.id == run.id or len(process) != 1 or not _is_gone(process[0]):
                continue
            message = "its process ended without reporting (killed); a later run resumed it"
            client.set_flow_run_state(other.id, Crashed(message=message), force=True)
            get_run_logger().warning("flow run %s of release %s crashed", other.name, release)
