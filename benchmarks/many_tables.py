"""A marginal release of 10⁵+ tables: the tables in the flow's process, or on 2 workers.

The same release — every k-way marginal of ``--attributes`` attributes of ``--size`` values
(all 3-way tables of 100 binary attributes: 161,700 tables), measured by the ``marginals``
strategy under zCDP ρ = 1/2, least squares — runs through
:func:`dpmm.pipeline.run_release` (the flow's stages without Prefect's engine), each mode
in a process of its own:

* ``flow``: ``cluster.arrays: flow`` (the ``tables`` plan): counted on a threaded
  LocalCluster in this process, the tables gathered here and measured here;
* ``workers``: ``cluster.arrays: workers`` (the ``worker-tables`` plan) on a LocalCluster
  of ``--workers`` process workers (one thread each, ``--memory-limit`` each): the tables
  are counted and kept there, and measured there group by group; the flow reads the
  measurement to reconstruct.

Printed per mode: wall seconds and per stage, CPU seconds of the flow's process and of
the workers, the peak RSS of the flow's process and of each worker.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/many_tables.py [--attributes 100] [--size 2]
        [--way 3] [--rows 100000] [--workers 2] [--memory-limit 2GiB]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scale import _peak_rss, _stage_timer

from dpmm.config import load_config
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP

ROWS_PER_PART = 20_000


def make_data(folder: Path, attributes: int, size: int, rows: int, seed: int = 7) -> Path:
    """Parquet parts of records in which each attribute copies its left neighbour w.p. ½."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for part, start in enumerate(range(0, rows, ROWS_PER_PART)):
        count = min(ROWS_PER_PART, rows - start)
        columns = [rng.integers(0, size, count)]
        for _ in range(1, attributes):
            copy = rng.random(count) < 0.5
            columns.append(np.where(copy, columns[-1], rng.integers(0, size, count)))
        table = pa.table({f"x{i:03d}": c.astype(np.int64) for i, c in enumerate(columns)})
        pq.write_table(table, folder / f"part-{part:04d}.parquet")
    return folder


def write_config(folder: Path, data: Path, args: argparse.Namespace, arrays: str) -> Path:
    with Ledger.init(folder / "budget.db") as ledger:
        ledger.grant("tables", ZCDP(10))
    domain = ", ".join(f"x{i:03d}: {args.size}" for i in range(args.attributes))
    path = folder / "release.yaml"
    path.write_text(
        f"name: tables\ndomain: {{{domain}}}\nprivacy: {{rho: 1/2}}\n"
        f"workload: [{{name: ways, kind: marginals, k: {args.way}}}]\n"
        "strategy: {method: marginals}\n"
        f"data: {{path: '{data}'}}\n"
        f"ledger: {{path: '{folder / 'budget.db'}', dataset: tables}}\n"
        "release: {root: releases, reconstruction: least_squares, histogram: never}\n"
        f"cluster: {{arrays: {arrays}}}\n"
    )
    return path


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(mode: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    folder = scratch / mode
    folder.mkdir()
    data = scratch / "data"
    config = load_config(write_config(folder, data, args, mode))
    if mode == "workers":
        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=args.memory_limit,
            dashboard_address=":0",
        )
    else:
        cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False)
    times: dict[str, float] = {}
    peaks: dict[str, int] = {}
    with cluster, Client(cluster) as client:
        worker_cpu = sum(client.run(_cpu_seconds).values()) if mode == "workers" else 0.0
        cpu, started = _cpu_seconds(), time.perf_counter()
        result = run_release(config, client=client, stage=_stage_timer(times, peaks))
        seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
        flow_rss = _peak_rss()
        workers = sorted(client.run(_peak_rss).values()) if mode == "workers" else []
        if mode == "workers":
            worker_cpu = sum(client.run(_cpu_seconds).values()) - worker_cpu
    integer = result.strategy.quantized.integer
    return {
        "mode": mode,
        "plan": counting_plan(config, result.strategy),
        "tables": len(integer.weights),
        "measured": int(integer.shape[0]),
        "seconds": seconds,
        "cpu": cpu,
        "worker_cpu": worker_cpu,
        "stages": times,
        "flow_rss": flow_rss,
        "worker_rss": workers,
    }


def _gib(size: float) -> str:
    return f"{size / 2**30:.2f}"


def print_runs(runs: list[dict[str, Any]]) -> None:
    print(
        "| mode | plan | tables | measured answers | wall s | flow CPU s | workers CPU s | "
        "plan s | ingest s | measure s | reconstruct s | write s | flow peak GiB | "
        "worker peaks GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        stages = run["stages"]
        print(
            f"| {run['mode']} | {run['plan']} | {run['tables']:,} | {run['measured']:,} | "
            f"{run['seconds']:.1f} | {run['cpu']:.1f} | {run['worker_cpu']:.1f} | "
            f"{stages.get('plan-strategy', 0) + stages.get('select-strategy', 0):.1f} | "
            f"{stages.get('ingest-histogram', 0):.1f} | {stages.get('measure-strategy', 0):.1f} "
            f"| {stages.get('reconstruct', 0):.1f} | {stages.get('write-release', 0):.1f} | "
            f"{_gib(run['flow_rss'])} | {', '.join(_gib(r) for r in run['worker_rss'])} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attributes", type=int, default=100)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--way", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--modes", nargs="+", default=["flow", "workers"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="2GiB")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "SCRATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # one mode in its own process, so that its peak RSS is its own
        mode, scratch = args.one
        print(json.dumps(run_one(mode, args, Path(scratch))))
        return
    tables = math.comb(args.attributes, args.way)
    print(f"{args.attributes} attributes of {args.size} values, {tables:,} {args.way}-way tables")
    runs = []
    with tempfile.TemporaryDirectory(prefix="dpmm-tables-") as scratch:
        make_data(Path(scratch) / "data", args.attributes, args.size, args.rows)
        for mode in args.modes:
            command = [sys.executable, __file__, "--one", mode, scratch, *sys.argv[1:]]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"{mode}: failed: {last}", flush=True)
                continue
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print_runs(runs)


if __name__ == "__main__":
    main()
