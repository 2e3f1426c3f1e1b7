"""The demo's synthetic census dataset: layout, types, fit to the demo config, skew, determinism."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig, load_config
from dpmm.data import Histogram, data_spec_from_config, histogram
from dpmm.demo import census, census_config_text, write_census_dataset
from dpmm.errors import DpmmError

ROWS = 50_000
SEED = 20240601


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[census.CensusDataset, ReleaseConfig]:
    """The demo layout: the config template next to its ``data/`` folder."""
    root = tmp_path_factory.mktemp("demo")
    (root / "census.yaml").write_text(census_config_text(), encoding="utf-8")
    dataset = write_census_dataset(root / "data", rows=ROWS, rng=np.random.default_rng(SEED))
    return dataset, load_config(root / "census.yaml")


@pytest.fixture(scope="module")
def counts(setup: tuple[census.CensusDataset, ReleaseConfig]) -> Histogram:
    """The dataset ingested through the config's own data section (bad rows rejected)."""
    _, config = setup
    spec = data_spec_from_config(config.raw["data"], base_dir=config.path.parent)
    return histogram(spec, config.domain)


def _table(counts: Histogram, *names: str) -> np.ndarray:
    """The marginal table of the named attributes (in domain order)."""
    domain = counts.domain
    x = np.asarray(counts.counts).reshape(domain.shape)
    drop = tuple(i for i, name in enumerate(domain.attributes) if name not in names)
    return x.sum(axis=drop)


def _expected_region_rows(rows: int) -> list[int]:
    shares = [1 / k**0.8 for k in range(1, 9)]
    exact = [rows * s / sum(shares) for s in shares]
    counts = [math.floor(e) for e in exact]
    by_remainder = sorted(range(8), key=lambda i: counts[i] - exact[i])
    for i in by_remainder[: rows - sum(counts)]:
        counts[i] += 1
    return counts


def test_rows_files_and_partitions_are_exact(setup) -> None:
    dataset, config = setup
    on_disk = sorted(dataset.folder.rglob("*"))
    parquet = [p for p in on_disk if p.is_file()]
    assert sorted(dataset.files) == parquet
    assert dataset.rows == ROWS
    assert dataset.partitions == len(dataset.files) == 8  # one file per region at 50k rows
    rows = [pq.ParquetFile(path).metadata.num_rows for path in dataset.files]
    assert sum(rows) == ROWS
    assert rows == _expected_region_rows(ROWS)
    regions = config.domain["region"].labels
    assert [p.parent.name for p in dataset.files] == [f"region={r}" for r in regions]
    assert all(p.name == "part-0.parquet" for p in dataset.files)
    # Nothing is left behind next to the dataset but the config.
    assert sorted(p.name for p in dataset.folder.parent.iterdir()) == ["census.yaml", "data"]


def test_large_regions_are_split_into_several_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(census, "PART_ROWS", 3_000)
    dataset = write_census_dataset(tmp_path / "d", rows=20_000, rng=np.random.default_rng(1))
    expected = _expected_region_rows(20_000)
    assert dataset.partitions == sum(math.ceil(n / 3_000) for n in expected) == 11
    for region, n in zip(census.REGIONS, expected, strict=True):
        files = sorted((dataset.folder / f"region={region}").glob("part-*.parquet"))
        assert [f.name for f in files] == [f"part-{k}.parquet" for k in range(len(files))]
        sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
        assert sum(sizes) == n and len(files) == math.ceil(n / 3_000)
        assert max(sizes) - min(sizes) <= 1


def test_columns_have_the_declared_types(setup) -> None:
    dataset, _ = setup
    for path in dataset.files:
        schema = pq.read_schema(path)
        assert schema.names == census.SCHEMA.names
        assert schema.types == census.SCHEMA.types
    table = pq.read_table(dataset.files[0])
    assert set(table.column("sex").to_pylist()) == {"female", "male"}
    ages = table.column("age").to_numpy()
    assert ages.min() == 0 and ages.max() >= 95
    sizes = table.column("household_size").to_numpy()
    assert sizes.min() == 1 and sizes.max() == 7


def test_every_value_fits_the_config_domain(setup, counts) -> None:
    dataset, config = setup
    assert config.name == "demo-census"
    assert config.domain.size <= 2_000_000
    assert counts.report.rows_read == ROWS and counts.report.rows_dropped == 0
    assert counts.report.partitions == dataset.partitions
    assert int(np.asarray(counts.counts).sum()) == ROWS
    for name, labels in census.LABELS.items():
        assert config.domain[name].labels == labels
    assert config.domain["income"].bins == tuple(float(e) for e in census.INCOME_BINS)
    assert config.domain["age"].size == census.AGES


