"""Bad input is refused with one sentence naming the file, column or key; nothing is spent."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import ReleaseConfig
from dpmm.data import DataError
from dpmm.errors import ConfigError, DpmmError
from dpmm.pipeline import run_release
from dpmm.privacy.ledger import BudgetExceeded, Ledger, LedgerError
from dpmm.privacy.params import PureDP
from tests.pipeline.conftest import history, kinds, remaining, run_folders, versions, write_config

COLUMNS = ("race", "sex", "income>50K")
BODY = """name: adult-small-tables
domain: {race: 5, sex: 2, income>50K: 2}
privacy: {epsilon: 1}
workload: [{name: one-way, kind: marginals, k: 1}]
strategy: {method: workload}
"""
ROWS = 2000


@pytest.fixture
def records(adult_frame: pd.DataFrame) -> pd.DataFrame:
    """The first rows of Adult, three columns: small enough to corrupt and read in a blink."""
    return adult_frame.loc[: ROWS - 1, list(COLUMNS)].reset_index(drop=True)


def _write(folder: Path, table: pa.Table | pd.DataFrame) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table, preserve_index=False)
    pq.write_table(table, folder / "part-0.parquet")
    return folder


def _refused(config: ReleaseConfig, error: type[DpmmError], *names: str) -> DpmmError:
    """Run the release, expect ``error``; check nothing was spent or written; the error."""
    before = remaining(config)
    with pytest.raises(error) as caught:
        run_release(config, rng=np.random.default_rng(0))
    _nothing_spent(config, before)
    _one_sentence(str(caught.value), *names)
    return caught.value


def _nothing_spent(config: ReleaseConfig, before: object) -> None:
    assert remaining(config) == before
    assert "spend" not in kinds(config)
    assert versions(config) == [] and run_folders(config) == []


def _one_sentence(message: str, *names: str) -> None:
    assert message and "\n" not in message, message
    for name in names:
        assert name in message, (name, message)


def test_missing_data_file(tmp_path) -> None:
    missing = tmp_path / "nowhere" / "adult.parquet"
    config = write_config(tmp_path / "c", BODY, data=missing)
    _refused(config, DataError, str(missing), "does not exist")
    assert kinds(config) == []  # found before the budget is reserved: no entry at all


def test_truncated_parquet(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records)
    good = (data / "part-0.parquet").read_bytes()
    (data / "part-1.parquet").write_bytes(good[: len(good) // 2])
    (data / "part-2.parquet").write_bytes(b"\x00garbage, not parquet\xff" * 10)
    config = write_config(tmp_path / "c", BODY, data=data)
    message = str(_refused(config, DataError, "parquet"))
    assert "part-1.parquet" in message or "part-2.parquet" in message


def test_missing_column(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records.drop(columns="race"))
    config = write_config(tmp_path / "c", BODY, data=data)
    _refused(config, DataError, "part-0.parquet", "'race'")


def test_value_outside_the_domain_names_column_count_and_examples(tmp_path, records) -> None:
    records.loc[[3, 10, 11], "race"] = [7, 9, 7]
    data = _write(tmp_path / "data", records)
    config = write_config(tmp_path / "c", BODY, data=data)
    error = _refused(config, DataError, "part-0.parquet", "'race'", "codes outside 0..4")
    assert "bad_rows" in str(error)  # it says how to skip such rows
    # The count and the values are the operator's only: never in the message.
    assert not re.search(r"\b[379]\b", str(error).split("0..4")[1]), error
    assert error.detail == "3 rows, e.g. 7, 9"


@pytest.mark.parametrize("as_null", [True, False], ids=["null", "ieee-nan"])
def test_nan_in_a_column(tmp_path, records, as_null: bool) -> None:
    sex = records["sex"].to_numpy(dtype=np.float64)
    sex[[5, 6]] = np.nan
    # pandas turns NaN into null; from_pandas=False keeps a real IEEE NaN in the file.
    column = pa.array(sex, from_pandas=as_null)
    assert column.null_count == (2 if as_null else 0)
    table = pa.Table.from_pandas(records, preserve_index=False).set_column(1, "sex", column)
    data = _write(tmp_path / "data", table)
    config = write_config(tmp_path / "c", BODY, data=data)
    error = _refused(config, DataError, "part-0.parquet", "'sex'")
    assert error.detail.startswith("2 rows")  # and, for an IEEE NaN, "e.g. nan"


def test_text_in_an_integer_column(tmp_path, records) -> None:
    table = records.astype({"income>50K": "object"})
    table["income>50K"] = np.where(records["income>50K"] == 1, "yes", "no")
    data = _write(tmp_path / "data", table)
    config = write_config(tmp_path / "c", BODY, data=data)
    _refused(config, DataError, "part-0.parquet", "'income>50K'", "text")


def test_unknown_attribute_in_the_workload(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records)
    body = BODY.replace("{name: one-way, kind: marginals, k: 1}", "{kind: prefix, attribute: agee}")
    with pytest.raises(ConfigError) as caught:
        write_config(tmp_path / "c", body, data=data)
    _one_sentence(str(caught.value), "release.yaml", "workload[0]", "agee")
    ledger = tmp_path / "c" / "budget.db"
    assert [e.kind for e in _entries(ledger)] == ["grant"]


def _entries(ledger: Path) -> list:
    with Ledger.open(ledger) as opened:
        return opened.history("adult")


def test_negative_budget_in_the_config(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records)
    body = BODY.replace("{epsilon: 1}", "{epsilon: -1}")
    with pytest.raises(ConfigError) as caught:
        write_config(tmp_path / "c", body, data=data)
    _one_sentence(str(caught.value), "release.yaml", "privacy.epsilon", "-1")
    assert [e.kind for e in _entries(tmp_path / "c" / "budget.db")] == ["grant"]


def test_budget_larger_than_what_remains(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records)
    config = write_config(tmp_path / "c", BODY, data=data, budget=PureDP("1/2"))
    _refused(config, BudgetExceeded, "'adult'", "remaining")
    assert kinds(config) == []


def test_ledger_file_missing(tmp_path, records) -> None:
    data = _write(tmp_path / "data", records)
    config = write_config(tmp_path / "c", BODY, data=data, budget=None)
    with pytest.raises(LedgerError) as caught:
        run_release(config, rng=np.random.default_rng(0))
    _one_sentence(str(caught.value), str(config.ledger.path), "dpmm ledger init")
    assert not config.ledger.path.exists()
    assert versions(config) == [] and run_folders(config) == []


def test_config_without_a_data_section(tmp_path) -> None:
    config = write_config(tmp_path / "c", BODY, data=None)
    assert config.data is None
    _refused(config, ConfigError, "release.yaml", "data")


def test_empty_data_folder(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "_SUCCESS").write_text("")
    config = write_config(tmp_path / "c", BODY, data=data)
    _refused(config, DataError, str(data), "no parquet file")


def test_bad_rows_drop_releases_and_tells_the_count_to_the_operators_terminal_only(
    tmp_path, records, caplog
) -> None:
    records.loc[[3, 10, 11], "race"] = [7, 9, 7]
    data = _write(tmp_path / "data", records)
    config = write_config(tmp_path / "c", BODY, data=data, extra="bad_rows: drop")
    result = run_release(config, rng=np.random.default_rng(1))
    assert audit_release(result.path).ok
    assert kinds(config) == ["reserve", "spend"]
    assert f"3 of {ROWS:,} rows read were outside the domain and dropped (3 for race)" in (
        caplog.text
    )
    (run,) = run_folders(config)
    assert "dropped" not in (run / "run.json").read_text()
    text = (result.path / "manifest.json").read_text()
    assert "dropped" not in text and "rows_read" not in text
    assert len(history(config)) == 4  # grant, reserve, spend, publish
