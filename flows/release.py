"""The ``dpmm-release`` flow: one release, each pipeline stage a named task.

The stages are :mod:`dpmm.pipeline`'s functions, run one after the other in the flow's
process, so the ledger and the measurement store are only touched there. Ingest
(``ingest-histogram``) and, for a config with private truncation thresholds, the bucket
count they are drawn from (``count-threshold-buckets``) submit one task per partition to
the config's Dask cluster (:mod:`dpmm.cluster`), which starts when ingest first needs it.
The stages are task runs of this flow itself, so its page shows them. Retries are safe: a
re-run of the flow resumes the open run and reuses its persisted measurement (DESIGN §5
rule 4); Prefect's cache is never used for it.

Artifacts (stable keys): ``dpmm-release-<name>`` (where the release is and its error per
group), ``dpmm-budget-<dataset>`` (granted, this release, remaining) and the figures of the
release's ``report.html`` as PNG image artifacts, ``dpmm-report-<name>-<figure>`` (error
against budget, where the budget goes, the answers' error bars). An image artifact holds
an image's URL; these hold the PNG itself as a ``data:image/png;base64,`` URL, so the UI
shows them without a file server or the internet. They hold public facts and published
answers only: no count, no unreleased value.
Names become keys through :func:`flows.artifact_keys.artifact_key` (lowercase letters,
digits and dashes: what Prefect accepts).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from fractions import Fraction
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_image_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from dpmm.cluster import DaskCluster
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import DpmmError
from dpmm.pipeline import (
    ReleaseResult,
    open_ledger,
    rerun_post_processing,
    run_release,
)
from dpmm.pipeline.threshold_stage import COUNT_STAGE
from dpmm.privacy.ledger_schema import decimal_text
from dpmm.privacy.params import PureDP
from dpmm.release.spend import spend_of
from dpmm.terminal_progress import terminal_bar
from flows.artifact_keys import artifact_key
from flows.crashed_runs import mark_crashed_runs

__all__ = ["release_flow"]


#: Stages given the cluster's client: the counting ones, and the measurement (drawn on
#: the workers, chunk by chunk, when the counts stay there).
_ON_CLUSTER = frozenset({"ingest-histogram", COUNT_STAGE, "measure-strategy"})


@contextmanager
def _progress(stage: str, unit: str, logged: bool) -> Iterator[Callable[..., None]]:
    """``progress(done, total[, what])`` for a stage: a rich bar naming the stage on the
    operator's terminal, a Prefect progress artifact in steps of 10 % (a share of the
    stage's steps only, nothing read from the data), and with ``logged`` each new
    ``what`` in the flow's log (the candidate strategy being tried and the best so far)."""
    artifact = create_progress_artifact(0.0, description=f"Progress of stage {stage}")
    logger = get_run_logger()
    shown, said = 0, ""
    with terminal_bar(stage, unit) as bar:

        def show(done: int, total: int, what: str = "") -> None:
            nonlocal shown, said
            if bar is not None:
                bar(done, total, what)
            if logged and what and what != said:
                logger.info("stage %s: %s", stage, what)
                said = what
            percent = 100 * done // max(total, 1)
            if percent >= shown + 10 or (done >= total and shown < 100):
                update_progress_artifact(artifact, float(percent))
                shown = percent

        yield show
        if shown < 100:  # the stage is done, whether or not it reported every step
            update_progress_artifact(artifact, 100.0)


#: Stages that report steps, and what a step is.
_STEPS = {
    "ingest-histogram": "files",
    COUNT_STAGE: "files",
    "plan-strategy": "candidates",
    "select-strategy": "candidates",
    "reconstruct": "steps",
}
#: Stages whose every step goes in the flow's log (a handful, each worth knowing).
_LOGGED_STEPS = frozenset({"plan-strategy", "select-strategy"})


