"""BLAS threads from the cores a process owns, its Dask worker's share, and the stages'
use of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from threadpoolctl import threadpool_info

import dpmm.blas_threads as bt
import dpmm.pipeline.strategy_stage
import dpmm.reconstruct.choice
from dpmm.config import load_config
from dpmm.errors import ConfigError
from dpmm.plan import plan


def _pool_threads() -> set[int]:
    """The thread counts of numpy's and scipy's BLAS, which the stages call (other libraries
    loaded by other tests, such as SCS's single-threaded OpenBLAS, may not go above 1)."""
    return {
        pool["num_threads"]
        for pool in threadpool_info()
        if "numpy" in pool["filepath"] or "scipy" in pool["filepath"]
    }


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 4-core machine with no cgroup quota and nothing else running, in tmp files."""
    monkeypatch.delenv(bt.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(bt.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(bt.os, "cpu_count", lambda: 4)
    (tmp_path / "cgroup").write_text("0::/\n")
    (tmp_path / "loadavg").write_text("0.50 0.40 0.30 1/200 4242\n")
    (tmp_path / "sys").mkdir()
    monkeypatch.setattr(bt, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(bt, "CGROUP_ROOT", tmp_path / "sys")
    monkeypatch.setattr(bt, "LOADAVG", tmp_path / "loadavg")
    monkeypatch.setattr(bt, "_own_running", lambda: 1)
    monkeypatch.setattr(bt, "LOAD_PAUSE_SECONDS", 0.0)
    return tmp_path


def test_affinity_alone(machine: Path) -> None:
    assert bt.cgroup_cores() is None
    assert bt.owned_cores() == 4
    assert bt.blas_threads() == 4


def test_a_smaller_affinity(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bt.os, "sched_getaffinity", lambda pid: {2, 3})
    assert bt.owned_cores() == 2


@pytest.mark.parametrize(
    ("cpu_max", "cores", "owned"),
    [("150000 100000", 1.5, 2), ("100000 100000", 1.0, 1), ("max 100000", None, 4)],
)
def test_cgroup_v2_quota(machine: Path, cpu_max: str, cores: float | None, owned: int) -> None:
    (machine / "sys" / "cpu.max").write_text(cpu_max + "\n")
    assert bt.cgroup_cores() == cores
    assert bt.owned_cores() == owned


def test_cgroup_v2_quota_of_a_nested_group(machine: Path) -> None:
    (machine / "cgroup").write_text("0::/slurm/job_7/step_0\n")
    group = machine / "sys" / "slurm" / "job_7" / "step_0"
    group.mkdir(parents=True)
    (group / "cpu.max").write_text("300000 100000\n")
    (machine / "sys" / "cpu.max").write_text("max 100000\n")  # the root: no quota
    assert bt.cgroup_cores() == 3.0
    assert bt.owned_cores() == 3


@pytest.mark.parametrize("folder", bt.CGROUP_V1_FOLDERS)
@pytest.mark.parametrize(("quota", "owned"), [("200000", 2), ("50000", 1), ("-1", 4)])
def test_cgroup_v1_quota(machine: Path, folder: str, quota: str, owned: int) -> None:
    (machine / "sys" / folder).mkdir()
    (machine / "sys" / folder / "cpu.cfs_quota_us").write_text(quota + "\n")
    (machine / "sys" / folder / "cpu.cfs_period_us").write_text("100000\n")
    assert bt.owned_cores() == owned


@pytest.mark.parametrize(("running", "threads"), [("1/200", 4), ("3/200", 2), ("9/200", 1)])
def test_cores_other_processes_keep_busy_are_left_to_them(
    machine: Path, running: str, threads: int
) -> None:
    # /proc/loadavg counts this process's one running thread too.
    (machine / "loadavg").write_text(f"2.00 1.00 1.00 {running} 4242\n")
    assert bt.blas_threads() == threads


def test_a_short_burst_is_not_load(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = iter([5, 1, 1, 1, 1])
    monkeypatch.setattr(bt, "_machine_running", lambda: next(samples))
    assert bt.busy_elsewhere() == 0


def test_other_processes_count_in_proportion_to_the_cores_owned(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bt.os, "sched_getaffinity", lambda pid: {0, 1})
    (machine / "loadavg").write_text("2.00 1.00 1.00 3/200 4242\n")  # 2 others on 4 cores
    assert bt.busy_elsewhere() == 1
    assert bt.blas_threads() == 1


@pytest.mark.parametrize(("value", "threads"), [("3", 3), (" 1 ", 1), ("off", None), ("OFF", None)])
def test_the_operator_override(
    machine: Path, monkeypatch: pytest.MonkeyPatch, value: str, threads: int | None
) -> None:
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, value)
    assert bt.blas_threads() == threads


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_override_names_the_variable(
    machine: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, value)
    with pytest.raises(ConfigError, match=f"^{bt.ENVIRONMENT_VARIABLE}: .*{value!r}"):
        bt.blas_threads()


def test_off_leaves_the_pools_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _pool_threads()
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, "off")
    with bt.blas_limit() as threads:
        assert threads is None
        assert _pool_threads() == before


def test_the_limit_applies_inside_and_is_undone_after(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _pool_threads()
    wanted = max(before) + 1  # differs from every pool's own setting
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, str(wanted))
    with bt.blas_limit() as threads:
        assert threads == wanted
        assert _pool_threads() == {wanted}
        monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, "1")
        with bt.blas_limit() as inner:  # nested: the outer decision holds
            assert inner == wanted
            assert _pool_threads() == {wanted}
    assert _pool_threads() == before


def test_the_optimizers_one_thread_limit_covers_every_pool_and_none_keeps_the_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pool_limit`` lists the pools once: NumPy's and SciPy's OpenBLAS both obey it."""
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, "3")
    with bt.blas_limit():
        with bt.pool_limit(1):
            assert _pool_threads() == {1}
            assert {pool["prefix"] for pool in threadpool_info()} == {
                pool["prefix"] for pool in bt._pools().info()
            }
        with bt.pool_limit(None):
            assert _pool_threads() == {3}
        assert _pool_threads() == {3}