def test_age_follows_a_pyramid_not_a_uniform(counts) -> None:
    age = _table(counts, "age")
    expected = ROWS / age.size
    chi_square = float(((age - expected) ** 2 / expected).sum())
    assert chi_square > 5_000  # the 99-dof 0.999 quantile is about 149
    assert age[:50].sum() > 1.5 * age[50:].sum()
    assert age[:10].sum() > 2 * age[75:85].sum()
    assert age[90:].sum() < 0.02 * ROWS


def test_regions_races_and_sexes_are_skewed(counts) -> None:
    region = _table(counts, "region")
    assert np.all(np.diff(region) < 0)
    assert region[0] > 4 * region[-1]
    race = _table(counts, "race") / ROWS
    assert race[0] > 0.5 and race[4] < 0.01  # white dominant, Pacific Islander rare
    female = _table(counts, "sex")[0] / ROWS
    assert 0.5 < female < 0.53
    by_age = _table(counts, "sex", "age")
    assert by_age[0, 80:].sum() > 1.2 * by_age[1, 80:].sum()  # women outlive men


def test_hispanic_rate_depends_on_region(counts) -> None:
    table = _table(counts, "region", "hispanic")
    rate = table[:, 1] / table.sum(axis=1)
    assert rate.max() > 3 * rate.min()
    assert 0.1 < table[:, 1].sum() / ROWS < 0.3


def test_income_and_household_depend_on_age(counts) -> None:
    by_age = _table(counts, "age", "income")
    assert by_age[:16, 1:].sum() == 0  # children have no income
    assert by_age[16:, 1:].sum() > 0.6 * by_age[16:].sum()
    # Mid-career earns more than the young: a larger share above $50,000.
    high = by_age[:, 4:].sum(axis=1) / by_age.sum(axis=1)
    assert high[40:55].mean() > 2 * high[18:25].mean()
    household = _table(counts, "age", "household_size")
    assert household[:18, 0].sum() == 0  # children never live alone
    sizes = household.sum(axis=0)
    assert sizes[:3].sum() > 0.5 * ROWS and np.all(np.diff(sizes[1:]) < 0)


def test_same_seed_same_bytes_other_seed_other_data(tmp_path, setup) -> None:
    dataset, _ = setup
    again = write_census_dataset(tmp_path / "a", rows=ROWS, rng=np.random.default_rng(SEED))
    other = write_census_dataset(tmp_path / "b", rows=ROWS, rng=np.random.default_rng(SEED + 1))
    assert [f.relative_to(again.folder) for f in again.files] == [
        f.relative_to(dataset.folder) for f in dataset.files
    ]
    for one, two in zip(dataset.files, again.files, strict=True):
        assert one.read_bytes() == two.read_bytes()
    first = pq.read_table(dataset.files[0])
    assert not first.equals(pq.read_table(other.files[0]))


def test_bad_arguments_are_refused(tmp_path) -> None:
    with pytest.raises(TypeError):
        write_census_dataset(tmp_path / "x", rows=10)  # type: ignore[call-arg]
    with pytest.raises(DpmmError, match="Generator"):
        write_census_dataset(tmp_path / "x", rows=10, rng=7)  # type: ignore[arg-type]
    for rows in (0, -5, 2.5, True):
        with pytest.raises(DpmmError, match="rows"):
            write_census_dataset(tmp_path / "x", rows=rows, rng=np.random.default_rng(0))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(DpmmError, match="already exists"):
        write_census_dataset(taken, rows=10, rng=np.random.default_rng(0))
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    # An empty folder is filled.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_census_dataset(empty, rows=10, rng=np.random.default_rng(0)).folder == empty


def test_a_crash_leaves_no_partial_dataset(tmp_path, monkeypatch) -> None:
    written = []
    real_write = census.pq.write_table

    def fail_on_third(table, path, **kwargs):
        if len(written) == 2:
            raise OSError("disk full")
        written.append(path)
        real_write(table, path, **kwargs)

    monkeypatch.setattr(census.pq, "write_table", fail_on_third)
    with pytest.raises(OSError, match="disk full"):
        write_census_dataset(tmp_path / "data", rows=1_000, rng=np.random.default_rng(0))
    assert len(written) == 2
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_every_file(tmp_path) -> None:
    calls: list[tuple[int, int]] = []
    dataset = write_census_dataset(
        tmp_path / "d",
        rows=5_000,
        rng=np.random.default_rng(3),
        progress=lambda *a: calls.append(a),
    )
    total = dataset.partitions
    assert calls == [(done, total) for done in range(total + 1)]


def test_config_text_is_the_packaged_template() -> None:
    template = Path(census.__file__).with_name("census.yaml")
    assert census_config_text() == template.read_text(encoding="utf-8")


@pytest.mark.slow
def test_two_million_rows_are_fast(tmp_path) -> None:
    started = time.perf_counter()
    dataset = write_census_dataset(tmp_path / "big", rng=np.random.default_rng(0))
    seconds = time.perf_counter() - started
    assert dataset.rows == 2_000_000 and dataset.partitions == 12
    assert seconds < 10, f"{seconds:.1f} s"
