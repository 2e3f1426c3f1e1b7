"""The plan stage: pick the strategy for a release and report its expected error, per query group.

Planning reads only the configuration (public facts): it builds the workload
``W`` (the config's groups stacked), asks :func:`dpmm.strategy.optimize` for
the strategy ``A``, and for each group computes, exactly (DESIGN.md §4):

* the expected total squared error of answering the group through ``A``
  (least-squares reconstruction), and the RMSE per query ``√(error / queries)``,
  with the exact variance of the discrete noise the release will add (what its
  manifest and standard errors state);
* the SVD bound of the group on its own, the least total squared error any
  strategy built for that group alone could reach under Gaussian noise (a lower
  bound under Laplace noise);
* the error of the Identity strategy (one noisy count per cell, discrete noise).

Errors add up over groups (the trace of ``W (AᵀA)⁺ Wᵀ`` is a sum over rows),
so the totals are the sums; the SVD bound of the whole workload is computed on
the stacked ``W`` where that is cheap (its singular values have structure, or
a dense Gram at most :data:`DENSE_BOUND_CELLS` wide gives them), and is otherwise
the sum of the groups' bounds, also a floor for the total, with a note: a dense
eigendecomposition of a 4,096-cell Gram takes longer than most selections. No
data is read and no budget is spent.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.config import load_config
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ages.yaml"
    >>> _ = path.write_text(
    ...     "name: ages\\n"
    ...     "domain: {age: 16}\\n"
    ...     "privacy: {epsilon: 1}\\n"
    ...     "workload: [{name: cdf, kind: prefix, attribute: age}]\\n"
    ...     "strategy: {method: identity}\\n"
    ... )
    >>> report = plan(load_config(path))
    >>> report.strategy_repr   # errors use the discrete Laplace's variance 2e/(e - 1)²
    'Identity(16)'
    >>> round(report.total.total_squared_error, 4)   # 1.8413 · (1 + 2 + … + 16)
    250.4232
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dpmm import __version__
from dpmm.blas_threads import blas_limit
from dpmm.config import ReleaseConfig
from dpmm.domain import Domain
from dpmm.error import identity_error, svd_bound
from dpmm.errors import ConfigError, TooLargeError, UnsupportedQueryError
from dpmm.linalg import Identity, Matrix
from dpmm.linalg.serialize import matrix_digest
from dpmm.measure.exact import MeasurementError
from dpmm.measure.mechanism import planned_noise_variance
from dpmm.measure.quantize import QuantizedStrategy
from dpmm.mixed_units import mixing_note
from dpmm.pipeline.budget_stage import derive_budget, noise_variance, target_report
from dpmm.pipeline.preflight import Footprint, preflight
from dpmm.pipeline.reconstruct_stage import solver
from dpmm.pipeline.strategy_stage import (
    ChosenStrategy,
    save_decision,
    select_for_config,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.privacy.params import LeastBudget
from dpmm.release.catalog import shorten
from dpmm.release.manifest import EXPECTED_ERROR_BASIS
from dpmm.strategy import Candidate
from dpmm.strategy.selection import Progress
from dpmm.targets import Budget, TargetReport
from dpmm.workload import WorkloadGroup, stack
from dpmm.workload.prefix_sum import SUM_KINDS

__all__ = ["GroupReport", "PlanReport", "plan"]

logger = logging.getLogger("dpmm.plan")

#: Errors that leave one figure out of the report instead of failing the plan.
UNAVAILABLE = (TooLargeError, UnsupportedQueryError)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _root_mean(total: float | None, queries: int) -> float | None:
    if total is None or queries <= 0:
        return None
    return math.sqrt(total / queries)


def _finite(value: float | None) -> float | None:
    """JSON has no infinity or NaN; a figure that is not finite is left out."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class GroupReport:
    """The expected error of one query group (or of the whole workload, on the total row).

    Figures that could not be computed (the matrix is too large for the dense
    fallback the figure needs) are ``None``; ``notes`` says why.
    """

    name: str
    kind: str
    queries: int
    total_squared_error: float | None
    svd_bound: float | None
    identity_error: float | None
    seconds: float
    notes: tuple[str, ...] = ()

    @property
    def rmse(self) -> float | None:
        """Root mean squared error per query."""
        return _root_mean(self.total_squared_error, self.queries)

    @property
    def svd_bound_rmse(self) -> float | None:
        """``√(svd_bound / queries)``: the per-query RMSE at the SVD bound."""
        return _root_mean(self.svd_bound, self.queries)

    @property
    def identity_rmse(self) -> float | None:
        """Root mean squared error per query of the Identity strategy."""
        return _root_mean(self.identity_error, self.queries)

    @property
    def ratio_to_identity(self) -> float | None:
        """``rmse / identity_rmse``: below 1 where the strategy beats Identity."""
        return _ratio(self.rmse, self.identity_rmse)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; missing figures are ``None``."""
        return {
            "name": self.name,
            "kind": self.kind,
            "queries": self.queries,
            "total_squared_error": _finite(self.total_squared_error),
            "rmse": _finite(self.rmse),
            "svd_bound": _finite(self.svd_bound),
            "svd_bound_rmse": _finite(self.svd_bound_rmse),
            "identity_error": _finite(self.identity_error),
            "identity_rmse": _finite(self.identity_rmse),
            "ratio_to_identity": _finite(self.ratio_to_identity),
            "seconds": self.seconds,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class PlanReport:
    """What a release would cost in accuracy: the chosen strategy and the error per group.

    ``strategy`` is the quantized strategy a release measures; ``strategy_digest`` and
    ``quantization_scale`` are the ones its manifest will show.

    ``total`` is the row for the whole workload; its ``seconds`` is the whole
    plan's time, strategy selection included.
    """

    name: str
    domain: Domain
    privacy: PureDP | ZCDP
    method: str
    strategy: Matrix
    strategy_seconds: float
    groups: tuple[GroupReport, ...]
    total: GroupReport
    chosen_method: str = ""
    candidates: tuple[Candidate, ...] = ()
    strategy_digest: str = ""
    quantization_scale: int = 1
    decision: ChosenStrategy | None = None
    config_path: str | None = None
    config_sha256: str | None = None
    footprint: Footprint | None = None
    counting: str = ""
    reconstruction: str = ""
    #: How the release rounds its answers to integer counts (``release.output: integer``).
    rounding: str = ""
    targets: TargetReport | None = None
    #: The config asked for the least budget meeting its targets (at most its cap): then
    #: ``budget`` is that one, derived by this plan and spent by the release.
    least: LeastBudget | None = None
    #: The config's whole budget (``privacy`` is the measurement's share of it, the same
    #: unless private thresholds take theirs).
    budget: PureDP | ZCDP | None = None
    #: The exact variance of one noise draw of ``strategy`` at a whole budget: every
    #: group's error at another budget scales with its square root (data-free).
    noise_variance: Callable[[Budget], float] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def strategy_repr(self) -> str:
        """The strategy's description, e.g. ``Hierarchical(64, b=8)``: as selected, before
        its quantization, the one every release of this plan records."""
        return self.decision.description if self.decision else repr(self.strategy)

    @property
    def seconds(self) -> float:
        """Wall time of the whole plan."""
        return self.total.seconds

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready object: the totals at the top level, one entry per group in ``groups``.

        ``domain_size`` is an exact integer (it may exceed 2⁶³; Python's JSON keeps it).
        """
        totals = self.total.to_dict()
        for key in ("name", "kind", "seconds", "notes"):
            totals.pop(key)
        return {
            "name": self.name,
            "config": self.config_path,
            "config_sha256": self.config_sha256,
            "dpmm_version": __version__,
            "domain": self.domain.to_dict(),
            "domain_size": self.domain.size,
            "privacy": self.privacy.to_dict(),
            "method": self.method,
            "chosen_method": self.chosen_method,
            "strategy": self.strategy_repr,
            "strategy_shape": list(self.strategy.shape),
            "strategy_digest": self.strategy_digest,
            "quantization_scale": self.quantization_scale,
            "strategy_seconds": self.strategy_seconds,
            "expected_error_basis": EXPECTED_ERROR_BASIS,
            "counting": self.counting or None,
            "reconstruction": self.reconstruction or None,
            "rounding": self.rounding or None,
            **(self.footprint.to_dict() if self.footprint else {}),
            **totals,
            "seconds": self.seconds,
            "notes": list(self.total.notes),
            "groups": [group.to_dict() for group in self.groups],
            "candidates": [candidate.to_dict() for candidate in self.candidates],
            "targets": self.targets.to_dict() if self.targets else None,
            "budget": self.budget.to_dict() if self.budget else None,
            "budget_derived_from_targets": self.least is not None,
            "budget_at_most": self.least.cap.to_dict() if self.least and self.least.cap else None,
            "target_weights": self.decision.weights if self.decision else None,
        }


