"""Write a release version: its manifest (DESIGN §6) and files, atomically, never replacing one.

Everything written is public: noisy measurements, post-processed estimates, standard
errors from the noise scale, the strategy, the config and the report (``report.html``:
the expected errors, their targets and the answers' error bars, drawn from the same
published figures). No raw count (not even the number of input rows) reaches a release;
the input is identified only by a fingerprint of its files.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmm import __version__
from dpmm.config import ReleaseConfig
from dpmm.linalg.serialize import matrix_digest, save_matrix
from dpmm.measure.record import MeasurementRecord
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.integer_answers import INVARIANTS_STATEMENT
from dpmm.pipeline.interval_stage import PlannedIntervals
from dpmm.pipeline.reconstruct_stage import HISTOGRAM_LIMIT, wants_histogram
from dpmm.pipeline.reconstruction import Reconstruction
from dpmm.privacy.ledger import Entry, Ledger
from dpmm.release import AnswerColumns, write_answers, write_histogram, write_measurements
from dpmm.release import write_release as write_version
from dpmm.release.manifest import EXPECTED_ERROR_BASIS, measurement_sections
from dpmm.release.parts import answer_part_tasks, measurement_part_tasks, write_parts
from dpmm.workload.labels import query_parts

if TYPE_CHECKING:
    from dpmm.report import ReportContent, ReportFigure

__all__ = ["HISTOGRAM_LIMIT", "ReleaseInput", "build_manifest", "write_release"]

_SOFTWARE = ("numpy", "scipy", "pyarrow", "dask")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:  # pragma: no cover - declared dependencies
        return "unknown"


def _workload(config: ReleaseConfig) -> dict[str, Any]:
    specs = json.dumps([group.spec for group in config.workload], sort_keys=True, default=str)
    return {
        "sha256": hashlib.sha256(specs.encode()).hexdigest(),
        "groups": [
            {"name": g.name, "kind": g.kind, "queries": int(g.matrix.shape[0]), "spec": g.spec}
            for g in config.workload
        ],
    }


def build_manifest(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    record: MeasurementRecord,
    reconstruction: Reconstruction,
    *,
    release_id: str,
    input_fingerprint: str,
    partitions: int,
    spend: Entry,
    reused_from: str | None = None,
    thresholds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of a release (``version`` and ``files`` are added by the writer).

    ``spend`` is the ledger's entry that spent the measurement's budget: the manifest
    records its sequence number and hash, so a ledger rewritten before it (even with its
    key) no longer matches the releases made from it. ``thresholds`` is the section of
    private truncation thresholds (:func:`dpmm.pipeline.threshold_stage.threshold_manifest`),
    when the config has any.
    """
    integer = strategy.quantized.integer
    targets = _target_entries(config, strategy, reconstruction)
    manifest = {
        "release_id": release_id,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "file": config.path.name,
            "sha256": config.sha256,
            "document": json.loads(json.dumps(config.raw, default=str)),
            "budget": _budget(config),
        },
        "domain": {"attributes": config.domain.to_dict(), "cells": int(config.domain.size)},
        "workload": _workload(config),
        "strategy": {
            "method": strategy.method,
            "selected": strategy.selected,
            "description": strategy.description[:2000],
            "file": "strategy.npz",
            "digest": matrix_digest(integer),
            "fingerprint": record.strategy_fingerprint,
            "shape": [int(n) for n in integer.shape],
            "quantization_scale": strategy.quantized.scale,
        },
        **measurement_sections(record),
        "ledger": {
            "location": str(Path(config.ledger.path).resolve()),
            "dataset": config.ledger.dataset,
            "reservation_id": record.reservation_id,
            "release_id": record.release_id,
            "reused_from": reused_from,
            "spend": {"seq": spend.seq, "hash": spend.hash},
        },
        "reconstruction": {
            "method": reconstruction.method,
            "standard_errors": reconstruction.standard_errors,
            "seconds": round(reconstruction.seconds, 3),
            **_output_entry(reconstruction),
        },
        "intervals": {
            "level": config.release.confidence,
            "method": reconstruction.intervals,
            "exact_share": _exact_share(reconstruction),
        },
        "error": {
            "basis": EXPECTED_ERROR_BASIS,
            "groups": [
                {
                    "name": g.name,
                    "queries": int(g.values.size),
                    "expected_rmse": g.expected_rmse,
                    "mean_standard_error": float(g.standard_errors.mean())
                    if g.values.size
                    else 0.0,
                    "exact": g.exact_errors,
                    **target,
                }
                for g, target in zip(reconstruction.groups, targets, strict=True)
            ],
        },
        "input": {"fingerprint": input_fingerprint, "partitions": partitions},
        "software": {
            "python": platform.python_version(),
            "dpmm": __version__,
            **{package: _version(package) for package in _SOFTWARE},
        },
    }
    if thresholds is not None:
        manifest["thresholds"] = thresholds
    if config.invariants:
        manifest["invariants"] = {
            **config.invariants.to_dict(),
            "statement": INVARIANTS_STATEMENT,
        }
    return manifest


