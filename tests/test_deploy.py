"""The deployment files under deploy/: they parse, agree with each other and with the code.

Flow files are read with ``ast`` (never imported), so these tests start no Prefect
server and touch no data.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpmm.config import load_config
from dpmm.settings import cluster_settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PREFECT_FILE = DEPLOY / "prefect.yaml"
K8S_FILE = DEPLOY / "dask" / "kubernetes.yaml"
JOBQUEUE_FILE = DEPLOY / "dask" / "jobqueue.yaml"
README = DEPLOY / "README.md"

YAML_FILES = sorted(
    p
    for folder in (DEPLOY, ROOT / "config")
    for p in folder.rglob("*")
    if p.suffix in {".yaml", ".yml"}
)
RELEASE_CONFIGS = sorted(
    [*(ROOT / "config" / "examples").glob("*.yaml"), *(DEPLOY / "configs").glob("*.yaml")]
)
#: The flow names the flows/ modules declare (``@flow(name=...)``); prefect deployment
#: commands address a deployment as ``<flow name>/<deployment name>``.
FLOW_NAMES = {"release_flow": "dpmm-release", "plan_flow": "dpmm-plan", "audit_flow": "dpmm-audit"}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _deployments() -> list[dict[str, Any]]:
    return _load(PREFECT_FILE)["deployments"]


def _deployment_ids() -> list[str]:
    return [d["name"] for d in _deployments()]


def _flow_function(entrypoint: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The top-level function an entrypoint names, decorated with Prefect's ``flow``."""
    path_text, _, function = entrypoint.partition(":")
    path = ROOT / path_text
    assert path.is_file(), f"entrypoint {entrypoint}: no file {path_text} in the repository"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return node
    raise AssertionError(f"entrypoint {entrypoint}: {path_text} defines no function {function}")


def _flow_decorator(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        if name == "flow":
            return decorator
    return None


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


# --- every YAML file ---------------------------------------------------------


def test_there_are_deployment_files() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES if DEPLOY in p.parents}
    assert {"prefect.yaml", "dask/kubernetes.yaml", "dask/jobqueue.yaml"} <= names
    assert any(name.startswith("configs/") for name in names)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_yaml_parses_to_a_mapping(path: Path) -> None:
    assert isinstance(_load(path), dict)


@pytest.mark.parametrize("path", RELEASE_CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_release_config_loads(path: Path) -> None:
    config = load_config(path)
    assert config.name and config.workload


# --- deploy/prefect.yaml -----------------------------------------------------


def test_prefect_file_matches_prefects_own_model() -> None:
    models = pytest.importorskip("prefect.cli.deploy._models")
    project = models.PrefectYamlModel.model_validate(_load(PREFECT_FILE))
    assert [d.name for d in project.deployments] == _deployment_ids()
    for deployment in project.deployments:
        assert deployment.entrypoint and deployment.description and deployment.tags
        assert deployment.work_pool is not None and deployment.work_pool.name


def test_pull_step_sets_the_working_directory() -> None:
    from prefect.deployments.steps import set_working_directory

    steps = _load(PREFECT_FILE)["pull"]
    (step,) = steps[0].items()
    assert step[0] == "prefect.deployments.steps.set_working_directory"
    assert set(step[1]) == {"directory"} and Path(step[1]["directory"]).is_absolute()
    assert callable(set_working_directory)


def test_there_is_a_monthly_release_and_an_on_demand_audit() -> None:
    by_entrypoint = {d["entrypoint"]: d for d in _deployments()}
    release = by_entrypoint["flows/release.py:release_flow"]
    audit = by_entrypoint["flows/audit.py:audit_flow"]
    assert [s["cron"] for s in release["schedules"]] == ["0 6 1 * *"]
    assert all(s.get("timezone") for s in release["schedules"])
    assert not audit.get("schedules") and not audit.get("schedule")


@pytest.mark.parametrize("name", _deployment_ids())
def test_schedules_are_valid_crons(name: str) -> None:
    from prefect.cli.deploy._models import RawScheduleConfig
    from prefect.client.schemas.schedules import CronSchedule

    (deployment,) = (d for d in _deployments() if d["name"] == name)
    for schedule in deployment.get("schedules") or []:
        RawScheduleConfig.model_validate(schedule)  # unknown keys are refused
        assert len(schedule["cron"].split()) == 5, schedule["cron"]
        # Prefect's own check of the cron string and the time zone name.
        CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])


