"""Private truncation thresholds of a release: count people per bucket, draw θ once, keep it.

A ``prefix_sum`` group with ``truncation: {method: svt|recursive, share: s}`` has its bound
θ chosen from the data (seed 003), spending ``s·ε`` of the release's budget. The pipeline
reserves that share with the measurement's budget, before any data is read
(:func:`dpmm.pipeline.run_state.open_run`). Then, before the strategy is selected:

1. :func:`bucket_counts` counts the people per bucket of each such attribute (its 1-way
   marginal over all records; with ``data.person``, over the records combined per
   person) — raw counts, held in memory only;
2. :func:`draw_thresholds` draws each θ once with the exact discrete Laplace sampler,
   marks its reservation spent right before the first draw, and writes θ to the run state
   before anything reads it. A resumed run reuses the written θ and spends nothing again;
   a run whose θ noise was drawn but not written refuses to draw it again.
3. :func:`apply_thresholds` rebuilds the groups with the public-threshold form
   ``{threshold: θ}`` (their spec keeps the method and share), so the strategy is selected
   for, and the noise calibrated to, the truncated workload.

When SVT finds no candidate (or the recursive bound reaches the top bucket), θ is the top
bucket weight: no truncation, and the manifest says so.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.data.execute import Progress
from dpmm.errors import DpmmError
from dpmm.pipeline.ingest_stage import count_tables
from dpmm.pipeline.run_state import ReleaseRun
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.sums.noise import ExactNoise, Noise
from dpmm.sums.truncation import Truncation
from dpmm.workload import WorkloadGroup, from_config

__all__ = [
    "COUNT_STAGE",
    "THRESHOLD_STAGE",
    "ThresholdNotRecorded",
    "apply_thresholds",
    "bucket_counts",
    "draw_thresholds",
    "recorded_thresholds",
    "threshold_manifest",
]

#: Task names: the counting pass (runs on the cluster) and the draw (in the flow's process).
COUNT_STAGE = "count-threshold-buckets"
THRESHOLD_STAGE = "choose-threshold"


class ThresholdNotRecorded(DpmmError):  # noqa: N818 (reads as a state)
    """A threshold's noise was drawn but θ was not written: it cannot be drawn again."""


@dataclass
class _SpendingNoise:
    """Exact noise that marks the threshold's reservation spent before the first draw."""

    inner: Noise
    ledger: Ledger
    reservation: Reservation
    exact: bool = True

    def laplace(self, scale: Fraction, size: int | tuple[int, ...]) -> np.ndarray:
        self.ledger.mark_spent(self.reservation)  # idempotent: SVT draws twice
        return self.inner.laplace(scale, size)


def _private_groups(config: ReleaseConfig) -> list[tuple[WorkloadGroup, Any]]:
    return [(config.workload[index], choice) for index, choice in config.private_thresholds]


def bucket_counts(
    config: ReleaseConfig, *, client: Any = None, progress: Progress | None = None
) -> dict[str, np.ndarray]:
    """People per bucket of every attribute a private threshold is chosen on.

    Raw counts of the data: they are passed to :func:`draw_thresholds` and never written
    or logged.

    Raises:
        ConfigError: The config has no data section.
        DataError: As for ingest (unreadable data, a bad value under ``bad_rows: reject``).
    """
    attributes = sorted({group.spec["attribute"] for group, _ in _private_groups(config)})
    counted = count_tables(
        config, [(name,) for name in attributes], client=client, progress=progress
    )
    return {name: counted.tables[(name,)] for name in attributes}


def recorded_thresholds(run: ReleaseRun) -> dict[str, dict[str, Any]] | None:
    """The run's thresholds if every one was drawn and written, else None."""
    entries = run.state().get("thresholds", {})
    if all("threshold" in entry for entry in entries.values()):
        return entries
    return None


