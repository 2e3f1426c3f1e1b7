"""The pipeline under faults: killed processes resume, concurrent runs never overspend."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import load_config
from dpmm.data import DataError
from dpmm.measure.record import load_measurement
from dpmm.pipeline import ReleaseBusy, run_release
from dpmm.pipeline.release import MEASUREMENT_ID
from dpmm.privacy.params import PureDP
from dpmm.release import read_measurements
from tests.pipeline.conftest import history, kinds, remaining, run_folders, versions

SPAWN = multiprocessing.get_context("spawn")
#: Seconds a child process may take (it imports dpmm, selects a strategy and ingests Adult).
CHILD_TIMEOUT = 120


def _dying_stage(name: str, when: str) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """A stage hook that kills the process before or after the stage ``name`` runs."""

    def stage(task: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if task == name and when == "before":
                os._exit(9)
            result = function(*args, **kwargs)
            if task == name and when == "after":
                os._exit(9)
            return result

        return run

    return stage


def _die_in(config_path: str, name: str, when: str, seed: int) -> None:
    """Child: run the release and die at the given stage."""
    run_release(
        load_config(config_path), stage=_dying_stage(name, when), rng=np.random.default_rng(seed)
    )


def _release_at_barrier(config_path: str, barrier: Any, results: Any, seed: int) -> None:
    """Child: wait for the other child, then run the release; report the outcome by name."""
    config = load_config(config_path)
    barrier.wait(CHILD_TIMEOUT)
    try:
        result = run_release(config, rng=np.random.default_rng(seed))
    except Exception as error:  # the outcome is the test's assertion, in the parent
        results.put((config.name, type(error).__name__))
    else:
        results.put((config.name, result.path.name))


def _hold_in_ingest(config_path: str, entered: Any, go: Any, seed: int) -> None:
    """Child: run the release, pausing inside ingest until the parent says go."""

    def stage(task: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if task == "ingest-histogram":
                entered.set()
                go.wait(CHILD_TIMEOUT)
            return function(*args, **kwargs)

        return run

    run_release(load_config(config_path), stage=stage, rng=np.random.default_rng(seed))


def _child(target: Callable[..., None], *args: Any) -> Any:
    process = SPAWN.Process(target=target, args=args)
    process.start()
    return process


def _finish(process: Any) -> int:
    process.join(CHILD_TIMEOUT)
    if process.is_alive():  # pragma: no cover - a hung child fails the test, not the session
        process.kill()
        process.join()
        pytest.fail("a child process did not finish")
    return process.exitcode


def test_kill_after_measuring_resumes_and_spends_once(make_small) -> None:
    config = make_small()
    child = _child(_die_in, str(config.path), "measure-strategy", "after", 1)
    assert _finish(child) == 9
    assert versions(config) == []
    (run,) = run_folders(config)
    persisted = load_measurement(run / "measurements", MEASUREMENT_ID)
    assert kinds(config) == ["reserve", "spend"]

    result = run_release(config, rng=np.random.default_rng(2))
    assert result.resumed is True
    assert result.path.name == "v0001" and versions(config) == ["v0001"]
    released = read_measurements(result.path / "measurements.parquet")
    np.testing.assert_array_equal(released.values, persisted.values)
    assert released.reservation_id == persisted.reservation_id
    spends = [e for e in history(config) if e.kind == "spend"]
    assert [e.release_id for e in spends] == [result.release_id]
    assert kinds(config) == ["reserve", "spend"]
    assert audit_release(result.path).ok


def test_kill_after_reserving_resumes_with_the_same_reservation(make_small) -> None:
    config = make_small()
    child = _child(_die_in, str(config.path), "ingest-histogram", "before", 3)
    assert _finish(child) == 9
    (run,) = run_folders(config)
    assert not any((run / "measurements").iterdir())
    (reserve,) = [e for e in history(config) if e.kind == "reserve"]

    result = run_release(config, rng=np.random.default_rng(4))
    assert result.resumed is True
    assert result.manifest["ledger"]["reservation_id"] == reserve.reservation_id
    assert result.release_id == reserve.release_id
    assert kinds(config) == ["reserve", "spend"]
    assert audit_release(result.path).ok


@pytest.mark.slow
def test_two_releases_racing_for_one_budget(make_small) -> None:
    first = make_small("adult-first", budget=PureDP(1), sub="first")
    second = make_small("adult-second", ledger=first.ledger.path, sub="second")
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    children = [
        _child(_release_at_barrier, str(c.path), barrier, results, seed)
        for seed, c in enumerate((first, second))
    ]
    outcomes = dict(results.get(timeout=CHILD_TIMEOUT) for _ in children)
    assert [_finish(c) for c in children] == [0, 0]
    assert sorted(outcomes.values()) == ["BudgetExceeded", "v0001"], outcomes
    winner, loser = (first, second) if outcomes[first.name] == "v0001" else (second, first)
    assert kinds(first) == ["reserve", "spend"]
    (spend,) = [e for e in history(first) if e.kind == "spend"]
    assert spend.release_id.startswith(winner.name + "-")
    assert remaining(first) == 0
    assert versions(loser) == [] and run_folders(loser) == []
    assert versions(winner) == ["v0001"]


def test_the_same_release_run_twice_at_once_is_busy(make_small) -> None:
    config = make_small()
    entered, go = SPAWN.Event(), SPAWN.Event()
    child = _child(_hold_in_ingest, str(config.path), entered, go, 5)
    try:
        assert entered.wait(CHILD_TIMEOUT)
        before = remaining(config)
        with pytest.raises(ReleaseBusy, match=config.name) as caught:
            run_release(config, rng=np.random.default_rng(6))
        assert "\n" not in str(caught.value)
        assert remaining(config) == before
        assert kinds(config) == ["reserve"]
    finally:
        go.set()
    assert _finish(child) == 0
    assert versions(config) == ["v0001"]
    assert kinds(config) == ["reserve", "spend"]


def test_a_failure_before_noise_cancels_the_reservation(make_small, tmp_path: Path) -> None:
    bad = tmp_path / "bad-data"
    bad.mkdir()
    pq.write_table(
        pa.table(
            {
                name: [0, 99]
                for name in (
                    "education-num",
                    "marital-status",
                    "relationship",
                    "race",
                    "sex",
                    "income>50K",
                )
            }
        ),
        bad / "part-0.parquet",
    )
    config = make_small(data=bad)
    before = remaining(config)
    with pytest.raises(DataError, match=r"column 'education-num'.*outside 0\.\.15"):
        run_release(config, rng=np.random.default_rng(7))
    assert remaining(config) == before
    assert kinds(config) == ["reserve", "cancel"]
    assert versions(config) == [] and run_folders(config) == []
