"""Run one task per partition and reduce the results in a tree, on Dask, with progress.

With ``client=None`` the graph runs on Dask's threaded local scheduler; with a
:class:`distributed.Client` it runs on that cluster. Either way the reduction is
a tree of ``combine`` calls that runs while partitions are still being read, so
at most a few partition results are held at once, and results are never
modified in place (a retried task must see its inputs unchanged).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import dask
from dask.callbacks import Callback

from dpmm.data.errors import DataError
from dpmm.errors import EngineError

__all__ = ["Progress", "map_reduce"]

T = TypeVar("T")
#: Called with (partitions done, partitions in total).
Progress = Callable[[int, int], None]
#: How many results one combine task adds up.
SPLIT_EVERY = 8


class _LeafCounter(Callback):
    """Reports progress each time a partition task of the local scheduler finishes."""

    def __init__(self, prefix: str, total: int, progress: Progress) -> None:
        super().__init__()
        self.prefix, self.total, self.progress, self.done = prefix, total, progress, 0

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if isinstance(key, str) and key.startswith(self.prefix):
            self.done += 1
            self.progress(self.done, self.total)


def _tree(nodes: list[Any], combine: Callable[..., Any], submit: Callable[..., Any]) -> Any:
    while len(nodes) > 1:
        nodes = [
            submit(combine, *nodes[i : i + SPLIT_EVERY])
            if len(nodes[i : i + SPLIT_EVERY]) > 1
            else nodes[i]
            for i in range(0, len(nodes), SPLIT_EVERY)
        ]
    return nodes[0]


def map_reduce(
    func: Callable[[Any], T],
    items: Sequence[Any],
    combine: Callable[..., T],
    *,
    client: Any = None,
    progress: Progress | None = None,
    keep: bool = False,
) -> T:
    """``combine(func(item) for item in items)``, one Dask task per item, combined as a tree.

    Args:
        func: The per-partition task; it must be picklable for a cluster.
        items: One per partition; not empty.
        combine: Adds up any number (≥ 2) of results into a new one; associative.
        client: A ``distributed.Client``, or None for the local threaded scheduler.
        progress: Called with ``(done, total)`` after each partition finishes.
        keep: With a client: return the result's future, the result left on its worker.

    Raises:
        Whatever a partition task raises (the first one to fail); other tasks are cancelled.
        EngineError: the cluster's scheduler gave a task up because it had no worker.

    Example:
        >>> map_reduce(lambda x: x * x, [1, 2, 3], lambda *r: sum(r))
        14
    """
    if not items:
        raise DataError("There is no partition to read")
    prefix = f"dpmm-ingest-partition-{uuid.uuid4().hex}-"
    total = len(items)
    keys = [f"{prefix}{i}" for i in range(total)]
    if client is None:
        leaves = [
            dask.delayed(func, pure=False)(item, dask_key_name=key)
            for item, key in zip(items, keys, strict=True)
        ]
        root = _tree(leaves, combine, lambda f, *a: dask.delayed(f, pure=False)(*a))
        if progress is None:
            return dask.compute(root, scheduler="threads")[0]
        with _LeafCounter(prefix, total, progress):
            return dask.compute(root, scheduler="threads")[0]
    return _distributed(func, items, combine, keys, client, progress, keep)


def _distributed(
    func: Callable[[Any], T],
    items: Sequence[Any],
    combine: Callable[..., T],
    keys: list[str],
    client: Any,
    progress: Progress | None,
    keep: bool = False,
) -> T:
    from distributed import as_completed

    leaves = [client.submit(func, item, key=key) for item, key in zip(items, keys, strict=True)]
    root = _tree(list(leaves), combine, lambda f, *a: client.submit(f, *a))
    total = len(leaves)
    pending = as_completed(leaves, loop=client.loop)  # the client need not be Dask's default
    # Only the tree holds a finished partition's result, so it is freed once combined.
    del leaves
    try:
        for done, future in enumerate(pending, start=1):
            if future.status == "error":
                _raise_failure(future, client)
            del future
            if progress is not None:
                progress(done, total)
        return root if keep else root.result()
    finally:
        client.cancel([*pending.futures, *([] if keep else [root])])


def _raise_failure(future: Any, client: Any) -> None:
    """Raise a failed partition task's own exception, or one sentence when the scheduler
    gave the task up because no worker was left to run it (its ``no-workers-timeout``)."""
    from distributed.scheduler import NoValidWorkerError, NoWorkerError

    try:
        future.result()
    except (NoValidWorkerError, NoWorkerError):
        address = client.scheduler.address if client.scheduler is not None else "?"
        raise EngineError(
            f"the Dask cluster at {address} has had no worker for longer than its scheduler's "
            "no-workers-timeout; nothing was measured: start workers and run the release again"
        ) from None
