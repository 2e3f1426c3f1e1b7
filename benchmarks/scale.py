"""A release at 10⁷, 10⁸ (and 10⁹) cells: in the flow's process and on a 2-worker cluster.

The same release — a Kronecker (hierarchical) strategy over a three-attribute grid, zCDP
ρ = 1/2, every prefix of attribute ``a`` within each value of ``b`` and ``c`` (as many
answers as cells), least squares — runs through :func:`dpmm.pipeline.run_release` (the flow's
stages without Prefect's engine):

* ``flow``: ``cluster.arrays: flow``, counting on a threaded LocalCluster in this process
  and everything after it here (only up to 2²⁸ cells);
* ``workers``: ``cluster.arrays: workers`` on a LocalCluster of ``--workers`` process
  workers (one thread each, ``--memory-limit`` each, spilling to disk beyond it): counts,
  measurement chunks, estimate and answers stay on the workers.

Printed per run: wall seconds (and per stage), the peak RSS of this (the flow's) process
and of each worker process, the answers written, and for a size run both ways the ratio
of wall times. A cost model fitted on the workers' runs — seconds and worker memory
linear in cells per worker — then predicts 10¹⁰–10¹² cells on k workers.

Synthetic data: ``--rows`` records (default: cells / 10, at most 10⁸) with ``a`` a
rounded normal over its range, ``b`` uniform and ``c`` binomial, written as Parquet parts
once per size under ``--data`` (reused by later runs).

``--workload tables`` answers a few tables instead (``a``, ``b × c``, the total): the
measurement and the estimate are as large, the answers small.

``--audit`` then runs ``dpmm audit`` of the version in a process of its own (its peak RSS
is the audit's), a ``workers`` version with ``--scheduler`` on a fresh cluster like the
release's (the workers' peaks are the audit's), and prints its wall seconds and peaks.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/scale.py [--cells 1e7 1e8] [--modes flow workers]
        [--workers 2] [--memory-limit 8GiB] [--data /tmp/dpmm-scale] [--workload tables]
        [--reconstruction nnls] [--strategy hdmm_kron] [--audit]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.config import load_config
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import VECTOR_LIMIT
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP

ROWS_PER_PART = 5_000_000


def grid(cells: int) -> tuple[int, int, int]:
    """``(a, b, c)`` sizes with a·b·c ≈ cells, about a cube (``b = c`` powers of two): a
    strategy's factors stay small enough for its selection to be quick."""
    side = 2 ** max(1, round(math.log2(cells) / 3))
    return cells // side**2, side, side


def make_data(folder: Path, shape: tuple[int, int, int], rows: int, seed: int = 7) -> Path:
    """Parquet parts of synthetic records over ``shape`` (made once per folder)."""
    done = folder / ".complete"  # hidden: not read as data
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for part, start in enumerate(range(0, rows, ROWS_PER_PART)):
        count = min(ROWS_PER_PART, rows - start)
        a = np.clip(rng.normal(shape[0] / 2, shape[0] / 6, count), 0, shape[0] - 1)
        table = pa.table(
            {
                "a": a.astype(np.int64),
                "b": rng.integers(0, shape[1], count, dtype=np.int64),
                "c": rng.binomial(shape[2] - 1, 0.3, count).astype(np.int64),
            }
        )
        pq.write_table(table, folder / f"part-{part:04d}.parquet")
    done.write_text("")
    return folder


#: The workloads: every prefix of ``a`` within each (b, c) (as many answers as cells), or
#: a few tables (``a``, ``b × c`` and the total).
WORKLOADS = {
    "prefixes": "[{name: a-by-b-c, kind: prefix, attribute: a, by: [b, c]}]",
    "tables": "[{name: a, kind: marginal, attributes: [a]}, "
    "{name: b-c, kind: marginal, attributes: [b, c]}, {name: people, kind: total}]",
}


def write_config(
    folder: Path,
    data: Path,
    shape: tuple[int, int, int],
    arrays: str,
    workload: str = "prefixes",
    reconstruction: str = "least_squares",
    strategy: str = "hierarchical",
    **cluster,
) -> Path:
    folder.mkdir(parents=True)
    with Ledger.init(folder / "budget.db") as ledger:
        ledger.grant("scale", ZCDP(10))
    options = "".join(f", {key}: {value}" for key, value in cluster.items())
    text = (
        f"name: scale\ndomain: {{a: {shape[0]}, b: {shape[1]}, c: {shape[2]}}}\n"
        "privacy: {rho: 1/2}\n"
        f"workload: {WORKLOADS[workload]}\n"
        f"strategy: {{method: {strategy}}}\n"
        f"data: {{path: '{data}'}}\n"
        f"ledger: {{path: '{folder / 'budget.db'}', dataset: scale}}\n"
        f"release: {{root: releases, reconstruction: {reconstruction}, histogram: never}}\n"
        f"cluster: {{arrays: {arrays}{options}}}\n"
    )
    path = folder / "release.yaml"
    path.write_text(text)
    return path


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _stage_timer(times: dict[str, float], peaks: dict[str, int]):
    """Times each stage, and the flow's peak RSS when it ends (which stage raised it)."""

    def stage(name: str, function):
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - started
                peaks[name] = _peak_rss()

        return run

    return stage


