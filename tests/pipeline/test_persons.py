"""Person-level bounding (``data.person``): a person's rows combined into one record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.data import DataError, DataSpec, open_source
from dpmm.domain import Domain
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import count_input
from dpmm.pipeline.persons import person_records
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.pipeline.threshold_stage import bucket_counts
from dpmm.privacy.params import ZCDP
from tests.pipeline.conftest import SHARED, kinds, remaining, write_config

RANDHIE = SHARED / "data" / "randhie" / "randhie.csv"
SITE_BINS = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5]
INCOME_BINS = list(range(0, 112_500, 2_500))  # 44 buckets of $2,500, up to $110,000


def _body(truncation: str = "{method: svt, share: 1/10, start: 2500}") -> str:
    return (
        "name: randhie-sums\n"
        "domain:\n"
        "  attributes:\n"
        f"    - {{name: site, size: 6, bins: {SITE_BINS}}}\n"
        f"    - {{name: income, size: {len(INCOME_BINS) - 1}, bins: {INCOME_BINS}}}\n"
        "privacy: {epsilon: 1}\n"
        "workload:\n"
        "  - {name: sums, kind: prefix_sum, attribute: income, by: [site], "
        f"truncation: {truncation}}}\n"
        "strategy: {method: hierarchical}\n"
    )


@pytest.fixture(scope="module")
def randhie(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """The RAND HIE person-years as Parquet in two files by year: people span both."""
    if not RANDHIE.is_file():
        pytest.skip(f"the shared RAND HIE data is not at {RANDHIE}")
    frame = pd.read_csv(RANDHIE, usecols=["zper", "site", "year", "income"])
    folder = tmp_path_factory.mktemp("randhie")
    for i, part in enumerate((frame[frame.year <= 2], frame[frame.year > 2])):
        table = pa.Table.from_pandas(part[["zper", "site", "income"]], preserve_index=False)
        pq.write_table(table, folder / f"part-{i}.parquet")
    return frame, folder


def _expected(frame: pd.DataFrame) -> np.ndarray:
    """People per (site, bucket of their summed income), by pandas."""
    people = frame.groupby("zper").agg(site=("site", "first"), income=("income", "sum"))
    bucket = np.searchsorted(INCOME_BINS, people.income.to_numpy(), side="right") - 1
    vector = np.zeros((6, len(INCOME_BINS) - 1), np.int64)
    np.add.at(vector, (people.site.to_numpy() - 1, bucket), 1)
    return vector


def test_a_persons_rows_are_combined_across_files(randhie, tmp_path) -> None:
    frame, folder = randhie
    spans = frame.groupby("zper").year.agg(lambda y: (y <= 2).any() and (y > 2).any())
    assert spans.sum() > 1000  # many people have rows in both files
    config = write_config(tmp_path, _body(), data=folder, extra="person: zper")
    strategy = choose_strategy(config)
    counts = count_input(config, strategy)
    expected = _expected(frame)
    np.testing.assert_array_equal(counts.vector.reshape(expected.shape), expected)
    assert counts.vector.sum() == frame.zper.nunique()
    assert counts.report.rows_read == len(frame)
    np.testing.assert_array_equal(bucket_counts(config)["income"], expected.sum(axis=0))


def test_without_person_each_row_is_a_record(randhie, tmp_path) -> None:
    frame, folder = randhie
    config = write_config(tmp_path, _body(), data=folder)
    counts = count_input(config, choose_strategy(config))
    assert counts.vector.sum() == len(frame)


def test_a_release_bounds_each_person_once(randhie, tmp_path) -> None:
    _, folder = randhie
    config = write_config(tmp_path, _body(), data=folder, extra="person: zper")
    result = run_release(config, rng=np.random.default_rng(0))
    (chosen,) = result.manifest["thresholds"]["groups"]
    assert 2500 <= chosen["threshold"] <= INCOME_BINS[-1]
    assert kinds(config) == ["reserve", "reserve", "spend", "spend"]
    assert remaining(config) == 9
    assert audit_release(result.path).ok


def test_an_attribute_that_differs_within_a_person_is_refused(tmp_path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(
        pa.table({"p": [1, 1, 2], "site": [1, 1, 2], "income": [10, 20, 30]}),
        folder / "a.parquet",
    )
    pq.write_table(
        pa.table({"p": [1, 2, 3, 3], "site": [2, 3, 1, 1], "income": [5, 5, 5, 5]}),
        folder / "b.parquet",
    )
    domain = Domain.from_dict(
        {
            "site": {"size": 3, "bins": [0.5, 1.5, 2.5, 3.5]},
            "income": {"size": 2, "bins": [0, 50, 100]},
        }
    )
    source = open_source(DataSpec(str(folder), person="p"))
    with pytest.raises(DataError) as caught:
        person_records(source, domain, summed=("income",))
    message = str(caught.value)
    assert "Column 'site'" in message and "'p'" in message and "2" not in message
    assert caught.value.detail == "2 people"  # for the operator's terminal only
    assert "\n" not in message


def test_the_summed_attribute_is_summed_and_others_kept(tmp_path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    rng = np.random.default_rng(1)
    person = rng.integers(0, 50, 600)
    site = person % 3  # constant per person
    income = rng.integers(0, 10, 600)
    for i, rows in enumerate(np.array_split(np.arange(600), 3)):
        pq.write_table(
            pa.table({"p": person[rows], "site": site[rows], "income": income[rows]}),
            folder / f"part-{i}.parquet",
        )
    domain = Domain.from_dict({"site": 3, "income": {"size": 4, "bins": [0, 50, 100, 150, 400]}})
    people = person_records(
        open_source(DataSpec(str(folder), person="p")), domain, summed=("income",)
    )
    got = people.table.to_pandas().sort_values("income").reset_index(drop=True)
    frame = pd.DataFrame({"p": person, "site": site, "income": income})
    want = frame.groupby("p").agg(site=("site", "first"), income=("income", "sum"))
    want = want.sort_values("income").reset_index(drop=True)
    np.testing.assert_array_equal(np.sort(got.income), np.sort(want.income))
    pairs = sorted(zip(got.site, got.income, strict=True))
    assert pairs == sorted(zip(want.site, want.income, strict=True))
    assert people.rows == 600


def test_a_person_release_whose_strategy_measures_the_total_counts_people(tmp_path) -> None:
    """A residual strategy (ρ) for one-way marginals and the total measures the total
    table (no attributes): with ``data.person`` it is the number of people."""
    folder = tmp_path / "data"
    folder.mkdir()
    person = np.random.default_rng(2).integers(0, 40, 300)
    for i, rows in enumerate(np.array_split(np.arange(300), 2)):
        who = person[rows]
        pq.write_table(
            pa.table({"p": who, "site": who % 3, "age": (who // 3) % 4}),
            folder / f"part-{i}.parquet",
        )
    body = (
        "name: people-total\n"
        "domain: {site: 3, age: 4}\n"
        "privacy: {rho: 1/2}\n"
        "workload:\n"
        "  - {name: one-way, kind: marginals, k: 1}\n"
        "  - {name: everyone, kind: total}\n"
        "strategy: {method: residual}\n"
    )
    config = write_config(tmp_path, body, data=folder, extra="person: p", budget=ZCDP(1))
    tables = count_input(config, choose_strategy(config)).tables.tables
    people = np.unique(person)
    assert () in tables and int(tables[()]) == people.size
    np.testing.assert_array_equal(tables[(0,)], np.bincount(people % 3, minlength=3))
    result = run_release(config, rng=np.random.default_rng(0))
    assert audit_release(result.path).ok
