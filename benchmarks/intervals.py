"""Plans and interval stages against a baseline revision of dpmm, in the same run.

Each case runs in a fresh Python process (imports excluded from its timing), once with
this checkout's ``dpmm`` and once with the baseline's (``--baseline``, a git revision
extracted with ``git archive`` into a temporary folder and put first on ``PYTHONPATH``):

* ``plan <config>``: ``dpmm plan`` of every ``config/examples/*.yaml``, on a copy of the
  examples folder (a plan writes its decision beside the config);
* ``dense-32``: the interval stage of a pure ε = 1 release answering AllRange(32) through
  a dense 40 × 32 strategy (a wide discrete Laplace: exact half-widths and split bounds);
* ``tree-64x32 σ²≈…``: the interval stage of a zCDP release of Hierarchical(64) ⊗
  Hierarchical(32) answering three groups, the 64 × 32 table, the 64 one-way sums and the
  total, at σ² ≈ 10⁵ and 10⁷ (a discrete Gaussian summed term by term).

The interval stage is what the release runs after reconstruction (the groups' coefficient
multisets are found before the clock starts): ``release_half_widths`` where the revision
has it, else the groups' ``half_widths`` in workload order, as that revision's release
does. Each cell is the median of ``--repeat`` runs; wall and CPU seconds of the child are
printed, with the baseline's over this checkout's wall time, and for the interval stages
how many of each group's distinct multisets were exact. Run from the repository root::

    python benchmarks/intervals.py --baseline d6528e4 --repeat 1

The machine's other load is not controlled: note the load averages printed. On the
2-core development host with other engineers' test suites running (load average 10.6 at
the start, 15.0 at the end, so wall time is about 4× CPU time), ``--repeat 1`` printed
(before: d6528e4; exact: the exact distinct multisets of each group)::

    case               before wall s  cpu s        exact  after wall s  cpu s        exact  ratio
    adult-3way                 64.88  15.56            -         64.30  15.28            -    1.0
    adult-marginals            10.86   2.53            -         11.46   2.67            -    0.9
    adult-targets              56.82  13.43            -         43.91  10.37            -    1.3
    census-sf1                 19.70   4.56            -         17.02   4.04            -    1.2
    income-sums-svt             2.43   0.52            -          2.23   0.53            -    1.1
    income-sums                 2.14   0.52            -          2.40   0.59            -    0.9
    ranges-1d                  31.18   7.74            -         31.10   8.44            -    1.0
    dense-32                   59.49  13.65       34/528         24.61   4.70       34/528    2.4
    tree-64x32 σ²≈1e5          19.14   3.70  0/1,0/1,1/1          0.15   0.02  0/1,0/1,0/1  131.6
    tree-64x32 σ²≈1e7           1.16   0.22  0/1,0/1,0/1          1.11   0.21  0/1,0/1,0/1    1.0

adult-targets' plan spends 3 CPU seconds less (its exact Laplace half-widths, 222 distinct
multisets, about twice as fast); its strategy selection is bounded in time, so under load
the strategy it keeps, and hence its figures, can differ from run to run. The dense
case's 34 exact multisets and 494 split bounds are the same half-widths 2.9× faster in
CPU. The tree at σ² ≈ 10⁵ no longer computes the total's multiset exactly: its sum of
2048 draws per coefficient took the 3.7 s, which the work estimate now counts (9.5·10⁶
cells, over the per-multiset limit), so it gets the least of the Chernoff and split bounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from contention import print_table, run_in_examples

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "config" / "examples"

PLAN = """
import contextlib, io, sys, time
from dpmm.cli import main
wall, cpu = time.perf_counter(), time.process_time()
with contextlib.redirect_stdout(io.StringIO()):
    status = main(["plan", sys.argv[1]])
if status:
    sys.exit(status)
print(time.perf_counter() - wall, time.process_time() - cpu, "-")
"""

STAGE = """
import sys, time
from fractions import Fraction
import numpy as np
from dpmm.linalg import AllRange, Dense, Hierarchical, Identity, Kron, Ones
from dpmm.measure import quantize
from dpmm.measure.mechanism import NoiseModel, record_fields
from dpmm.pipeline import interval_stage
from dpmm.privacy import PureDP, ZCDP
from dpmm.reconstruct.intervals import Intervals, Multisets, NoiseLaw, coefficient_rows

if sys.argv[1] == "dense":
    shape = (32,)
    groups = [AllRange(32)]
    strategy = Dense(np.random.default_rng(5).random((40, 32)) + np.eye(40, 32))
    privacy = PureDP(Fraction(1))