@pytest.mark.parametrize("name", _deployment_ids())
def test_entrypoint_is_a_flow_taking_the_parameters(name: str) -> None:
    (deployment,) = (d for d in _deployments() if d["name"] == name)
    entrypoint = deployment["entrypoint"]
    assert re.fullmatch(r"[\w/.-]+\.py:[A-Za-z_]\w*", entrypoint), entrypoint
    function = _flow_function(entrypoint)
    decorator = _flow_decorator(function)
    assert decorator is not None, f"{entrypoint} is not decorated with flow(...)"
    if isinstance(decorator, ast.Call) and function.name in FLOW_NAMES:
        names = [k.value for k in decorator.keywords if k.arg == "name"]
        assert [ast.literal_eval(n) for n in names] == [FLOW_NAMES[function.name]]
    unknown = set(deployment.get("parameters") or {}) - set(_parameters(function))
    assert not unknown, f"{entrypoint} takes no parameter(s) {sorted(unknown)}"


@pytest.mark.parametrize("name", _deployment_ids())
def test_config_path_parameter_names_a_config_that_loads(name: str) -> None:
    (deployment,) = (d for d in _deployments() if d["name"] == name)
    config_path = (deployment.get("parameters") or {}).get("config_path")
    if config_path is None:
        pytest.skip("this deployment takes no config")
    # Relative to the repository root, where the pull step puts the worker.
    assert not Path(config_path).is_absolute()
    assert load_config(ROOT / config_path).name


def test_readme_creates_every_work_pool() -> None:
    text = README.read_text(encoding="utf-8")
    for pool in {d["work_pool"]["name"] for d in _deployments()}:
        assert f"prefect work-pool create {pool} --type process" in text


# --- deploy/dask/kubernetes.yaml ---------------------------------------------


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    containers = pod["spec"]["containers"]
    assert containers, "a pod spec without containers"
    return containers


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_kubernetes_manifest_is_a_dask_cluster() -> None:
    manifest = _load(K8S_FILE)
    assert manifest["apiVersion"] == "kubernetes.dask.org/v1"
    assert manifest["kind"] == "DaskCluster"
    assert manifest["metadata"]["name"]
    spec = manifest["spec"]
    assert spec["worker"]["replicas"] == 2
    scheduler, worker = _containers(spec["scheduler"]), _containers(spec["worker"])
    assert "scheduler" in scheduler[0]["args"] and "worker" in worker[0]["args"]
    ports = {p["port"] for p in spec["scheduler"]["service"]["ports"]}
    assert 8786 in ports
    for container in [*scheduler, *worker]:
        assert container["image"] and container["resources"]["limits"]
        assert _env(container)["PREFECT_API_URL"].endswith("/api")


def test_monthly_config_points_at_the_kubernetes_scheduler_service() -> None:
    manifest = _load(K8S_FILE)
    metadata = manifest["metadata"]
    config = load_config(DEPLOY / "configs" / "census-monthly.yaml")
    address = config.raw["cluster"]["address"]
    # The operator names the scheduler Service <cluster name>-scheduler.
    host = f"{metadata['name']}-scheduler.{metadata['namespace']}.svc.cluster.local"
    assert address == f"tcp://{host}:8786"
    assert cluster_settings(config.raw["cluster"]).address == address


# --- deploy/dask/jobqueue.yaml -----------------------------------------------


def _commented_cluster_section() -> dict[str, Any]:
    text = JOBQUEUE_FILE.read_text(encoding="utf-8")
    start, end = "# --- cluster section ---\n", "# --- end cluster section ---"
    block = text.split(start, 1)[1].split(end, 1)[0]
    lines = [line.removeprefix("#").removeprefix(" ") for line in block.splitlines()]
    return yaml.safe_load("\n".join(lines))


def test_jobqueue_config_has_the_slurm_settings() -> None:
    slurm = _load(JOBQUEUE_FILE)["jobqueue"]["slurm"]
    assert isinstance(slurm["cores"], int) and slurm["cores"] > 0
    assert re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", slurm["memory"])
    assert re.fullmatch(r"(\d+-)?\d{1,2}:\d{2}:\d{2}", slurm["walltime"])
    directives = slurm["job-extra-directives"]
    assert directives and all(d.startswith("--") for d in directives)
    exports = [line for line in slurm["job-script-prologue"] if "PREFECT_API_URL=" in line]
    assert len(exports) == 1 and exports[0].startswith("export ")
    assert exports[0].endswith("/api")


def test_jobqueue_cluster_section_is_the_same_cluster_and_loads() -> None:
    slurm = _load(JOBQUEUE_FILE)["jobqueue"]["slurm"]
    section = _commented_cluster_section()["cluster"]
    settings = cluster_settings(section)
    assert settings.cluster_class == "dask_jobqueue.SLURMCluster"
    assert settings.scale and settings.scale % slurm["processes"] == 0
    # Keyword arguments are the config keys with '_' for '-'; unset keys may be left out.
    as_config = {key.replace("_", "-"): value for key, value in settings.options.items()}
    set_in_file = {k: v for k, v in slurm.items() if v not in (None, [], {})}
    assert as_config == set_in_file
