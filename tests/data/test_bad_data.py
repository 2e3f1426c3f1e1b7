"""Every kind of bad data or config fails with one sentence naming the file and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.data import DataError, DataSpec, data_spec_from_config, histogram, marginal_tables
from dpmm.domain import Domain
from dpmm.errors import ConfigError

DOMAIN = Domain.from_dict(
    [
        {"name": "sex", "size": 2},
        {"name": "race", "size": 3, "labels": ["white", "black", "other"]},
        {"name": "income", "size": 2, "bins": [0, 50_000, 1_000_000]},
    ]
)
GOOD = {
    "sex": [0, 1, 1, 0],
    "race": ["white", "other", "black", "white"],
    "income": [10, 7e4, 1e6, 0],
}


def write(folder: Path, name: str = "part-0.parquet", **changes: list) -> Path:
    columns = {**GOOD, **changes}
    columns = {k: v for k, v in columns.items() if v is not None}
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def one_sentence(error: pytest.ExceptionInfo) -> str:
    """The message, one sentence naming file, column and problem; no value from the data
    (those are in the operator-only detail)."""
    text = str(error.value)
    assert "\n" not in text and text.count(". ") == 0 and "e.g." not in text, text
    return text


def test_good_data_counts(tmp_path):
    write(tmp_path)
    counts = histogram(str(tmp_path), DOMAIN).counts.reshape(DOMAIN.shape)
    assert counts.sum() == 4 and counts[0, 0, 0] == 2 and counts[1, 2, 1] == 1


CASES = {
    "missing column": ({"race": None}, "has no column 'race'"),
    "label not in domain": (
        {"race": ["white", "asian", "martian", "white"]},
        "not among its labels",
    ),
    "value outside bins": ({"income": [-1.0, 10.0, 2e6, 5.0]}, "outside the bins [0, 1e+06]"),
    "code out of range": ({"sex": [0, 1, 2, 7]}, "codes outside 0..1"),
    "NaN": ({"income": [np.nan, 10.0, 1.0, 5.0]}, "NaN values"),
    "null": ({"sex": [0, None, 1, 0]}, "missing (null) values"),
    "text in numeric": ({"sex": ["0", "male", "1", "0"]}, "holds text, but attribute 'sex'"),
    "fractional code": ({"sex": [0.0, 0.5, 1.0, 1.0]}, "not whole numbers"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_values_are_rejected_naming_file_and_column(tmp_path, case):
    changes, phrase = CASES[case]
    path = write(tmp_path, **changes)
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    text = one_sentence(error)
    assert phrase in text
    assert str(path) in text
    column = next(iter(changes))
    assert f"column '{column}'" in text


def test_reject_counts_rows_and_quotes_at_most_five_examples(tmp_path):
    labels = ["a", "b", "c", "d", "e", "f", "g", "white"]
    write(tmp_path, sex=[0] * 8, race=labels, income=[1.0] * 8)
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    text = one_sentence(error)
    assert "rows have values not among its labels" in text
    assert error.value.detail == "7 rows, e.g. 'a', 'b', 'c', 'd', 'e'"


def test_drop_skips_bad_rows_and_reports_how_many(tmp_path):
    write(tmp_path, sex=[0, 5, 1, None], race=["white", "white", "mars", "black"])
    spec = DataSpec(str(tmp_path), bad_rows="drop")
    result = histogram(spec, DOMAIN)
    assert result.counts.sum() == 1
    assert result.report.rows_read == 4 and result.report.rows_dropped == 3
    assert dict(result.report.dropped_by_attribute) == {"sex": 2, "race": 1}
    tables = marginal_tables(spec, DOMAIN, [["race"], []]).tables
    # The same rows are kept as for the histogram, though the table needs only race.
    assert tables[("race",)].tolist() == [1, 0, 0]
    assert int(tables[()]) == 1


def test_truncated_parquet(tmp_path):
    path = write(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    assert f"File '{path}' is not a readable parquet file" in one_sentence(error)


def test_a_malformed_csv_row_stays_out_of_the_message(tmp_path):
    """Arrow's parse error quotes the row; the message may reach Prefect, so only the
    operator-only detail carries it."""
    path = tmp_path / "people.csv"
    path.write_text("sex,race,income\n0,white,10\n1,white,20,Jane Roe 123-45-6789\n")
    with pytest.raises(DataError) as error:
        histogram(str(path), DOMAIN)
    text = one_sentence(error)
    assert f"File '{path}' is not a readable csv file" in text
    assert "Jane" not in text and "Jane Roe" in error.value.detail


def test_a_csv_that_is_not_utf8(tmp_path):
    path = tmp_path / "people.csv"
    path.write_bytes("sex,race,income,café\n0,white,10,1\n".encode("latin-1"))
    with pytest.raises(DataError) as error:
        histogram(str(path), DOMAIN)
    assert f"File '{path}' is not UTF-8 text" in one_sentence(error)


def test_two_columns_of_one_name_are_refused(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text("sex,race,income,race\n0,white,10,black\n")
    with pytest.raises(DataError) as error:
        histogram(str(path), DOMAIN)
    assert f"File '{path}' has two columns named 'race'" in one_sentence(error)


def test_a_column_that_a_folder_key_also_sets_is_refused(tmp_path):
    path = write(tmp_path / "sex=1")
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    text = one_sentence(error)
    assert f"File '{path}' has a column 'sex' that its folder name" in text


def test_path_not_found(tmp_path):
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path / "nowhere"), DOMAIN)
    assert "does not exist" in one_sentence(error)


def test_unreadable_path(tmp_path):
    path = write(tmp_path)
    path.chmod(0)
    try:
        if path.stat().st_mode and _can_read(path):
            pytest.skip("running as a user that reads mode-000 files (root)")
        with pytest.raises(DataError) as error:
            histogram(str(tmp_path), DOMAIN)
        assert f"File '{path}' cannot be read" in one_sentence(error)
    finally:
        path.chmod(0o644)


def _can_read(path: Path) -> bool:
    try:
        path.read_bytes()
    except PermissionError:
        return False
    return True


def test_unreadable_folder_listing_is_one_sentence(tmp_path):
    (tmp_path / "notes.txt").write_text("no data")
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    assert "holds no parquet file" in one_sentence(error)


def test_empty_dataset(tmp_path):
    write(tmp_path, sex=[], race=[], income=[])
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    assert "has no rows" in one_sentence(error)


def test_hive_partition_value_not_in_domain(tmp_path):
    write(tmp_path, "sex=0/part-0.parquet", sex=None)
    bad = write(tmp_path, "sex=3/part-0.parquet", sex=None)
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    text = one_sentence(error)
    assert str(bad) in text and "column 'sex'" in text and "codes outside 0..1" in text


def test_hive_partition_text_for_numeric_attribute(tmp_path):
    write(tmp_path, "sex=male/part-0.parquet", sex=None)
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    assert "holds text, but" in one_sentence(error)
    assert error.value.detail == "e.g. 'male'"


def test_mixed_hive_layouts(tmp_path):
    write(tmp_path, "sex=0/part-0.parquet", sex=None)
    write(tmp_path, "part-1.parquet")
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path), DOMAIN)
    assert "mixes partition folder keys" in one_sentence(error)


def test_bad_rows_value():
    with pytest.raises(ConfigError) as error:
        data_spec_from_config({"path": "x.parquet", "bad_rows": "ignore"}, base_dir=Path("."))
    assert one_sentence(error).startswith("data.bad_rows: must be one of: reject, drop")


def test_unknown_format():
    with pytest.raises(ConfigError) as error:
        data_spec_from_config({"path": "x.parquet", "format": "orc"}, base_dir=Path("."))
    assert one_sentence(error).startswith("data.format: unknown format 'orc'")
    with pytest.raises(ConfigError, match=r"cannot infer the format of 'x\.json'"):
        data_spec_from_config({"path": "x.json"}, base_dir=Path("."))


def test_column_mapping_to_unknown_attribute(tmp_path):
    write(tmp_path)
    spec = DataSpec(str(tmp_path), columns=(("age", "sex"),))
    with pytest.raises(ConfigError, match=r"data\.columns: 'age' is not an attribute"):
        histogram(spec, DOMAIN)


def test_nothing_is_returned_when_one_of_many_files_is_bad(tmp_path):
    for i in range(5):
        write(tmp_path, f"part-{i}.parquet")
    write(tmp_path, "part-9.parquet", sex=[0, 1, 9, 0])
    with pytest.raises(DataError, match=r"part-9\.parquet"):
        histogram(str(tmp_path), DOMAIN)


def test_unknown_url_protocol():
    with pytest.raises(DataError) as error:
        histogram("nosuch://bucket/x.parquet", DOMAIN)
    assert "Cannot open the data location 'nosuch://bucket/x.parquet'" in one_sentence(error)


def test_csv_text_in_numeric_column_and_labels_kept_as_text(tmp_path):
    labelled = Domain.from_dict(
        [{"name": "code", "size": 2, "labels": ["01", "1"]}, {"name": "n", "size": 3}]
    )
    (tmp_path / "a.csv").write_text("code,n\n01,2\n1,0\n01,2\n")
    counts = histogram(str(tmp_path / "a.csv"), labelled).counts
    assert counts.tolist() == [0, 0, 2, 1, 0, 0]
    (tmp_path / "b.csv").write_text("code,n\n01,2\n1,many\n")
    with pytest.raises(DataError) as error:
        histogram(str(tmp_path / "b.csv"), labelled)
    assert "column 'n' holds text" in one_sentence(error)
    assert error.value.detail == "e.g. 'many'"
