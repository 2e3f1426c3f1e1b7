"""End-to-end release time and peak memory on a 10⁸-cell domain with a Kron workload.

Generates partitioned Parquet once (default 10⁷ rows, 4 int32 attributes ``a b c d`` of
size 100, zipf-skewed, 20 files) in ``--data`` (cached there), writes a release config
(``privacy: {rho: 1}``; a Kron workload: the joint CDF of ``a`` and ``b`` per value of
``c``, and every range of ``d``; ``release: {reconstruction: least_squares}``; a fresh
budget ledger) and runs :func:`dpmm.pipeline.run_release` in a fresh subprocess per run,
so the peak RSS printed is that run's alone. Every stage is timed through the pipeline's
``stage`` hook. The baseline is the target: a release in under 10 minutes on 2 cores.

A run that does not finish within ``--timeout`` seconds is killed and reported with the
stage it was in; a run that raises (e.g. ``TooLargeError``, or ``MemoryError`` under the
``--memory-limit`` address-space cap) is reported with its error. Run::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pipeline.py --cells 1e6   # sanity check
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pipeline.py               # 10⁸ cells
    .venv/bin/python benchmarks/pipeline.py --method hierarchical,auto --repeat 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TARGET_SECONDS = 600.0
NAMES = ("a", "b", "c", "d")
#: Pipeline stages in order; ``load-config`` and ``other`` are the benchmark's own rows.
STAGES = (
    "load-config",
    "reserve-budget",
    "select-strategy",
    "ingest-histogram",
    "measure-strategy",
    "reconstruct",
    "write-release",
    "other",
)


def generate(folder: Path, rows: int, sizes: list[int], files: int, seed: int) -> None:
    """Zipf-skewed codes per attribute (rank r has weight 1/r^1.1), in shuffled value order."""
    rng = np.random.default_rng(seed)
    import pyarrow as pa
    import pyarrow.parquet as pq

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    laws = []
    for size in sizes:
        weights = 1.0 / np.arange(1, size + 1) ** 1.1
        laws.append((rng.permutation(size).astype(np.int32), np.cumsum(weights / weights.sum())))
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for i in range(files):
        n = int(bounds[i + 1] - bounds[i])
        columns = {}
        for name, (order, cdf) in zip(NAMES, laws, strict=True):
            ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), len(order) - 1)
            columns[name] = pa.array(order[ranks])
        pq.write_table(pa.table(columns), partial / f"part-{i:04d}.parquet")
    os.replace(partial, folder)  # the folder exists only once complete


def dataset(root: Path, rows: int, sizes: list[int], files: int, seed: int) -> Path:
    """The cached dataset for these parameters, generated on first use."""
    folder = root / f"parquet-r{rows}-s{'x'.join(map(str, sizes))}-f{files}-seed{seed}"
    if not folder.is_dir():
        started = time.perf_counter()
        generate(folder, rows, sizes, files, seed)
        print(f"generated {rows:,} rows in {files} files in {time.perf_counter() - started:.1f} s")
    else:
        print(f"using cached data {folder}")
    return folder


def config_text(data: Path, sizes: list[int], method: str, name: str) -> str:
    """The release config: a Kron workload over four attributes, ρ = 1, least squares."""
    domain = ", ".join(f"{n}: {s}" for n, s in zip(NAMES, sizes, strict=True))
    return (
        f"name: {name}\n"
        f"domain: {{{domain}}}\n"
        "privacy: {rho: 1}\n"
        "workload:\n"
        "  - name: cdf-ab-by-c\n"
        "    kind: kron\n"
        "    factors: {a: prefix, b: prefix, c: identity}\n"
        "  - name: ranges-d\n"
        "    kind: kron\n"
        "    factors: {d: all_range}\n"
        f"strategy: {{method: {method}}}\n"
        f"data: {{path: {json.dumps(str(data))}}}\n"
        "release: {root: releases, reconstruction: least_squares}\n"
        "ledger: {path: budget.db, dataset: bench}\n"
    )


def _emit(log: Path, **event: Any) -> None:
    with open(log, "a") as handle:
        handle.write(json.dumps(event) + "\n")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(config_path: Path, log: Path, memory_gib: float) -> int:
    """Run one release in this process, logging each stage's start and end to ``log``."""
    if memory_gib > 0:
        cap = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from dpmm.config import load_config
    from dpmm.pipeline import run_release
    from dpmm.privacy import ZCDP
    from dpmm.privacy.ledger import Ledger

    def stage(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            _emit(log, event="start", stage=name)
            started = time.perf_counter()
            result = function(*args, **kwargs)
            seconds = time.perf_counter() - started
            facts = {"selected": result.selected} if name == "select-strategy" else {}
            _emit(log, event="end", stage=name, seconds=seconds, peak_mib=_peak_mib(), **facts)
            return result

        return timed

    try:
        with Ledger.init(config_path.parent / "budget.db") as ledger:
            ledger.grant("bench", ZCDP(1))
        started = time.perf_counter()
        config = stage("load-config", load_config)(config_path)
        result = run_release(config, stage=stage)
        total = time.perf_counter() - started
        _emit(
            log,
            event="done",
            seconds=total,
            peak_mib=_peak_mib(),
            selected=result.strategy.selected,
            measurements=int(result.strategy.quantized.integer.shape[0]),
            queries=sum(int(g.values.size) for g in result.reconstruction.groups),
        )
        return 0
    except BaseException as error:  # report any failure, MemoryError included
        _emit(
            log,
            event="error",
            error=f"{type(error).__name__}: {error}",
            trace=traceback.format_exc(limit=6),
            peak_mib=_peak_mib(),
        )
        return 1


def _read_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def run_once(
    root: Path, data: Path, sizes: list[int], method: str, timeout: float, memory_gib: float
) -> dict[str, Any]:
    """One release in a fresh subprocess; its stage times, total, peak RSS and outcome."""
    folder = root / f"run-{method}-{os.getpid()}-{time.time_ns()}"
    folder.mkdir(parents=True)
    config_path = folder / "release.yaml"
    config_path.write_text(config_text(data, sizes, method, "bench"))
    log = folder / "stages.jsonl"
    command = [sys.executable, __file__, "--child", str(config_path), "--log", str(log)]
    command += ["--memory-limit", str(memory_gib)]
    started = time.perf_counter()
    process = subprocess.Popen(command)
    try:
        code = process.wait(timeout=timeout)
        outcome = None if code == 0 else f"exit status {code}"
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        outcome = f"killed after the {timeout:.0f} s timeout"
    wall = time.perf_counter() - started
    events = _read_log(log)
    shutil.rmtree(folder, ignore_errors=True)
    stages = {e["stage"]: e["seconds"] for e in events if e["event"] == "end"}
    peaks = {e["stage"]: e["peak_mib"] for e in events if e["event"] == "end"}
    running = [e["stage"] for e in events if e["event"] == "start" and e["stage"] not in stages]
    final = next((e for e in events if e["event"] in ("done", "error")), None)
    result: dict[str, Any] = {"stages": stages, "peaks": peaks, "wall": wall, "ok": False}
    if final is not None and final["event"] == "done":
        result.update(
            ok=True,
            total=final["seconds"],
            peak_mib=final["peak_mib"],
            selected=final["selected"],
            measurements=final["measurements"],
            queries=final["queries"],
        )
        stages["other"] = final["seconds"] - sum(stages.values())
        return result
    seen = [e["peak_mib"] for e in events if "peak_mib" in e]
    result["peak_mib"] = max(seen) if seen else float("nan")
    if final is not None:
        result["error"] = final["error"]
        result["trace"] = final["trace"]
    else:
        result["error"] = outcome or "the run ended without a report"
    result["stage"] = running[-1] if running else None
    result["selected"] = next((e["selected"] for e in events if "selected" in e), None)
    return result


def report(method: str, runs: list[dict[str, Any]], cells: int, rows: int) -> bool:
    """Print one method's table (medians across runs); True when it met the target."""
    failed = [r for r in runs if not r["ok"]]
    print(f"\n### strategy.method = {method} ({cells:,} cells, {rows:,} rows)\n")
    if failed:
        first = failed[0]
        where = f" during stage {first['stage']!r}" if first.get("stage") else ""
        print(f"FAILED{where}: {first['error']}")
        if first.get("trace"):
            print(first["trace"].rstrip())
        print("\ncompleted stages of the failed run (seconds):")
        for name, seconds in first["stages"].items():
            peak = first["peaks"][name] / 1024
            print(f"  {name}: {seconds:.1f} s, peak RSS after it {peak:.2f} GiB")
        if first.get("selected"):
            print(f"selected strategy: {first['selected']}")
        print(f"peak RSS: {first['peak_mib'] / 1024:.2f} GiB; met the 10-minute target: no")
        return False
    label = f"median of {len(runs)}" if len(runs) > 1 else "1 run"
    print(f"| stage ({label}) | seconds | peak RSS so far (GiB) |")
    print("|---|---|---|")
    for name in STAGES:
        values = [r["stages"].get(name, 0.0) for r in runs]
        peaks = [r["peaks"][name] / 1024 for r in runs if name in r["peaks"]]
        shown = f"{statistics.median(peaks):.2f}" if peaks else ""
        print(f"| {name} | {statistics.median(values):.2f} | {shown} |")
    total = statistics.median(r["total"] for r in runs)
    peak = statistics.median(r["peak_mib"] for r in runs)
    print(f"| **total wall** | **{total:.2f}** | **{peak / 1024:.2f}** |")
    met = total < TARGET_SECONDS
    print(
        f"\nselected strategy: {runs[0]['selected']} ({runs[0]['measurements']:,} measurements); "
        f"workload queries: {runs[0]['queries']:,}"
    )
    print(f"peak RSS (child): {peak / 1024:.2f} GiB")
    print(f"met the 10-minute target: {'yes' if met else 'no'} ({total:.1f} s vs 600 s)")
    return met


def _sizes(args: argparse.Namespace) -> list[int]:
    if args.cells is not None:
        side = round(float(args.cells) ** 0.25)
        return [side] * 4
    sizes = [int(s) for s in args.sizes.split(",")]
    if len(sizes) != 4 or min(sizes) < 2:
        raise SystemExit("--sizes takes four attribute sizes of at least 2, e.g. 100,100,100,100")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/dpmm-bench-pipeline"))
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--sizes", default="100,100,100,100", help="four attribute sizes")
    parser.add_argument("--cells", type=float, help="four equal sizes of about this product")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--method", default="hierarchical", help="comma-separated methods")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument(
        "--memory-limit", type=float, default=16.0, help="GiB of address space per run (0: none)"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        raise SystemExit(child(args.child, args.log, args.memory_limit))
    sizes, rows = _sizes(args), int(args.rows)
    cells = math.prod(sizes)
    data = dataset(args.data, rows, sizes, args.files, args.seed)
    print(f"domain a×b×c×d = {'×'.join(map(str, sizes))} = {cells:,} cells")
    met = True
    for method in args.method.split(","):
        runs = []
        for _ in range(args.repeat):
            runs.append(run_once(args.data, data, sizes, method, args.timeout, args.memory_limit))
            if not runs[-1]["ok"]:
                break
        met = report(method, runs, cells, rows) and met
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
