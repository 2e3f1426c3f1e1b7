"""What ``release.output: integer`` costs: the error rounding adds, per group, and its time.

Runs each release R times: the data are counted once through the release's own ingest
(:func:`dpmm.pipeline.ingest_stage.count_input`), then each run draws a fresh measurement
in memory from the OS CSPRNG (the exact sampler a release uses; no ledger: the benchmark
accounts for nothing) and post-processes it three ways with the release's own
:func:`dpmm.pipeline.reconstruct_stage.reconstruct`: real-valued, integer, and integer
with the true total declared as an invariant. Per group it prints the RMSE per query of
the real-valued answers against the truth, of the integer ones against the truth and
against the real-valued ones, the mean stated standard error of each, the share of
integer answers within two stated standard errors of the truth, and the seconds the
rounding added (integer reconstruction minus real-valued, medians over the runs).

Cases:

* ``adult-marginals`` — ``config/examples/adult-marginals.yaml`` on the real Adult data
  (``../shared/data/adult``): 14 attributes, 6.4·10¹⁷ cells, counted as marginal tables;
  the least-squares tables are rounded top-down (no vector).
* ``adult-two-way`` — the 2-way tables of six Adult attributes over their own 13,440-cell
  domain (the vector is rounded).
* ``census-sf1`` — ``config/examples/census-sf1.yaml`` (500,480 cells, the vector is
  rounded) on **synthetic** persons (no SF1 microdata is public): sex, Hispanic origin,
  race flags, household relationship and age drawn from simple census-like shares
  (fixed seed), ``--people`` of them.

Measured here (2026-11-27, 2 shared cores under other load; R = 20 for Adult, 10 for SF1;
RMSE per query; the ``integer+total`` rows, with the true total declared, were within
±4 of these but for Adult's age CDF: 35.1 integer against 41.1)::

    release            group           RMSE real  RMSE int  int-real  ±2 s.e.  +seconds
    adult-marginals    one-way            26.27     22.07     13.09    0.978      0.13
                       two-way            27.78     26.12     11.68    0.967      0.13
                       age-cdf-by-sex     39.58     41.14     21.44    0.976      0.13
    adult-two-way      two-way            12.29     11.66      6.11    0.982      2.11
    census-sf1         sf1-person          7.31     13.14     11.92    0.983     21.08

Run::

    .venv/bin/python benchmarks/integer_tables.py --runs 20
    .venv/bin/python benchmarks/integer_tables.py --case census-sf1 --runs 5
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from dpmm.config import ReleaseConfig, load_config
from dpmm.measure import measure
from dpmm.pipeline.ingest_stage import count_input, counting_plan
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.settings import Invariants
from dpmm.workload.table_form import answer_from_tables, needed_tables, table_form

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "config" / "examples"
ADULT = ROOT.parent / "shared" / "data" / "adult" / "adult.csv"
SIX = ["education-num", "marital-status", "relationship", "race", "sex", "income>50K"]
#: Synthetic SF1 persons: single-race flags (bit i) and their shares, then two-race pairs.
RACE_SHARES = {1: 0.70, 2: 0.13, 4: 0.01, 8: 0.06, 16: 0.003, 32: 0.057, 3: 0.015, 9: 0.01}
#: Household relationship codes 0-16: householder, spouse, partner, child, ..., group quarters.
ADULT_RELATIONSHIP = np.array([38, 20, 6, 3, 1, 3, 2, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1], float)
CHILD_RELATIONSHIP = np.array([0, 0, 0, 80, 4, 6, 1, 0, 0, 2, 3, 1, 1, 1, 0, 0, 1], float)


def _adult_config(folder: Path, case: str) -> ReleaseConfig:
    document = yaml.safe_load((EXAMPLES / "adult-marginals.yaml").read_text())
    frame = pd.read_csv(ADULT)
    if case == "adult-two-way":
        sizes = yaml.safe_load((EXAMPLES / "adult-domain.json").read_text())
        document["name"] = "adult-two-way"
        document["domain"] = {name: sizes[name] for name in SIX}
        document["workload"] = [{"name": "two-way", "kind": "marginals", "k": 2}]
        frame = frame[SIX]
    else:
        document["domain"] = {"file": str(EXAMPLES / "adult-domain.json")}
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / "records.parquet")
    return _write(folder, document)


def _sf1_config(folder: Path, people: int) -> ReleaseConfig:
    rng = np.random.default_rng(20261127)  # the synthetic data only; the noise is the OS's
    age = np.minimum(rng.gamma(2.2, 17.0, people).astype(np.int64), 114)
    races, shares = zip(*RACE_SHARES.items(), strict=True)
    child = age < 18
    relationship = np.where(
        child,
        rng.choice(17, people, p=CHILD_RELATIONSHIP / CHILD_RELATIONSHIP.sum()),
        rng.choice(17, people, p=ADULT_RELATIONSHIP / ADULT_RELATIONSHIP.sum()),
    )
    columns = {
        "sex": np.array(["male", "female"])[rng.integers(0, 2, people)],
        "hispanic": np.array(["hispanic", "not hispanic"])[(rng.random(people) < 0.82) * 1],
        "race": rng.choice(np.array(races), people, p=np.array(shares) / sum(shares)),
        "relationship": relationship,
        "age": age,
    }
    pq.write_table(pa.table(columns), folder / "records.parquet")
    return _write(folder, yaml.safe_load((EXAMPLES / "census-sf1.yaml").read_text()))


def _write(folder: Path, document: dict) -> ReleaseConfig:
    document = copy.deepcopy(document)
    document["data"] = {"path": "records.parquet"}
    document["release"] = {"root": "releases", "reconstruction": "least_squares"}
    path = folder / "release.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(path)


def _truth(config: ReleaseConfig, counts, plan: str) -> dict[str, np.ndarray]:
    """Every group's true answers: ``W x``, or (without the vector) from true tables."""
    if plan == "vector":
        return {g.name: np.asarray(g.matrix @ counts.vector, float) for g in config.workload}
    frame = pd.read_csv(ADULT)
    shape = config.domain.shape
    truth = {}
    for group in config.workload:
        blocks = table_form(group.matrix, shape)
        tables = {}
        for attrs in needed_tables(blocks):
            names = [config.domain.attributes[i] for i in attrs]
            cells = np.ravel_multi_index(
                [frame[n].to_numpy() for n in names], [shape[i] for i in attrs]
            )
            size = int(np.prod([shape[i] for i in attrs]))
            tables[attrs] = np.bincount(cells, minlength=size).astype(float)
        truth[group.name] = answer_from_tables(blocks, tables)
    return truth


