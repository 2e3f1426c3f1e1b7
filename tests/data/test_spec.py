"""The config's data section becomes a DataSpec; every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpmm.data import DataSpec, data_spec_from_config
from dpmm.errors import ConfigError


def test_defaults_and_relative_paths():
    spec = data_spec_from_config({"path": "data/adult/"}, base_dir=Path("/srv/configs"))
    assert spec == DataSpec("/srv/configs/data/adult", "parquet", (), "reject")
    assert spec.column("age") == "age"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [("x.parquet", "parquet"), ("x.PQ", "parquet"), ("a/b.csv", "csv"), ("b.csv.gz", "csv")],
)
def test_format_from_suffix(path, fmt):
    assert data_spec_from_config({"path": path}, base_dir=Path("/")).format == fmt


def test_urls_are_kept_and_mapping_applies():
    spec = data_spec_from_config(
        {"path": "s3://bucket/adult", "format": "CSV", "columns": {"income>50K": "income"}},
        base_dir=Path("/srv"),
    )
    assert spec.location == "s3://bucket/adult" and spec.format == "csv"
    assert spec.column("income>50K") == "income"


@pytest.mark.parametrize(
    ("section", "start"),
    [
        ({}, "data.path: must be a file, folder or URL"),
        ({"path": 3}, "data.path: must be a file, folder or URL"),
        ({"path": "x", "where": 1}, "data.where: unknown key"),
        ({"path": "x", "columns": ["a"]}, "data.columns: must map attribute names"),
        ({"path": "x", "columns": {"a": 1}}, "data.columns: 'a' must map to a column name"),
        ({"path": "x", "bad_rows": True}, "data.bad_rows: must be one of: reject, drop"),
        ({"path": "x", "format": 1}, "data.format: must be a string"),
    ],
)
def test_errors_name_the_key(section, start):
    with pytest.raises(ConfigError) as error:
        data_spec_from_config(section, base_dir=Path("."))
    assert str(error.value).startswith(start)


def test_not_a_mapping():
    with pytest.raises(ConfigError, match=r"^data: must be a mapping"):
        data_spec_from_config(["x"], base_dir=Path("."))  # type: ignore[arg-type]
