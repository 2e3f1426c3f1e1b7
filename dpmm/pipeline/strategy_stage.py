"""Select a release's strategy from its config alone, and keep the plan's decision.

Selection reads no data and spends nothing. ``dpmm plan`` saves its decision (the
quantized strategy it chose) in the release's plan folder, ``<root>/<name>/.plan/``,
with the facts it was made from: the config file's sha256, the domain and dpmm's
version. A release loads that decision instead of selecting again, and refuses to start
when any of those facts changed since (the plan a person reviewed is the release that
runs); a config that was never planned is planned by its first release with the same
rule. A run keeps its own copy: a resumed run measures exactly the strategy it selected.

What is stored is the quantized strategy, the integer matrix that is measured and its
power-of-two scale, never the real-valued one: every later use (plan, resume, re-run)
measures and reconstructs with exactly the grid that was chosen when it was selected,
instead of deriving a grid again.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpmm import __version__
from dpmm.blas_threads import blas_limit
from dpmm.config import ReleaseConfig
from dpmm.durable import atomic_write
from dpmm.error import expected_error
from dpmm.errors import ConfigError, DpmmError, PrivacyParameterError
from dpmm.linalg import Marginals, Matrix
from dpmm.linalg.chunked_kron import axis_factors
from dpmm.linalg.kron import factor_gram_pinv
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.serialize import SerializationError, load_matrix, matrix_digest, save_matrix
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.exact import MeasurementError
from dpmm.measure.mechanism import planned_noise_variance
from dpmm.measure.quantize import QuantizedStrategy, measurable
from dpmm.pipeline.budget_stage import with_budget
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.ingest_stage import VECTOR_LIMIT
from dpmm.pipeline.interval_stage import PlannedIntervals
from dpmm.pipeline.preflight import check_answers_fit, preflight
from dpmm.pipeline.target_weights import select_for_targets
from dpmm.privacy.params import PrivacyParameter, privacy_from_config
from dpmm.strategy import AUTO_CANDIDATES, METHODS, select_strategy
from dpmm.strategy.selection import Candidate, Progress, Selection, select
from dpmm.workload import stack

__all__ = [
    "TABLE_METHODS",
    "VECTOR_LIMIT",
    "ChosenStrategy",
    "choose_strategy",
    "plan_folder",
    "planned_strategy",
    "save_decision",
    "select_for_config",
    "select_releasable",
]

PLAN_FOLDER = ".plan"
#: What ``auto`` tries above :data:`VECTOR_LIMIT` unless the arrays are kept on the Dask
#: workers: the methods whose strategies are measured from marginal tables (``workload``
#: for a union of marginals, ``hdmm_union`` one table per product). The first must apply;
#: the others may beat it.
TABLE_METHODS = (
    "marginals",
    "workload",
    "hdmm_marginals",
    "marginal_optimal",
    "residual",
    "hdmm_union",
)


def _load(
    folder: Path, stem: str, config: ReleaseConfig, source: str
) -> tuple[ChosenStrategy, dict[str, Any]] | None:
    """The strategy kept as ``stem`` in ``folder`` and the facts stored beside it."""
    matrix_file, facts_file = folder / f"{stem}.npz", folder / f"{stem}.json"
    if not (matrix_file.is_file() and facts_file.is_file()):
        return None
    try:
        integer = load_matrix(matrix_file)
        facts = json.loads(facts_file.read_text())
        quantized = QuantizedStrategy(integer, facts["quantization_scale"])
        # Decisions stored before descriptions were kept describe their quantized matrix.
        description = facts.get("description") or repr(quantized.matrix)
        chosen = ChosenStrategy(
            quantized,
            config.strategy_method,
            facts["selected"],
            0.0,
            source,
            description,
            facts.get("weights"),
            privacy_from_config(facts["budget"], "budget") if facts.get("budget") else None,
        )
    except (
        SerializationError,
        MeasurementError,
        PrivacyParameterError,
        ValueError,
        KeyError,
        TypeError,
        OSError,
    ):
        return None  # a damaged (or older) entry is selected again, never trusted
    return chosen, facts


def _store(folder: Path, stem: str, chosen: ChosenStrategy, **facts: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_matrix(chosen.quantized.integer, folder / f"{stem}.npz")
    facts |= {
        "selected": chosen.selected,
        "seconds": chosen.seconds,
        "quantization_scale": chosen.quantized.scale,
        "description": chosen.description,
        "weights": chosen.weights,
        "budget": chosen.budget.to_dict() if chosen.budget else None,
    }
    atomic_write(folder / f"{stem}.json", [json.dumps(facts, sort_keys=True).encode()])


#: Strategies measured from marginal tables, on any domain: never the data vector.
TABLE_STRATEGIES = (Marginals, ResidualBlockStrategy, TableKrons)


def _unreleasable(
    candidate: Candidate, cells: int, workers: tuple[int, ...] | None = None
) -> str | None:
    """Why a tried candidate cannot be released on a domain of ``cells`` cells, or None.

    ``workers``: the domain's shape when the config keeps a Kronecker strategy's arrays on
    the Dask workers (``cluster.arrays: workers``), else None."""
    # Above the vector limit the input is counted as marginal tables (a union of marginals
    # or a residual strategy: its integer blocks are read from the tables), or on the
    # workers for a Kronecker product over the domain's attributes.
    if cells > VECTOR_LIMIT and not isinstance(candidate.strategy, TABLE_STRATEGIES):
        if workers is not None and _kron_on_workers(candidate.strategy, workers):
            return None
        return f"not releasable: {_needs_vector(cells)}"
    return None


def _needs_vector(cells: int) -> str:
    return (
        f"it needs the data vector, and {cells:,} cells are more than the {VECTOR_LIMIT:,} "
        "a release counts as a vector"
    )


def _auto_candidates(cells: int, workers: tuple[int, ...] | None) -> tuple[str, ...]:
    """What ``auto`` runs on a domain of ``cells`` cells: every candidate, or above the
    vector limit with the arrays in the flow's process only :data:`TABLE_METHODS`; the
    others' strategies could not be released there, so they are not searched for."""
    return TABLE_METHODS if cells > VECTOR_LIMIT and workers is None else AUTO_CANDIDATES


