"""Fixtures of the pipeline tests: Adult as hive-partitioned Parquet, ledgers and configs."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig, load_config
from dpmm.privacy.ledger import Entry, Ledger
from dpmm.privacy.params import ZCDP, PureDP

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
ADULT_CSV = SHARED / "data" / "adult" / "adult.csv"
ADULT_DOMAIN = Path(__file__).resolve().parents[2] / "config" / "examples" / "adult-domain.json"
#: Files written per ``sex=`` partition folder.
FILES_PER_PARTITION = 3
#: The six attributes of the two-way tables (13,440 cells: small enough for the full vector).
SMALL = ("education-num", "marital-status", "relationship", "race", "sex", "income>50K")
DATASET = "adult"
#: What a new test ledger grants, unless told otherwise.
DEFAULT_BUDGET = PureDP(10)

#: ``make_config(body, budget=...)`` returns a config written in a fresh folder.
MakeConfig = Callable[..., ReleaseConfig]


@pytest.fixture(scope="session")
def adult_frame() -> pd.DataFrame:
    """The Adult records as the CSV has them (integer codes)."""
    if not ADULT_CSV.is_file():
        pytest.skip(f"the shared Adult data is not at {ADULT_CSV}")
    return pd.read_csv(ADULT_CSV)


@pytest.fixture(scope="session")
def adult_domain() -> dict[str, int]:
    """Attribute sizes of the 14-attribute Adult domain, in order."""
    return json.loads(ADULT_DOMAIN.read_text())


@pytest.fixture(scope="session")
def adult_parquet(
    adult_frame: pd.DataFrame, adult_domain: dict[str, int], tmp_path_factory
) -> Path:
    """Adult as hive-partitioned Parquet (``sex=0/``, ``sex=1/``), a few files per partition."""
    assert list(adult_frame.columns) == list(adult_domain), "the CSV's columns are the domain's"
    for name, size in adult_domain.items():  # already integer codes inside the domain
        column = adult_frame[name]
        assert column.dtype.kind == "i" and column.min() >= 0 and column.max() < size, name
    folder = tmp_path_factory.mktemp("adult-parquet")
    for sex, part in adult_frame.groupby("sex"):
        target = folder / f"sex={sex}"
        target.mkdir()
        rows = part.drop(columns="sex")
        for i, piece in enumerate(np.array_split(np.arange(len(rows)), FILES_PER_PARTITION)):
            table = pa.Table.from_pandas(rows.iloc[piece], preserve_index=False)
            pq.write_table(table, target / f"part-{i}.parquet")
    return folder


def write_config(
    folder: Path,
    body: str,
    *,
    data: str | Path | None,
    budget: PureDP | ZCDP | None = DEFAULT_BUDGET,
    dataset: str = DATASET,
    ledger: Path | None = None,
    extra: str = "",
) -> ReleaseConfig:
    """Write ``<folder>/release.yaml`` (``body`` plus run sections) and, unless given, a ledger.

    Args:
        folder: Where the config, its ledger (``budget.db``) and ``releases/`` go.
        body: YAML with name, domain, privacy, workload (and strategy) keys.
        data: The data path; None leaves the data section out.
        budget: Granted to ``dataset`` in a new ledger; None creates no ledger.
        dataset: The ledger's dataset.
        ledger: An existing ledger to charge instead of a new one.
        extra: More YAML keys of the data section (e.g. ``bad_rows: drop``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    if ledger is None:
        ledger = folder / "budget.db"
        if budget is not None and not ledger.exists():
            with Ledger.init(ledger) as opened:
                opened.grant(dataset, budget)
    sections = [body.rstrip("\n")]
    if data is not None:
        more = f", {extra}" if extra else ""
        sections.append(f"data: {{path: '{data}'{more}}}")
    sections.append(f"ledger: {{path: '{ledger}', dataset: {dataset}}}")
    sections.append("release: {root: releases, reconstruction: least_squares}")
    path = folder / "release.yaml"
    path.write_text("\n".join(sections) + "\n")
    return load_config(path)


def small_body(name: str, privacy: str = "{epsilon: 1}") -> str:
    """Two-way tables of the six :data:`SMALL` attributes, measured as marginals."""
    attributes = ", ".join(f"{a}: SIZE_{i}" for i, a in enumerate(SMALL))
    return f"name: {name}\ndomain: {{{attributes}}}\nprivacy: {privacy}\n" + (
        "workload: [{name: two-way, kind: marginals, k: 2}]\nstrategy: {method: marginals}\n"
    )


def fill_sizes(body: str, sizes: dict[str, int]) -> str:
    """Replace the ``SIZE_i`` placeholders of :func:`small_body` with the domain's sizes."""
    for i, name in enumerate(SMALL):
        body = body.replace(f"SIZE_{i}", str(sizes[name]))
    return body


def history(config: ReleaseConfig) -> list[Entry]:
    """The ledger entries of the config's dataset, oldest first."""
    with Ledger.open(config.ledger.path) as ledger:
        return ledger.history(config.ledger.dataset)


def kinds(config: ReleaseConfig, release_id: str | None = None) -> list[str]:
    """The kinds of the dataset's budget entries (reserve, spend, cancel; of one release,
    when given), in order. Grants and publications are left out (see :func:`published`)."""
    return [
        e.kind
        for e in history(config)
        if e.kind not in ("grant", "publish") and (release_id is None or e.release_id == release_id)
    ]


def published(config: ReleaseConfig) -> int:
    """How many release versions the dataset's ledger recorded a manifest for."""
    return sum(e.kind == "publish" for e in history(config))


def remaining(config: ReleaseConfig) -> Fraction:
    """The dataset's remaining budget (an exact fraction)."""
    with Ledger.open(config.ledger.path) as ledger:
        return ledger.remaining(config.ledger.dataset)


def versions(config: ReleaseConfig) -> list[str]:
    """The version folders written for the config's release name."""
    folder = config.release.root / config.name
    return sorted(p.name for p in folder.glob("v*")) if folder.is_dir() else []


def run_folders(config: ReleaseConfig) -> list[Path]:
    """The run folders (finished or not) of the config's release name."""
    runs = config.release.root / config.name / ".runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def tree_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file below ``folder``, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def make_small(tmp_path: Path, adult_parquet: Path, adult_domain: dict[str, int]) -> MakeConfig:
    """``make_small(name, privacy=..., budget=..., sub=...)``: the six-attribute config."""

    def make(
        name: str = "adult-two-way", *, privacy: str = "{epsilon: 1}", sub: str = "a", **options
    ) -> ReleaseConfig:
        body = fill_sizes(small_body(name, privacy), adult_domain)
        options.setdefault("data", adult_parquet)
        return write_config(tmp_path / sub, body, **options)

    return make


def die_after_measuring(config_path: str) -> None:
    """Child process: run the release and die as soon as its measurement is persisted."""
    from dpmm.pipeline import run_release

    def stage(task: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            if task == "measure-strategy":
                os._exit(9)
            return result

        return run

    run_release(load_config(config_path), stage=stage)


def kill_after_measuring(config: ReleaseConfig) -> None:
    """Run the release in a child killed as soon as its measurement is persisted, and check
    what it leaves: one open run, no version, the budget reserved and spent once."""
    child = multiprocessing.get_context("spawn").Process(
        target=die_after_measuring, args=(str(config.path),)
    )
    child.start()
    child.join(180)
    assert child.exitcode == 9
    assert len(run_folders(config)) == 1
    assert versions(config) == [] and kinds(config) == ["reserve", "spend"]


def nudge_part(part: Path, column: str, row: int, change: float) -> None:
    """Add ``change`` to one value of a Parquet part's ``column``, in place (a tampered file)."""
    table = pq.read_table(part)
    values = table.column(column).to_numpy().copy()
    values[row] += change
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, pa.array(values)), part)
