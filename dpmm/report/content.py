"""What a plan or release report shows, gathered from what the plan or the release computed.

A report states, per query group, the expected error at the budget, its accuracy target
(what the budget gives, whether it is met, the least budget meeting it), how the error
moves with the budget, and, for a release, the first answers of each group with their
standard errors. Nothing here recomputes an error: the plan's figures
(:class:`~dpmm.plan.PlanReport`) and the release's reconstruction
(:class:`~dpmm.pipeline.reconstruction.Reconstruction`) are taken as they are, and
the error at another budget is the one at the report's budget times the square root of
the ratio of the strategy's exact noise variances (:func:`dpmm.targets.error_factor`).

A plan report is data-free. A release report holds only what the release publishes
(answers and standard errors, which are post-processing of the noisy measurement) and
public facts: nothing read from the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.measure.mechanism import NoiseModel
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.interval_stage import PlannedIntervals
from dpmm.release.catalog import shorten
from dpmm.targets import Budget, GroupTarget, budget_noise, check_targets
from dpmm.workload.labels import query_parts

if TYPE_CHECKING:  # the plan and the pipeline import this module's callers
    from dpmm.pipeline.chosen import ChosenStrategy
    from dpmm.pipeline.reconstruction import GroupAnswers, Reconstruction
    from dpmm.plan import PlanReport

__all__ = [
    "ANSWERS_SHOWN",
    "AnswerSample",
    "GroupAccuracy",
    "ReportContent",
    "plan_content",
    "release_content",
]

#: Answers a release report draws per group (the first ones, in ``answers.parquet``'s
#: order); every answer is in ``answers.parquet``.
ANSWERS_SHOWN = 40
#: Longest strategy description a report prints (the plan's JSON and the manifest have
#: it whole).
STRATEGY_SHOWN = 400


@dataclass(frozen=True)
class GroupAccuracy:
    """One query group's expected error at the report's budget.

    Attributes:
        name: The workload group.
        kind: Its kind (``marginals``, ``prefix``, ...).
        queries: How many queries it has.
        rmse: Its expected RMSE per query (None: not computed).
        svd_bound_rmse: The per-query RMSE at the SVD bound (plans only).
        identity_rmse: The Identity strategy's RMSE per query (plans only).
        mean_standard_error: The mean standard error of its answers (releases only).
        target: Its accuracy target at the budget, if it has one.
    """

    name: str
    kind: str
    queries: int
    rmse: float | None
    svd_bound_rmse: float | None = None
    identity_rmse: float | None = None
    mean_standard_error: float | None = None
    target: GroupTarget | None = None

    @property
    def squared_error(self) -> float | None:
        """The expected total squared error of the group's answers."""
        return None if self.rmse is None else self.rmse**2 * self.queries


@dataclass(frozen=True, eq=False)
class AnswerSample:
    """The first published answers of a group, with their standard errors, the half-widths
    of their published intervals (at the release's confidence level) and labels."""

    group: str
    queries: int
    labels: tuple[str, ...]
    estimates: np.ndarray
    standard_errors: np.ndarray
    half_widths: np.ndarray
    confidence: float


@dataclass(frozen=True, eq=False)
class ReportContent:
    """Everything a report draws and tabulates.

    Attributes:
        kind: ``plan`` or ``release``.
        name: The release's name.
        budget: The config's whole budget, which the errors are stated at.
        measurement: The measurement's share of it (all of it unless private truncation
            thresholds take theirs).
        groups: One entry per workload group, in workload order.
        facts: ``(label, text)`` lines for the page's header.
        thresholds: ``(group, budget)`` of each private truncation threshold.
        weights: The group weights the strategy was selected with for the targets.
        least: The least budget meeting every target (None: no target, or out of reach).
        binding: The group whose target sets ``least``.
        answers: A release's first answers per group (empty for a plan).
        noise_variance: The exact variance of one noise draw at a whole budget (None: the
            error cannot be moved along the budget).
    """

    kind: str
    name: str
    budget: Budget
    measurement: Budget
    groups: tuple[GroupAccuracy, ...]
    facts: tuple[tuple[str, str], ...] = ()
    thresholds: tuple[tuple[str, Budget], ...] = ()
    weights: dict[str, float] | None = None
    least: Budget | None = None
    binding: str | None = None
    answers: tuple[AnswerSample, ...] = ()
    noise_variance: Callable[[Budget], float] | None = field(default=None, repr=False)

    @property
    def has_targets(self) -> bool:
        """Whether any group states an accuracy target."""
        return any(group.target is not None for group in self.groups)


