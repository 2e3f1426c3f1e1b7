"""A release's bytes and its ledger vouch for each other: any change to either is caught.

The manifest lists every file's sha256; the ledger records the manifest's sha256 (a
``publish`` entry under the spent reservation, written before the version appears) and
the manifest records the ledger's spend entry. So one flipped byte anywhere in a release
fails the audit, and so does a ledger whose chain was recomputed after an edit, whether
or not the editor held the ledger's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.cli import main
from dpmm.config import ReleaseConfig
from dpmm.pipeline import run_release
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.ledger_schema import COLUMNS, GENESIS, Row
from dpmm.privacy.params import PureDP
from dpmm.report import REPORT_NAME
from tests.pipeline.conftest import write_config

BODY = (
    "name: grid\ndomain: {x: 8, y: 3}\nprivacy: {epsilon: 1/2}\n"
    "workload:\n  - {name: cdf, kind: prefix, attribute: x}\n"
    "  - {name: cells, kind: identity}\n"
    "strategy: {method: hierarchical}\n"
)
#: Every this-many-th byte is flipped in the default suite; the slow test flips every byte.
STRIDE = 89


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReleaseConfig, Path]:
    folder = tmp_path_factory.mktemp("integrity")
    (folder / "data").mkdir()
    rng = np.random.default_rng(5)
    table = pa.table({"x": rng.integers(0, 8, 400), "y": rng.integers(0, 3, 400)})
    pq.write_table(table, folder / "data" / "part.parquet")
    config = write_config(folder, BODY, data=folder / "data", budget=PureDP(2))
    result = run_release(config)
    assert audit_release(result.path).ok
    return config, result.path


#: The report's figures are kilobytes of base64 images that the audit checks by their
#: sha256 like any file: flipping each of their bytes would audit the release ~10⁵ times
#: for no more than a sample shows, so the report is always sampled.
REPORT_STRIDE = 997


def _positions(release: Path, stride: int) -> list[tuple[str, int]]:
    return [
        (path.name, offset)
        for path in sorted(release.iterdir())
        for offset in range(
            0,
            path.stat().st_size,
            max(stride, REPORT_STRIDE) if path.name == REPORT_NAME else stride,
        )
    ]


def _undetected(release: str, flips: list[tuple[str, int]], scratch: str) -> list[str]:
    """Audit a private copy of the release once per flipped byte; the flips it passed."""
    copy = Path(scratch) / Path(release).name
    shutil.copytree(release, copy)
    missed = []
    for name, offset in flips:
        path = copy / name
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[offset] ^= 0x01
        path.write_bytes(bytes(flipped))
        if audit_release(copy).ok:
            missed.append(f"{name}@{offset}")
        path.write_bytes(original)
    return missed


def _sweep(release: Path, stride: int, scratch: Path, workers: int = 1) -> tuple[int, list[str]]:
    flips = _positions(release, stride)
    shares = [flips[i::workers] for i in range(workers)]
    folders = [scratch / f"worker-{i}" for i in range(workers)]
    for folder in folders:
        folder.mkdir()
    if workers == 1:
        return len(flips), _undetected(str(release), flips, str(folders[0]))
    with ProcessPoolExecutor(workers) as pool:
        found = pool.map(_undetected, [str(release)] * workers, shares, map(str, folders))
        return len(flips), [flip for missed in found for flip in missed]


@pytest.mark.slow
def test_sampled_byte_flips_in_every_file_are_all_detected(released, tmp_path) -> None:
    _, release = released
    flipped, missed = _sweep(release, STRIDE, tmp_path)
    assert flipped > 100 and missed == []


@pytest.mark.slow
def test_every_byte_flip_in_every_file_is_detected(released, tmp_path) -> None:
    _, release = released
    flipped, missed = _sweep(release, 1, tmp_path, workers=min(4, os.cpu_count() or 1))
    total = sum(path.stat().st_size for path in release.iterdir() if path.name != REPORT_NAME)
    report = -(-(release / REPORT_NAME).stat().st_size // REPORT_STRIDE)
    assert flipped == total + report and missed == [], f"{len(missed)} of {flipped} flips passed"


def _rechain(ledger: Path, key: bytes) -> None:
    """Raise the first grant to 100 and recompute every hash under ``key``."""
    with sqlite3.connect(ledger) as db:
        db.execute("UPDATE entries SET amount = '100' WHERE seq = 1")
        rows = [Row(*values) for values in db.execute(f"SELECT {COLUMNS} FROM entries")]
        previous = GENESIS
        for row in sorted(rows, key=lambda row: row.seq):
            digest = replace(row, prev_hash=previous, hash="").expected_hash(key)
            db.execute(
                "UPDATE entries SET prev_hash = ?, hash = ? WHERE seq = ?",
                (previous, digest, row.seq),
            )
            previous = digest
        db.execute("UPDATE meta SET value = ? WHERE key = 'head'", (previous,))


def _copy(config: ReleaseConfig, release: Path, tmp_path: Path) -> tuple[Path, Path]:
    ledger = Path(config.ledger.path)
    for suffix in ("", ".secret"):
        shutil.copy(f"{ledger}{suffix}", tmp_path / f"ledger.db{suffix}")
    return tmp_path / "ledger.db", release


@pytest.mark.parametrize("with_key", [False, True], ids=["without-key", "with-key"])
def test_a_recomputed_ledger_chain_is_detected(released, tmp_path, capsys, with_key) -> None:
    config, release = released
    ledger, release = _copy(config, release, tmp_path)
    with Ledger.open(ledger) as opened:
        anchor = opened.anchor()
        key = opened.secret() if with_key else os.urandom(32)
    assert main(["ledger", "anchor", str(ledger)]) == 0
    printed = capsys.readouterr().out.split()[-1]
    assert printed == f"{anchor[0]}:{anchor[1]}"
    _rechain(ledger, key)
    report = audit_release(release, ledger=ledger)
    assert report.failed() == ["ledger"]
    detail = report.checks[-1].detail
    if with_key:
        assert "is not the entry the manifest recorded" in detail
        assert main(["ledger", "verify", str(ledger)]) == 0  # the chain itself is consistent
    else:
        assert "entry 1 (grant) does not match its hash" in detail
    capsys.readouterr()
    assert main(["ledger", "verify", str(ledger), "--anchor", printed]) == 1
    expected = "rewritten after the anchor was taken" if with_key else "does not match its hash"
    assert expected in capsys.readouterr().err


def test_the_manifest_records_the_spend_and_the_ledger_the_manifest(released) -> None:
    config, release = released
    manifest = json.loads((release / "manifest.json").read_text())
    with Ledger.open(config.ledger.path) as ledger:
        reservation = manifest["ledger"]["reservation_id"]
        spend = ledger.spend_entry(reservation)
        published = ledger.published(reservation)
        run = ledger.reservation(reservation).run_folder
    assert manifest["ledger"]["spend"] == {"seq": spend.seq, "hash": spend.hash}
    assert published == [hashlib.sha256((release / "manifest.json").read_bytes()).hexdigest()]
    assert run is not None and Path(run).name == manifest["release_id"]
