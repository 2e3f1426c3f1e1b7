"""Reference files of relative targets: matched to the group's queries by label, recorded
by sha256, and every bad file one sentence naming the file, the column and the row."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dpmm.config import load_config
from dpmm.errors import ConfigError
from dpmm.workload.labels import query_labels

DOMAIN = {
    "attributes": [{"name": "sex", "size": 2, "labels": ["m", "f"]}, {"name": "age", "size": 4}]
}
#: The group's labels, in row order, as answers.parquet writes them.
LABELS = [f"sex={s},age<={a}" for s in ("m", "f") for a in range(4)]


def _config(folder: Path, relative_to: object, name: str = "release.yaml") -> Path:
    target = {"half_width": 0.05, "confidence": 0.95, "relative_to": relative_to}
    document = {
        "name": "reference",
        "domain": DOMAIN,
        "privacy": {"epsilon": 1},
        "workload": [
            {"name": "people", "kind": "total"},
            {"name": "cdf", "kind": "prefix", "attribute": "age", "by": ["sex"], "target": target},
        ],
    }
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _csv(folder: Path, rows: list[tuple[object, ...]], header: str = "label,value") -> Path:
    lines = [
        header,
        *(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in r) for r in rows),
    ]
    path = folder / "reference.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rows_are_matched_to_queries_by_label_in_any_order(tmp_path: Path) -> None:
    values = {label: -(10.0 + i) for i, label in enumerate(LABELS)}  # signs do not matter
    rows = [(label, values[label]) for label in reversed(LABELS)]
    _csv(tmp_path, rows)
    config = load_config(_config(tmp_path, {"file": "reference.csv"}))
    group = config.workload[1]
    assert query_labels(group, config.domain) == LABELS
    reference = group.target.reference
    assert reference.magnitudes.tolist() == [abs(values[label]) for label in LABELS]
    digest = hashlib.sha256((tmp_path / "reference.csv").read_bytes()).hexdigest()
    assert group.target.to_dict()["relative_to"] == {
        "file": "reference.csv",
        "column": "value",
        "sha256": digest,
    }
    # The spec keeps the config's form: it reads back through the config.
    assert group.spec["target"]["relative_to"] == {"file": "reference.csv", "column": "value"}


def test_a_parquet_file_with_a_group_column_serves_its_group_only(tmp_path: Path) -> None:
    # e.g. an earlier release's answers.parquet, its estimates as the reference
    table = pa.table(
        {
            "group": ["people", *(["cdf"] * len(LABELS))],
            "label": ["total", *LABELS],
            "estimate": [5000.0, *np.arange(1.0, len(LABELS) + 1)],
        }
    )
    pq.write_table(table, tmp_path / "answers.parquet")
    config = load_config(_config(tmp_path, {"file": "answers.parquet", "column": "estimate"}))
    assert config.workload[1].target.reference.magnitudes.tolist() == list(range(1, 9))


def test_a_published_number_is_the_reference_of_every_query(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, -48842))
    target = config.workload[1].target
    assert target.reference.magnitudes.tolist() == [48842.0]
    assert target.describe() == "±5 % of -48,842 at 95 %"
    errors = np.array([100.0, 200.0])
    assert target.figure(errors) == pytest.approx(1.959964 * 200 / 48842, rel=1e-6)
    assert target.binding_query(errors) == 1


def _rows(**changed: object) -> list[tuple[object, ...]]:
    return [(label, changed.get(label, 100 + i)) for i, label in enumerate(LABELS)]


BAD = {
    "missing file": (None, r"the reference file '\S+/reference\.csv' does not exist"),
    "a query without a row": (
        _rows()[:-1],
        r"has 7 rows for group 'cdf', which has 8 queries: none for query 'sex=f,age<=3'",
    ),
    "a row of no query": (
        [*_rows(), ("sex=x,age<=0", 5)],
        r"reference\.csv', row 9 \(label 'sex=x,age<=0'\): is not a query of group 'cdf'",
    ),
    "a repeated row": (
        [*_rows(), ("sex=m,age<=2", 5)],
        r"reference\.csv', row 9 \(label 'sex=m,age<=2'\): repeats the query of row 3",
    ),
    "a zero": (
        _rows(**{"sex=f,age<=1": 0}),
        r"reference\.csv', column 'value', row 6 \(label 'sex=f,age<=1'\): is 0; a target "
        r"relative to 0 can never be met",
    ),
    "a non-number": (
        _rows(**{"sex=m,age<=3": "many"}),
        r"column 'value', row 4 \(label 'sex=m,age<=3'\): 'many' is not a number",
    ),
    "an empty value": (
        _rows(**{"sex=m,age<=1": ""}),
        r"column 'value', row 2 \(label 'sex=m,age<=1'\): has no value",
    ),
    "an infinite value": (
        _rows(**{"sex=m,age<=0": "inf"}),
        r"column 'value', row 1 \(label 'sex=m,age<=0'\): inf is not a finite number",
    ),
}


@pytest.mark.parametrize(("rows", "message"), BAD.values(), ids=BAD.keys())
def test_a_bad_reference_file_is_one_sentence(
    tmp_path: Path, rows: list | None, message: str
) -> None:
    if rows is not None:
        _csv(tmp_path, rows)
    config = _config(tmp_path, {"file": "reference.csv"})
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    text = str(caught.value)
    assert text.startswith(f"{config}: workload[1].target.relative_to: the reference file '")
    assert "\n" not in text
    assert caught.match(message)


def test_a_missing_column_names_the_columns_there_are(tmp_path: Path) -> None:
    _csv(tmp_path, _rows(), header="label,count")
    with pytest.raises(ConfigError, match=r"has no column 'value' \(it has: label, count\)"):
        load_config(_config(tmp_path, {"file": "reference.csv"}))


@pytest.mark.parametrize(
    ("relative_to", "message"),
    [
        (0, r"relative_to: a reference must be a finite number other than 0, got 0"),
        (".nan", r"relative_to: a reference must be a finite number other than 0"),
        ("people.csv", r"relative_to: must be a published number or \{file: PATH, column: NAME\}"),
        (
            {"file": "x.csv", "sheet": 1},
            r"relative_to\.sheet: unknown key \(allowed: file, column\)",
        ),
        (
            {"file": "x.txt"},
            r"relative_to: the reference file '\S+x\.txt' must be a \.csv or \.parquet file",
        ),
    ],
)
def test_a_bad_relative_to_names_its_key(tmp_path: Path, relative_to: object, message: str) -> None:
    path = _config(tmp_path, relative_to)
    if relative_to == ".nan":
        path.write_text(path.read_text().replace("'.nan'", ".nan"))
    with pytest.raises(ConfigError, match=r"workload\[1\]\.target\." + message):
        load_config(path)