def _figure(what: str, where: str, compute: Callable[[], float], notes: list[str]) -> float | None:
    """``compute()``, or ``None`` with a note when the matrices are too large for it."""
    try:
        return compute()
    except UNAVAILABLE as error:
        note = f"{what}: {error}"
        logger.warning("%s: %s not computed: %s", where, what, error)
        notes.append(note)
        return None


def _group_report(
    group: WorkloadGroup, privacy: PureDP | ZCDP, identity: float | None, error: float
) -> GroupReport:
    """The group's figures: ``error`` is its expected error as the release computes it, and
    ``identity`` the exact noise variance the release adds to one count of the Identity
    strategy (None: that of the continuous noise)."""
    start = time.perf_counter()
    W = group.matrix
    notes: list[str] = []
    where = f"group '{group.name}'"
    bound = _figure("SVD bound", where, lambda: svd_bound(W, privacy), notes)
    baseline = _figure(
        "identity error", where, lambda: identity_error(W, privacy, variance=identity), notes
    )
    seconds = time.perf_counter() - start
    logger.info("%s: %d queries, figures in %.2f s", where, W.shape[0], seconds)
    return GroupReport(
        name=group.name,
        kind=group.kind,
        queries=W.shape[0],
        total_squared_error=error,
        svd_bound=bound,
        identity_error=baseline,
        seconds=seconds,
        notes=tuple(notes),
    )


