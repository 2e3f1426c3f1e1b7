"""Residual releases deliver their planned error: measured RMSE over repeated releases.

Each setting is a release config under ρ-zCDP run through the product path: ``plan(config)``
once (it saves the decision the release measures), then ``--runs`` releases with
``run_release(config)``, each a fresh measurement with OS-CSPRNG discrete Gaussian noise,
charged to a temporary ledger granted ``runs × ρ``. Every release's ``answers.parquet``
(read with ``dpmm.release.read_answers``) is compared with true answers computed here with
numpy from the raw records, independently of dpmm's counting. Settings:

* ``adult``: all 2-way marginals of Adult (``../shared/data/adult``) over the full
  14-attribute domain of ``config/examples/adult-domain.json``, ρ = 1
  (ResidualPlanner's row: sum-var 2,994,835 at the optimum);
* ``adult-binned``: the same, with the five numeric attributes (age, fnlwgt, capital-gain,
  capital-loss, hours-per-week) binned in pairs of codes through the domain's ``bins``, so
  that every dense integer residual block stays within the entries its exact sensitivity
  may visit (``dpmm.linalg.helmert_blocks.MAX_BLOCK_ENTRIES``); the closed-form optimum's
  diagonal blocks have exact norms without that limit, so both settings release it;
* ``qs-prefix``: QuerySmasher's [10]×8, all 2-way with prefix queries on both attributes
  of every pair (28 ``kron`` groups of 100 queries), ρ = 1, on 50,000 synthetic records
  (zipf-skewed, each attribute copying its left neighbour w.p. 1/2) written as Parquet.
  QuerySmasher's sum-var is 92,684.5 (exact SDP optimum 92,676.55; RP+ 105,379).

Per query group (and for all queries) the table shows the plan's and the manifest's
expected RMSE, the measured RMSE (root of the mean over runs and queries of the squared
error), their ratio, the ratio's sampling error as the relative standard error of the RMSE
estimate, both the independent-query approximation ``1/√(2·q·runs)`` and the estimate from
the spread of the per-run mean squared errors (which accounts for correlated answers), and
the share of answers within ±2 of their standard errors (95.4 % for Gaussian errors). The
target is |ratio − 1| ≤ 5 %: the last column is ``ok`` within it, ``~ (s.e.)`` outside it
but within two sampling errors (the larger of the two estimates), ``OFF`` outside both;
with fewer than 10 runs (``--quick``) there is no verdict.
The plan's wall time and the median release wall time are shown per setting, with a check
that every release measured the plan's strategy and stated the plan's expected errors.

Run::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/residual_release.py          # 20 runs each
    .venv/bin/python benchmarks/residual_release.py --quick      # smoke run: 2 runs, [10]×4
    .venv/bin/python benchmarks/residual_release.py --settings qs-prefix --runs 50
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import DpmmError
from dpmm.pipeline import run_release
from dpmm.plan import PlanReport, plan
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP
from dpmm.release import read_answers

ROOT = Path(__file__).resolve().parents[1]
ADULT_CSV = ROOT.parent / "shared" / "data" / "adult" / "adult.csv"
ADULT_DOMAIN = ROOT / "config" / "examples" / "adult-domain.json"
#: Adult's numeric attributes, binned in pairs of codes in ``adult-binned``.
ADULT_NUMERIC = ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week")
BIN_WIDTH = 2
RESIDUAL_METHODS = ("marginal_optimal", "residual")
DATASET = "bench"
#: The data of the synthetic setting is fixed; the noise never is.
DATA_SEED = 20261201
TARGET = 0.05
#: Fewer runs than this give no usable spread of the per-run errors: no verdict.
VERDICT_RUNS = 10


@dataclass
class Setting:
    """One release config, its raw records and the true answers of each query group."""

    name: str
    description: str
    body: str
    data: Path
    truth: dict[str, np.ndarray]
    reference: str


@dataclass
class Measured:
    """Squared errors and coverage of one group, one row per run."""

    queries: int
    mse: list[float] = field(default_factory=list)
    covered: list[float] = field(default_factory=list)


def adult_records() -> tuple[dict[str, int], np.ndarray]:
    """The Adult codes (rows × 14) and the domain file's ``{attribute: size}``."""
    sizes = json.loads(ADULT_DOMAIN.read_text())
    header = ADULT_CSV.read_text().splitlines()[0].split(",")
    if header != list(sizes):
        raise SystemExit(f"{ADULT_CSV}: columns {header} are not the domain's {list(sizes)}")
    return sizes, np.loadtxt(ADULT_CSV, delimiter=",", skiprows=1, dtype=np.int64)