def test_outside_a_dask_worker() -> None:
    assert bt.dask_worker_threads() is None


def _in_a_worker_task() -> tuple[int | None, int | None, list[int]]:
    """Run on a worker: a quiet 2-core machine, then the limit as a stage applies it."""
    import dpmm.blas_threads as worker_bt

    worker_bt.owned_cores = lambda: 2
    worker_bt.busy_elsewhere = lambda: 0
    with worker_bt.blas_limit() as threads:
        pools = [pool["num_threads"] for pool in threadpool_info()]
    return worker_bt.dask_worker_threads(), threads, pools


@pytest.mark.slow
def test_a_dask_worker_task_gets_its_share_of_the_cores() -> None:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        worker_threads, threads, pools = client.submit(_in_a_worker_task, pure=False).result()
    assert worker_threads == 2
    assert threads == 1  # 2 cores, 2 worker threads: 1 BLAS thread per task
    assert pools and set(pools) == {1}


def _small_config(folder: Path, method: str) -> Path:
    document = {
        "name": "small",
        "domain": {"a": 16, "b": 4},
        "privacy": {"epsilon": 1},
        "workload": [{"name": "cdf", "kind": "prefix", "attribute": "a", "by": ["b"]}],
        "strategy": {"method": method},
    }
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_plan_selects_and_reconstructs_with_the_decided_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = max(_pool_threads()) + 1
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, str(wanted))
    seen: dict[str, set[int]] = {}

    def spy(module: object, name: str) -> None:
        function = getattr(module, name)

        def watched(*args, **kwargs):
            seen[name] = _pool_threads()
            return function(*args, **kwargs)

        monkeypatch.setattr(module, name, watched)

    spy(dpmm.pipeline.strategy_stage, "select_strategy")
    spy(dpmm.reconstruct.choice, "least_squares")
    report = plan(load_config(_small_config(tmp_path, "auto")))
    assert np.isfinite(report.total.total_squared_error)
    assert seen == {"select_strategy": {wanted}, "least_squares": {wanted}}
    assert max(_pool_threads()) < wanted  # undone after the plan


def test_a_release_stage_applies_the_limit_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release calls selection and reconstruction as separate stages."""
    from dpmm.measure.mechanism import planned_record
    from dpmm.pipeline.reconstruct_stage import reconstruct
    from dpmm.pipeline.strategy_stage import select_for_config

    config = load_config(_small_config(tmp_path, "hierarchical"))
    wanted = max(_pool_threads()) + 1
    seen: list[set[int]] = []
    real_least_squares = dpmm.reconstruct.choice.least_squares

    def watched(*args, **kwargs):
        seen.append(_pool_threads())
        return real_least_squares(*args, **kwargs)

    monkeypatch.setattr(dpmm.reconstruct.choice, "least_squares", watched)
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, str(wanted))
    chosen, _ = select_for_config(config)
    record = planned_record(chosen.quantized, config.measurement_privacy)
    reconstruct(config, chosen, record, "vector")
    assert seen == [{wanted}]


def test_independent_searches_count_the_cores_owned_not_the_load(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BLAS team leaves busy cores to their owners; side-by-side searches take their share."""
    (machine / "loadavg").write_text("4.00 4.00 4.00 4/500 1\n")  # 3 busy elsewhere
    assert bt.blas_threads() == 1
    assert bt.search_threads() == 4
    monkeypatch.setattr(bt, "dask_worker_threads", lambda: 2)
    assert bt.search_threads() == 2
    monkeypatch.setenv(bt.ENVIRONMENT_VARIABLE, "3")
    assert bt.search_threads() == 3