def _kron_on_workers(strategy: Matrix, shape: tuple[int, ...]) -> bool:
    factors = axis_factors(strategy, shape)
    return factors is not None and all(factor_gram_pinv(f) is not None for f in factors)


def _first_releasable(
    selection: Selection, cells: int, workers: tuple[int, ...] | None = None
) -> tuple[Candidate | None, QuantizedStrategy | None, dict[int, str], MeasurementError | None]:
    """The least-error candidate a release can count and quantize exactly (the selection's
    own choice first) with its grid, and why each candidate ranked above it cannot be."""
    reasons: dict[int, str] = {}
    problem: MeasurementError | None = None
    ranked = sorted(
        (c for c in selection.candidates if c.strategy is not None),
        key=lambda c: (c is not selection.chosen, c.error),
    )
    for candidate in ranked:
        reason = _unreleasable(candidate, cells, workers)
        if reason is None:
            try:
                return candidate, measurable(candidate.strategy), reasons, problem
            except MeasurementError as error:
                problem = problem or error
                reason = f"not releasable: {error}"
        reasons[id(candidate)] = reason
    return None, None, reasons, problem


def released_error(W: Matrix, quantized: QuantizedStrategy, privacy: PrivacyParameter) -> float:
    """``W``'s expected total squared error from ``quantized`` as a release measures it: under
    its exact discrete noise (the selection ranks under continuous noise of the same
    sensitivity; a small integer scale's discrete noise is a few % below it)."""
    A = quantized.matrix
    continuous = privacy.noise_variance(float(A.sensitivity(privacy.norm)))
    discrete = planned_noise_variance(quantized, privacy)  # in A's units already
    return expected_error(W, A, privacy) * discrete / continuous


