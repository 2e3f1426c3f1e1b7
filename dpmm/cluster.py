"""The Dask cluster of a config's ``cluster`` section: the release's, and its audit's.

The release flow's stages are Prefect task runs in the flow's process; the counting stages
submit one plain Dask task per partition through a ``distributed.Client`` (DESIGN §9: no
task holds a worker thread while it waits on others). ``dpmm audit`` of a version whose
arrays stayed on the workers recomputes its answers on the same cluster (or on one the
operator names). The cluster starts when a stage first asks for the client, so a release
that reads no data (``--from-measurements``) and the audit of a one-process version start
none. By default it is a LocalCluster of threads in the calling process (pyarrow and numpy
release the GIL while reading and counting); an existing scheduler (``cluster.address``)
or a cluster class (``cluster.class``, e.g. ``dask_jobqueue.SLURMCluster``) is used as
configured (``deploy/README.md``).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from dask.utils import import_required
from distributed import Client, LocalCluster

from dpmm.settings import ClusterSettings

__all__ = ["LOCAL_DEFAULTS", "DaskCluster"]

#: LocalCluster options unless the config sets them: two worker threads, no new processes,
#: the dashboard on any free port (Dask's 8787 is often taken, and Dask then warns).
LOCAL_DEFAULTS = {
    "n_workers": 1,
    "threads_per_worker": 2,
    "processes": False,
    "dashboard_address": ":0",
}


class DaskCluster:
    """The configured cluster, started on first use and shut down (if dpmm started it) on
    exit; a scheduler given by address is only disconnected from."""

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self._client: Client | None = None
        self._resources = ExitStack()

    def __enter__(self) -> DaskCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self._resources.close()

    @property
    def client(self) -> Client:
        """A client of the cluster, starting the cluster the first time."""
        if self._client is None:
            self._client = self._resources.enter_context(Client(self._connect_to()))
        return self._client

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard's address, if the cluster was started and serves one."""
        return self._client.dashboard_link if self._client is not None else None

    def _connect_to(self) -> Any:
        settings = self.settings
        if settings.address is not None:
            return settings.address
        if settings.cluster_class is not None:
            module, _, name = settings.cluster_class.rpartition(".")
            cluster_class = getattr(import_required(module, f"cluster.class needs {module}"), name)
            cluster = self._resources.enter_context(cluster_class(**settings.options))
            if settings.scale:
                cluster.scale(settings.scale)
            return cluster
        options = {**LOCAL_DEFAULTS, **settings.options}
        return self._resources.enter_context(LocalCluster(**options))