def two_way_truth(records: np.ndarray, shape: list[int]) -> np.ndarray:
    """Every 2-way table in pair order (attribute positions ascending), cells in C order."""
    tables = []
    for i, j in itertools.combinations(range(len(shape)), 2):
        cells = records[:, i] * shape[j] + records[:, j]
        tables.append(np.bincount(cells, minlength=shape[i] * shape[j]))
    return np.concatenate(tables).astype(np.float64)


def adult(folder: Path, rho: str, binned: bool) -> Setting:
    sizes, records = adult_records()
    shape = list(sizes.values())
    if binned:
        attributes = []
        for position, (name, size) in enumerate(sizes.items()):
            if name in ADULT_NUMERIC:
                bins = math.ceil(size / BIN_WIDTH)
                edges = list(range(0, BIN_WIDTH * bins + 1, BIN_WIDTH))
                attributes.append(f"{{name: {name}, size: {bins}, bins: {edges}}}")
                records[:, position] //= BIN_WIDTH
                shape[position] = bins
            else:
                attributes.append(f"{{name: {name}, size: {size}}}")
        domain = "{attributes: [" + ", ".join(attributes) + "]}"
    else:
        domain = f"{{file: '{ADULT_DOMAIN}'}}"
    name = "adult-binned" if binned else "adult"
    body = (
        f"name: {name}\ndomain: {domain}\nprivacy: {{rho: {rho}}}\n"
        "workload: [{name: two-way, kind: marginals, k: 2}]\n"
    )
    what = f"five numeric attributes binned by {BIN_WIDTH}" if binned else "domain file as is"
    return Setting(
        name,
        f"Adult, all 2-way, {len(records):,} records, shape {shape} ({what})",
        body,
        ADULT_CSV,
        {"two-way": two_way_truth(records, shape)},
        "" if binned else "ResidualPlanner sum-var 2,994,835 (ρ = 1)",
    )


def skewed_records(rows: int, d: int, size: int) -> np.ndarray:
    """Zipf-like codes (weight 1/(r+1)^1.5), each attribute copying its left one w.p. 1/2."""
    rng = np.random.default_rng(DATA_SEED)
    weights = 1.0 / np.arange(1, size + 1) ** 1.5
    records = rng.choice(size, size=(rows, d), p=weights / weights.sum())
    copy = rng.random((rows, d)) < 0.5
    for j in range(1, d):
        records[:, j] = np.where(copy[:, j], records[:, j - 1], records[:, j])
    return records.astype(np.int64)


def qs_prefix(folder: Path, rho: str, rows: int, d: int, size: int = 10) -> Setting:
    records = skewed_records(rows, d, size)
    names = [f"a{i + 1}" for i in range(d)]
    data = folder / "qs-data"
    data.mkdir()
    table = pa.table({name: records[:, i] for i, name in enumerate(names)})
    pq.write_table(table, data / "part-0.parquet")
    groups, truth = [], {}
    for i, j in itertools.combinations(range(d), 2):
        group = f"{names[i]}-{names[j]}"
        factors = f"{{{names[i]}: prefix, {names[j]}: prefix}}"
        groups.append(f"  - {{name: {group}, kind: kron, factors: {factors}}}")
        counts = np.zeros((size, size))
        np.add.at(counts, (records[:, i], records[:, j]), 1)
        truth[group] = counts.cumsum(axis=0).cumsum(axis=1).ravel()  # a_i <= u and a_j <= v
    domain = ", ".join(f"{name}: {size}" for name in names)
    body = (
        f"name: qs-prefix\ndomain: {{{domain}}}\nprivacy: {{rho: {rho}}}\n"
        "workload:\n" + "\n".join(groups) + "\n"
    )
    reference = "QuerySmasher sum-var 92,684.5, RP+ 105,379 (ρ = 1)" if d == 8 else ""
    return Setting(
        "qs-prefix",
        f"[{size}]×{d}, all 2-way prefix × prefix, {rows:,} synthetic records",
        body,
        data,
        truth,
        reference,
    )


