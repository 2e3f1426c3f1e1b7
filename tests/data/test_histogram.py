"""Exact counts on the real Adult data against a plain numpy count, however the data is split."""

from __future__ import annotations

import dask.array as da
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from dpmm.data import DataError, DataSpec, histogram, marginal_tables
from dpmm.data.histogram import _add_sparse, _Partial
from dpmm.data.reader import open_source
from tests.data.conftest import reference_counts


@pytest.mark.parametrize("parts", [1, 7, 200, "hive"])
def test_histogram_equals_numpy_reference(adult_parts, adult_table, five_domain, parts):
    result = histogram(str(adult_parts[parts]), five_domain)
    expected = reference_counts(adult_table, five_domain).ravel()
    assert result.counts.dtype == np.int64
    np.testing.assert_array_equal(result.counts, expected)
    assert result.report.rows_read == adult_table.num_rows
    assert result.report.rows_dropped == 0
    assert result.report.partitions == (10 if parts == "hive" else parts)


def test_cell_order_matches_domain_c_order(adult_parts, adult_table, five_domain):
    counts = histogram(str(adult_parts[7]), five_domain).counts.reshape(five_domain.shape)
    row = [adult_table.column(n)[123].as_py() for n in five_domain.attributes]
    same = np.ones(adult_table.num_rows, bool)
    for name, value in zip(five_domain.attributes, row, strict=True):
        same &= adult_table.column(name).to_numpy() == value
    assert counts[tuple(row)] == same.sum() > 0


@pytest.mark.parametrize("parts", [1, 200, "hive"])
def test_marginal_tables_equal_numpy_reference(adult_parts, adult_table, adult_domain, parts):
    sets = [["race", "age"], ["income>50K"], ["native-country", "sex", "hours-per-week"], []]
    result = marginal_tables(str(adult_parts[parts]), adult_domain, sets)
    assert set(result.tables) == {
        ("age", "race"),
        ("income>50K",),
        ("sex", "hours-per-week", "native-country"),
        (),
    }
    for key, table in result.tables.items():
        expected = reference_counts(adult_table, adult_domain.project(key)) if key else None
        if key:
            assert table.shape == adult_domain.project(key).shape
            np.testing.assert_array_equal(table, expected)
        else:
            assert int(table) == adult_table.num_rows


@pytest.mark.slow
def test_two_worker_cluster_gives_the_same_numbers(adult_parts, adult_table, five_domain, tmp_path):
    distributed = pytest.importorskip("distributed")
    seen: list[tuple[int, int]] = []
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        vector = histogram(
            str(adult_parts[7]), five_domain, client=client, progress=lambda *a: seen.append(a)
        )
        tables = marginal_tables(
            str(adult_parts["hive"]), five_domain, [["age", "sex"]], client=client
        )
        big = histogram(str(adult_parts[7]), five_domain, client=client, dense_limit=1000)
        big_counts = big.counts.compute()
        bad = adult_table.slice(0, 10).set_column(0, "age", pa.array([0] * 9 + [500], pa.int64()))
        pq.write_table(adult_table.slice(10, 100), tmp_path / "part-0.parquet")
        pq.write_table(bad, tmp_path / "part-1.parquet")
        with pytest.raises(DataError, match=r"part-1\.parquet', column 'age': rows have codes"):
            histogram(str(tmp_path), five_domain, client=client)
    expected = reference_counts(adult_table, five_domain)
    np.testing.assert_array_equal(vector.counts, expected.ravel())
    np.testing.assert_array_equal(tables.tables[("age", "sex")], expected.sum(axis=(1, 2, 4)))
    np.testing.assert_array_equal(big_counts, expected.ravel())
    assert seen == [(i, 7) for i in range(1, 8)]