def _baseline_if_better(
    W: Matrix,
    privacy: PrivacyParameter,
    cells: int,
    selection: Selection,
    best: Candidate,
    quantized: QuantizedStrategy,
    workers: tuple[int, ...] | None = None,
) -> tuple[Candidate, QuantizedStrategy]:
    """``auto``'s baseline instead of ``best`` when, quantized and under the discrete noise
    each is measured with, the baseline's error is lower: auto is never worse than it."""
    baseline = selection.candidates[0]
    if baseline is best or baseline.strategy is None or _unreleasable(baseline, cells, workers):
        return best, quantized
    try:
        grid = measurable(baseline.strategy)
        better = released_error(W, grid, privacy) < released_error(W, quantized, privacy)
    except MeasurementError:  # the baseline cannot be measured under this budget
        return best, quantized
    return (baseline, grid) if better else (best, quantized)


def select_releasable(
    workload: Matrix,
    method: str,
    privacy: PrivacyParameter,
    cells: int,
    *,
    progress: Progress | None = None,
    budget: float = math.inf,
    workers: tuple[int, ...] | None = None,
) -> tuple[ChosenStrategy, Selection]:
    """The least-error candidate a release can count and measure exactly, quantized.

    The one selection rule of ``dpmm plan`` and ``dpmm release``: the candidates that
    ``method`` tries are ranked by exact expected error, the method's own choice first;
    those that a release cannot count on this domain or quantize to an exactly measurable
    integer strategy are passed over and marked with the reason in the returned
    selection's candidates. On a domain counted as marginal tables (beyond the vector
    limit, without ``workers``) ``auto`` runs only :data:`TABLE_METHODS`, and records the
    others as not tried: their strategies need the data vector. When ``auto`` stopped at a
    proven optimum that cannot be released, every other candidate is tried (on a domain
    counted as marginal tables, the table methods). ``auto``'s searches stop after
    ``budget`` seconds in all.
    With ``workers`` (the domain's shape, when ``cluster.arrays: workers`` keeps the arrays
    on the Dask workers), a Kronecker strategy over the domain's attributes is releasable
    beyond the vector limit too.

    The selection runs with the BLAS threads :func:`~dpmm.blas_threads.blas_limit` decides.

    Raises:
        MeasurementError: no candidate can be measured exactly.
    """
    with blas_limit():
        return _select_releasable(workload, method, privacy, cells, progress, budget, workers)


def _select_releasable(
    workload: Matrix,
    method: str,
    privacy: PrivacyParameter,
    cells: int,
    progress: Progress | None,
    budget: float,
    workers: tuple[int, ...] | None,
) -> tuple[ChosenStrategy, Selection]:
    started = time.perf_counter()
    order = _auto_candidates(cells, workers)
    selection = select_strategy(
        workload, method, privacy, progress=progress, budget=budget, candidates=order
    )
    found = _first_releasable(selection, cells, workers)
    if method == "auto" and found[0] is not selection.chosen:
        order = TABLE_METHODS if cells > VECTOR_LIMIT else AUTO_CANDIDATES
        left = budget - (time.perf_counter() - started)
        wider = select(workload, privacy, METHODS, order, progress=progress, budget=left)
        tried = {c.method for c in wider.candidates}
        earlier = tuple(c for c in selection.candidates if c.method not in tried)
        selection = Selection(wider.chosen, (*earlier, *wider.candidates))
        found = _first_releasable(selection, cells, workers)
    best, quantized, reasons, problem = found
    if method == "auto" and best is not None and quantized is not None:
        best, quantized = _baseline_if_better(
            workload, privacy, cells, selection, best, quantized, workers
        )
    if best is None or quantized is None:
        why = next(iter(reasons.values()), "").removeprefix("not releasable: it ")
        raise problem or MeasurementError(
            f"none of the strategies '{method}' tried can be released on this domain; the "
            f"best one {why}"
        )
    seconds = time.perf_counter() - started
    chosen = ChosenStrategy(
        quantized, method, best.method, seconds, "selected", repr(best.strategy)
    )
    candidates = tuple(
        replace(c, skipped=reasons[id(c)]) if id(c) in reasons else c for c in selection.candidates
    )
    if method == "auto":
        tried = {c.method for c in candidates}
        candidates += tuple(
            Candidate(name, 0.0, skipped=f"not tried: {_needs_vector(cells)}")
            for name in AUTO_CANDIDATES
            if name not in tried
        )
    return chosen, Selection(best, candidates)


