"""End-to-end releases of the real Adult data: files, accuracy against the truth, audit, reuse."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpmm.audit import audit_release
from dpmm.measure.record import discrete_noise_variance
from dpmm.pipeline import (
    VECTOR_LIMIT,
    counting_plan,
    ingest_stage,
    rerun_post_processing,
    run_release,
)
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP
from dpmm.release import list_releases, read_answers, read_measurements
from tests.pipeline.conftest import (
    ADULT_DOMAIN,
    SMALL,
    history,
    kinds,
    published,
    run_folders,
    tree_digests,
    versions,
    write_config,
)

SEED = 20261122


def _rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


def _answers(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "answers.parquet")


def _close_to(estimates: np.ndarray, truth: np.ndarray, errors: np.ndarray) -> None:
    """Mean absolute error below ten times the mean standard error (and the errors real)."""
    assert estimates.shape == truth.shape
    assert np.all(errors > 0)
    mae = float(np.abs(estimates - truth).mean())
    assert mae < 10 * float(errors.mean()), (mae, float(errors.mean()))
    # The noise is real: a release identical to the truth would leak it.
    assert not np.allclose(estimates, truth)


def _two_way_truth(frame: pd.DataFrame, sizes: dict[str, int]) -> np.ndarray:
    tables = []
    for a, b in itertools.combinations(SMALL, 2):
        table = np.zeros((sizes[a], sizes[b]))
        np.add.at(table, (frame[a].to_numpy(), frame[b].to_numpy()), 1)
        tables.append(table.ravel())
    return np.concatenate(tables)


def test_two_way_release_has_its_files_is_audited_and_close_to_the_truth(
    make_small, adult_frame, adult_domain
) -> None:
    config = make_small()
    assert config.domain.size == 16 * 7 * 6 * 5 * 2 * 2
    result = run_release(config, rng=_rng())
    version = config.release.root / config.name / "v0001"
    assert result.path == version and versions(config) == ["v0001"]
    for name in ("manifest.json", "answers.parquet", "measurements.parquet", "strategy.npz"):
        assert (version / name).is_file(), name
    answers = _answers(version)
    queries = sum(adult_domain[a] * adult_domain[b] for a, b in itertools.combinations(SMALL, 2))
    assert len(answers) == queries == sum(g.matrix.shape[0] for g in config.workload)
    assert answers["query"].tolist() == list(range(queries))
    assert (answers["label"].str.len() > 0).all()
    assert answers["label"].iloc[0] == "education-num=0,marital-status=0"
    assert (
        len(read_answers(version / "answers.parquet")) == queries
    )  # the library's own reader agrees
    record = read_measurements(version / "measurements.parquet")
    assert record.values.size == record.shape[0] > 0
    report = audit_release(version)
    assert report.ok, report.failed()
    truth = _two_way_truth(adult_frame, adult_domain)
    _close_to(answers["estimate"].to_numpy(), truth, answers["standard_error"].to_numpy())
    assert [s.version for s in list_releases(config.release.root)] == [1]
    # Each query's cells, read from its code columns alone, give the same truth.
    assert list(answers.columns[8:]) == [f"{p}.{a}" for a in SMALL for p in ("attr", "code")]
    codes = answers[[f"code.{a}" for a in SMALL]]
    assert (codes.notna().sum(axis=1) == 2).all()
    by_codes = np.zeros(len(answers))
    for a, b in itertools.combinations(SMALL, 2):
        rows = codes[f"code.{a}"].notna() & codes[f"code.{b}"].notna()
        counts = adult_frame.groupby([a, b]).size()
        keys = zip(codes.loc[rows, f"code.{a}"], codes.loc[rows, f"code.{b}"], strict=True)
        by_codes[rows.to_numpy()] = [counts.get(key, 0) for key in keys]
    np.testing.assert_array_equal(by_codes, truth)
    texts = answers["attr.education-num"].dropna()
    assert (texts == answers.loc[texts.index, "code.education-num"].astype(int).astype(str)).all()


@pytest.mark.slow
def test_full_adult_domain_counts_marginal_tables_never_the_vector(
    tmp_path, adult_parquet, adult_frame, adult_domain, monkeypatch
) -> None:
    example = (ADULT_DOMAIN.parent / "adult-marginals.yaml").read_text()
    body = example.replace("file: adult-domain.json", f"file: '{ADULT_DOMAIN}'")
    config = write_config(tmp_path, body, data=adult_parquet)
    assert config.domain.size > 6 * 10**17 > VECTOR_LIMIT

    def no_vector(*args, **kwargs):
        raise AssertionError("the full data vector was counted")

    monkeypatch.setattr(ingest_stage, "histogram", no_vector)
    result = run_release(config, rng=_rng(1))
    assert counting_plan(config, result.strategy) == "tables"
    assert result.reconstruction.histogram is None
    assert not (result.path / "histogram.parquet").exists()
    report = audit_release(result.path)
    assert report.ok, report.failed()
    answers = _answers(result.path)
    assert list(answers["group"].unique()) == ["one-way", "two-way", "age-cdf-by-sex"]
    one_way = answers[answers["group"] == "one-way"]
    truth = np.concatenate(
        [np.bincount(adult_frame[a], minlength=n) for a, n in adult_domain.items()]
    )
    _close_to(one_way["estimate"].to_numpy(), truth, one_way["standard_error"].to_numpy())


def test_full_domain_marginals_under_rho_release_the_proven_optimum_from_tables(
    tmp_path, adult_parquet, adult_frame, adult_domain
) -> None:
    # auto's proven optimum on marginals under zCDP is a residual strategy: a release
    # measures its integer residual blocks from the marginal tables, whatever the domain.
    body = (
        f"name: adult-one-way\ndomain: {{file: '{ADULT_DOMAIN}'}}\nprivacy: {{rho: 1}}\n"
        "workload: [{name: one-way, kind: marginals, k: 1}]\nstrategy: {method: auto}\n"
    )
    config = write_config(tmp_path, body, data=adult_parquet, budget=ZCDP(1))
    assert config.domain.size > VECTOR_LIMIT
    result = run_release(config, rng=_rng(2))
    assert result.strategy.selected == "marginal_optimal"
    assert counting_plan(config, result.strategy) == "tables"
    assert audit_release(result.path).ok
    truth = np.concatenate(
        [np.bincount(adult_frame[a], minlength=n) for a, n in adult_domain.items()]
    )
    answers = _answers(result.path)
    _close_to(answers["estimate"].to_numpy(), truth, answers["standard_error"].to_numpy())


KRON_BODY = """name: adult-age-hours
domain: {age: 85, hours-per-week: 99}
privacy: {rho: 0.5}
workload: [{name: age-hours, kind: kron, factors: {age: prefix, hours-per-week: all_range}}]
"""


def _kron_truth(frame: pd.DataFrame) -> np.ndarray:
    counts = np.zeros((85, 99))
    np.add.at(counts, (frame["age"].to_numpy(), frame["hours-per-week"].to_numpy()), 1)
    below = np.cumsum(counts, axis=0)  # age <= a
    sums = np.concatenate([np.zeros((85, 1)), np.cumsum(below, axis=1)], axis=1)
    ranges = [(lo, hi) for lo in range(99) for hi in range(lo, 99)]
    lows = np.array([lo for lo, _ in ranges])
    highs = np.array([hi for _, hi in ranges])
    return (sums[:, highs + 1] - sums[:, lows]).ravel()


def test_kron_range_release_under_rho_is_audited(tmp_path, adult_parquet, adult_frame) -> None:
    body = KRON_BODY + "strategy: {method: workload}\n"
    config = write_config(tmp_path, body, data=adult_parquet, budget=ZCDP(1))
    result = run_release(config, rng=_rng(2))
    report = audit_release(result.path)
    assert report.ok, report.failed()
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["privacy"]["noise"] == "discrete_gaussian"
    answers = _answers(result.path)
    assert answers["label"].iloc[1] == "age<=0,hours-per-week=0..1"
    _close_to(
        answers["estimate"].to_numpy(),
        _kron_truth(adult_frame),
        answers["standard_error"].to_numpy(),
    )


def test_kron_range_release_with_an_optimized_strategy(tmp_path, adult_parquet) -> None:
    config = write_config(tmp_path, KRON_BODY, data=adult_parquet, budget=ZCDP(1))
    result = run_release(config, rng=_rng(3))
    assert result.strategy.selected != "workload"
    assert audit_release(result.path).ok


def test_discrete_gaussian_variance_of_a_large_sigma() -> None:
    # For σ ≥ 10 the discrete Gaussian's variance is σ² to within a factor 1 - e^(-1900).
    variance = discrete_noise_variance("discrete_gaussian", None, Fraction(10**30))
    assert variance == pytest.approx(1e30, rel=1e-12)


def test_rerun_writes_a_new_version_and_leaves_the_first_untouched(make_small) -> None:
    config = make_small()
    first = run_release(config, rng=_rng(4)).path
    before = tree_digests(first)
    second = run_release(config, rng=_rng(5))
    assert second.path.name == "v0002" and versions(config) == ["v0001", "v0002"]
    assert tree_digests(first) == before
    assert kinds(config) == ["reserve", "spend", "reserve", "spend"]
    spends = [e for e in history(config) if e.kind == "spend"]
    assert len({e.release_id for e in spends}) == 2
    assert published(config) == 2  # each version's manifest, under its own reservation
    with Ledger.open(config.ledger.path) as ledger:
        assert ledger.verify() == 7
    assert audit_release(second.path).ok


def _copy_release(version: Path, ledger: Path, target: Path) -> tuple[Path, Path]:
    shutil.copytree(version, target / "v0001")
    for suffix in ("", ".secret"):  # the ledger is verified with its key
        shutil.copy(f"{ledger}{suffix}", target / f"budget.db{suffix}")
    return target / "v0001", target / "budget.db"


def test_audit_finds_a_flipped_byte_and_an_edited_ledger_row(make_small, tmp_path) -> None:
    config = make_small()
    version = run_release(config, rng=_rng(6)).path
    assert audit_release(version).ok

    flipped, ledger = _copy_release(version, config.ledger.path, tmp_path / "flip")
    answers = flipped / "answers.parquet"
    data = bytearray(answers.read_bytes())
    data[len(data) // 2] ^= 0x01
    answers.write_bytes(bytes(data))
    report = audit_release(flipped, ledger=ledger)
    # The answers check may fail too, when the byte lies in a column it recomputes.
    assert report.failed()[0] == "files" and set(report.failed()) <= {"files", "answers"}
    assert "answers.parquet" in next(c.detail for c in report.checks if c.name == "files")

    edited, ledger = _copy_release(version, config.ledger.path, tmp_path / "edit")
    with sqlite3.connect(ledger) as db:
        changed = db.execute("UPDATE entries SET amount = '1/2' WHERE kind = 'reserve'").rowcount
    assert changed == 1
    report = audit_release(edited, ledger=ledger)
    assert report.failed() == ["ledger"]


def test_post_processing_rerun_spends_nothing(make_small) -> None:
    config = make_small()
    first = run_release(config, rng=_rng(7)).path
    budget = kinds(config)
    rerun = rerun_post_processing(config, first)
    assert rerun.path.name == "v0002"
    assert kinds(config) == budget and published(config) == 2  # nothing spent, one more version
    manifest = json.loads((rerun.path / "manifest.json").read_text())
    assert manifest["ledger"]["reused_from"] == str(first.resolve())
    original = json.loads((first / "manifest.json").read_text())
    assert original["ledger"]["reused_from"] is None
    assert manifest["ledger"]["reservation_id"] == original["ledger"]["reservation_id"]
    assert (rerun.path / "measurements.parquet").read_bytes() == (
        first / "measurements.parquet"
    ).read_bytes()
    report = audit_release(rerun.path)
    assert report.ok, report.failed()


def _numbers_and_keys(node: object) -> tuple[list[float], list[str]]:
    numbers: list[float] = []
    keys: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            numbers.append(item)
    return numbers, keys


def test_no_raw_count_reaches_the_manifest_or_the_run_state(make_small, adult_frame) -> None:
    config = make_small()
    result = run_release(config, rng=_rng(8))
    text = (result.path / "manifest.json").read_text()
    numbers, keys = _numbers_and_keys(json.loads(text))
    assert not [k for k in keys if re.search(r"(^|[_-])rows?($|[_-])|row_?count", k.lower())]
    assert "rows_read" not in text and "rows_dropped" not in text
    by_sex = adult_frame.groupby("sex").size().tolist()
    assert not {len(adult_frame), *by_sex} & set(numbers)
    (run,) = run_folders(config)
    state = json.loads((run / "run.json").read_text())
    assert state["state"] == "released" and state["release_id"] == result.release_id
    assert "rows_read" not in json.dumps(state) and len(adult_frame) not in state["ingest"].values()
    assert (run.stat().st_mode & 0o777, (run / "run.json").stat().st_mode & 0o777) == (0o700, 0o600)


SUM_BODY = """name: adult-hours-sums
domain: {attributes: [{name: sex, size: 2}, {name: hours-per-week, size: 99, bins: [HOURS]}]}
privacy: {epsilon: 1}
workload:
  - {name: hours-sum, kind: prefix_sum, attribute: hours-per-week, by: [sex],
     truncation: {threshold: 60}}