def run_one(cells: int, mode: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from distributed import Client

    shape = grid(cells)
    rows = args.rows or min(cells // 10, 10**8)
    data = make_data(Path(args.data) / ("x".join(map(str, shape)) + f"-{rows}"), shape, rows)
    config_path = write_config(
        work / f"{mode}-{cells}",
        data,
        shape,
        mode,
        args.workload,
        args.reconstruction,
        args.strategy,
    )
    config = load_config(config_path)
    times: dict[str, float] = {}
    peaks: dict[str, int] = {}
    with _cluster(mode, args) as cluster, Client(cluster) as client:
        started = time.perf_counter()
        result = run_release(config, client=client, stage=_stage_timer(times, peaks))
        seconds = time.perf_counter() - started
        flow_rss = _peak_rss()  # the release's, before this script reads the truth back
        workers = sorted(client.run(_peak_rss).values()) if mode == "workers" else []
    audit = _audit(result.path, mode, args) if args.audit else None
    answers = sum(int(group.values.size) for group in result.reconstruction.groups)
    errors = _table_errors(result, data, shape) if args.workload == "tables" else {}
    return {
        "errors": errors,
        "cells": cells,
        "shape": shape,
        "rows": rows,
        "mode": mode,
        "seconds": seconds,
        "stages": times,
        "flow_rss_after": peaks,
        "flow_rss": flow_rss,
        "worker_rss": workers,
        "answers": answers,
        "audit": audit,
    }


def _cluster(mode: str, args: argparse.Namespace) -> Any:
    """A LocalCluster of ``--workers`` process workers, or the flow's threads."""
    from distributed import LocalCluster

    if mode == "workers":
        return LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=args.memory_limit,
            dashboard_address=":0",
        )
    return LocalCluster(n_workers=1, threads_per_worker=2, processes=False)


def _audit(folder: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """``dpmm audit`` of the version in its own process, a ``workers`` version on a fresh
    cluster like the release's: wall seconds, whether it passed, its process's peak RSS
    and the workers' peaks."""
    from distributed import Client

    command = [sys.executable, "-m", "dpmm.cli", "audit", str(folder)]
    with _cluster(mode, args) as cluster, Client(cluster) as client:
        if mode == "workers":
            command += ["--scheduler", cluster.scheduler_address]
        with tempfile.TemporaryFile("w+") as out:
            started = time.perf_counter()
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(process.pid, 0)  # the audit's own peak
            seconds = time.perf_counter() - started
            out.seek(0)
            printed = out.read()
        workers = sorted(client.run(_peak_rss).values()) if mode == "workers" else []
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(printed)
    return {
        "passed": os.waitstatus_to_exitcode(status) == 0,
        "seconds": seconds,
        "rss": usage.ru_maxrss * 1024,
        "worker_rss": workers,
    }


def _table_errors(result: Any, data: Path, shape: tuple[int, int, int]) -> dict[str, Any]:
    """Per group of the ``tables`` workload: the published answers' RMSE against the true
    tables (counted here from the records) and the expected RMSE the manifest states."""
    from dpmm.release import read_answers

    rows = pq.read_table(data, columns=["a", "b", "c"])
    a, b, c = (rows.column(name).to_numpy() for name in ("a", "b", "c"))
    truth = {
        "a": np.bincount(a, minlength=shape[0]),
        "b-c": np.bincount(b * shape[2] + c, minlength=shape[1] * shape[2]),
        "people": np.array([a.size]),
    }
    published = read_answers(result.path / "answers.parquet").to_pandas()
    stated = {g["name"]: g["expected_rmse"] for g in result.manifest["error"]["groups"]}
    return {
        name: {
            "measured": float(
                np.sqrt(
                    np.mean((published[published.group == name].estimate.to_numpy() - true) ** 2)
                )
            ),
            "expected": stated[name],
        }
        for name, true in truth.items()
    }


def _gib(size: float) -> str:
    return f"{size / 2**30:.2f}"


def print_runs(runs: list[dict[str, Any]], flush: bool = False) -> None:
    print(
        "| cells | grid | rows | mode | seconds | plan | ingest | measure | reconstruct | write | "
        "flow peak GiB | worker peaks GiB | answers | workers/flow time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_size = {}
    for run in runs:
        by_size.setdefault(run["cells"], {})[run["mode"]] = run
    for run in runs:
        stages = run["stages"]
        flow = by_size[run["cells"]].get("flow")
        ratio = (
            f"{run['seconds'] / flow['seconds']:.2f}" if run["mode"] == "workers" and flow else ""
        )
        print(
            f"| {run['cells']:.2e} | {'×'.join(map(str, run['shape']))} | {run['rows']:.1e} "
            f"| {run['mode']} | {run['seconds']:.1f} | "
            f"{stages.get('plan-strategy', 0) + stages.get('select-strategy', 0):.1f} | "
            f"{stages.get('ingest-histogram', 0):.1f} | {stages.get('measure-strategy', 0):.1f} "
            f"| {stages.get('reconstruct', 0):.1f} | {stages.get('write-release', 0):.1f} | "
            f"{_gib(run['flow_rss'])} | {', '.join(_gib(r) for r in run['worker_rss'])} | "
            f"{run['answers']:.2e} | {ratio} |",
            flush=flush,
        )


def print_audits(runs: list[dict[str, Any]]) -> None:
    print(
        "| cells | mode | release seconds | audit | audit seconds | audit process peak GiB | "
        "audit worker peaks GiB |"
    )
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        audit = run.get("audit")
        if audit is None:
            continue
        print(
            f"| {run['cells']:.2e} | {run['mode']} | {run['seconds']:.1f} | "
            f"{'passed' if audit['passed'] else 'FAILED'} | {audit['seconds']:.1f} | "
            f"{_gib(audit['rss'])} | {', '.join(_gib(r) for r in audit['worker_rss'])} |"
        )


def fit_model(runs: list[dict[str, Any]], workers: int) -> None:
    """Seconds ≈ s₀ + s₁·cells/k and worker memory ≈ m₀ + m₁·cells/k, fitted on the
    workers' runs; predictions for 10¹⁰–10¹² cells."""
    points = [run for run in runs if run["mode"] == "workers"]
    if len(points) < 2:
        print("\n(the cost model needs at least two sizes run on the workers)")
        return
    per_worker = np.array([run["cells"] / workers for run in points], dtype=float)
    seconds = np.array([run["seconds"] for run in points])
    memory = np.array([max(run["worker_rss"]) for run in points], dtype=float)
    design = np.column_stack([np.ones_like(per_worker), per_worker])
    (s0, s1), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    (m0, m1), *_ = np.linalg.lstsq(design, memory, rcond=None)
    print(
        f"\ncost model (workers' runs): seconds ≈ {s0:.1f} + {s1 * 1e6:.3f} µs × cells/worker; "
        f"worker peak ≈ {_gib(m0)} GiB + {m1:.1f} bytes × cells/worker"
    )
    print("| cells | workers | predicted hours | predicted worker peak GiB |")
    print("|---|---|---|---|")
    for run in points:
        k = workers
        print(
            f"| {run['cells']:.0e} (measured {run['seconds'] / 3600:.3f} h, "
            f"{_gib(max(run['worker_rss']))} GiB) | {k} | "
            f"{(s0 + s1 * run['cells'] / k) / 3600:.3f} | {_gib(m0 + m1 * run['cells'] / k)} |"
        )
    for cells, k in ((1e10, 16), (1e10, 64), (1e11, 64), (1e11, 256), (1e12, 256), (1e12, 1024)):
        print(
            f"| {cells:.0e} | {k} | {(s0 + s1 * cells / k) / 3600:.2f} | "
            f"{_gib(m0 + m1 * cells / k)} |"
        )


def _in_own_process(cells: int, mode: str, scratch: str) -> dict[str, Any] | None:
    """One run in a fresh process; None (its last error line printed) if it failed."""
    command = [sys.executable, __file__, "--one", str(cells), mode, scratch, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"| {cells:.2e} | {mode}: failed: {last} |", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=float, nargs="+", default=[1e7, 1e8])
    parser.add_argument("--modes", nargs="+", default=["flow", "workers"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="8GiB")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="prefixes")
    parser.add_argument(
        "--reconstruction", choices=["least_squares", "nnls"], default="least_squares"
    )
    parser.add_argument("--strategy", choices=["hierarchical", "hdmm_kron"], default="hierarchical")
    parser.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "dpmm-scale"))
    parser.add_argument("--audit", action="store_true", help="audit each version after its release")
    parser.add_argument(
        "--one", nargs=3, metavar=("CELLS", "MODE", "SCRATCH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:  # one run in its own process, so that its peak RSS is its own
        cells, mode, scratch = args.one
        print(json.dumps(run_one(int(cells), mode, args, Path(scratch))))
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="dpmm-scale-") as scratch:
        for cells in (int(c) for c in args.cells):
            for mode in args.modes:
                if mode == "flow" and cells > VECTOR_LIMIT:
                    continue
                run = _in_own_process(cells, mode, scratch)
                if run is not None:
                    runs.append(run)
                    print_runs(runs[-1:], flush=True)
    print()
    print_runs(runs)
    if args.audit:
        print()
        print_audits(runs)
    for run in runs:
        for name, error in run.get("errors", {}).items():
            print(
                f"{run['cells']:.0e} cells, group {name}: measured RMSE "
                f"{error['measured']:.3f}, expected {error['expected']:.3f}"
            )
    fit_model(runs, args.workers)


if __name__ == "__main__":
    main()
