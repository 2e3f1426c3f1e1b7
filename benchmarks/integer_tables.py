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
* ``adult-3way`` — every 3-way table of the same six attributes over the 14-attribute
  domain, each measured (``config/examples/adult-3way.yaml``'s strategy), counted as
  marginal tables: no order rounds these 20 tables one at a time, so their 13,440-cell
  joint table is rounded in their place and each is its sums.
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

Every 3-way table of six Adult attributes through their joint table, and SF1 with its
sex, Hispanic-origin and age tables declared (2026-11-27, 2 cores under a load average of
7-15 from other work: wall seconds are 3-4× the CPU seconds; RMSE per query; the
``integer+margins`` rows declare the data's own one-way tables)::

    release     runs  variant          RMSE real  RMSE int  int-real  ±2 s.e.  +s wall  +s CPU
    adult-3way    20  integer              22.31     17.99     21.93    0.997    33.98    8.44
                      integer+total        22.31     17.98     21.94    0.997    33.32    8.34
                      integer+margins      22.31     18.00     22.02    0.997    34.38    8.37
                      (sex, race)
    census-sf1    10  integer               7.38     12.89     12.04    0.984    48.20   11.66
                      integer+total         7.38     12.72     12.16    0.985    49.73   11.99
                      integer+margins       7.38     31.69     31.73    0.984    49.93   11.86
                      (sex, hispanic, age)

On SF1 the declared tables (their joint table of 460 cells) left the answers farther off
than none declared (31.7 against 12.9). Per product (three runs' NNLS estimates, rounded
each way): the queries off were those summing over ages. The estimate spreads the count
of a measured age group over its single ages (the synthetic ages are top-coded at 114:
3,911 persons there, 2,542 estimated, 911 at 113 against 187 declared), so the declared
age table moves hundreds of persons between neighbouring ages, and scaling each age's
slice to its count on its own moved the group's race mix with them (white non-Hispanic
persons 389 RMS off against 10 for the estimate); the joint table's L1 rounding put each
age's gap in whichever sex and Hispanic origin HiGHS's vertex gave (sex by single year of
age 47.6 off against 9.3). Now the slices carry their rounding errors and their gaps to
the next (:func:`~dpmm.reconstruct.integer.sliced_rounding`) and the joint table is
rounded the same way before its transportation step (``chained_table(carried=True)``);
those products are 5.2 and 9.0 off. The same command before and after (2026-11-27, 2
cores shared with other tests and benchmarks running; 10 runs)::

    release     runs  variant          RMSE real  RMSE int  int-real  ±2 s.e.  +s wall  +s CPU
    census-sf1    10  integer               7.25     13.20     12.38    0.983    18.89   11.86
      before          integer+total         7.25     13.08     12.55    0.984    20.14   11.74
                      integer+margins       7.25     35.70     35.64    0.983    21.51   11.65
    census-sf1    10  integer               7.36     12.95     12.86    0.982    21.31   12.87
      after           integer+total         7.36     12.75     12.92    0.982    19.36   12.12
                      integer+margins       7.36     12.66     13.35    0.987    19.12   12.78

**Declared margins** (``--margins ATTRIBUTE ...``): a fourth variant,
``integer+margins``, declares the data's own one-way tables of those attributes. On
``adult-two-way`` (R = 20; the vector rounded slice by slice of the margins' joint table,
itself rounded with every margin fixed), against ``integer`` with none declared; each
slice scaled to its count and rounded on its own (before), then carrying errors and gaps
(after, 2026-11-27, under the load above)::

    margins                                RMSE real  RMSE int  int-real  +seconds
    sex, race (10-cell joint table)            11.82     11.10      6.26      1.72
      none declared                            11.82     11.22      5.16      1.75
    education-num, marital-status,             12.00     10.71      7.47      1.64
      relationship (672 cells)
      none declared                            12.00     11.23      5.52      1.61
    sex, race, before (same load)              12.64     11.75      7.23      3.04
      none declared                            12.64     11.86      6.14      2.90
    sex, race, after                           12.58     11.86      7.80      3.22
      none declared                            12.58     11.85      5.52      3.17

The seconds are the NNLS solve's: the joint table and the sliced rounding took 3 ms and
16 ms (before). Each run draws its own noise, so rows of different runs differ by about
±0.4; rounding the same eight runs' estimates both ways, Adult's sex and race margins
were 11.23 before and 11.96 after (11.81 none declared): carrying a slice's gap to the
next moves it between the sexes, where the estimate's mix differs.

**Large vectors** (``--cells N``): a synthetic region (N/10⁴) × age (100) × income (100)
domain, ``--vector-people`` persons (Zipf regions, income tied to age, fixed seed), the
1- and 2-way tables and the income CDF by age, ρ = 1, per-attribute hierarchical trees,
least squares. Each run rounds the same measurement every way: the release's own
(:func:`~dpmm.pipeline.integer_answers.rounding_iterations`: NNLS to its tolerance up to
2¹⁹ cells, else stopped after 200 iterations from least squares rounded top-down), least
squares projected onto the simplex then running sums, least squares rounded top-down
(:func:`dpmm.reconstruct.integer.top_down_rounding`), and with ``--compare`` NNLS stopped after 200
iterations from the projection and NNLS to its tolerance. ``--release`` then runs one
whole integer release (ingest to the written version) and prints each stage's seconds.

Measured here (2026-11-27, 2 cores under heavy other load, load average 7-9: wall times
are 3-5× the CPU time; 10⁶ persons at 10⁶ and 10⁷ cells, 10⁵ at 10⁵; RMSE per query
against the truth; R runs)::

    cells  R  integers from                    one-way  two-way  income-cdf  seconds
    10⁵    1  least squares (real-valued)         2.86     2.58        4.39     0.09
              LS simplex, running sums          794.12    18.62      152.52     0.00
              LS top-down                       136.29     7.06       11.05     0.04
              NNLS 200 it. from LS                6.48     2.40        4.02     2.02
              NNLS to tolerance (the release)     5.80     2.15        3.95    28.95
    10⁶    2  least squares (real-valued)         3.33     3.21        5.46     0.68
              LS simplex, running sums         3065.15    46.74     1065.50     0.29
              LS top-down                      1114.59    17.78       99.39     2.14
              NNLS 200 it. from LS               16.16     4.91        9.58    83.12
              NNLS 200 it. from top-down (rel.)  12.22     4.68        8.91    87.49
              NNLS to tolerance                  13.09     3.13        6.34   581.36
    10⁷    1  least squares (real-valued)         3.57     3.40        6.97     2.20
              LS simplex, running sums         3038.94    33.34     2054.86     2.12
              LS top-down                      1248.55    12.24      286.49    16.52
              NNLS 200 it. from top-down (rel.)  27.20     3.07       39.31   545.11

With ADMM (``dpmm.reconstruct.admm``: the release's NNLS on these Kronecker strategies
since), ``--cells 1000000 --runs 1 --compare`` gave (load average 10-15; the release's
row is now 200 ADMM iterations from the top-down rounding; PG is projected gradient's
200 iterations from it, what the release ran before)::

    integers from                       one-way  two-way  income-cdf  seconds
    least squares (real-valued)            3.69     3.23        5.43     3.19
    PG 200 it. from top-down (before)     13.55     4.66        8.77    66.63
    ADMM 200 it. from top-down (release)  13.00     3.22        6.51    72.33
    ADMM 200 it. from LS                  14.08     3.30        6.51   137.18
    ADMM to tolerance                     13.89     3.15        6.50   474.38

against the real-valued answers: 12.62 / 4.83 / 8.38 (PG), 12.44 / 2.81 / 4.79 (the
release), 13.42 / 2.43 / 4.52 (ADMM to tolerance).

One whole integer release of 10⁷ cells took 1,644.8 s wall (reconstruction 1,599.8 s,
measurement 20.5 s, writing 6.5 s) but 5.3 minutes of CPU (user 2:55, system 2:26: the
process had about a fifth of a core), with a peak of 1.47 GiB against the plan's
footprint of 1.89 GiB. The integers of a vector beyond 2¹⁹ cells cost accuracy against
NNLS to its tolerance (on 10⁶ cells the CDF's RMSE 8.9 against 6.3, the one-way tables'
12.2 against 13.1) and more against least squares on 10⁷ (27 against 3.6 on the one-way
tables); least squares' own vector, however rounded, is far worse.

**On the Dask workers** (``--cells N --workers W``, ``--worker-memory``): the same
synthetic vector kept on a LocalCluster of W worker processes (one thread each), each
table a group of its own (answers on the workers need Kronecker products); per run one
in-memory measurement, its answers chunked as a measurement drawn on the cluster is,
reconstructed real-valued and integer by the release's own ``reconstruct``, every answer
computed on the workers and gathered. The rounding there is NNLS on the cluster (200
iterations above 2¹⁹ cells, from least squares itself), then the vector rounded chunk by
chunk (:func:`~dpmm.reconstruct.slices.chunked_sliced_rounding`). Measured here
(2026-11-27, 10⁶ cells, 2 workers of 1.5 GiB, R = 2; another engineer's test suite and
benchmark running on the 2 cores, load average 4-6; seconds are medians of
reconstruction plus answers, CPU of this process and the workers)::

    reconstruction and answers     wall s    CPU s
    real-valued                      2.52     1.32
    integer                         59.71    34.68

    group               RMSE real  RMSE int  int-real
    region                   3.47      3.83      1.54
    age                      3.37      5.80      4.58
    income                   3.47     23.05     22.66
    region-age               3.44      2.74      2.34
    age-income               3.18      3.68      3.35
    income-cdf-by-age        5.29      6.03      4.64

The time is NNLS's: the chunked rounding of a 10⁶-cell vector on those workers took
1.2-1.4 s (0.05-0.3 s in memory), to the same integers. The income table (the last
attribute: each of its cells sums cells 100 apart in domain order, which running sums do
not keep together) is left far off. In the flow's process NNLS starts from the top-down
rounding instead (the one-way tables together 13.0 RMS off, above); whether the start
explains the difference was not measured.

Run::

    .venv/bin/python benchmarks/integer_tables.py --runs 20
    .venv/bin/python benchmarks/integer_tables.py --case census-sf1 --runs 5
    .venv/bin/python benchmarks/integer_tables.py --case adult-two-way --margins sex race
    .venv/bin/python benchmarks/integer_tables.py --case adult-3way --runs 20 --margins sex race
    .venv/bin/python benchmarks/integer_tables.py --case census-sf1 --runs 10 \
        --margins sex hispanic age
    .venv/bin/python benchmarks/integer_tables.py --cells 1000000 --runs 2 --compare
    .venv/bin/python benchmarks/integer_tables.py --cells 10000000 --runs 1 --release
    .venv/bin/python benchmarks/integer_tables.py --cells 1000000 --runs 2 --workers 2 \
        --worker-memory 1.5GiB
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import resource
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
from dpmm.measure.measurement import Measurement
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import count_input, counting_plan
from dpmm.pipeline.integer_answers import ROUNDING_ITERATIONS, rounding_iterations
from dpmm.pipeline.preflight import footprint
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP
from dpmm.reconstruct.integer import cumulative_rounding, rounded_total, top_down_rounding
from dpmm.reconstruct.nnls import nnls_setup
from dpmm.reconstruct.simplex_threshold import threshold
from dpmm.settings import DeclaredMargin, Invariants
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
    if case == "adult-3way":  # every 3-way table of six attributes, over all fourteen
        document = yaml.safe_load((EXAMPLES / "adult-3way.yaml").read_text())
        document["name"] = "adult-3way-six"
        document["domain"] = {"file": str(EXAMPLES / "adult-domain.json")}
        document["workload"][0]["attributes"] = SIX
    elif case == "adult-two-way":
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


def _variants(
    config: ReleaseConfig, total: int, margins: tuple[DeclaredMargin, ...]
) -> dict[str, ReleaseConfig]:
    integer = dataclasses.replace(config.release, output="integer")
    found = {
        "real": config,
        "integer": dataclasses.replace(config, release=integer),
        "integer+total": dataclasses.replace(config, release=integer, invariants=Invariants(total)),
    }
    if margins:
        declared = Invariants(margins=margins)
        found["integer+margins"] = dataclasses.replace(config, release=integer, invariants=declared)
    return found


def _true_margins(config: ReleaseConfig, names: list[str]) -> tuple[DeclaredMargin, ...]:
    """The data's own one-way tables of ``names``, declared as published margins."""
    frame = pd.read_parquet(config.path.parent / "records.parquet", columns=names)
    margins = []
    for name in names:
        labels = config.domain[name].labels
        codes = frame[name].map({v: i for i, v in enumerate(labels)}) if labels else frame[name]
        counts = np.bincount(codes.to_numpy(np.int64), minlength=config.domain[name].size)
        margins.append(DeclaredMargin(name, tuple(int(c) for c in counts)))
    return tuple(margins)


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


def run_case(config: ReleaseConfig, runs: int, margins: list[str] | None = None) -> None:
    strategy = choose_strategy(config)
    plan = counting_plan(config, strategy)
    counts = count_input(config, strategy)
    truth = _truth(config, counts, plan)
    total = pq.read_metadata(config.path.parent / "records.parquet").num_rows  # the invariant
    x = counts.vector if counts.vector is not None else counts.tables
    variants = _variants(config, total, _true_margins(config, margins or []))
    answers = {name: {g.name: [] for g in config.workload} for name in variants}
    errors = {name: {g.name: [] for g in config.workload} for name in variants}
    seconds = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    for _ in range(runs):
        record = measure(strategy.quantized, x, config.measurement_privacy)
        for name, variant in variants.items():
            started, used = time.perf_counter(), time.process_time()
            solved = reconstruct(variant, strategy, record, plan)
            seconds[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - used)
            for group in solved.groups:
                answers[name][group.name].append(np.asarray(group.values, float))
                errors[name][group.name].append(np.asarray(group.standard_errors, float))
    real_seconds = statistics.median(seconds["real"])
    real_cpu = statistics.median(cpu["real"])
    print(
        f"\n{config.name}: {plan} plan, {config.domain.size:,} cells, {strategy.selected}, "
        f"{runs} runs; real-valued reconstruction {real_seconds:.2f} s wall, {real_cpu:.2f} s "
        "CPU (medians)"
    )
    for name, variant in variants.items():
        if variant.release.integer:
            print(f"  {name}: {reconstruct(variant, strategy, record, plan).rounding}")
    header = (
        f"{'group':<16}{'variant':<16}{'queries':>8}{'RMSE real':>11}{'RMSE int':>10}"
        f"{'int-real':>10}{'s.e. real':>11}{'s.e. int':>10}{'±2 s.e.':>9}{'+seconds':>10}"
        f"{'+cpu s':>8}"
    )
    print(header)
    print("-" * len(header))
    for name in (v for v in variants if v != "real"):
        added = statistics.median(seconds[name]) - real_seconds
        added_cpu = statistics.median(cpu[name]) - real_cpu
        for group in config.workload:
            true = truth[group.name]
            real = np.stack(answers["real"][group.name])
            rounded = np.stack(answers[name][group.name])
            stated = np.stack(errors[name][group.name])
            covered = float(np.mean(np.abs(rounded - true) <= 2 * stated))
            print(
                f"{group.name:<16}{name:<16}{true.size:>8}{_rms(real - true):>11.3f}"
                f"{_rms(rounded - true):>10.3f}{_rms(rounded - real):>10.3f}"
                f"{float(np.mean(np.stack(errors['real'][group.name]))):>11.3f}"
                f"{float(np.mean(stated)):>10.3f}{covered:>9.3f}{added:>10.2f}{added_cpu:>8.2f}"
            )


def _vector_config(folder: Path, cells: int, people: int, workers: bool = False) -> ReleaseConfig:
    """A synthetic release of ``cells`` cells: region (``cells / 10⁴``) × age (100) ×
    income (100), people concentrated by a Zipf law on regions and income tied to age,
    measured by per-attribute hierarchical trees (a Kronecker strategy). ``workers``: its
    arrays kept on the Dask workers, each table a group of its own (a Kronecker product,
    which answers there need)."""
    regions = max(1, cells // 10_000)
    rng = np.random.default_rng(20261127)  # the synthetic data only; the noise is the OS's
    region = np.minimum(rng.zipf(1.3, people) - 1, regions - 1)
    age = np.minimum(rng.gamma(2.2, 17.0, people).astype(np.int64), 99)
    income = np.clip((rng.lognormal(0.0, 0.8, people) * (20 + age)).astype(np.int64), 0, 99)
    columns = {"region": region, "age": age, "income": income}
    pq.write_table(pa.table(columns), folder / "records.parquet")
    document = {
        "name": f"vector-{cells}",
        "domain": {"region": regions, "age": 100, "income": 100},
        "privacy": {"rho": 1},
        "workload": [
            {"name": "one-way", "kind": "marginals", "k": 1},
            {"name": "two-way", "kind": "marginals", "k": 2},
            {"name": "income-cdf-by-age", "kind": "prefix", "attribute": "income", "by": ["age"]},
        ],
        "strategy": {"method": "hierarchical"},
    }
    if workers:
        tables = [["region"], ["age"], ["income"], ["region", "age"], ["age", "income"]]
        document["workload"] = [
            *({"name": "-".join(t), "kind": "marginal", "attributes": t} for t in tables),
            document["workload"][-1],
        ]
        document["cluster"] = {"arrays": "workers"}
    return _write(folder, document)


def _timed(function, *args, **kwargs) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def _other_roundings(
    config: ReleaseConfig, strategy, record, least_squares: np.ndarray, compare: bool
) -> dict[str, tuple[np.ndarray, float]]:
    """Integer vectors (and seconds) the release does not make, for comparison: least
    squares projected onto the simplex (NNLS's usual start) through running sums, least
    squares rounded top-down (the release's start above its NNLS limit), and with
    ``compare`` NNLS stopped after as many iterations from least squares' projection, and
    (above the limit) NNLS to the release's tolerance; on a Kronecker strategy NNLS is
    ADMM, and projected gradient's 200 iterations from the top-down rounding (what the
    release ran before ADMM) are added."""
    total = rounded_total(float(least_squares.sum()))

    def projected() -> np.ndarray:
        tau = threshold([least_squares], float(total))
        return cumulative_rounding(np.maximum(least_squares - tau, 0.0), total)

    shaped = least_squares.reshape(config.domain.shape)
    found = {
        "LS simplex, sums": _timed(projected),
        "LS top-down": _timed(lambda: top_down_rounding(shaped, total).reshape(-1)),
    }
    if compare:
        measured = Measurement(strategy.quantized, record)
        setup = nnls_setup(measured.strategy, measured.noise_std)
        solver = "NNLS" if setup.spectrum is None else "ADMM"

        def solved(chosen=setup, **options) -> np.ndarray:
            estimate = chosen.solve(measured.answers, total=float(total), **options).x
            return cumulative_rounding(np.maximum(estimate, 0.0), total)

        if setup.spectrum is not None:  # the projected gradient the release ran before ADMM
            gradient = dataclasses.replace(setup, spectrum=None)
            found[f"PG {ROUNDING_ITERATIONS} it. from top-down"] = _timed(
                solved,
                gradient,
                start=top_down_rounding(shaped, total).reshape(-1).astype(float),
                max_iterations=ROUNDING_ITERATIONS,
            )
        found[f"{solver} {ROUNDING_ITERATIONS} it. from LS"] = _timed(
            solved, max_iterations=ROUNDING_ITERATIONS
        )
        if rounding_iterations(config) is not None:  # else the release's own
            found[f"{solver} to tolerance"] = _timed(solved)
    return found


def run_vector_case(config: ReleaseConfig, runs: int, compare: bool) -> None:
    """Integer vectors of a large synthetic domain: the release's reconstruction, real
    and integer, then other ways of rounding (see :func:`_other_roundings`), with RMSE
    per group against the truth and the real-valued (least-squares) answers."""
    strategy = choose_strategy(config)
    plan = counting_plan(config, strategy)
    counts, counted = _timed(count_input, config, strategy)
    truth = {g.name: np.asarray(g.matrix @ counts.vector, float) for g in config.workload}
    release = dataclasses.replace(config.release, output="integer")
    integer = dataclasses.replace(config, release=release)
    released = "release: " + (
        "NNLS to tolerance"
        if rounding_iterations(integer) is None
        else f"NNLS {ROUNDING_ITERATIONS} it. from top-down"
    )
    squared: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, list[float]] = {}
    for _ in range(runs):
        privacy = config.measurement_privacy
        record, spent = _timed(measure, strategy.quantized, counts.vector, privacy)
        seconds.setdefault("measure", []).append(spent)
        real = reconstruct(config, strategy, record, plan)
        seconds.setdefault("real-valued reconstruction", []).append(real.seconds)
        rounded = reconstruct(integer, strategy, record, plan)
        seconds.setdefault("integer reconstruction", []).append(rounded.seconds)
        vectors = {released: (rounded.histogram, rounded.seconds - real.seconds)}
        vectors.update(_other_roundings(config, strategy, record, real.histogram, compare))
        for name, (vector, spent) in vectors.items():
            seconds.setdefault(f"integers: {name}", []).append(spent)
            for group, answers in zip(config.workload, real.groups, strict=True):
                values = np.asarray(group.matrix @ vector.astype(float), float)
                true = truth[group.name]
                squared.setdefault((group.name, "real-valued (LS)"), []).append(
                    float(np.mean((answers.values - true) ** 2))
                )
                squared.setdefault((group.name, name), []).append(
                    float(np.mean((values - true) ** 2))
                )
                squared.setdefault((group.name, f"{name} − real"), []).append(
                    float(np.mean((values - answers.values) ** 2))
                )
    print(
        f"\n{config.name}: {plan} plan, {config.domain.size:,} cells, {strategy.selected}, "
        f"{runs} runs; counted in {counted:.1f} s"
    )
    for what, spent in seconds.items():
        print(f"  {what:<44}{statistics.median(spent):>9.2f} s (median)")
    print(f"{'group':<20}{'answers':<42}{'RMSE':>10}")
    for (group, name), values in sorted(squared.items()):
        print(f"{group:<20}{name:<42}{np.sqrt(np.mean(values)):>10.2f}")


def _cluster_cpu(client) -> float:
    """The CPU seconds the cluster's worker processes have used so far."""
    import psutil

    def used() -> float:
        times = psutil.Process().cpu_times()
        return times.user + times.system

    return sum(client.run(used).values())


def run_workers_case(config: ReleaseConfig, runs: int, workers: int, memory: str) -> None:
    """The synthetic vector kept on a LocalCluster of ``workers`` worker processes (one
    thread and ``memory`` each): per run one in-memory measurement (its answers then
    chunked as a measurement drawn on the cluster is), reconstructed by the release's own
    :func:`~dpmm.pipeline.reconstruct_stage.reconstruct` real-valued and integer, every
    answer computed on the workers and gathered here; RMSE per group against the truth
    and between the two, wall and CPU seconds (this process and the workers) of each."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from dpmm.measure.chunked import answer_chunks

    strategy = choose_strategy(config)
    plan = counting_plan(config, strategy)
    counts, counted = _timed(count_input, config, strategy)
    vector = np.asarray(da.asarray(counts.vector).compute()).reshape(-1)  # counted on threads
    truth = {g.name: np.asarray(g.matrix @ vector, float) for g in config.workload}
    release = dataclasses.replace(config.release, output="integer")
    integer = dataclasses.replace(config, release=release)
    chunks = (answer_chunks(strategy.quantized.integer),)
    squared: dict[tuple[str, str], list[float]] = {}
    spent: dict[str, list[tuple[float, float]]] = {}
    options = {"n_workers": workers, "threads_per_worker": 1, "memory_limit": memory}
    with (
        LocalCluster(processes=True, dashboard_address=":0", **options) as cluster,
        Client(cluster) as client,
    ):
        for _ in range(runs):
            record = measure(strategy.quantized, vector, config.measurement_privacy)
            values = da.from_array(record.values, chunks=chunks)
            record = dataclasses.replace(record, values=values)
            answers = {}
            for name, chosen in (("real-valued", config), ("integer", integer)):
                wall, cpu = time.perf_counter(), time.process_time() + _cluster_cpu(client)
                solved = reconstruct(chosen, strategy, record, plan)
                gathered = client.gather(client.compute([g.values for g in solved.groups]))
                cpu = time.process_time() + _cluster_cpu(client) - cpu
                spent.setdefault(name, []).append((time.perf_counter() - wall, cpu))
                answers[name] = dict(zip(truth, gathered, strict=True))
            for group, true in truth.items():
                real, rounded = answers["real-valued"][group], answers["integer"][group]
                assert np.array_equal(rounded, np.round(rounded)) and rounded.min() >= 0
                for name, error in (
                    ("real-valued (LS)", real - true),
                    ("integer", rounded - true),
                    ("integer − real", rounded - real),
                ):
                    squared.setdefault((group, name), []).append(float(np.mean(error**2)))
    iterations = rounding_iterations(integer)
    solve = "to its tolerance" if iterations is None else f"stopped after {iterations} iterations"
    print(
        f"\n{config.name}: {plan} plan on {workers} worker processes ({memory} each), "
        f"{config.domain.size:,} cells, {strategy.selected}, {runs} runs; counted in "
        f"{counted:.1f} s; the integers from NNLS "
        f"{solve}"
    )
    print(f"{'reconstruction and answers':<28}{'wall s':>9}{'CPU s':>9}   (medians)")
    for name, pairs in spent.items():
        wall, cpu = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        print(f"{name:<28}{wall:>9.2f}{cpu:>9.2f}")
    print(f"{'group':<22}{'answers':<20}{'RMSE':>10}")
    for (group, name), values in squared.items():
        print(f"{group:<22}{name:<20}{np.sqrt(np.mean(values)):>10.2f}")


def run_vector_release(config: ReleaseConfig) -> None:
    """One whole integer release of the synthetic vector (ingest to the written version,
    a fresh ledger), with each stage's seconds."""
    document = yaml.safe_load(config.path.read_text())
    document["release"]["output"] = "integer"
    document["ledger"] = {"path": "budget.db", "dataset": "bench"}
    path = config.path.with_name("integer-release.yaml")  # planned afresh, as written
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    with Ledger.init(config.path.parent / "budget.db") as ledger:
        ledger.grant("bench", ZCDP(1))
    stages: dict[str, float] = {}

    def stage(name: str, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            result = function(*args, **kwargs)
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
            return result

        return timed

    started = time.perf_counter()
    released = load_config(path)
    result = run_release(released, stage=stage)
    whole = time.perf_counter() - started
    manifest = json.loads((result.path / "manifest.json").read_text())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    planned = footprint(released, result.strategy, "vector").memory / 2**30
    print(
        f"\nwhole integer release of {config.domain.size:,} cells: {whole:.1f} s, process "
        f"peak {peak:.2f} GiB (the plan's footprint {planned:.2f} GiB)"
    )
    for name, seconds in stages.items():
        print(f"  {name:<30}{seconds:>9.1f} s")
    print(f"  rounding: {manifest['reconstruction']['rounding']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="releases per case (R)")
    parser.add_argument("--people", type=int, default=300_000, help="synthetic SF1 persons")
    parser.add_argument(
        "--case",
        action="append",
        choices=["adult-marginals", "adult-two-way", "adult-3way", "census-sf1"],
    )
    parser.add_argument("--cells", type=int, help="a synthetic vector of this many cells")
    parser.add_argument("--vector-people", type=int, default=10**6, help="its persons")
    parser.add_argument("--compare", action="store_true", help="also round NNLS (slow)")
    parser.add_argument("--release", action="store_true", help="and one whole release")
    parser.add_argument("--workers", type=int, help="kept on this many Dask worker processes")
    parser.add_argument("--worker-memory", default="2GiB", help="each worker's memory limit")
    parser.add_argument(
        "--margins", nargs="+", metavar="ATTRIBUTE", help="also with their true margins declared"
    )
    args = parser.parse_args(argv)
    if args.cells and args.workers:
        with tempfile.TemporaryDirectory() as scratch:
            config = _vector_config(Path(scratch), args.cells, args.vector_people, workers=True)
            run_workers_case(config, args.runs, args.workers, args.worker_memory)
        return 0
    if args.cells:
        with tempfile.TemporaryDirectory() as scratch:
            config = _vector_config(Path(scratch), args.cells, args.vector_people)
            if args.runs:
                run_vector_case(config, args.runs, args.compare)
            if args.release:
                run_vector_release(config)
        return 0
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
            run_case(config, args.runs, args.margins)
    return 0


if __name__ == "__main__":
    sys.exit(main())