def _budget(config: ReleaseConfig) -> dict[str, Any]:
    """The whole budget the release spent, and whether its plan derived it from the targets
    (``privacy: {epsilon: least}``) under a cap."""
    cap = config.least.cap if config.least else None
    return {
        "total": config.privacy.to_dict(),
        "derived_from_targets": config.least is not None,
        "at_most": cap.to_dict() if cap else None,
    }


def _exact_share(reconstruction: Reconstruction) -> float:
    """The share of answers whose interval comes from the noise's exact distribution (a
    fact of the strategy, the workload and the noise: no data)."""
    total = sum(int(g.values.size) for g in reconstruction.groups)
    exact = sum(
        float(np.sum(np.broadcast_to(g.exact_intervals, (int(g.values.size),))))
        for g in reconstruction.groups
    )
    return exact / total if total else 1.0


def _output_entry(reconstruction: Reconstruction) -> dict[str, Any]:
    """Integer output: what was rounded, how (absent for real-valued answers)."""
    if reconstruction.rounding is None:
        return {}
    return {"output": "integer", "rounding": reconstruction.rounding}


def _target_entries(
    config: ReleaseConfig, strategy: ChosenStrategy, reconstruction: Reconstruction
) -> list[dict[str, Any]]:
    """Each group's accuracy target and whether its published answers meet it: a
    ``half_width`` target by the published half-widths (computed the same way at the
    target's level, when it is not ``release.confidence``)."""
    planned = None
    entries = []
    for answers in reconstruction.groups:
        target = answers.group.target
        if target is None:
            entries.append({})
            continue
        errors = answers.standard_errors  # a Dask array on the cluster: reduced there
        widths = None
        if target.kind == "half_width" and answers.half_widths is not None:
            widths = answers.half_widths
            if target.confidence != config.release.confidence:
                if planned is None:
                    plan = counting_plan(config, strategy)
                    every = [g.standard_errors for g in reconstruction.groups]
                    planned = PlannedIntervals(config, strategy, plan, config.workload, every)
                widths = planned.group(answers.name, float(target.confidence), config.privacy)
        figure = target.figure(errors, widths)
        met = figure <= target.value
        entries.append({"target": target.to_dict(), "target_figure": figure, "target_met": met})
    return entries


@dataclass(frozen=True, eq=False)
class ReleaseInput:
    """What a release version is made of; :func:`write_release` writes it."""

    config: ReleaseConfig
    strategy: ChosenStrategy
    record: MeasurementRecord
    reconstruction: Reconstruction

    @cached_property
    def report(self) -> tuple[ReportContent, tuple[ReportFigure, ...]]:
        """The release report's content and figures (rendered once: the release flow
        leaves the same figures as artifacts)."""
        from dpmm.report import release_content, report_figures  # matplotlib, when written

        content = release_content(
            self.config,
            self.strategy,
            self.reconstruction,
            self.record.privacy,
            release_id=self.record.release_id,
        )
        return content, report_figures(content)

    def write_files(self, folder: Path) -> None:
        """Write answers, measurements, strategy, the report and (where allowed) the
        histogram."""
        save_matrix(self.strategy.quantized.integer, folder / "strategy.npz")
        if self.record.chunks is not None:
            self._write_parts(folder)
        else:
            self._write_tables(folder)
        from dpmm.report import REPORT_NAME, write_report

        write_report(folder / REPORT_NAME, *self.report)

    def _write_tables(self, folder: Path) -> None:
        """Answers, measurements and (where allowed) the histogram as one file each."""
        parts = [
            AnswerColumns.for_group(
                g.name,
                g.values,
                g.standard_errors,
                exact=g.exact_errors,
                half_width=g.half_widths,
                exact_interval=g.exact_intervals,
                labels=query_parts(g.group, g.domain),
            )
            for g in self.reconstruction.groups
        ]
        write_answers(folder / "answers.parquet", parts, self.config.domain.attributes)
        write_measurements(folder / "measurements.parquet", self.record)
        histogram = self.reconstruction.histogram
        if histogram is not None and wants_histogram(self.config):
            write_histogram(folder / "histogram.parquet", histogram)

    def _write_parts(self, folder: Path) -> None:
        """A measurement drawn on the cluster: answers and measurements as folders of
        parts, each written by the task that computes it (:mod:`dpmm.release.parts`)."""
        attributes = self.config.domain.attributes
        answers = [
            task
            for number, g in enumerate(self.reconstruction.groups)
            for task in answer_part_tasks(
                folder / "answers.parquet",
                number,
                g.name,
                g.values,
                g.standard_errors,
                g.exact_errors,
                g.half_widths,
                g.exact_intervals,
                query_parts(g.group, g.domain),
                attributes,
            )
        ]
        write_parts(folder / "answers.parquet", answers)
        measurements = folder / "measurements.parquet"
        write_parts(measurements, measurement_part_tasks(measurements, self.record))


def write_release(release: ReleaseInput, manifest: dict[str, Any], ledger: Ledger) -> Path:
    """Write the next version of the release, its manifest's sha256 recorded in ``ledger``
    under the measurement's reservation before the version appears; returns its folder."""
    config = release.config

    def publish(digest: str) -> None:
        ledger.publish(release.record.reservation_id, digest)

    return write_version(config.release.root, config.name, manifest, release.write_files, publish)
