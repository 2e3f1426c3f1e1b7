"""Everything a release needs that can be known without data, checked before the ledger.

:func:`preflight` decides how the input is counted and runs the release's own
post-processing on a planned record (every answer zero, no noise drawn:
:func:`~dpmm.measure.mechanism.planned_record`): the same reconstruction, per-query
standard errors, labels and histogram as the release computes, so what would fail there
fails here, and the expected error of every group is the one the manifest will state.

What grows with the data's size in memory (the counts, the measurement, the answers) is
estimated from the domain, the strategy and the workload, and checked against this
machine's memory and the release root's free disk. ``dpmm plan`` and ``dpmm release``
both call it, before any budget is reserved.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dpmm.blas_threads import blas_limit
from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError, TooLargeError
from dpmm.measure.exact import MeasurementError
from dpmm.measure.mechanism import planned_record
from dpmm.measure.tables import strategy_tables
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.ingest_stage import VECTOR_LIMIT, counting_plan
from dpmm.pipeline.reconstruct_stage import check_reconstructable, reconstruct, wants_histogram
from dpmm.pipeline.reconstruction import Reconstruction

__all__ = ["Footprint", "Preflight", "check_answers_fit", "footprint", "preflight"]

#: Bytes a release holds per published answer: the estimate, the standard error and the
#: variance temporaries, and the descriptions of the row group being written (a release of
#: every range of 4,096 bins, 8.4·10⁶ answers, peaked at 1.6 GB, about 190 bytes each; of
#: Adult's 364 three-way tables, 2.1·10⁷ answers, at 1.7 GB).
ANSWER_BYTES = 200
#: Bytes per measured row: the int64 answers, the record read back, the scaled floats.
MEASUREMENT_BYTES = 32
#: Bytes per counted cell of the vector: int64 counts and the solver's float vectors.
VECTOR_BYTES = 64
#: Bytes per cell the workers of a ``chunked`` release hold together at their peak: the
#: counts, the estimate and the blocks in flight (benchmarks/scale.py: 35 bytes per cell
#: at 10⁸ cells on 2 workers, their peaks summed; blocks of 2²² elements).
CLUSTER_CELL_BYTES = 40
#: Bytes per cell that rounding the vector to integers (``release.output: integer``) holds
#: at its peak beside the estimate: the NNLS solve it rounds and the running sums
#: (measured: 65 at 10⁶ cells of a Kronecker strategy).
ROUNDING_BYTES = 72
#: Bytes per cell of a counted marginal table (int64, and a float copy).
TABLE_BYTES = 16
#: Bytes written per measured row (the run's record and the release's copy), per answer
#: (before compression) and per histogram cell.
DISK_PER_ROW, DISK_PER_ANSWER, DISK_PER_CELL = 24, 48, 16


@dataclass(frozen=True)
class Footprint:
    """What a release holds in memory at its peak and writes to disk, estimated in bytes."""

    memory: int
    disk: int

    def to_dict(self) -> dict[str, int]:
        return {"memory_bytes": self.memory, "disk_bytes": self.disk}


@dataclass(frozen=True, eq=False)
class Preflight:
    """A release checked without data: how it counts, and its post-processing run dry.

    ``reconstruction`` is the release's post-processing of a zero measurement: its
    standard errors are the release's; its values are zero and mean nothing.
    """

    counting: str
    reconstruction: Reconstruction
    footprint: Footprint


def _counted_cells(config: ReleaseConfig, chosen: ChosenStrategy, counting: str) -> int:
    if counting in ("vector", "chunked"):
        return config.domain.size
    # counting_plan counts tables only for a Marginals or HelmertBlocks integer strategy.
    shape = config.domain.shape
    tables = strategy_tables(chosen.quantized.integer)
    return sum(math.prod(shape[i] for i in attrs) for attrs in tables)


def _answers(config: ReleaseConfig) -> int:
    return sum(group.matrix.shape[0] for group in config.workload)


def check_answers_fit(config: ReleaseConfig) -> None:
    """Refuse, before any strategy is searched for, a config whose answers (and histogram)
    alone exceed this machine's memory: whatever the strategy, the flow's process holds
    them, unless a Kronecker strategy beyond the vector may keep its arrays on the workers
    (``cluster.arrays: workers``, or a Kronecker method under ``auto`` arrays).

    Raises:
        ConfigError: names the number of answers, the memory they need and the machine's.
    """
    cells, arrays = config.domain.size, config.cluster.arrays
    in_flow = arrays == "flow" or cells <= VECTOR_LIMIT or config.strategy_method == "auto"
    memory = _physical_memory()
    if arrays == "workers" or not in_flow or memory is None:
        return
    answers = _answers(config)
    needs = answers * ANSWER_BYTES + (cells * 8 if wants_histogram(config) else 0)
    if needs > memory:
        raise ConfigError(
            f"{config.path}: the workload's {answers:,} answers need about {_gib(needs)} of "
            f"memory whatever the strategy, and this machine has {_gib(memory)}; answer "
            "fewer queries (workload) or use a coarser domain"
        )


def footprint(config: ReleaseConfig, chosen: ChosenStrategy, counting: str) -> Footprint:
    """The release's peak memory (of the flow's process; for the ``chunked`` plan, of the
    workers together; for ``worker-tables``, of the flow's process, the tables being on
    the workers) and the bytes it writes, from public facts alone."""
    rows = chosen.quantized.integer.shape[0]
    answers = _answers(config)
    histogram = config.domain.size if wants_histogram(config) else 0
    cells = _counted_cells(config, chosen, counting)
    if counting == "chunked":  # the workers hold the counts and estimate, not the rest
        memory = cells * CLUSTER_CELL_BYTES
    elif counting == "worker-tables":  # the workers hold the tables; the flow reconstructs
        memory = rows * MEASUREMENT_BYTES + answers * ANSWER_BYTES + histogram * 8
    else:
        counted = cells * (TABLE_BYTES if counting == "tables" else VECTOR_BYTES)
        memory = counted + rows * MEASUREMENT_BYTES + answers * ANSWER_BYTES + histogram * 8
        if counting == "vector" and config.release.integer:
            memory += cells * ROUNDING_BYTES
    disk = rows * DISK_PER_ROW + answers * DISK_PER_ANSWER + histogram * DISK_PER_CELL
    return Footprint(memory, disk)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def _free_disk(root: Path) -> int | None:
    folder = root.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:  # pragma: no cover - unreadable
        return None


def _gib(size: int) -> str:
    return f"{size / 2**30:,.1f} GiB"


def check_footprint(config: ReleaseConfig, chosen: ChosenStrategy, needs: Footprint) -> None:
    """Refuse a release that cannot fit this machine's memory or the root's free disk.

    Raises:
        ConfigError: the estimate exceeds what is available (names the largest part).
    """
    answers = _answers(config)
    where = f"{config.path}: the strategy {chosen.selected!r} cannot be released here: "
    memory = _physical_memory()
    on_workers = counting_plan(config, chosen) == "chunked"
    cluster = config.cluster
    local = cluster.address is None and cluster.cluster_class is None  # a LocalCluster here
    if memory is not None and needs.memory > memory and on_workers and local:
        raise ConfigError(
            where + f"its Dask workers need about {_gib(needs.memory)} of memory together "
            f"for {config.domain.size:,} cells, and they run on this machine, which has "
            f"{_gib(memory)}; give cluster.address of a cluster with that memory, or use "
            "a strategy read from marginal tables (cluster.arrays: auto)"
        )
    if memory is not None and needs.memory > memory and not on_workers:
        raise ConfigError(
            where + f"it needs about {_gib(needs.memory)} of memory ({answers:,} answers, "
            f"{chosen.quantized.integer.shape[0]:,} measurements) and this machine has "
            f"{_gib(memory)}; answer fewer queries (workload) or use a coarser domain"
        )
    free = _free_disk(config.release.root)
    if free is not None and needs.disk > free:
        raise ConfigError(
            where + f"it writes about {_gib(needs.disk)} and {config.release.root} has "
            f"{_gib(free)} free"
        )


def preflight(config: ReleaseConfig, chosen: ChosenStrategy) -> Preflight:
    """Check a release of ``chosen`` end to end without data; nothing is read or spent.

    Raises:
        ConfigError: the release would be refused or could not finish: the input cannot
            be counted for this strategy, a group cannot be answered, or the answers,
            their standard errors or the files do not fit.
    """
    counting = counting_plan(config, chosen)
    needs = footprint(config, chosen, counting)
    check_footprint(config, chosen, needs)
    try:
        with blas_limit():  # the covariance factor and the data-free reconstruction
            check_reconstructable(config, chosen, counting)
            record = planned_record(
                chosen.quantized, config.measurement_privacy, lazy=counting == "chunked"
            )
            reconstruction = reconstruct(config, chosen, record, counting, replicates=0)
    except (TooLargeError, MeasurementError) as error:
        raise ConfigError(
            f"{config.path}: the strategy {chosen.selected!r} cannot be released: {error}"
        ) from error
    return Preflight(counting, reconstruction, needs)
