"""Release tables: answers, measurements and histogram round-trip; damage is refused."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.linalg import Hierarchical
from dpmm.measure import measure
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release import (
    AnswerColumns,
    ReleaseError,
    read_answers,
    read_histogram,
    read_measurements,
    write_answers,
    write_histogram,
    write_measurements,
)
from dpmm.release.tables import MEASUREMENT_METADATA_KEY


@pytest.fixture(params=[PureDP("1/3"), ZCDP("1/5")], ids=["laplace", "gaussian"])
def record(request, tmp_path):
    privacy = request.param
    with Ledger.init(tmp_path / "ledger.db") as ledger:
        ledger.grant("d", type(privacy)(1))
        reservation = ledger.reserve("d", privacy, release_id="r1")
        return measure(
            Hierarchical(8),
            np.arange(8),
            privacy,
            store=tmp_path,
            measurement_id="m1",
            ledger=ledger,
            reservation=reservation,
            rng=np.random.default_rng(0),
        )


def test_measurements_round_trip_equal(record, tmp_path):
    path = tmp_path / "measurements.parquet"
    write_measurements(path, record)
    back = read_measurements(path)
    assert back == record
    assert back.header() == record.header()
    np.testing.assert_array_equal(back.values, record.values)
    assert back.values.dtype == np.int64
    schema = pq.read_schema(path)
    assert schema.field("value").type == pa.int64()
    assert json.loads(schema.metadata[MEASUREMENT_METADATA_KEY])["count"] == record.values.size


def _rewrite(path, values, header):
    schema = pa.schema([("row", pa.int64()), ("value", pa.int64())]).with_metadata(
        {MEASUREMENT_METADATA_KEY: json.dumps(header).encode()}
    )
    rows = pa.array(np.arange(len(values), dtype=np.int64))
    pq.write_table(pa.Table.from_arrays([rows, pa.array(values)], schema=schema), path)


def test_changed_value_or_count_is_refused_naming_the_file(record, tmp_path):
    path = tmp_path / "measurements.parquet"
    values = np.array(record.values, dtype=np.int64)
    values[3] += 1
    _rewrite(path, values, record.header())
    with pytest.raises(ReleaseError, match=r"measurements\.parquet.*sha256"):
        read_measurements(path)
    _rewrite(path, np.array(record.values[:-1]), record.header())
    with pytest.raises(
        ReleaseError, match=r"measurements\.parquet holds 14 values but its header says 15"
    ):
        read_measurements(path)


def test_missing_or_malformed_header_is_refused(record, tmp_path):
    path = tmp_path / "measurements.parquet"
    table = pa.table({"row": np.arange(3), "value": np.arange(3)})
    pq.write_table(table, path)
    with pytest.raises(ReleaseError, match="no measurement header"):
        read_measurements(path)
    header = {**record.header(), "privacy": {"kind": "other"}}
    _rewrite(path, np.array(record.values), header)
    with pytest.raises(ReleaseError, match="malformed measurement header"):
        read_measurements(path)


def test_answers_round_trip_and_concat():
    a = AnswerColumns.for_group("a", [1.5, 2.5], [0.1, 0.2], exact=True, labels=["x", "y"])
    b = AnswerColumns.for_group("b", [3.0], [0.3], exact=[False])
    rows = AnswerColumns.concat([a, b])
    assert len(rows) == 3
    table = rows.to_table()
    assert table.column("group").to_pylist() == ["a", "a", "b"]
    assert table.column("query").to_pylist() == [0, 1, 0]
    assert table.column("label").to_pylist() == ["x", "y", ""]
    assert table.column("exact_standard_error").to_pylist() == [True, True, False]


def test_answers_file_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    estimate, error = rng.normal(size=5), rng.random(5)
    rows = AnswerColumns.for_group("g", estimate, error, exact=False)
    write_answers(tmp_path / "answers.parquet", rows)
    table = read_answers(tmp_path / "answers.parquet")
    np.testing.assert_array_equal(table.column("estimate").to_numpy(), estimate)
    np.testing.assert_array_equal(table.column("standard_error").to_numpy(), error)
    assert table.schema.field("query").type == pa.int64()


def test_unequal_answer_columns_are_refused():
    with pytest.raises(ReleaseError, match=r"different lengths.*estimate=2"):
        AnswerColumns(
            group=["a"],
            query=np.zeros(1, np.int64),
            label=[""],
            estimate=np.zeros(2),
            standard_error=np.zeros(1),
            exact_standard_error=np.zeros(1, bool),
        )


def test_histogram_round_trip(tmp_path):
    estimate = np.random.default_rng(5).normal(size=12)
    write_histogram(tmp_path / "histogram.parquet", estimate)
    np.testing.assert_array_equal(read_histogram(tmp_path / "histogram.parquet"), estimate)


def test_bad_files_are_refused_naming_them(tmp_path):
    with pytest.raises(ReleaseError, match=r"answers table .*nothing\.parquet does not exist"):
        read_answers(tmp_path / "nothing.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ReleaseError, match=r"junk\.parquet is not a readable Parquet file"):
        read_measurements(tmp_path / "junk.parquet")
    pq.write_table(pa.table({"group": ["a"]}), tmp_path / "short.parquet")
    with pytest.raises(ReleaseError, match=r"short\.parquet has no column 'query'"):
        read_answers(tmp_path / "short.parquet")
    pq.write_table(pa.table({"cell": [0.5], "estimate": [1.0]}), tmp_path / "typed.parquet")
    with pytest.raises(ReleaseError, match=r"column 'cell' of .*typed\.parquet has type double"):
        read_histogram(tmp_path / "typed.parquet")


def test_a_measurement_value_turned_null_is_refused(record, tmp_path):
    path = tmp_path / "measurements.parquet"
    write_measurements(path, record)
    table = pq.read_table(path)
    values = table.column("value").to_pylist()
    values[3] = None
    index = table.schema.get_field_index("value")
    damaged = table.set_column(index, table.schema.field("value"), pa.array(values, pa.int64()))
    pq.write_table(damaged.replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(ReleaseError, match="values missing"):
        read_measurements(path)
