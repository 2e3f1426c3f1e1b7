"""Shared fixtures: the real Adult data as Parquet partitions, and its numpy reference counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from dpmm.domain import Domain

ADULT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "adult"
ADULT_CSV = ADULT / "adult.csv"
ADULT_DOMAIN = ADULT / "adult-domain.json"
#: Five attributes whose full histogram (85·9·16·2·2 = 48,960 cells) is cheap to build.
FIVE = ("age", "workclass", "education-num", "sex", "income>50K")


@pytest.fixture(scope="session")
def adult_table() -> pa.Table:
    return pcsv.read_csv(ADULT_CSV)


@pytest.fixture(scope="session")
def adult_domain() -> Domain:
    return Domain.from_dict(json.loads(ADULT_DOMAIN.read_text()))


@pytest.fixture(scope="session")
def five_domain(adult_domain: Domain) -> Domain:
    return adult_domain.project(FIVE)


def reference_counts(table: pa.Table, domain: Domain) -> np.ndarray:
    """Plain numpy: one ``np.add.at`` per row over the domain's C-order array."""
    counts = np.zeros(domain.shape, np.int64)
    index = tuple(table.column(name).to_numpy() for name in domain.attributes)
    np.add.at(counts, index, 1)
    return counts


def write_parts(table: pa.Table, folder: Path, parts: int) -> Path:
    """Split the rows into ``parts`` Parquet files of (nearly) equal length."""
    folder.mkdir(parents=True)
    bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
    for i in range(parts):
        piece = table.slice(bounds[i], bounds[i + 1] - bounds[i])
        pq.write_table(piece, folder / f"part-{i:04d}.parquet")
    return folder


@pytest.fixture(scope="session")
def adult_parts(tmp_path_factory: pytest.TempPathFactory, adult_table: pa.Table) -> dict:
    """The Adult rows as 1, 7 and 200 Parquet files, and hive-style by sex and race."""
    root = tmp_path_factory.mktemp("adult")
    out = {n: write_parts(adult_table, root / f"parts{n}", n) for n in (1, 7, 200)}
    hive = root / "hive"
    pq.write_to_dataset(adult_table, hive, partition_cols=["sex", "race"])
    out["hive"] = hive
    return out