def select_for_config(
    config: ReleaseConfig, *, progress: Progress | None = None
) -> tuple[ChosenStrategy, Selection]:
    """:func:`select_releasable` for a config's workload, method and measurement budget.

    Raises:
        ConfigError: the method cannot build a releasable strategy for this workload (the
            message names the file, the key and the reason).
    """
    check_answers_fit(config)  # before a search whose result could not be released
    method, privacy = config.strategy_method, config.measurement_privacy
    budget = config.strategy_time_budget
    deadline = time.monotonic() + budget  # for every round of a selection for targets

    winner = method

    def select_on(workload: Matrix, *, first: bool = False) -> tuple[ChosenStrategy, Selection]:
        # A weighted round selects only with the method that won the plain one (for
        # `auto`: its winning candidate): the weights move the optimum within a family,
        # and the other candidates were judged on the plain round.
        nonlocal winner
        left = budget if first else max(0.0, deadline - time.monotonic())
        chosen, selection = select_releasable(
            workload,
            winner,
            privacy,
            config.domain.size,
            progress=progress,
            budget=left,
            # Asked for: under `auto` a domain beyond the vector is counted as tables.
            workers=tuple(config.domain.shape) if config.cluster.arrays == "workers" else None,
        )
        if first and chosen.selected in METHODS:
            winner = chosen.selected
        return chosen, selection

    try:
        targeted = any("target" in group.spec for group in config.workload)
        if not targeted or len(config.workload) == 1:  # one group: weights change nothing
            return select_on(stack(config.workload), first=True)
        started = time.perf_counter()
        rounds = itertools.count()
        # The plain round's published half-widths over z standard errors, per group: the
        # weighted rounds scale their z figures by it instead of computing every interval
        # again (exact intervals took 4 of 5 s per round on the Adult targets). The rounds
        # only steer the weights; the plan then computes the kept strategy's own figures.
        published_over_z: dict[str, float] = {}
        chosen, selection, kept = select_for_targets(
            config.workload,
            lambda workload: select_on(workload, first=next(rounds) == 0),
            lambda chosen: _target_ratios(config, chosen, published_over_z),
        )
        seconds = time.perf_counter() - started  # every round's
        return replace(chosen, seconds=seconds, weights=kept.weights), selection
    except ConfigError:
        raise
    except (DpmmError, MeasurementError) as error:
        raise ConfigError(
            f"{config.path}: strategy.method: '{method}' cannot build a strategy for this "
            f"workload ({error})"
        ) from error


def _target_ratios(
    config: ReleaseConfig, chosen: ChosenStrategy, published_over_z: dict[str, float]
) -> dict[str, float]:
    """Each targeted group's figure over its target, from the data-free release of
    ``chosen``: a ``half_width`` target's by the half-widths the release publishes the
    first time (``published_over_z`` empty: it is filled with each group's published figure
    over its z figure), then by the z figure times that ratio."""
    checked = preflight(config, chosen)
    answers = checked.reconstruction.groups
    errors = [answered.standard_errors for answered in answers]
    planned = None
    first = not published_over_z
    if first and any(g.target.kind == "half_width" for g in config.workload if g.target):
        planned = PlannedIntervals(config, chosen, checked.counting, config.workload, errors)
    ratios = {}
    for group, answered in zip(config.workload, answers, strict=True):
        if (target := group.target) is not None:
            figure = target.figure(answered.standard_errors)
            if target.kind == "half_width" and planned is not None:
                widths = planned.group(group.name, float(target.confidence), config.privacy)
                published = target.figure(answered.standard_errors, widths)
                published_over_z[group.name] = published / figure if figure > 0 else 1.0
                figure = published
            elif target.kind == "half_width":
                figure *= published_over_z.get(group.name, 1.0)
            ratios[group.name] = figure / target.value
    return ratios


def plan_folder(config: ReleaseConfig) -> Path:
    """``<release root>/<name>/.plan``: where the plan's decision is kept."""
    return config.release.root / config.name / PLAN_FOLDER


