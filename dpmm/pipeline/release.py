"""The release pipeline: check → reserve → [thresholds] → ingest → measure → reconstruct → write.

The check loads the plan's decision (or selects and saves one with the plan's rule) and
runs :func:`~dpmm.pipeline.preflight.preflight` on it, so everything that can fail
without data fails before the ledger is touched.

:func:`run_release` is the whole pipeline as plain function calls; the Prefect flow in
``flows/release.py`` runs the same sequence, each stage a named task, by passing a
``stage`` hook that wraps every stage function. Every stage is also usable on its own.

Failure rules (DESIGN §5): anything that fails before noise is drawn cancels the
reservation and leaves no files; a crash (a killed process) leaves the run open, and
running the same config again resumes it, reusing its reservation, strategy and
persisted measurement, so the budget is spent once.

A config with private truncation thresholds (``prefix_sum`` groups with
``truncation: {method: svt|recursive}``) has them drawn after the reservation and before
the strategy is selected (:mod:`dpmm.pipeline.threshold_stage`); the measurement then
spends the rest of the budget. Once a threshold's noise is drawn, a failure leaves the run
open like a crash: running the same config again resumes it with the same θ.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError
from dpmm.linalg.serialize import load_matrix
from dpmm.measure import measure
from dpmm.measure.exact import analyze_strategy
from dpmm.measure.quantize import QuantizedStrategy
from dpmm.measure.record import MeasurementRecord, load_measurement, record_path
from dpmm.pipeline.budget_stage import at_planned_budget
from dpmm.pipeline.ingest_stage import (
    TABLE_PLANS,
    Counts,
    check_countable,
    count_input,
    counting_plan,
)
from dpmm.pipeline.preflight import preflight
from dpmm.pipeline.reconstruct_stage import check_reconstructable, reconstruct
from dpmm.pipeline.reconstruction import Reconstruction
from dpmm.pipeline.run_state import ReleaseRun, cancel_reserved, open_run
from dpmm.pipeline.strategy_stage import ChosenStrategy, choose_strategy
from dpmm.pipeline.threshold_stage import (
    COUNT_STAGE,
    THRESHOLD_STAGE,
    apply_thresholds,
    bucket_counts,
    draw_thresholds,
    recorded_thresholds,
    threshold_manifest,
)
from dpmm.pipeline.write_stage import ReleaseInput, build_manifest, write_release
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP, privacy_from_config
from dpmm.release import ReleaseError, load_manifest, read_measurements
from dpmm.strategy.selection import Progress

if TYPE_CHECKING:
    from dpmm.report import ReportFigure

__all__ = ["MEASUREMENT_ID", "ReleaseResult", "Stage", "open_ledger", "run_release"]

log = logging.getLogger("dpmm.release")

MEASUREMENT_ID = "strategy"
#: ``stage(task name, function)`` returns the callable that runs the stage.
Stage = Callable[[str, Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True, eq=False)
class ReleaseResult:
    """A written release: its folder, run, and what an operator summary needs.

    ``figures`` are the figures of its ``report.html``, rendered (the release flow leaves
    them as artifacts).
    """

    path: Path
    release_id: str
    resumed: bool
    strategy: ChosenStrategy
    reconstruction: Reconstruction
    manifest: dict[str, Any]
    figures: tuple[ReportFigure, ...] = ()


def _direct(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    return function


def open_ledger(config: ReleaseConfig) -> Ledger:
    """The config's ledger, which must exist (``dpmm ledger init``) before a release."""
    if config.ledger.path is None:
        raise ConfigError(
            f"{config.path}: ledger.path: a release needs a budget ledger "
            "(create one with dpmm ledger init PATH and grant budget to the dataset)"
        )
    return Ledger.open(config.ledger.path)


