"""Strategy selections and plans with and without a competing BLAS-heavy process.

Each case runs in a fresh Python process and is timed there (imports excluded):

* ``select AllRange(64)⊗AllRange(64)``: ``auto`` under pure ε = 1 through
  :func:`dpmm.strategy.select_strategy`, inside :func:`dpmm.blas_threads.blas_limit` as
  the plan and the release select;
* ``plan <config>``: ``dpmm plan`` of every ``config/examples/*.yaml``, on a copy of the
  examples folder (a plan writes its decision beside the config);
* ``reference``: a pure-Python loop with no BLAS at all, the baseline: what the competitor
  costs any one-thread job on this machine, which no thread limit can give back.

Every case is run quiet, then with a competing process — numpy multiplying 2000 × 2000
matrices in a loop with its default BLAS threads — each with dpmm's thread limit off
(``DPMM_BLAS_THREADS=off``: the libraries' own pools) and on (the default). The
competitor is started before and stopped after the contended runs. The table prints the
median seconds over ``--repeat`` runs and contended / quiet for each setting; the target
is at most about 2 with the limit on. Run from the repository root::

    python benchmarks/contention.py --repeat 2
    python benchmarks/contention.py --cases select,adult-3way --repeat 3

The machine's other load is not controlled: run it on an otherwise idle machine, and note
the load average printed at the start and the end. A run that times out shows as ``inf``.

On the 2-core development host (load average 2.32 at the start, 2.98 at the end; the
host's other jobs were idle), ``--repeat 3 --timeout 120`` printed (seconds, medians)::

    case           quiet s, off  quiet s, on  contended s, off  contended s, on  off ratio  on ratio
    reference              1.14         1.00              1.32             2.13       1.2      2.1
    select                 1.73         1.67              8.31             2.71       4.8      1.6
    adult-3way             6.20         4.77              9.32             9.78       1.5      2.1
    adult-marginals        1.40         1.19              2.52             2.19       1.8      1.8
    adult-targets          6.51         5.84              9.56            11.01       1.5      1.9
    census-sf1             5.55         5.87             16.90            11.50       3.0      2.0
    income-sums-svt        0.43         0.45              0.88             0.81       2.1      1.8
    income-sums            0.45         0.47              0.87             0.80       1.9      1.7
    ranges-1d              5.39         4.86              9.97             8.46       1.8      1.7

Beside the competitor the limit cuts the selection 3.1× and census-sf1's plan 1.5×. With
the limit on, every case costs at most what the competitor costs the reference, a loop
that uses no BLAS at all (its two columns differ only by the machine's noise: 1.2 and
2.1): that remainder is the CPU time the competitor's two threads take from the one the
case runs on, which no thread count gives back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "config" / "examples"

COMPETITOR = """
import numpy as np
a = np.random.default_rng(0).random((2000, 2000))
while True:
    a = a @ a
    a /= np.abs(a).max()
"""

SELECT = """
import time
from dpmm.blas_threads import blas_limit
from dpmm.linalg import AllRange, Kron
from dpmm.privacy import PureDP
from dpmm.strategy import select_strategy
W = Kron([AllRange(64), AllRange(64)])
started = time.perf_counter()
with blas_limit():
    select_strategy(W, "auto", PureDP(1))
print(time.perf_counter() - started)
"""

REFERENCE = """
import time
started = time.perf_counter()
total = 0
for i in range(10_000_000):
    total += i * i
print(time.perf_counter() - started)
"""

PLAN = """
import contextlib, io, sys, time
from dpmm.cli import main
started = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    status = main(["plan", sys.argv[1]])
if status:
    sys.exit(status)
print(time.perf_counter() - started)
"""


def cases() -> dict[str, tuple[str, list[str]]]:
    """Case name → (child program, its arguments)."""
    found = {"reference": (REFERENCE, []), "select": (SELECT, [])}
    for config in sorted(EXAMPLES.glob("*.yaml")):
        found[config.stem] = (PLAN, [config.name])
    return found


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """The rows under the header, the first column left-aligned and the others right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * width for width in widths), *rows]:
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
        ]
        print("  ".join(cells))


def run_in_examples(
    program: str, arguments: list[str], env: dict[str, str], timeout: float
) -> str | None:
    """The last line a child prints, run in a fresh process on a copy of the example
    configs (None when it timed out).

    Raises:
        RuntimeError: the child failed (its stderr's end in the message).
    """
    with tempfile.TemporaryDirectory() as folder:
        examples = Path(folder) / "examples"
        shutil.copytree(EXAMPLES, examples, ignore=shutil.ignore_patterns("releases"))
        try:
            done = subprocess.run(
                [sys.executable, "-c", program, *arguments],
                cwd=examples,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None
    if done.returncode:
        raise RuntimeError(f"{program[:40]!r} {arguments} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def run_case(program: str, arguments: list[str], limit: bool, timeout: float) -> float:
    """Seconds the child reports, in a fresh process (inf when it timed out)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if limit:
        env.pop("DPMM_BLAS_THREADS", None)
    else:
        env["DPMM_BLAS_THREADS"] = "off"
    line = run_in_examples(program, arguments, env, timeout)
    return float("inf") if line is None else float(line)


def median_seconds(
    program: str, arguments: list[str], limit: bool, args: argparse.Namespace
) -> float:
    """The median of ``--repeat`` runs of one case."""
    return statistics.median(
        run_case(program, arguments, limit, args.timeout) for _ in range(args.repeat)
    )


def start_competitor() -> subprocess.Popen[bytes]:
    """The competing process, given a moment to start its BLAS threads."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR], env=env)
    time.sleep(2.0)
    return competitor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs per cell (median kept)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    args = parser.parse_args()
    chosen = cases()
    if args.cases:
        chosen = {name: chosen[name] for name in args.cases.split(",")}
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    quiet_off = {name: median_seconds(*case, False, args) for name, case in chosen.items()}
    quiet_on = {name: median_seconds(*case, True, args) for name, case in chosen.items()}
    competitor = start_competitor()
    try:
        off = {name: median_seconds(*case, False, args) for name, case in chosen.items()}
        on = {name: median_seconds(*case, True, args) for name, case in chosen.items()}
    finally:
        competitor.kill()
        competitor.wait()
    print(f"load average at end: {os.getloadavg()[0]:.2f}\n")
    header = (
        "case",
        "quiet s, off",
        "quiet s, on",
        "contended s, off",
        "contended s, on",
        "contended/quiet, off",
        "contended/quiet, on",
    )
    rows = [
        (
            name,
            f"{quiet_off[name]:.2f}",
            f"{quiet_on[name]:.2f}",
            f"{off[name]:.2f}",
            f"{on[name]:.2f}",
            f"{off[name] / quiet_off[name]:.1f}",
            f"{on[name] / quiet_on[name]:.1f}",
        )
        for name in chosen
    ]
    print_table(header, rows)


if __name__ == "__main__":
    main()