def _plan_facts(config: ReleaseConfig) -> dict[str, Any]:
    """What a decision was made from: a release refuses it when any of these changed."""
    facts = {
        "config_sha256": config.sha256,
        "domain": config.domain.to_dict(),
        "dpmm_version": __version__,
    }
    references = {
        group.name: group.target.reference.source["sha256"]
        for group in config.workload
        if group.target and group.target.reference and "sha256" in group.target.reference.source
    }
    if references:  # the public files relative targets are relative to
        facts["references"] = references
    margin_files = {
        margin.attribute: margin.source["sha256"]
        for margin in config.invariants.margins
        if "sha256" in margin.source
    }
    if margin_files:  # the public files declared margins are read from
        facts["margin_files"] = margin_files
    return facts


def _workload_digest(config: ReleaseConfig) -> str:
    return matrix_digest(stack(config.workload))


def save_decision(config: ReleaseConfig, chosen: ChosenStrategy) -> None:
    """Keep ``chosen`` as the strategy of every later release of this config, for as long
    as the config file, its domain and dpmm's version are unchanged.

    Raises:
        OSError: the release root cannot be written.
    """
    facts = _plan_facts(config)
    if config.private_thresholds:  # planned at the bound: see choose_strategy
        facts["workload_sha256"] = _workload_digest(config)
    _store(plan_folder(config), "decision", chosen, **facts)


def planned_strategy(config: ReleaseConfig) -> ChosenStrategy | None:
    """The plan's decision for ``config``, or None if it was never planned (or, for a
    config with private thresholds, planned for another workload than the one drawn).

    Raises:
        ConfigError: the config file, its domain, a public file it reads (target
            references, declared margins) or dpmm's version changed since the plan.
    """
    kept = _load(plan_folder(config), "decision", config, "plan")
    if kept is None:
        return None
    chosen, facts = kept
    now = _plan_facts(config)
    changed = [
        what
        for key, what in (
            ("domain", "its domain"),
            ("config_sha256", "the config file"),
            ("references", "a reference file of its accuracy targets"),
            ("margin_files", "a file of its declared margins"),
            ("dpmm_version", f"dpmm's version ({facts.get('dpmm_version')} → {__version__})"),
        )
        if facts.get(key) != now.get(key)
    ]
    if changed:
        raise ConfigError(
            f"{config.path}: {changed[0]} changed since the release was planned; review the "
            f"new plan with: dpmm plan {config.path}"
        )
    if config.private_thresholds and facts.get("workload_sha256") != _workload_digest(config):
        return None
    return chosen if chosen.quantized.integer.shape[1] == config.domain.size else None


def choose_strategy(
    config: ReleaseConfig,
    *,
    run_folder: Path | None = None,
    progress: Progress | None = None,
) -> ChosenStrategy:
    """The run's strategy if it has one, else the plan's decision, else a fresh selection
    (which becomes the plan's decision when made before a run, as ``dpmm release`` does
    before it reserves anything).

    A ``least`` config's decision holds its budget (:mod:`.budget_stage`).
    A config with private truncation thresholds decides after its thresholds are drawn:
    the plan's decision when the workload at those thresholds is the one planned (no θ
    was found below the bound), else a selection for that workload.
    The result is kept in the run folder (when given). ``progress`` follows the
    candidates tried (see :func:`dpmm.strategy.select_strategy`).

    Raises:
        ConfigError: the config changed since it was planned (see :func:`planned_strategy`).
    """
    if run_folder is not None:
        kept = _load(run_folder, "strategy", config, "run")
        if kept is not None and kept[0].quantized.integer.shape[1] == config.domain.size:
            return kept[0]
    chosen = planned_strategy(config) or select_for_config(config, progress=progress)[0]
    chosen = with_budget(config, chosen)  # least: the plan's budget, or derived now
    if chosen.source == "selected" and run_folder is None:
        save_decision(config, chosen)  # before a run: the plan of a config never planned
    if run_folder is not None:
        _store(run_folder, "strategy", chosen)
    return chosen