def _abandon(run: ReleaseRun, ledger: Ledger) -> None:
    """Undo a run that failed before drawing noise: cancel its budget, remove its folder.

    A run that drew a threshold's noise stays open (its θ is persisted and spent): running
    the same config again resumes it, as after a crash.
    """
    drawn = any(ledger.status(held) != "reserved" for held in run.thresholds.values())
    if ledger.status(run.reservation) == "reserved" and not drawn:
        cancel_reserved(ledger, [*run.thresholds.values(), run.reservation])
        run.discard()
    else:
        if drawn and ledger.status(run.reservation) == "reserved":
            log.warning("a threshold was drawn; the run stays open to be resumed: %s", run.folder)
        run.close()


def _thresholds(
    config: ReleaseConfig,
    run: ReleaseRun,
    ledger: Ledger,
    stage: Stage,
    client: Any,
    rng: np.random.Generator | None,
) -> ReleaseConfig:
    """The config at its private thresholds: those the run recorded, or drawn now."""
    entries = recorded_thresholds(run)
    if entries is None:
        counts = stage(COUNT_STAGE, bucket_counts)(config, client=client)
        entries = stage(THRESHOLD_STAGE, draw_thresholds)(config, counts, run, ledger, rng=rng)
    return apply_thresholds(config, entries)


def _measure_counts(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    counts: Counts,
    run: ReleaseRun,
    ledger: Ledger,
    rng: np.random.Generator | None,
    client: Any = None,
) -> MeasurementRecord:
    x = counts.vector if counts.vector is not None else counts.tables
    return measure(
        strategy.quantized,
        x,
        config.measurement_privacy,
        store=run.measurements,
        measurement_id=MEASUREMENT_ID,
        ledger=ledger,
        reservation=run.reservation,
        rng=rng,
        client=client,
    )


def _measurement(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    run: ReleaseRun,
    ledger: Ledger,
    stage: Stage,
    client: Any,
    progress: Callable[[int, int], None] | None,
    rng: np.random.Generator | None,
) -> MeasurementRecord:
    """The run's measurement: the persisted one of a resumed run (no data is read), or
    the data counted and measured now."""
    if record_path(run.measurements, MEASUREMENT_ID).exists():
        return load_measurement(run.measurements, MEASUREMENT_ID)
    counts = stage("ingest-histogram", count_input)(
        config, strategy, client=client, progress=progress
    )
    _record_ingest(run, counts, ledger)
    measured = stage("measure-strategy", _measure_counts)
    return measured(config, strategy, counts, run, ledger, rng, client=client)


def _checked_plan(config: ReleaseConfig, progress: Progress | None = None) -> ReleaseConfig:
    """The plan's decision (made now, candidate by candidate, if the config was never
    planned), checked end to end without data before anything is reserved (for a config
    with private thresholds: at the bound its plan assumes); returns the config at the
    budget it spends (a ``least`` config's: the one its plan derived)."""
    chosen = choose_strategy(config, progress=progress)
    config = at_planned_budget(config, chosen)
    preflight(config, chosen)
    return config


def _record_ingest(run: ReleaseRun, counts: Counts, ledger: Ledger) -> None:
    """Keep what the release states about its input in the run state: the fingerprint,
    keyed with the ledger's secret (file sizes cannot be read back from it), and how it
    was read. The row counts are for the operator's terminal only."""
    report = counts.report
    keyed = hmac.new(ledger.secret(), counts.fingerprint.encode(), hashlib.sha256)
    run.update(
        ingest={"partitions": report.partitions, "seconds": round(report.seconds, 3)},
        input_fingerprint=keyed.hexdigest(),
        partitions=counts.partitions,
    )
    if report.rows_dropped:
        dropped = ", ".join(f"{n:,} for {a}" for a, n in report.dropped_by_attribute.items())
        log.warning(
            "%s of %s rows read were outside the domain and dropped (%s)",
            f"{report.rows_dropped:,}",
            f"{report.rows_read:,}",
            dropped,
        )