def _stages(cluster: DaskCluster) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """The pipeline's ``stage`` hook: each stage a task run of this flow, named for
    operators, timed in the log; the counting stages get the cluster's client."""
    logger = get_run_logger()

    def stage(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            logger.info("stage %s: started", name)
            started = time.perf_counter()
            terminal = sys.stderr.isatty()
            if name in _ON_CLUSTER:
                # Submitted from this process, one Dask task per partition: no worker
                # thread waits on other tasks (with one 1-thread worker that wait never
                # ended), and a lost worker's partitions are rescheduled.
                kwargs["client"] = cluster.client
                if cluster.dashboard_link:
                    logger.info("stage %s: Dask dashboard at %s", name, cluster.dashboard_link)
            if terminal and name not in _STEPS:
                sys.stderr.write(f"  {name} ...")
                sys.stderr.flush()
            with ExitStack() as steps:
                if name in _STEPS:
                    kwargs["progress"] = steps.enter_context(
                        _progress(name, _STEPS[name], name in _LOGGED_STEPS)
                    )
                result = task(function, name=name, cache_policy=NO_CACHE)(*args, **kwargs)
            seconds = time.perf_counter() - started
            logger.info("stage %s: done in %.1f s", name, seconds)
            if terminal:  # after the bar's line, or the "name ..." the stage began
                sys.stderr.write(
                    f"  {name} done in {seconds:.1f} s\n"
                    if name in _STEPS
                    else f" done in {seconds:.1f} s\n"
                )
            return result

        return run

    return stage


def _failure_artifact(config: ReleaseConfig, error: Exception) -> None:
    """Why a release failed, for the UI: a dpmm error's sentence (which names files, keys
    and kinds of problem, never a value from the data: a data error's counts and examples
    are in its operator-only detail), or only the type of an unexpected error."""
    reason = (
        str(error)
        if isinstance(error, DpmmError | OSError)
        else f"an unexpected {type(error).__name__}; the operator's terminal has the traceback"
    )
    create_markdown_artifact(
        f"# Release `{config.name}` failed\n\n{reason}",
        key=artifact_key("dpmm-release", config.name, "failure"),
        description=f"Why the last failed run of release {config.name} failed",
    )


def _budget_row(label: str, amount: Fraction) -> dict[str, str]:
    """One row of the budget table, in ``dpmm ledger show``'s exact format."""
    return {"budget": label, "exact": str(amount), "decimal": decimal_text(amount)}


def _artifacts(config: ReleaseConfig, result: ReleaseResult, dashboard: str | None) -> None:
    folder = result.path.resolve()
    rows = [
        {
            "group": g.name,
            "queries": int(g.values.size),
            "expected RMSE": round(g.expected_rmse, 4),
            "standard errors": result.reconstruction.standard_errors,
        }
        for g in result.reconstruction.groups
    ]
    create_markdown_artifact(
        f"# Release `{config.name}`\n\nWritten to [`{folder}`]({folder.as_uri()}) "
        f"(strategy `{result.strategy.selected}`, reconstruction "
        f"`{result.reconstruction.method}`); its report is `report.html` there."
        + (f" Its Dask cluster's dashboard was at <{dashboard}>." if dashboard else ""),
        key=artifact_key("dpmm-release", config.name),
        description=f"Where release {config.name} is",
    )
    create_table_artifact(
        rows,
        key=artifact_key("dpmm-errors", config.name),
        description=f"Expected error per query group of {result.path.name}",
    )
    for figure in result.figures:  # the report's own PNGs
        create_image_artifact(
            figure.data_uri(),
            key=artifact_key("dpmm-report", config.name, figure.key),
            description=f"{figure.title} of {result.path.name}, as in its report.html",
        )
    with open_ledger(config) as ledger:
        balance = ledger.balance(config.ledger.dataset)
    spend = spend_of(result.manifest)  # nothing for post-processing, θ shares included
    budget = [
        _budget_row("granted", balance.granted),
        _budget_row("this release", spend.amount if spend else Fraction(0)),
        _budget_row("reserved", balance.reserved),
        _budget_row("spent", balance.spent),
        _budget_row("remaining", balance.remaining),
    ]
    symbol = "ε" if isinstance(config.privacy, PureDP) else "ρ"
    create_table_artifact(
        budget,
        key=artifact_key("dpmm-budget", config.ledger.dataset),
        description=f"Privacy budget ({symbol}) of dataset {config.ledger.dataset}",
    )


@flow(name="dpmm-release")
def release_flow(config_path: str, from_measurements: str | None = None) -> str:
    """Run the release a config describes and return the new version's folder.

    Args:
        config_path: The release config (YAML).
        from_measurements: A release version folder: post-process its measurement again
            (new workload or reconstruction) without reading data or spending budget.
    """
    config = load_config(config_path)
    try:
        mark_crashed_runs(config.name)
    except Exception as error:  # housekeeping of the UI: never a reason to stop a release
        get_run_logger().warning("could not check for crashed runs: %s", type(error).__name__)
    try:
        with DaskCluster(config.cluster) as cluster:
            stage = _stages(cluster)
            if from_measurements is not None:
                result = rerun_post_processing(config, from_measurements, stage=stage)
            else:
                result = run_release(config, stage=stage)
            dashboard = cluster.dashboard_link
    except Exception as error:
        _failure_artifact(config, error)
        raise
    _artifacts(config, result, dashboard)
    logger = get_run_logger()
    logger.info(
        "strategy %s, reconstruction %s", result.strategy.selected, result.reconstruction.method
    )
    for group in result.reconstruction.groups:
        logger.info("group %s: expected RMSE %.4g", group.name, group.expected_rmse)
    logger.info("release written to %s", result.path.resolve())
    return str(result.path)