#: Widest Gram whose dense eigendecomposition the plan does for the whole workload's SVD
#: bound (about a second; 4,096 cells took 2.8 s on a quiet 2-core machine, more than the
#: selection on the ranges-1d example).
DENSE_BOUND_CELLS = 2048


def _whole_bound(
    W: Matrix, privacy: PureDP | ZCDP, reports: Sequence[GroupReport]
) -> tuple[float | None, str | None]:
    """The whole workload's SVD bound, or the sum of the groups' where it is costly, with
    a note saying which."""
    try:
        return svd_bound(W, privacy, dense_limit=DENSE_BOUND_CELLS**2), None
    except TooLargeError:  # its message describes the solver's reduced workload
        why = (
            "the whole workload's singular values need a dense Gram wider than "
            f"{DENSE_BOUND_CELLS:,} columns or rows"
        )
    except UNAVAILABLE as error:
        why = str(error)
    total = _sum([r.svd_bound for r in reports])
    if total is None:
        return None, f"whole workload: SVD bound: {why}"
    return total, f"SVD bound of the total: the sum of the groups' bounds ({why})"


def _binning_note(group: WorkloadGroup) -> str:
    """What a sum group's bucket valuation may cost each answer, besides its noise."""
    spec = group.spec
    capped = " capped at θ" if "truncation" in spec else ""
    return (
        f"group '{group.name}': each record is counted at its bucket's {spec['valuation']}, "
        f"at most {spec['value_error_bound']:,.6g} from its own value{capped}; an answer may "
        "be off by that much per record it adds up, besides its noise"
    )


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(value is None for value in values) else math.fsum(values)


def plan(config: ReleaseConfig, *, progress: Progress | None = None) -> PlanReport:
    """Plan a release: its strategy and expected error per query group. Touches no data.

    The release's post-processing is run on a planned, data-free measurement
    (:func:`~dpmm.pipeline.preflight.preflight`), so every group's expected error is the
    one the release's manifest will state, and a release that could not finish is refused
    now. The decision (the quantized strategy) is saved in the release's plan folder,
    which ``dpmm release`` executes as long as the config is unchanged.

    Args:
        config: A configuration from :func:`dpmm.config.load_config`.
        progress: Called as the strategy selection goes, with ``(candidates done,
            candidates, the one being tried and the best so far)``.

    Raises:
        ConfigError: The configured strategy method cannot build a strategy for this
            workload, or its release would be refused or could not finish (the message
            names the file and the reason).
    """
    # One decision of the BLAS threads for the whole plan (selection, the data-free
    # reconstruction, the SVD bounds): the stages inside reuse it.
    with blas_limit():
        return _plan(config, progress)