def run_release(
    config: ReleaseConfig,
    *,
    client: Any = None,
    progress: Callable[[int, int], None] | None = None,
    stage: Stage = _direct,
    rng: np.random.Generator | None = None,
) -> ReleaseResult:
    """Run a release end to end and write its next version.

    Args:
        config: A config with ``data`` and ``ledger.path``.
        client: A ``distributed.Client`` for ingest; None counts on local threads.
        progress: Called with ``(partitions done, total)`` during ingest.
        stage: Wraps each stage function (the Prefect flow makes each a task).
        rng: Tests only: a seeded generator for the noise. The default is the OS CSPRNG.

    Raises:
        ConfigError, DataError, BudgetExceeded, ReleaseBusy: nothing was spent and, for the
            first three, nothing was written.
    """
    check_countable(config)
    ledger = open_ledger(config)
    try:
        config = stage("plan-strategy", _checked_plan)(config)
        run = stage("reserve-budget", open_run)(config, ledger)
        try:
            if config.private_thresholds:
                config = _thresholds(config, run, ledger, stage, client, rng)
            strategy = stage("select-strategy", choose_strategy)(config, run_folder=run.folder)
            config = at_planned_budget(config, strategy)  # a resumed run's: the one it kept
            plan = counting_plan(config, strategy)
            check_reconstructable(config, strategy, plan)
            record = _measurement(config, strategy, run, ledger, stage, client, progress, rng)
        except BaseException:
            _abandon(run, ledger)  # cancels only if no noise was drawn
            raise
        state = run.state()
        result = _post_process(
            config,
            strategy,
            record,
            plan,
            stage,
            ledger,
            release_id=run.release_id,
            fingerprint=state.get("input_fingerprint", ""),
            partitions=int(state.get("partitions", 0)),
            thresholds=(
                threshold_manifest(config, state["thresholds"])
                if config.private_thresholds
                else None
            ),
        )
        run.update(state="released", release=str(result[0]))
        run.close()
        return ReleaseResult(result[0], run.release_id, run.resumed, strategy, *result[1:])
    finally:
        ledger.close()


def _post_process(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    record: MeasurementRecord,
    plan: str,
    stage: Stage,
    ledger: Ledger,
    *,
    release_id: str,
    fingerprint: str,
    partitions: int,
    reused_from: str | None = None,
    thresholds: dict[str, Any] | None = None,
) -> tuple[Path, Reconstruction, dict[str, Any], tuple[ReportFigure, ...]]:
    if plan in TABLE_PLANS:  # drawn on the workers: read here, the size of the tables
        record = record.in_memory()
    reconstruction = stage("reconstruct", reconstruct)(config, strategy, record, plan)
    manifest = build_manifest(
        config,
        strategy,
        record,
        reconstruction,
        release_id=release_id,
        input_fingerprint=fingerprint,
        partitions=partitions,
        spend=ledger.spend_entry(record.reservation_id),
        reused_from=reused_from,
        thresholds=thresholds,
    )
    release = ReleaseInput(config, strategy, record, reconstruction)
    path = stage("write-release", write_release)(release, manifest, ledger)
    return path, reconstruction, manifest, release.report[1]


def _measured(
    config: ReleaseConfig, folder: Path, manifest: dict[str, Any]
) -> tuple[ReleaseConfig, ChosenStrategy, MeasurementRecord, str]:
    """An earlier version's measurement, its strategy and counting, for ``config`` (at the
    version's private thresholds, if any)."""
    if manifest.get("domain", {}).get("attributes") != config.domain.to_dict():
        raise ConfigError(
            f"{config.path}: domain: differs from the domain of {folder}, whose measurement "
            "is being post-processed"
        )
    if config.private_thresholds:
        config = _earlier_thresholds(config, manifest.get("thresholds"), folder)
    record = read_measurements(folder / manifest["measurement"]["file"])
    if config.least is not None:  # the budget the version's plan derived, spent there
        config = config.spending(_whole_budget(manifest, record))
    integer = load_matrix(folder / manifest["strategy"]["file"])
    quantized = QuantizedStrategy(integer, int(manifest["strategy"]["quantization_scale"]))
    strategy = ChosenStrategy(
        quantized,
        manifest["strategy"]["method"],
        manifest["strategy"]["selected"],
        0.0,
        "release",
        str(manifest["strategy"].get("description", "")),
    )
    return config, strategy, record, counting_plan(config, strategy)