def _variants(config: ReleaseConfig, total: int) -> dict[str, ReleaseConfig]:
    integer = dataclasses.replace(config.release, output="integer")
    return {
        "real": config,
        "integer": dataclasses.replace(config, release=integer),
        "integer+total": dataclasses.replace(config, release=integer, invariants=Invariants(total)),
    }


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


def run_case(config: ReleaseConfig, runs: int) -> None:
    strategy = choose_strategy(config)
    plan = counting_plan(config, strategy)
    counts = count_input(config, strategy)
    truth = _truth(config, counts, plan)
    total = pq.read_metadata(config.path.parent / "records.parquet").num_rows  # the invariant
    x = counts.vector if counts.vector is not None else counts.tables
    variants = _variants(config, total)
    answers = {name: {g.name: [] for g in config.workload} for name in variants}
    errors = {name: {g.name: [] for g in config.workload} for name in variants}
    seconds = {name: [] for name in variants}
    for _ in range(runs):
        record = measure(strategy.quantized, x, config.measurement_privacy)
        for name, variant in variants.items():
            started = time.perf_counter()
            solved = reconstruct(variant, strategy, record, plan)
            seconds[name].append(time.perf_counter() - started)
            for group in solved.groups:
                answers[name][group.name].append(np.asarray(group.values, float))
                errors[name][group.name].append(np.asarray(group.standard_errors, float))
    real_seconds = statistics.median(seconds["real"])
    print(
        f"\n{config.name}: {plan} plan, {config.domain.size:,} cells, {strategy.selected}, "
        f"{runs} runs; real-valued reconstruction {real_seconds:.2f} s (median)"
    )
    header = (
        f"{'group':<16}{'variant':<15}{'queries':>8}{'RMSE real':>11}{'RMSE int':>10}"
        f"{'int-real':>10}{'s.e. real':>11}{'s.e. int':>10}{'±2 s.e.':>9}{'+seconds':>10}"
    )
    print(header)
    print("-" * len(header))
    for name in ("integer", "integer+total"):
        added = statistics.median(seconds[name]) - real_seconds
        for group in config.workload:
            true = truth[group.name]
            real = np.stack(answers["real"][group.name])
            rounded = np.stack(answers[name][group.name])
            stated = np.stack(errors[name][group.name])
            covered = float(np.mean(np.abs(rounded - true) <= 2 * stated))
            print(
                f"{group.name:<16}{name:<15}{true.size:>8}{_rms(real - true):>11.3f}"
                f"{_rms(rounded - true):>10.3f}{_rms(rounded - real):>10.3f}"
                f"{float(np.mean(np.stack(errors['real'][group.name]))):>11.3f}"
                f"{float(np.mean(stated)):>10.3f}{covered:>9.3f}{added:>10.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="releases per case (R)")
    parser.add_argument("--people", type=int, default=300_000, help="synthetic SF1 persons")
    parser.add_argument(
        "--case", action="append", choices=["adult-marginals", "adult-two-way", "census-sf1"]
    )
    args = parser.parse_args(argv)
    if not ADULT.is_file():
        print(f"the Adult data is not at {ADULT}", file=sys.stderr)
        return 2
    for case in args.case or ["adult-marginals", "adult-two-way", "census-sf1"]:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            config = (
                _sf1_config(folder, args.people)
                if case == "census-sf1"
                else _adult_config(folder, case)
            )
            run_case(config, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