def _plan(config: ReleaseConfig, progress: Progress | None) -> PlanReport:
    started = time.perf_counter()
    name, privacy, W = config.name, config.measurement_privacy, stack(list(config.workload))
    logger.info(
        "%s: %d groups, %s queries over %s cells; selecting a strategy (%s)",
        name,
        len(config.workload),
        f"{W.shape[0]:,}",
        f"{config.domain.size:,}",
        config.strategy_method,
    )
    chosen, selection = select_for_config(config, progress=progress)
    derived = None
    if config.least is not None:  # the least budget meeting the targets, spent by the release
        budget, derived = derive_budget(config, chosen)
        chosen = replace(chosen, budget=budget)
        config = config.spending(budget)
        privacy = config.measurement_privacy
    checked = preflight(config, chosen)
    variance = noise_variance(config, chosen)
    targets = target_report(
        config, chosen, checked.reconstruction.groups, variance, checked.counting
    )
    if derived is not None and targets is not None:  # the least and what binds, as derived
        targets = replace(targets, least=derived.least, binding=derived.binding)
    # Each group's expected error as the release computes it.
    errors = [group.squared_error_sum() for group in checked.reconstruction.groups]
    A = chosen.quantized.matrix  # what the release measures and reconstructs with
    # The exact discrete noise an identity release's record would state (the continuous
    # noise's where the samplers could not draw an identity release's).
    try:
        identity = planned_noise_variance(QuantizedStrategy(Identity(1), 1), privacy)
    except MeasurementError:
        identity = None
    strategy_seconds = time.perf_counter() - started
    described = shorten(chosen.description, 120)
    logger.info("%s: strategy %s selected in %.2f s", name, described, strategy_seconds)
    reports = tuple(
        _group_report(group, privacy, identity, error)
        for group, error in zip(config.workload, errors, strict=True)
    )
    notes = [f"group '{r.name}': {note}" for r in reports for note in r.notes]
    if len(reports) == 1:
        bound = reports[0].svd_bound
    else:
        bound, note = _whole_bound(W, privacy, reports)
        notes += [note] if note else []
    notes += [
        f"group '{config.workload[index].name}': θ is chosen from the data by "
        f"{choice.method} with {choice.share} of ε when released; this plan bounds a record "
        "by the top bucket weight and uses the remaining ε"
        for index, choice in config.private_thresholds
    ]
    notes += [_binning_note(group) for group in config.workload if group.kind in SUM_KINDS]
    mixed = mixing_note(
        config.workload, privacy, config.strategy_method, errors, config.strategy_time_budget
    )
    notes += [mixed] if mixed else []
    total = GroupReport(
        name="total",
        kind="",
        queries=W.shape[0],
        total_squared_error=math.fsum(errors),
        svd_bound=bound,
        identity_error=_sum([r.identity_error for r in reports]),
        seconds=time.perf_counter() - started,
        notes=tuple(notes),
    )
    logger.info("%s: planned in %.2f s", name, total.seconds)
    try:
        save_decision(config, chosen)
    except OSError as error:
        raise ConfigError(
            f"{config.path}: release.root: the plan's decision cannot be saved under "
            f"{config.release.root} ({error.strerror or error})"
        ) from error
    return PlanReport(
        name=name,
        domain=config.domain,
        privacy=privacy,
        method=config.strategy_method,
        strategy=A,
        strategy_seconds=strategy_seconds,
        groups=reports,
        total=total,
        chosen_method=chosen.selected,
        candidates=selection.candidates,
        strategy_digest=matrix_digest(chosen.quantized.integer),
        quantization_scale=chosen.quantized.scale,
        decision=chosen,
        config_path=str(config.path),
        config_sha256=config.sha256,
        footprint=checked.footprint,
        counting=checked.counting,
        reconstruction=solver(config, checked.counting),
        rounding=checked.reconstruction.rounding or "",
        targets=targets,
        least=config.least,
        budget=config.privacy,
        noise_variance=variance,
    )
