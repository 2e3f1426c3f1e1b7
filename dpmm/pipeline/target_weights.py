"""Strategy selection for accuracy targets: group weights that spend the budget where a
target binds.

With accuracy targets the budget a release needs is set by the group furthest from its
target: ``max_g rmse_g / target_g`` (every error scales with the noise, so the least ε is
proportional to it, the least ρ to its square). The plain selection minimizes the total
error, which can over-serve one group while another binds. Here the selection runs on the
workload with each targeted group's queries weighted (HDMM's weighted workloads):
multiplicative updates raise the weight of the groups furthest from their targets (a single
targeted group's doubles each round, against the groups without a target), for at most
:data:`ROUNDS` selections, the plain one first (the later ones with the plain one's winning
method only: :func:`~dpmm.pipeline.strategy_stage.select_for_config`); the strategy with the least
``max_g rmse_g / target_g`` is kept, so targets never make a plan worse than the plain
one by this measure. Groups without a target keep weight 1.

Each round's strategy is judged by the figures the plan states for it (its data-free
release: RMSE, or the largest half-width it publishes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dpmm.errors import ConfigError
from dpmm.linalg import Matrix
from dpmm.strategy.selection import Selection
from dpmm.workload import WorkloadGroup, stack
from dpmm.workload.builders import weighted

__all__ = ["ROUNDS", "TargetWeights", "select_for_targets"]

#: Selections in all: the plain one, then weighted ones.
ROUNDS = 4

#: A selection on a workload: the strategy chosen and the selection.
Select = Callable[[Matrix], tuple[object, Selection]]
#: Per targeted group, its figure over its target for a chosen strategy (the plan's own).
Ratios = Callable[[object], dict[str, float]]


@dataclass(frozen=True)
class TargetWeights:
    """The group weights the kept strategy was selected with.

    Attributes:
        weights: Per targeted group, the weight of its queries (1: the plain selection).
        round: Which of the rounds gave it (0: the plain selection).
        ratios: Per targeted group, its figure over its target.
    """

    weights: dict[str, float]
    round: int
    ratios: dict[str, float]

    @property
    def worst(self) -> float:
        """The largest ratio: what the least budget is proportional to."""
        return max(self.ratios.values(), default=0.0)


def select_for_targets(
    workload: Sequence[WorkloadGroup], select: Select, ratios_of: Ratios
) -> tuple[object, Selection, TargetWeights]:
    """The strategy of :data:`ROUNDS` selections whose worst ratio of figure to target is
    least, its selection, and the weights it was selected with.

    Args:
        workload: The groups, some with a ``target``.
        select: Selects a strategy for a (weighted) stacked workload.
        ratios_of: The targeted groups' figures over their targets for a chosen strategy.

    Raises:
        ConfigError: the plain selection's strategy cannot be released.
    """
    weights: dict[str, float] = {}
    kept: tuple[object, Selection, TargetWeights] | None = None
    for round_ in range(ROUNDS):
        groups = [
            replace(g, matrix=weighted(weights[g.name], g.matrix))
            if weights.get(g.name, 1.0) != 1.0
            else g
            for g in workload
        ]
        chosen, selection = select(stack(groups))
        try:
            ratios = ratios_of(chosen)
        except ConfigError:
            if kept is None:
                raise
            continue  # a weighted round's strategy the release could not run: not kept
        found = TargetWeights(dict(weights) or dict.fromkeys(ratios, 1.0), round_, ratios)
        if kept is None or found.worst < kept[2].worst:
            kept = (chosen, selection, found)
        # The furthest from its target weighs more: its error falls about as 1/weight.
        mean = float(np.exp(np.mean(np.log(list(ratios.values())))))
        following = {name: found.weights[name] * ratios[name] / mean for name in ratios}
        if len(ratios) == 1 and len(workload) > 1:
            # One target: nothing to balance it against but the groups without one.
            following = {name: 2.0 * weight for name, weight in found.weights.items()}
        if following == found.weights:
            break  # the same weights again: the same selection
        weights = following
    return kept  # type: ignore[return-value]  # the first round always sets it
