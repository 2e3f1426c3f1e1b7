"""Counts and sums in one release: what measuring them with one strategy costs each part.

A strategy chosen for a workload of counts (people) and sums (say, dollars) minimizes one
total squared error, in which squared dollars outweigh squared people by orders of
magnitude; or its structure, chosen for the counts, answers the sums poorly. Either way
one part can end far above what a strategy for it alone reaches at the same budget.

Measured as two releases, each part with half the budget, each part's expected error is
at most 4× its own optimum under pure ε (the error scales as 1/ε²) and 2× under ρ-zCDP (as
1/ρ); the even split is the one that makes the larger of the two ratios smallest. So the
plan warns when a part's error in the joint strategy is above that, and says what the
even split gives instead. Everything here is data-free: strategies and expected errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpmm.error import expected_error
from dpmm.privacy import PrivacyParameter
from dpmm.privacy.params import PureDP
from dpmm.strategy import select_strategy
from dpmm.workload import WorkloadGroup, stack
from dpmm.workload.prefix_sum import SUM_KINDS

__all__ = ["mixing_note"]


def _half(privacy: PrivacyParameter) -> str:
    if isinstance(privacy, PureDP):
        return f"ε = {privacy.epsilon / 2}"
    return f"ρ = {privacy.rho / 2}"


def mixing_note(
    workload: Sequence[WorkloadGroup],
    privacy: PrivacyParameter,
    method: str,
    joint_errors: Sequence[float],
    budget: float = math.inf,
) -> str | None:
    """A warning when measuring sum and count groups with one strategy costs a part more
    than two releases with half the budget each would; None otherwise.

    Args:
        workload: The release's groups.
        privacy: The measurement's budget.
        method: The strategy method, run again for each part alone.
        joint_errors: Each group's expected total squared error under the joint strategy.
        budget: Each part's selection time budget, in seconds.
    """
    sums = [i for i, group in enumerate(workload) if group.kind in SUM_KINDS]
    counts = [i for i, group in enumerate(workload) if group.kind not in SUM_KINDS]
    if not sums or not counts:
        return None
    ratios = []
    for part in (sums, counts):
        W = stack([workload[i] for i in part])
        selection = select_strategy(W, method, privacy, budget=budget)
        alone = selection.chosen.error
        if alone is None:  # a named method is not scored by the selection
            alone = expected_error(W, selection.strategy, privacy)
        joint = math.fsum(joint_errors[i] for i in part)
        ratios.append(joint / alone if alone and alone > 0 else 1.0)
    even = 4.0 if isinstance(privacy, PureDP) else 2.0  # half the budget, in error
    if max(ratios) <= even:
        return None
    sums_rmse, counts_rmse = (math.sqrt(ratio) for ratio in ratios)
    return (
        f"measured with one strategy, the sums' expected RMSE is {sums_rmse:.2g}× and the "
        f"counts' {counts_rmse:.2g}× what a strategy for each part alone reaches; as two "
        f"releases with {_half(privacy)} each (sum groups in one config, count groups in "
        f"the other), neither part's would be more than {math.sqrt(even):.2g}× its own"
    )