else:
    shape = (64, 32)
    groups = [
        Kron([Identity(64), Identity(32)]),
        Kron([Identity(64), Ones(1, 32)]),
        Kron([Ones(1, 64), Ones(1, 32)]),
    ]
    strategy = Kron([Hierarchical(64), Hierarchical(32)])
    privacy = ZCDP(Fraction(21, int(sys.argv[2])))  # σ² = 21 / ρ in the integer units
quantized = quantize(strategy)
fields = record_fields(NoiseModel.of(quantized).exact, privacy)
gaussian = fields["noise"] == "discrete_gaussian"
law = NoiseLaw(str(fields["noise"]), Fraction(str(fields["sigma2" if gaussian else "scale"])))


def multisets_of(workload):
    blocks = coefficient_rows(workload, quantized.matrix, quantized.scale)
    if blocks is not None:
        return Multisets.of_rows(blocks)
    return interval_stage._kron_multisets(workload, quantized.matrix, shape, quantized.scale)


multisets = [multisets_of(workload) for workload in groups]
errors = [np.ones(workload.shape[0]) for workload in groups]
terms = int(quantized.integer.shape[0])
wall, cpu = time.perf_counter(), time.process_time()
intervals = Intervals(law, 0.95)
if hasattr(interval_stage, "release_half_widths"):
    found = interval_stage.release_half_widths(intervals, multisets, errors, terms)
else:
    found = [
        interval_stage.half_widths(intervals, group, error, terms)
        for group, error in zip(multisets, errors)
    ]
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
exact = [intervals.distinct(group.distinct)[1] for group in multisets]  # known: no work
print(wall, cpu, ",".join(f"{int(flags.sum())}/{flags.size}" for flags in exact))
"""


def cases() -> dict[str, tuple[str, list[str]]]:
    """Case name → (child program, its arguments)."""
    found = {config.stem: (PLAN, [config.name]) for config in sorted(EXAMPLES.glob("*.yaml"))}
    found["dense-32"] = (STAGE, ["dense"])
    found["tree-64x32 σ²≈1e5"] = (STAGE, ["tree", "100000"])
    found["tree-64x32 σ²≈1e7"] = (STAGE, ["tree", "10000000"])
    return found


def run_case(
    program: str, arguments: list[str], source: Path, timeout: float
) -> tuple[float, float, str]:
    """Wall and CPU seconds the child reports and its exact counts, in a fresh process
    importing dpmm from ``source`` (inf when it timed out)."""
    env = dict(os.environ, PYTHONPATH=str(source))
    line = run_in_examples(program, arguments, env, timeout)
    if line is None:
        return float("inf"), float("inf"), "-"
    wall, cpu, exact = line.split()
    return float(wall), float(cpu), exact


def median_case(
    program: str, arguments: list[str], source: Path, args: argparse.Namespace
) -> tuple[float, float, str]:
    """The median wall and CPU seconds of ``--repeat`` runs (the last run's exact counts)."""
    runs = [run_case(program, arguments, source, args.timeout) for _ in range(args.repeat)]
    return (
        statistics.median(run[0] for run in runs),
        statistics.median(run[1] for run in runs),
        runs[-1][2],
    )


def baseline_source(revision: str, folder: Path) -> Path:
    """The baseline revision's ``dpmm`` package, extracted under ``folder``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "dpmm"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="d6528e4", help="git revision compared against")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (median kept)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    args = parser.parse_args()
    chosen = cases()
    if args.cases:
        chosen = {name: chosen[name] for name in args.cases.split(",")}
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        baseline = baseline_source(args.baseline, Path(folder))
        for name, (program, arguments) in chosen.items():
            before = median_case(program, arguments, baseline, args)
            after = median_case(program, arguments, ROOT, args)
            rows.append(
                (
                    name,
                    f"{before[0]:.2f}",
                    f"{before[1]:.2f}",
                    before[2],
                    f"{after[0]:.2f}",
                    f"{after[1]:.2f}",
                    after[2],
                    f"{before[0] / after[0]:.1f}",
                )
            )
            print(f"  {name}: done", flush=True)
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"({time.perf_counter() - started:.0f} s in all)\n")
    print(f"before: {args.baseline}; after: this checkout; ratio: before / after wall\n")
    header = ("case", "before wall s", "cpu s", "exact", "after wall s", "cpu s", "exact", "ratio")
    print_table(header, rows)


if __name__ == "__main__":
    main()