def draw_thresholds(
    config: ReleaseConfig,
    counts: Mapping[str, np.ndarray],
    run: ReleaseRun,
    ledger: Ledger,
    *,
    rng: np.random.Generator | None = None,
) -> dict[str, dict[str, Any]]:
    """Draw each threshold not yet written, spend its reservation, and write θ at once.

    Args:
        config: The release config (as loaded: groups untruncated).
        counts: :func:`bucket_counts` of the data.
        run: The open run holding the thresholds' reservations.
        ledger: The open ledger.
        rng: Tests only: a seeded generator. The default is the OS CSPRNG.

    Returns:
        The run state's ``thresholds``: per group name, its reservation id, method, share,
        θ and whether θ came from the data (``found``) or is the top bucket weight.

    Raises:
        ThresholdNotRecorded: A threshold's reservation is already spent but θ was not
            written (the process died in between): drawing again would spend it twice.
    """
    entries = copy.deepcopy(run.state().get("thresholds", {}))
    for group, choice in _private_groups(config):
        entry = entries[group.name]
        if "threshold" in entry:
            continue
        reservation = run.thresholds[group.name]
        status = ledger.status(reservation)
        if status != "reserved":
            raise ThresholdNotRecorded(
                f"run {run.folder.name}: the truncation threshold of group {group.name!r} was "
                f"drawn (its reservation is {status}) but not recorded, so it cannot be reused "
                "or drawn again; cancel the run's measurement reservation and start a new release"
            )
        weights = np.asarray(group.spec["weights"], dtype=np.float64)
        epsilon = config.threshold_privacy(choice.share).epsilon
        noise = _SpendingNoise(ExactNoise(rng), ledger, reservation)
        truncation = Truncation(
            choice.method, choice.share, choice.ratio, choice.growth, choice.start, choice.floor,
            shift=choice.shift,
        )  # fmt: skip
        theta = truncation.select(counts[group.spec["attribute"]], weights, epsilon, noise=noise)
        # Spent even if the method needed no noise: recorded spend only errs upward.
        ledger.mark_spent(reservation)
        entry.update(
            method=choice.method,
            share=str(choice.share),
            threshold=float(weights[-1]) if theta is None else float(theta),
            found=theta is not None,
        )
        run.update(thresholds=entries)  # written before anything reads θ
    return entries


def apply_thresholds(
    config: ReleaseConfig, entries: Mapping[str, Mapping[str, Any]]
) -> ReleaseConfig:
    """The config with each private group rebuilt at its drawn θ (``{threshold: θ}``).

    The rebuilt groups' specs keep the method and share beside ``threshold``, so the
    config still knows its budget split (:attr:`ReleaseConfig.measurement_privacy`).
    """
    private = config.private_thresholds
    if not private:
        return config
    section = copy.deepcopy(config.raw["workload"])
    for index, _ in private:
        theta = entries[config.workload[index].name]["threshold"]
        section[index]["truncation"] = {"threshold": theta}
    # The targets as the config read them (their reference files are not read again).
    rebuilt = [
        dataclasses.replace(new, target=old.target)
        for new, old in zip(from_config(section, config.domain), config.workload, strict=True)
    ]
    for index, choice in private:
        group = rebuilt[index]
        spec = {**group.spec, "truncation": {**choice.to_dict(), **group.spec["truncation"]}}
        rebuilt[index] = dataclasses.replace(group, spec=spec)
    return dataclasses.replace(config, workload=tuple(rebuilt))


def threshold_manifest(
    config: ReleaseConfig, entries: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The manifest's ``thresholds`` section: the budget split and each θ (a DP output)."""
    groups = []
    for group, choice in _private_groups(config):
        entry = entries[group.name]
        found = bool(entry["found"])
        groups.append(
            {
                "group": group.name,
                "attribute": group.spec["attribute"],
                **choice.to_dict(),
                "budget": config.threshold_privacy(choice.share).to_dict(),
                "threshold": entry["threshold"],
                "found": found,
                "note": "chosen from the data"
                if found
                else f"{choice.method} chose no threshold below the top bucket weight; "
                "the top bucket weight is used (no truncation)",
                "reservation_id": entry["reservation_id"],
            }
        )
    return {
        "total_budget": config.privacy.to_dict(),
        "measurement_budget": config.measurement_privacy.to_dict(),
        "groups": groups,
    }
