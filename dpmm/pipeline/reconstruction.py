"""What a release's post-processing gives: each workload group's labelled answers, with
their standard errors and intervals, and the estimate they came from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmm.domain import Domain
from dpmm.reconstruct.choice import EXACT
from dpmm.workload import WorkloadGroup

__all__ = ["EXACT_INTERVALS", "NORMAL_INTERVALS", "GroupAnswers", "Reconstruction", "rms"]

#: ``intervals.method`` of a release: answers linear in the noise get intervals from its
#: exact distribution (or a rigorous bound, per row), others a normal approximation.
EXACT_INTERVALS = "exact noise distribution through the least-squares reconstruction"
NORMAL_INTERVALS = "normal approximation from the standard errors (no coverage guarantee)"


@dataclass(frozen=True, eq=False)
class GroupAnswers:
    """One workload group's answers: an estimate and standard error per query, and labels."""

    group: WorkloadGroup
    domain: Domain
    values: np.ndarray
    standard_errors: np.ndarray
    exact_errors: bool
    #: The strategy's expected RMSE over the group's queries under least squares (the
    #: plan's promise); None: the root mean square of ``standard_errors``.
    least_squares_rmse: float | None = None
    #: Each answer's interval half-width at the release's level (a Dask array for answers
    #: on the cluster); None until :func:`reconstruct` sets them.
    half_widths: Any = None
    #: Whether each half-width comes from the noise's exact distribution (one bool for
    #: all, or one per query), not from a bound or an approximation.
    exact_intervals: bool | np.ndarray = False

    @property
    def name(self) -> str:
        """The workload group's name."""
        return self.group.name

    @property
    def kind(self) -> str:
        """The workload group's kind."""
        return self.group.kind

    def squared_error_sum(self) -> float:
        """The sum of the squared standard errors (for answers on the cluster, whose
        least-squares standard errors have mean square ``least_squares_rmse²`` exactly,
        from that: not by gathering them)."""
        if hasattr(self.standard_errors, "dask"):
            return self.expected_rmse**2 * int(self.values.size)
        return math.fsum(np.square(self.standard_errors))

    @property
    def expected_rmse(self) -> float:
        """The group's expected RMSE under least squares, data-free: what the plan shows
        for the strategy, whatever solver the answers came from."""
        if self.least_squares_rmse is not None:
            return self.least_squares_rmse
        return rms(self.standard_errors)


@dataclass(frozen=True, eq=False)
class Reconstruction:
    """The released estimate: answers per group and, with the full vector, the histogram."""

    method: str
    groups: list[GroupAnswers]
    histogram: np.ndarray | None
    seconds: float
    #: How the standard errors were had: exact (linear estimators) or a bootstrap's.
    standard_errors: str = EXACT
    #: How the intervals were had: :data:`EXACT_INTERVALS` or :data:`NORMAL_INTERVALS`.
    intervals: str = EXACT_INTERVALS
    #: How the answers were rounded to integers (``release.output: integer``), or None.
    rounding: str | None = None


def rms(values: np.ndarray) -> float:
    """The root mean square of the values (0 for none)."""
    return float(np.sqrt(np.mean(values**2))) if values.size else 0.0