def write_config(folder: Path, setting: Setting, method: str, rho: str, runs: int) -> ReleaseConfig:
    """The config (``release.yaml``) and a fresh ledger granted ``runs × ρ``."""
    folder.mkdir()
    ledger = folder / "budget.db"
    with Ledger.init(ledger) as opened:
        opened.grant(DATASET, ZCDP(Fraction(rho) * runs))
    text = (
        setting.body
        + f"strategy: {{method: {method}}}\n"
        + f"data: {{path: '{setting.data}'}}\n"
        + f"ledger: {{path: '{ledger}', dataset: {DATASET}}}\n"
        + "release: {root: releases, reconstruction: least_squares}\n"
    )
    (folder / "release.yaml").write_text(text)
    return load_config(folder / "release.yaml")


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else math.inf


def measure(
    config: ReleaseConfig, setting: Setting, report: PlanReport, runs: int
) -> tuple[dict[str, Measured], list[float], list[str], dict[str, float]]:
    """Run the releases; per group the squared errors, and the checks against the plan."""
    planned = {g.name: g.rmse for g in report.groups}
    measured = {name: Measured(len(truth)) for name, truth in setting.truth.items()}
    seconds, problems, stated = [], [], {}
    for run in range(runs):
        start = time.perf_counter()
        try:
            result = run_release(config)
        except Exception as error:  # a failed release is a result to report, not a crash
            problems.append(f"run {run}: the release failed: {type(error).__name__}: {error}")
            continue
        seconds.append(time.perf_counter() - start)
        strategy = result.manifest["strategy"]
        if strategy["selected"] != report.chosen_method:
            problems.append(f"run {run}: released {strategy['selected']!r}")
        if strategy["digest"] != report.strategy_digest:
            problems.append(f"run {run}: strategy digest differs from the plan's")
        stated = {g["name"]: g["expected_rmse"] for g in result.manifest["error"]["groups"]}
        for name, rmse in stated.items():
            if relative(rmse, planned[name]) > 1e-9:
                problems.append(f"run {run}: {name} manifest RMSE {rmse} ≠ plan {planned[name]}")
        answers = read_answers(result.path / "answers.parquet").to_pandas()
        for name, group in answers.groupby("group", sort=False):
            group = group.sort_values("query")
            truth = setting.truth[name]
            if len(group) != len(truth):
                raise SystemExit(f"{name}: {len(group)} answers for {len(truth)} true answers")
            error = group["estimate"].to_numpy() - truth
            sigma = group["standard_error"].to_numpy()
            measured[name].mse.append(float(np.mean(error**2)))
            measured[name].covered.append(float(np.mean(np.abs(error) <= 2 * sigma)))
    return measured, seconds, problems, stated


def row(name: str, queries: int, plan_rmse: float, stated: float, m: Measured) -> str:
    """One table row; the verdict allows the larger of 5 % and two sampling errors."""
    runs = len(m.mse)
    mse = statistics.fmean(m.mse)
    rmse = math.sqrt(mse)
    ratio = rmse / plan_rmse
    naive = 1 / math.sqrt(2 * queries * runs)
    spread = 0.5 * statistics.stdev(m.mse) / math.sqrt(runs) / mse if runs > 1 else math.nan
    allowed = max(TARGET, 2 * max(naive, spread if math.isfinite(spread) else 0.0))
    if runs < VERDICT_RUNS:
        verdict = "(few runs)"
    elif abs(ratio - 1) <= TARGET:
        verdict = "ok"
    else:
        verdict = "~ (s.e.)" if abs(ratio - 1) <= allowed else "OFF"
    return (
        f"| {name} | {queries:,} | {plan_rmse:.4f} | {stated:.4f} | {rmse:.4f} | {ratio:.4f} | "
        f"{naive:.2%} | {spread:.2%} | {statistics.fmean(m.covered):.2%} | {verdict} |"
    )