def _thresholds(config: ReleaseConfig | None) -> tuple[tuple[str, Budget], ...]:
    if config is None:
        return ()
    return tuple(
        (config.workload[index].name, config.threshold_privacy(choice.share))
        for index, choice in config.private_thresholds
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plan_content(report: PlanReport, config: ReleaseConfig | None = None) -> ReportContent:
    """A plan report's content: the plan's figures as they are (data-free).

    Args:
        report: The plan (:func:`dpmm.plan.plan`).
        config: Its config, for the budget shares of private truncation thresholds.
    """
    targets = {t.name: t for t in report.targets.groups} if report.targets else {}
    groups = tuple(
        GroupAccuracy(
            name=group.name,
            kind=group.kind,
            queries=group.queries,
            rmse=group.rmse,
            svd_bound_rmse=group.svd_bound_rmse,
            identity_rmse=group.identity_rmse,
            target=targets.get(group.name),
        )
        for group in report.groups
    )
    source = f"{report.config_path} (sha256 {report.config_sha256})" if report.config_path else ""
    facts = [
        ("config", source),
        ("domain", f"{len(report.domain)} attributes, {report.domain.size:,} cells"),
        ("strategy", f"{report.chosen_method or report.method} (method '{report.method}')"),
        ("described as", shorten(report.strategy_repr, STRATEGY_SHOWN)),
        ("reconstruction", report.reconstruction or "?"),
        ("planned", _now()),
    ]
    return ReportContent(
        kind="plan",
        name=report.name,
        budget=report.budget or report.privacy,
        measurement=report.privacy,
        groups=groups,
        facts=tuple((label, text) for label, text in facts if text),
        thresholds=_thresholds(config),
        weights=report.decision.weights if report.decision else None,
        least=report.targets.least if report.targets else None,
        binding=report.targets.binding if report.targets else None,
        noise_variance=report.noise_variance,
    )


def _labels(answers: GroupAnswers, count: int) -> tuple[str, ...]:
    """The labels of the group's first ``count`` queries (as ``answers.parquet`` has them)."""
    labels: list[str] = []
    for rows in query_parts(answers.group, answers.domain).rows(limit=count):
        labels += rows.labels.to_pylist()[: count - len(labels)]
        if len(labels) >= count:
            break
    return tuple(labels)


def release_content(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    reconstruction: Reconstruction,
    measured: Budget,
    *,
    release_id: str = "",
) -> ReportContent:
    """A release report's content: the release's published answers and standard errors.

    Args:
        config: The release's config (at its private thresholds, if any).
        strategy: The strategy measured.
        reconstruction: The answers and standard errors published.
        measured: The measurement's budget (its record's).
        release_id: The release's id, for the header.
    """
    # A re-run of an earlier measurement under a config whose budget differs from the
    # one measured states its errors at the budget measured.
    budget = config.privacy if config.measurement_privacy == measured else measured
    noise = NoiseModel.of(strategy.quantized)
    variance = budget_noise(noise.variance, budget, measured)
    wanted = [
        (g.name, target, g.standard_errors)
        for g in reconstruction.groups
        if (target := g.group.target) is not None
    ]
    report = None
    if wanted:
        planned = None
        if any(target.kind == "half_width" for _, target, _ in wanted):
            errors = [g.standard_errors for g in reconstruction.groups]
            plan = counting_plan(config, strategy)
            planned = PlannedIntervals(
                config, strategy, plan, config.workload, errors, stated_at=budget
            ).group
        report = check_targets(
            wanted,
            budget,
            variance,
            gaussian_constant=noise.gaussian_constant,
            half_widths=planned,
        )
    targets = {t.name: t for t in report.groups} if report else {}
    groups = tuple(
        GroupAccuracy(
            name=g.name,
            kind=g.kind,
            queries=int(g.values.size),
            rmse=g.expected_rmse if g.values.size else None,
            mean_standard_error=float(g.standard_errors.mean()) if g.values.size else None,
            target=targets.get(g.name),
        )
        for g in reconstruction.groups
    )
    answers = tuple(
        AnswerSample(
            group=g.name,
            queries=int(g.values.size),
            labels=_labels(g, min(ANSWERS_SHOWN, int(g.values.size))),
            estimates=np.array(g.values[:ANSWERS_SHOWN], dtype=np.float64),
            standard_errors=np.array(g.standard_errors[:ANSWERS_SHOWN], dtype=np.float64),
            half_widths=np.array(g.half_widths[:ANSWERS_SHOWN], dtype=np.float64),
            confidence=config.release.confidence,
        )
        for g in reconstruction.groups
        if g.values.size
    )
    facts = [
        ("config", f"{config.path.name} (sha256 {config.sha256})"),
        ("release id", release_id),
        ("domain", f"{len(config.domain)} attributes, {config.domain.size:,} cells"),
        ("strategy", f"{strategy.selected} (method '{strategy.method}')"),
        ("described as", shorten(strategy.description, STRATEGY_SHOWN)),
        ("reconstruction", f"{reconstruction.method} ({reconstruction.standard_errors})"),
        ("written", _now()),
    ]
    return ReportContent(
        kind="release",
        name=config.name,
        budget=budget,
        measurement=measured,
        groups=groups,
        facts=tuple((label, text) for label, text in facts if text),
        thresholds=_thresholds(config) if budget == config.privacy else (),
        weights=strategy.weights,
        least=report.least if report else None,
        binding=report.binding if report else None,
        answers=answers,
        noise_variance=variance,
    )
