"""Release tables: answers, measurements and histogram round-trip; damage is refused."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.domain import Domain
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
    tables,
    write_answers,
    write_histogram,
    write_measurements,
)
from dpmm.release.tables import ANSWERS_SCHEMA, MEASUREMENT_METADATA_KEY, answers_schema
from dpmm.workload import from_config
from dpmm.workload.labels import QueryParts, query_labels, query_parts


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


def test_answers_round_trip_in_group_order(tmp_path):
    a = AnswerColumns.for_group(
        "a",
        [1.5, 2.5],
        [0.1, 0.2],
        exact=True,
        half_width=[0.2, 0.4],
        exact_interval=True,
        labels=["x", "y"],
    )
    b = AnswerColumns.for_group(
        "b", [3.0], [0.3], exact=[False], half_width=[0.6], exact_interval=[False]
    )
    write_answers(tmp_path / "answers.parquet", [a, b])
    table = read_answers(tmp_path / "answers.parquet")
    assert table.schema == ANSWERS_SCHEMA
    assert table.column("group").to_pylist() == ["a", "a", "b"]
    assert table.column("query").to_pylist() == [0, 1, 0]
    assert table.column("label").to_pylist() == ["x", "y", ""]
    assert table.column("exact_standard_error").to_pylist() == [True, True, False]
    assert table.column("half_width").to_pylist() == [0.2, 0.4, 0.6]
    assert table.column("exact_interval").to_pylist() == [True, True, False]


def test_answers_file_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    estimate, error = rng.normal(size=5), rng.random(5)
    rows = AnswerColumns.for_group(
        "g", estimate, error, exact=False, half_width=2 * error, exact_interval=False
    )
    write_answers(tmp_path / "answers.parquet", [rows])
    table = read_answers(tmp_path / "answers.parquet")
    np.testing.assert_array_equal(table.column("estimate").to_numpy(), estimate)
    np.testing.assert_array_equal(table.column("standard_error").to_numpy(), error)
    assert table.schema.field("query").type == pa.int64()


DOMAIN = Domain.from_dict(
    [
        {"name": "sex", "size": 2, "labels": ["m", "f"]},
        {"name": "income", "size": 3, "bins": [0, 25000, 50000, 100000]},
        {"name": "age", "size": 4},
        # Named like fixed columns: the per-attribute columns are prefixed, never clash.
        {"name": "label", "size": 2},
    ]
)


def _written(tmp_path, entries):
    groups = from_config(entries, DOMAIN)
    parts = [
        AnswerColumns.for_group(
            g.name,
            np.arange(g.matrix.shape[0], dtype=float),
            np.ones(g.matrix.shape[0]),
            exact=True,
            half_width=np.full(g.matrix.shape[0], 2.0),
            exact_interval=True,
            labels=query_parts(g, DOMAIN),
        )
        for g in groups
    ]
    write_answers(tmp_path / "answers.parquet", parts, DOMAIN.attributes)
    return groups, read_answers(tmp_path / "answers.parquet")


def test_answers_have_a_text_and_a_code_column_per_attribute(tmp_path):
    entries = [
        {"name": "ranges", "kind": "ranges", "attribute": "age", "intervals": [[0, 2], [1, 1]],
         "by": ["sex"]},
        {"name": "income-cdf", "kind": "prefix", "attribute": "income"},
        {"name": "income-bins", "kind": "all_range", "attribute": "income"},
        {"name": "sums", "kind": "prefix_sum", "attribute": "income"},
        {"name": "total", "kind": "total"},
        {"name": "two-way", "kind": "marginal", "attributes": ["sex", "label"]},
    ]  # fmt: skip
    groups, table = _written(tmp_path, entries)
    assert table.column_names == answers_schema(DOMAIN.attributes).names
    assert table.column_names[8:] == [
        "attr.sex", "code.sex", "attr.income", "code.income",
        "attr.age", "code.age", "attr.label", "code.label",
    ]  # fmt: skip
    rows = {(r["group"], r["query"]): r for r in table.to_pylist()}
    assert rows[("ranges", 0)]["label"] == "sex=m,age=0..2"
    assert [rows[("ranges", 3)][c] for c in ("attr.sex", "code.sex", "attr.age", "code.age")] == [
        "f",
        1,
        "1",
        1,
    ]
    assert rows[("ranges", 0)]["code.age"] is None  # a range: no single value
    assert rows[("income-cdf", 0)]["attr.income"] == "<25000"
    assert rows[("income-cdf", 0)]["code.income"] is None
    # A merged bin keeps its comma inside the column: no splitting of labels needed.
    assert rows[("income-bins", 1)]["attr.income"] == "[0, 50000)"
    assert rows[("income-bins", 3)]["attr.income"] == "[25000, 50000)"
    assert rows[("income-bins", 3)]["code.income"] == 1
    assert rows[("sums", 2)]["label"] == "sum(income<=100000)"
    assert rows[("sums", 2)]["attr.income"] == "<=100000"
    assert rows[("two-way", 1)]["label"] == "sex=m,label=1"
    assert rows[("two-way", 1)]["code.label"] == 1 and rows[("two-way", 1)]["attr.label"] == "1"
    total = rows[("total", 0)]
    assert total["label"] == "total"
    assert all(total[c] is None for c in table.column_names[8:])
    # Unrestricted attributes are null, and every row's label is its group's label.
    for group in groups:
        labels = [rows[(group.name, q)]["label"] for q in range(group.matrix.shape[0])]
        assert labels == query_labels(group, DOMAIN)
    assert all(r["attr.age"] is None for r in rows.values() if r["group"] != "ranges")


def test_per_attribute_columns_agree_with_the_label_over_runs_of_rows(tmp_path, monkeypatch):
    """Written a few rows at a time, every row's texts are its label's parts."""
    monkeypatch.setattr(tables, "ROWS_AT_ONCE", 5)
    entries = [
        {"name": "all", "kind": "identity"},
        {"name": "grid", "kind": "kron", "factors": {"income": "all_range", "age": "prefix"}},
        {"name": "pairs", "kind": "marginals", "k": 2},
    ]
    groups, table = _written(tmp_path, entries)
    assert pq.ParquetFile(tmp_path / "answers.parquet").num_row_groups > 1
    names = DOMAIN.attributes
    for row in table.to_pylist():
        parts = [
            f"{name}{'' if row[f'attr.{name}'].startswith('<') else '='}{row[f'attr.{name}']}"
            for name in names
            if row[f"attr.{name}"] is not None
        ]
        assert ",".join(parts) == row["label"], row
        for name in names:
            code = row[f"code.{name}"]
            if code is not None:
                values = DOMAIN[name].labels or [str(v) for v in range(DOMAIN[name].size)]
                if DOMAIN[name].bins is None:
                    assert row[f"attr.{name}"] == values[code]
    assert table.num_rows == sum(g.matrix.shape[0] for g in groups)


def test_a_group_describing_an_attribute_not_written_is_refused(tmp_path):
    (group,) = from_config([{"kind": "identity", "attribute": "age"}], DOMAIN)
    rows = AnswerColumns.for_group(
        "g",
        np.zeros(4),
        np.ones(4),
        exact=True,
        half_width=np.ones(4),
        exact_interval=True,
        labels=query_parts(group, DOMAIN),
    )
    with pytest.raises(ReleaseError, match="restrict 'age'"):
        write_answers(tmp_path / "answers.parquet", [rows], ["sex"])


def test_unequal_answer_columns_are_refused():
    with pytest.raises(ReleaseError, match=r"different lengths.*estimate=2"):
        AnswerColumns(
            group="a",
            estimate=np.zeros(2),
            standard_error=np.zeros(1),
            exact_standard_error=np.zeros(1, bool),
            half_width=np.zeros(1),
            exact_interval=np.zeros(1, bool),
            queries=QueryParts.listed(["x"]),
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