def run_setting(
    build: Callable[[Path], Setting], method: str, rho: str, runs: int, scratch: Path
) -> None:
    setting = build(scratch)
    config = write_config(scratch / setting.name, setting, method, rho, runs)
    print(f"## {setting.name}: {setting.description}, ρ = {rho}")
    print()
    start = time.perf_counter()
    try:
        report = plan(config)
    except DpmmError as error:
        print(f"* the plan failed: {type(error).__name__}: {error}\n", flush=True)
        return
    plan_seconds = time.perf_counter() - start
    residual = report.chosen_method in RESIDUAL_METHODS
    total = report.total.total_squared_error
    strategy = report.strategy_repr
    strategy = strategy if len(strategy) <= 80 else strategy[:79] + "…"
    print(
        f"* plan: method {method!r} selected {report.chosen_method!r} "
        f"({'residual' if residual else 'NOT residual'}): {strategy}, quantization scale "
        f"2^{report.quantization_scale.bit_length() - 1}; planned sum-var {total:,.1f}"
        + (f" (anchor: {setting.reference})" if setting.reference else "")
    )
    for candidate in report.candidates:
        if not residual and candidate.method in RESIDUAL_METHODS:
            error = candidate.error
            print(
                f"* candidate {candidate.method}: sum-var "
                + (f"{error:,.1f}" if error is not None else "not computed")
                + f"; {candidate.skipped or 'not chosen'}"
            )
    measured, seconds, problems, stated = measure(config, setting, report, runs)
    if not seconds:
        print(f"* plan {plan_seconds:.2f} s; every release failed:")
        print("\n".join(f"  * {problem}" for problem in problems[:10]) + "\n", flush=True)
        return
    print(
        f"* wall time: plan {plan_seconds:.2f} s; release median "
        f"{statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max {max(seconds):.2f}) "
        f"over {len(seconds)} of {runs} releases"
    )
    if problems:
        print(f"* plan vs releases: {len(problems)} problems:")
        print("\n".join(f"  * {problem}" for problem in problems[:10]))
    else:
        print("* plan vs releases: every release measured the plan's strategy and stated its RMSE")
    print()
    print(
        "| group | queries | plan RMSE | manifest RMSE | measured RMSE | measured / plan | "
        "rel. s.e. 1/√(2qR) | rel. s.e. (runs) | within ±2 s.e. | |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for group in report.groups:
        m = measured[group.name]
        print(row(group.name, group.queries, group.rmse, stated[group.name], m))
    if len(report.groups) > 1:
        queries = report.total.queries
        everything = Measured(queries)
        for r in range(len(seconds)):
            everything.mse.append(sum(m.mse[r] * m.queries for m in measured.values()) / queries)
            everything.covered.append(
                sum(m.covered[r] * m.queries for m in measured.values()) / queries
            )
        stated_total = math.sqrt(
            sum(stated[g.name] ** 2 * g.queries for g in report.groups) / queries
        )
        print(row("**all**", queries, report.total.rmse, stated_total, everything))
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="releases per setting")
    parser.add_argument("--settings", default="adult,adult-binned,qs-prefix")
    parser.add_argument("--method", default="auto", help="the configs' strategy.method")
    parser.add_argument("--rho", default="1", help="ρ of each release (a fraction)")
    parser.add_argument("--records", type=int, default=50_000, help="synthetic records")
    parser.add_argument("--attributes", type=int, default=8, help="synthetic attributes")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 runs, [10]×4")
    parser.add_argument("--keep", type=Path, help="write the releases here (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.attributes, args.records = 2, 4, 5_000
    builders: dict[str, Callable[[Path], Setting]] = {
        "adult": lambda folder: adult(folder, args.rho, binned=False),
        "adult-binned": lambda folder: adult(folder, args.rho, binned=True),
        "qs-prefix": lambda folder: qs_prefix(folder, args.rho, args.records, args.attributes),
    }
    print(
        f"{args.runs} releases per setting, ρ = {args.rho} zCDP each, strategy.method "
        f"{args.method!r}, least squares; target |measured / plan − 1| ≤ {TARGET:.0%}\n"
    )
    with tempfile.TemporaryDirectory(prefix="residual-release-") as temporary:
        scratch = args.keep or Path(temporary)
        for name in args.settings.split(","):
            folder = scratch / name
            folder.mkdir(parents=True)
            run_setting(builders[name], args.method, args.rho, args.runs, folder)


if __name__ == "__main__":
    main()