def test_large_domain_is_a_chunked_dask_array(adult_parts, adult_table, five_domain):
    result = histogram(str(adult_parts[7]), five_domain, dense_limit=1000, chunk_cells=10_000)
    assert isinstance(result.counts, da.Array)
    assert result.counts.numblocks == (5,)
    np.testing.assert_array_equal(
        result.counts.compute(), reference_counts(adult_table, five_domain).ravel()
    )


def test_sparse_merge_adds_repeated_cells_exactly():
    rng = np.random.default_rng(7)
    parts, dense = [], np.zeros(50, np.int64)
    for _ in range(5):
        cells = rng.integers(0, 50, size=rng.integers(0, 40))
        dense += np.bincount(cells, minlength=50)
        uniq, counts = np.unique(cells, return_counts=True)
        parts.append(_Partial((uniq, counts), len(cells), 0, {}))
    cells, counts = _add_sparse(*parts).payload
    assert np.all(np.diff(cells) > 0)
    rebuilt = np.zeros(50, np.int64)
    rebuilt[cells] = counts
    np.testing.assert_array_equal(rebuilt, dense)


def test_progress_reports_every_partition_locally(adult_parts, five_domain):
    seen: list[tuple[int, int]] = []
    histogram(str(adult_parts[7]), five_domain, progress=lambda *a: seen.append(a))
    assert sorted(seen) == [(i, 7) for i in range(1, 8)]


def test_csv_file_and_url_forms(adult_parts, adult_table, five_domain, tmp_path):
    expected = reference_counts(adult_table, five_domain).ravel()
    csv = tmp_path / "adult.csv"
    pcsv.write_csv(adult_table.slice(0, 5000), csv)
    small = reference_counts(adult_table.slice(0, 5000), five_domain).ravel()
    np.testing.assert_array_equal(histogram(str(csv), five_domain).counts, small)
    url = f"file://{adult_parts[7]}"
    np.testing.assert_array_equal(histogram(url, five_domain).counts, expected)


def test_memory_url_with_hive_folders(adult_table, five_domain):
    fs = fsspec.filesystem("memory")
    root = "/dpmm-test-hive"
    for sex in (0, 1):
        rows = adult_table.filter(pa.compute.equal(adult_table.column("sex"), sex))
        with fs.open(f"{root}/sex={sex}/part-0.parquet", "wb") as handle:
            pq.write_table(rows.drop_columns(["sex"]), handle)
    fs.pipe(f"{root}/_SUCCESS", b"")
    try:
        result = histogram(f"memory://{root}", five_domain)
    finally:
        fs.rm(root, recursive=True)
    np.testing.assert_array_equal(result.counts, reference_counts(adult_table, five_domain).ravel())


def test_column_mapping_and_labels_and_bins(tmp_path):
    from dpmm.domain import Domain

    domain = Domain.from_dict(
        [
            {"name": "colour", "size": 3, "labels": ["red", "green", "blue"]},
            {"name": "height", "size": 2, "bins": [0, 150, 250]},
        ]
    )
    table = pa.table({"c": ["blue", "red", "blue", "green"], "height": [149.9, 150, 250, 0]})
    pq.write_table(table, tmp_path / "x.parquet")
    spec = DataSpec(str(tmp_path / "x.parquet"), columns=(("colour", "c"),))
    counts = histogram(spec, domain).counts.reshape(3, 2)
    np.testing.assert_array_equal(counts, [[0, 1], [1, 0], [1, 1]])


def test_a_large_parquet_file_is_split_by_row_groups(adult_table, five_domain, tmp_path):
    pq.write_table(adult_table, tmp_path / "one.parquet", row_group_size=5000)
    source = open_source(DataSpec(str(tmp_path)), split_bytes=100_000)
    groups = [p.row_groups for p in source.partitions]
    assert len(groups) > 2
    assert [g for piece in groups for g in piece] == list(range(10))
    seen: list[tuple[int, int]] = []
    result = histogram(source, five_domain, progress=lambda *a: seen.append(a))
    assert len(seen) == len(groups)
    np.testing.assert_array_equal(result.counts, reference_counts(adult_table, five_domain).ravel())