""".replace("HOURS", ", ".join(str(edge) for edge in range(100)))


@pytest.mark.slow
def test_prefix_sum_release_is_audited_and_close_to_the_truncated_sums(
    tmp_path, adult_parquet, adult_frame
) -> None:
    config = write_config(tmp_path, SUM_BODY, data=adult_parquet)
    result = run_release(config, rng=_rng(4))
    assert audit_release(result.path).ok
    answers = _answers(result.path)
    assert answers["label"].iloc[0] == "sex=0,sum(hours-per-week<1)"
    assert answers["label"].iloc[98] == "sex=0,sum(hours-per-week<=99)"
    assert answers["attr.hours-per-week"].iloc[98] == "<=99"
    assert answers["code.hours-per-week"].isna().all()  # prefixes: no single value
    assert answers["code.sex"].tolist() == [0] * 99 + [1] * 99
    # Each record counts at its bucket's midpoint (code + 1/2), capped at 60.
    truth = []
    for sex in (0, 1):
        hours = adult_frame.loc[adult_frame["sex"] == sex, "hours-per-week"].to_numpy()
        values = np.bincount(hours, weights=np.minimum(hours + 0.5, 60), minlength=99)
        truth.append(np.cumsum(values))
    _close_to(
        answers["estimate"].to_numpy(),
        np.concatenate(truth),
        answers["standard_error"].to_numpy(),
    )
