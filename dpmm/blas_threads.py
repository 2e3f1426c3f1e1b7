"""How many BLAS/OpenMP threads this process, or the Dask worker task running it, may use.

BLAS libraries start one thread per core of the machine. That is right on an idle
machine the process has to itself and badly wrong otherwise: on a 2-core machine with one
other BLAS-heavy process (``benchmarks/contention.py``'s), ``auto`` selection for
AllRange(64)⊗AllRange(64) took 44–49 s with numpy's 2 OpenBLAS threads against 5–8 s
with 1; with only other jobs' load (load average ≈ 4), a 3000 × 3000 ``eigh`` took 13 s
against 4–6 s. OpenBLAS's idle threads busy-wait, but that is only part of it:
``OPENBLAS_THREAD_TIMEOUT=4`` (read once, when numpy loads OpenBLAS, so only the
operator's environment can set it) brought the selection to 7 s but the ``eigh`` only
to 10 s: every parallel call still waits for its slowest thread. So dpmm's BLAS-heavy
stages (strategy selection, the plan, reconstruction) run inside :func:`blas_limit`,
which sizes the pools from:

* the cores the process owns: its CPU affinity (``os.sched_getaffinity``) and the cgroup
  CPU quota of its container (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` /
  ``cpu.cfs_period_us``), rounded up;
* minus the cores other processes keep busy as the stage starts (their runnable threads
  in ``/proc/loadavg``, without this process's own), as GNU OpenMP's ``OMP_DYNAMIC`` sizes
  its teams from the load average; with a machine to itself a stage gets every core;
* in a Dask worker, that share divided among the worker's threads (each task gets
  ``cores // nthreads``, at least 1);
* unless the operator sets :data:`ENVIRONMENT_VARIABLE`: a positive integer is used as
  is, ``off`` leaves the pools as the libraries set them.

Nested :func:`blas_limit` blocks reuse the outermost decision. Limits set inside one
still apply: the template optimizers' ``pool_limit(1)`` around thousands of
tiny solves, and ``pool_limit(None)`` (large Gaussian factors of OPT_⊗), which keeps this one.
OpenBLAS has one thread count per process, so threads of one process that run stages at
once (a Dask worker's threads in the flow's process) share the last count set.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from pathlib import Path

from threadpoolctl import ThreadpoolController

from dpmm.errors import ConfigError, describe_value

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "blas_limit",
    "blas_threads",
    "busy_elsewhere",
    "cgroup_cores",
    "dask_worker_threads",
    "owned_cores",
    "pool_limit",
    "search_threads",
]

#: The operator's override: a positive number of threads, or ``off``.
ENVIRONMENT_VARIABLE = "DPMM_BLAS_THREADS"

#: The cgroup files read for a CPU quota (module constants, so tests can point them at
#: files of their own). cgroup v2 names the process's group in /proc/self/cgroup.
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 mounts the cpu controller under one of these names, depending on the system.
CGROUP_V1_FOLDERS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
#: Runnable threads of the whole machine ("running/total" is the fourth field).
LOADAVG = Path("/proc/loadavg")
#: This process's threads, one folder each with a ``stat`` file giving its state.
OWN_TASKS = Path("/proc/self/task")

#: Samples of the machine's runnable threads, and the pause between them: a process that
#: keeps cores busy is runnable in every sample, a short burst in few (the median is kept).
LOAD_SAMPLES = 5
LOAD_PAUSE_SECONDS = 0.005

_decided: ContextVar[int | None] = ContextVar("dpmm_blas_threads", default=None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _quota(quota: str, period: str) -> float | None:
    """Cores a cgroup quota grants (None: no quota, ``max`` or ``-1``)."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def cgroup_cores() -> float | None:
    """The CPU quota of this process's cgroup in cores, or None when there is none.

    cgroup v2's ``cpu.max`` (``"<quota> <period>"`` or ``"max <period>"``) in the group
    /proc/self/cgroup names, then at the cgroup root (a container's own view), then
    cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota ``-1``: none).
    """
    group = next(
        (line[3:].strip() for line in (_read(PROC_CGROUP) or "").splitlines() if line[:3] == "0::"),
        "/",
    )
    for folder in dict.fromkeys((CGROUP_ROOT / group.lstrip("/"), CGROUP_ROOT)):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2:
            return _quota(*fields)
    for name in CGROUP_V1_FOLDERS:
        folder = CGROUP_ROOT / name
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return _quota(quota, period)
    return None