def _whole_budget(manifest: dict[str, Any], record: MeasurementRecord) -> PureDP | ZCDP:
    """The whole budget a version spent: as its manifest records it, else (versions written
    before it did) its thresholds' total or its measurement's."""
    recorded = manifest["config"].get("budget") or {}
    whole = recorded.get("total") or (manifest.get("thresholds") or {}).get("total_budget")
    return privacy_from_config(whole, "budget") if whole else record.privacy


def _check_measured_strategy(
    folder: Path, manifest: dict[str, Any], record: MeasurementRecord, strategy: ChosenStrategy
) -> None:
    """Refuse to post-process a measurement with any other strategy than the one it measured
    (and that the manifest describes): their fingerprints must agree.

    Raises:
        ReleaseError: the strategy file is not the measured strategy.
    """
    fingerprint = analyze_strategy(strategy.quantized.integer).fingerprint()
    if not fingerprint == manifest["strategy"]["fingerprint"] == record.strategy_fingerprint:
        raise ReleaseError(
            f"{folder}: {manifest['strategy']['file']} is not the strategy its manifest "
            "describes and its measurement was made with (their fingerprints differ)"
        )


def recompute_answers(config: ReleaseConfig, release_dir: str | Path) -> Reconstruction:
    """The answers ``config``'s post-processing gives from a version's own measurement and
    strategy: deterministic, so for the version's config they are its published answers."""
    folder = Path(release_dir)
    config, strategy, record, plan = _measured(config, folder, load_manifest(folder))
    return reconstruct(config, strategy, record, plan)


def rerun_post_processing(
    config: ReleaseConfig, release_dir: str | Path, *, stage: Stage = _direct
) -> ReleaseResult:
    """A new version from an earlier version's measurement: no data read, no budget spent.

    The config may change the workload and reconstruction; the domain must be the same.
    The new version describes its strategy as the earlier one recorded it.

    Raises:
        ConfigError: the config's domain is not the version's.
        ReleaseError: the version's strategy file is not the strategy it measured.
    """
    folder = Path(release_dir)
    manifest = load_manifest(folder)
    thresholds = manifest.get("thresholds")
    config, strategy, record, plan = _measured(config, folder, manifest)
    _check_measured_strategy(folder, manifest, record, strategy)
    with Ledger.open(manifest["ledger"]["location"]) as ledger:  # it holds the reservation
        path, reconstruction, written, figures = _post_process(
            config,
            strategy,
            record,
            plan,
            stage,
            ledger,
            release_id=manifest["release_id"],
            fingerprint=manifest["input"]["fingerprint"],
            partitions=int(manifest["input"]["partitions"]),
            reused_from=str(folder.resolve()),
            thresholds=thresholds if config.private_thresholds else None,
        )
    return ReleaseResult(
        path, manifest["release_id"], False, strategy, reconstruction, written, figures
    )


def _earlier_thresholds(
    config: ReleaseConfig, section: dict[str, Any] | None, folder: Path
) -> ReleaseConfig:
    """The config at the θ an earlier version drew (post-processing draws nothing)."""
    drawn = {entry["group"]: entry for entry in (section or {}).get("groups", [])}
    names = [config.workload[index].name for index, _ in config.private_thresholds]
    missing = [name for name in names if name not in drawn]
    if missing:
        raise ConfigError(
            f"{config.path}: workload: group {missing[0]!r} has a private truncation threshold "
            f"that {folder} did not draw; post-processing cannot choose one"
        )
    return apply_thresholds(config, drawn)
