"""The budget a release spends: the config's own, or the least that meets its targets.

A config may give its budget (``privacy: {epsilon: 1}``) or ask for the least budget that
meets its groups' accuracy targets, at most a cap (``privacy: {epsilon: least, at_most:
2}``). Then the plan selects the strategy at the cap (or at 1), runs the release's
data-free post-processing there, and :func:`derive_budget` moves every standard error
along the budget (:func:`dpmm.targets.check_targets`) to the least budget meeting every
target, an exact rational rounded toward more noise. That budget is part of the plan's
decision (:attr:`ChosenStrategy.budget`, saved with the strategy): ``dpmm release``
reserves exactly it, with the same strategy and weights, and refuses before touching the
ledger when no budget the samplers can draw meets the targets or the least exceeds the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError
from dpmm.measure.mechanism import NoiseModel
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.interval_stage import PlannedIntervals
from dpmm.pipeline.preflight import preflight
from dpmm.pipeline.reconstruction import GroupAnswers
from dpmm.privacy.params import KINDS, PureDP, amount_text
from dpmm.targets import Budget, TargetReport, budget_noise, check_targets, least_budget_text
from dpmm.workload.labels import query_parts

__all__ = ["at_planned_budget", "derive_budget", "noise_variance", "target_report"]


def noise_variance(config: ReleaseConfig, chosen: ChosenStrategy) -> Callable[[Budget], float]:
    """The exact variance of one noise draw of the chosen strategy at a whole budget (with
    private thresholds, the measurement keeps its share of it)."""
    noise = NoiseModel.of(chosen.quantized)
    return budget_noise(noise.variance, config.privacy, config.measurement_privacy)


def target_report(
    config: ReleaseConfig,
    chosen: ChosenStrategy,
    answers: Sequence[GroupAnswers],
    variance: Callable[[Budget], float],
    counting: str,
) -> TargetReport | None:
    """The groups' accuracy targets at the config's budget and the least budget meeting
    them (for the whole budget: with private thresholds, their shares come first), each
    group's binding query named by its label (public: made from the config alone);
    ``half_width`` targets judged by the half-widths a release counting its input by
    ``counting`` publishes (:class:`~dpmm.pipeline.interval_stage.PlannedIntervals`)."""
    wanted = [
        (group.name, group.target, a.standard_errors)
        for group, a in zip(config.workload, answers, strict=True)
        if group.target is not None
    ]
    if not wanted:
        return None
    groups = {group.name: group for group in config.workload}

    def label(name: str, index: int) -> str:
        (found,) = query_parts(groups[name], config.domain).between(index, index + 1).labels()
        return found

    constant = NoiseModel.of(chosen.quantized).gaussian_constant
    planned = None
    if any(group.target.kind == "half_width" for group in config.workload if group.target):
        errors = [a.standard_errors for a in answers]
        planned = PlannedIntervals(config, chosen, counting, config.workload, errors).group
    return check_targets(
        wanted,
        config.privacy,
        variance,
        gaussian_constant=constant,
        label=label,
        half_widths=planned,
    )


def _amount(budget: Budget) -> object:
    return budget.epsilon if isinstance(budget, PureDP) else budget.rho


def derive_budget(config: ReleaseConfig, chosen: ChosenStrategy) -> tuple[Budget, TargetReport]:
    """The least budget meeting every target of a ``least`` config with ``chosen``, and the
    targets' report at the budget the config is planned at.

    Raises:
        ConfigError: no budget the samplers can draw meets every target, or the least one
            is more than the config's cap (one sentence naming the key).
    """
    least = config.least
    if least is None:
        raise ConfigError(f"{config.path}: privacy: the config gives its budget")
    checked = preflight(config, chosen)
    variance = noise_variance(config, chosen)
    report = target_report(
        config, chosen, checked.reconstruction.groups, variance, checked.counting
    )
    key = f"privacy.{KINDS[least.kind].parameter}"
    if report is None or report.least is None:
        out = [g.name for g in report.groups if g.needed is None] if report else []
        raise ConfigError(
            f"{config.path}: {key}: no budget the samplers can draw meets the target of group "
            f"'{out[0] if out else '?'}' with this strategy; relax the target"
        )
    if least.cap is not None and _amount(report.least) > _amount(least.cap):
        cap = amount_text(least.kind, _amount(least.cap))
        raise ConfigError(
            f"{config.path}: privacy.at_most: the targets need {least_budget_text(report.least)}"
            f" (binding: {report.binding_text()}), more than the cap {cap}; relax the targets "
            "or raise the cap"
        )
    return report.least, report


def at_planned_budget(config: ReleaseConfig, chosen: ChosenStrategy) -> ReleaseConfig:
    """The config at the budget it spends: its own, or the one its plan derived.

    Raises:
        ConfigError: a ``least`` config whose decision holds no derived budget.
    """
    if config.least is None:
        return config
    if chosen.budget is None:
        raise ConfigError(
            f"{config.path}: privacy: the least budget meeting the targets was not derived; "
            f"plan the release first: dpmm plan {config.path}"
        )
    return config.spending(chosen.budget)


def with_budget(config: ReleaseConfig, chosen: ChosenStrategy) -> ChosenStrategy:
    """``chosen`` with the budget a ``least`` config spends: the one already derived for it
    (a run's, after private thresholds), or derived now."""
    if config.least is None or chosen.budget is not None:
        return chosen
    budget = config.privacy if config.budget_derived else derive_budget(config, chosen)[0]
    return replace(chosen, budget=budget)
