"""The release flow with a private truncation threshold: its own tasks, one draw, audit passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.cli import main
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import PureDP

pytestmark = [
    pytest.mark.filterwarnings("ignore"),
    pytest.mark.slow,
    pytest.mark.usefixtures("restore_logging"),
]

CONFIG = """\
name: sums
domain:
  attributes:
    - {name: site, size: 3}
    - {name: income, size: 10, bins: [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]}
privacy: {epsilon: 1}
workload:
  - name: sums
    kind: prefix_sum
    attribute: income
    by: [site]
    truncation: {method: svt, share: 1/10, ratio: 0.9, start: 100}
strategy: {method: hierarchical}
data: {path: data/, person: person}
release: {root: releases, reconstruction: least_squares}
ledger: {path: budget.db, dataset: sums}
cluster: {n_workers: 1, processes: false}
"""


def test_the_flow_draws_the_threshold_once_and_the_release_audits(tmp_path: Path, capsys) -> None:
    (tmp_path / "data").mkdir()
    person = np.arange(3000) % 1000  # three rows per person, spread over two files
    income = (person % 7) * 20 + 5
    for i, rows in enumerate(np.array_split(np.arange(person.size), 2)):
        table = pa.table({"person": person[rows], "site": person[rows] % 3, "income": income[rows]})
        pq.write_table(table, tmp_path / "data" / f"part-{i}.parquet")
    (tmp_path / "sums.yaml").write_text(CONFIG)
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("sums", PureDP(2))
    assert main(["release", str(tmp_path / "sums.yaml")]) == 0
    version = tmp_path / "releases" / "sums" / "v0001"
    manifest = json.loads((version / "manifest.json").read_text())
    (chosen,) = manifest["thresholds"]["groups"]
    # What the command printed: the whole spend (θ's share too), the strategy and θ.
    printed = capsys.readouterr().out
    assert "spent: ε = 1 of dataset 'sums' (threshold of sums ε = 1/10, measurement" in printed
    assert "strategy: hierarchical: " in printed and "reconstruction: least_squares" in printed
    assert f"threshold: θ = {chosen['threshold']:g} for group sums: " in printed
    assert chosen["budget"] == {"kind": "pure", "epsilon": "1/10"}
    assert 100 <= chosen["threshold"] <= 1000
    with Ledger.open(tmp_path / "budget.db") as ledger:
        history = ledger.history("sums")
        entries = [(e.kind, e.budget) for e in history if e.kind in ("reserve", "spend")]
        assert [e.kind for e in history].count("publish") == 1
        assert ledger.remaining("sums") == 1
    assert sorted(entries, key=str) == sorted(
        [
            ("reserve", PureDP("1/10")),
            ("reserve", PureDP("9/10")),
            ("spend", PureDP("1/10")),
            ("spend", PureDP("9/10")),
        ],
        key=str,
    )
    assert main(["audit", str(version)]) == 0
    capsys.readouterr()