def owned_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by its cgroup's quota
    (rounded up: a quota of 1.5 cores keeps 2 threads busy part of the time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_cores()
    return max(1, min(cores or 1, math.ceil(quota) if quota else cores or 1))


def _own_running() -> int:
    """This process's threads that are running or runnable now."""
    running = 0
    try:
        tasks = list(OWN_TASKS.iterdir())
    except OSError:
        return 0
    for task in tasks:
        stat = _read(task / "stat") or ""
        # "pid (comm) S ...": the state follows the last ')', as comm may hold any bytes.
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R":
            running += 1
    return running


def _machine_running() -> int | None:
    fields = (_read(LOADAVG) or "").split()
    try:
        return int(fields[3].split("/")[0])
    except (IndexError, ValueError):
        return None


def busy_elsewhere() -> int:
    """Cores other processes keep busy: the median over a few samples of the machine's
    runnable threads that are not this process's (0 where /proc is not there).

    When the process owns fewer cores than the machine has, other processes' threads are
    counted in proportion (they are assumed spread over every core).
    """
    samples = []
    for sample in range(LOAD_SAMPLES):
        if sample:
            time.sleep(LOAD_PAUSE_SECONDS)
        machine = _machine_running()
        if machine is None:
            return 0
        samples.append(max(0, machine - _own_running()))
    others = statistics.median(samples)
    share = owned_cores() / max(os.cpu_count() or 1, 1)
    return round(others * min(share, 1.0))


def dask_worker_threads() -> int | None:
    """The number of threads of the Dask worker running the calling task, or None outside
    a Dask worker task."""
    distributed = sys.modules.get("distributed")
    if distributed is None:  # never imported: no worker in this process (and no import cost)
        return None
    try:
        return max(1, int(distributed.get_worker().state.nthreads))
    except ValueError:  # not in a worker task
        return None


def _override() -> tuple[bool, int | None]:
    """``(set, threads)`` from :data:`ENVIRONMENT_VARIABLE` (``threads`` None: ``off``).

    Raises:
        ConfigError: the variable is neither a positive integer nor ``off``.
    """
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not value:
        return False, None
    if value.lower() == "off":
        return True, None
    if value.isdigit() and int(value) > 0:
        return True, int(value)
    raise ConfigError(
        f"{ENVIRONMENT_VARIABLE}: must be a positive number of threads or 'off', "
        f"got {describe_value(value)}"
    )


def blas_threads() -> int | None:
    """The BLAS/OpenMP threads a BLAS-heavy stage started now may use (None: ``off``).

    Raises:
        ConfigError: :data:`ENVIRONMENT_VARIABLE` is neither a positive integer nor ``off``.

    Example:
        >>> import os
        >>> os.environ["DPMM_BLAS_THREADS"] = "3"
        >>> blas_threads()
        3
        >>> del os.environ["DPMM_BLAS_THREADS"]
    """
    given, threads = _override()
    if given:
        return threads
    free = max(1, owned_cores() - busy_elsewhere())
    sharing = dask_worker_threads()
    return max(1, free // sharing) if sharing else free


@functools.cache
def _pools() -> ThreadpoolController:
    """The process's BLAS/OpenMP pools, listed once. ``threadpool_limits`` lists them again
    on every call by walking every loaded library: 0.8 ms in a bare interpreter, ~2 ms in
    dpmm's, and the template optimizers enter a one-thread limit hundreds of times per
    selection (290 times in OPT_+ on SF1, 0.6 s of its 4.6 s). NumPy and SciPy, which each
    bring an OpenBLAS, are loaded first, so both pools are listed."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401

    return ThreadpoolController()


def pool_limit(limits: int | None) -> AbstractContextManager:
    """At most ``limits`` threads in every BLAS/OpenMP pool for the block (None: as they
    are), as ``threadpoolctl.threadpool_limits`` but without listing the pools again.

    Example:
        >>> from threadpoolctl import threadpool_info
        >>> with pool_limit(1):
        ...     {pool["num_threads"] for pool in threadpool_info()}
        {1}
    """
    return _pools().limit(limits=limits)


@contextmanager
def blas_limit() -> Iterator[int | None]:
    """Run the block with :func:`blas_threads` BLAS/OpenMP threads (threadpoolctl); yields
    the count (None: pools left alone). Inside another ``blas_limit`` the outer count holds.

    Raises:
        ConfigError: :data:`ENVIRONMENT_VARIABLE` is neither a positive integer nor ``off``.

    Example:
        >>> from threadpoolctl import threadpool_info
        >>> import numpy, os
        >>> os.environ["DPMM_BLAS_THREADS"] = "1"
        >>> with blas_limit() as threads:
        ...     threads, {pool["num_threads"] for pool in threadpool_info()}
        (1, {1})
        >>> del os.environ["DPMM_BLAS_THREADS"]
    """
    outer = _decided.get()
    if outer is not None:
        yield outer
        return
    threads = blas_threads()
    if threads is None:
        yield None
        return
    token = _decided.set(threads)
    try:
        with pool_limit(threads):
            yield threads
    finally:
        _decided.reset(token)


def search_threads() -> int:
    """Independent single-threaded searches a stage may run side by side: the cores the
    process owns (shared among a Dask worker's threads), or the operator's count.

    Unlike a BLAS team, whose every call waits for its slowest thread, independent
    searches lose nothing to another process's load beyond their fair share of the cores,
    so the cores busy elsewhere are not subtracted: beside a competitor running two
    threads on two cores, two searches get about one core between them where one would
    get two thirds of one.

    Example:
        >>> import os
        >>> os.environ["DPMM_BLAS_THREADS"] = "3"
        >>> search_threads()
        3
        >>> del os.environ["DPMM_BLAS_THREADS"]
    """
    given, threads = _override()
    if given and threads is not None:
        return threads
    sharing = dask_worker_threads()
    cores = owned_cores()
    return max(1, cores // sharing) if sharing else cores
