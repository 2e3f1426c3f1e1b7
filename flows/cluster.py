"""The Dask task runner a release flow uses, from the config's ``cluster`` section.

By default a LocalCluster of threads in the flow's own process: its tasks share the
process's Prefect context and API, so no worker starts its own temporary Prefect server
(which costs seconds per worker process), and pyarrow and numpy release the GIL while
reading and counting. An existing scheduler (``cluster.address``) or a cluster class
(``cluster.class``, e.g. ``dask_jobqueue.SLURMCluster``) is used as configured; their
workers must have ``PREFECT_API_URL`` set to the same Prefect server (``deploy/README.md``).
"""

from __future__ import annotations

from prefect_dask import DaskTaskRunner

from dpmm.settings import ClusterSettings

__all__ = ["LOCAL_DEFAULTS", "task_runner"]

#: LocalCluster options unless the config sets them: two worker threads, no new processes.
LOCAL_DEFAULTS = {"n_workers": 1, "threads_per_worker": 2, "processes": False}


def task_runner(settings: ClusterSettings) -> DaskTaskRunner:
    """A ``DaskTaskRunner`` for the configured cluster."""
    if settings.address is not None:
        return DaskTaskRunner(address=settings.address)
    if settings.cluster_class is not None:
        adapt = {"minimum": settings.scale, "maximum": settings.scale} if settings.scale else None
        return DaskTaskRunner(
            cluster_class=settings.cluster_class,
            cluster_kwargs=dict(settings.options),
            adapt_kwargs=adapt,
        )
    options = {**LOCAL_DEFAULTS, **settings.options}
    # Any free port: a fixed one (Dask's 8787) is often taken by another cluster, and
    # Dask then warns on the operator's terminal. The flow logs the dashboard's link.
    options.setdefault("dashboard_address", ":0")
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=options)
