"""From a persisted measurement to workload answers with standard errors (post-processing).

Reads only the measurement record, the strategy and public facts (DESIGN §5 rule 5). The
measured answers are ``B x + noise`` with ``B`` the integer strategy; divided by the
quantization scale ``D`` they estimate ``A_q x`` with noise of standard deviation
``sd / D``. With the full vector the estimate is least squares or NNLS (constrained to
the least-squares total); on marginal tables it is least squares in the marginal algebra,
table by table, and for integer residual blocks least squares per residual set
(:mod:`dpmm.reconstruct.residual_blocks`), never touching the domain.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dpmm.blas_threads import blas_limit
from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError, UnsupportedQueryError
from dpmm.linalg import MarginalsGram, query_variances
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.measurement import Measurement
from dpmm.measure.record import MeasurementRecord
from dpmm.measure.tables import strategy_tables
from dpmm.pipeline.chosen import ChosenStrategy
from dpmm.pipeline.cluster_answers import ClusterAnswers, check_on_cluster
from dpmm.pipeline.ingest_stage import TABLE_PLANS, VECTOR_LIMIT
from dpmm.pipeline.integer_answers import (
    check_integer_output,
    integer_from_tables,
    integer_from_vector,
    integer_on_cluster,
    rounded_errors,
    rounding_iterations,
    tables_rounding,
    vector_rounding,
)
from dpmm.pipeline.interval_stage import group_multisets, release_half_widths
from dpmm.pipeline.reconstruction import (
    EXACT_INTERVALS,
    NORMAL_INTERVALS,
    GroupAnswers,
    Reconstruction,
    rms,
)
from dpmm.reconstruct import (
    MarginalMeasurement,
    covariance_factor,
    marginal_tables,
    table_krons,
)
from dpmm.reconstruct.answers import REPLICATES
from dpmm.reconstruct.choice import EXACT, solve_answers
from dpmm.reconstruct.integer import TableSource, rounded_total, top_down_rounding
from dpmm.reconstruct.intervals import Intervals, NoiseLaw
from dpmm.reconstruct.nnls import nnls_setup
from dpmm.reconstruct.residual_blocks import (
    BlockEstimate,
    block_histogram,
    block_marginals,
    block_workload_answers,
    check_answerable,
)
from dpmm.strategy.selection import Progress
from dpmm.workload import WorkloadGroup
from dpmm.workload.table_form import answer_from_tables, needed_tables, table_form

__all__ = [
    "HISTOGRAM_LIMIT",
    "NNLS_LIMIT",
    "check_reconstructable",
    "reconstruct",
    "solver",
    "wants_histogram",
]

#: ``histogram: auto`` writes the reconstructed histogram up to this many cells.
HISTOGRAM_LIMIT = 10**7
#: ``auto`` reconstruction may use NNLS up to this many cells (when the strategy and the
#: least-squares estimate call for it, see :mod:`dpmm.reconstruct.choice`), least squares
#: above (NNLS on 1.2·10⁶ cells takes minutes; least squares in the strategy's structure,
#: seconds).
NNLS_LIMIT = 10**5


def check_reconstructable(config: ReleaseConfig, strategy: ChosenStrategy, plan: str) -> None:
    """Fail now, before any noise is drawn, if the answers or their standard errors cannot
    be had.

    Raises:
        TooLargeError: The strategy has no structured Gram inverse and too many cells.
        ConfigError: A workload group cannot be answered from the residual sets measured,
            or ``reconstruction: nnls`` is asked of a release that never holds the vector.
    """
    integer = strategy.quantized.integer
    check_integer_output(config, plan, isinstance(integer, HelmertBlocks))
    if config.release.reconstruction == "nnls" and _without_vector(strategy, plan):
        raise ConfigError(
            f"{config.path}: release.reconstruction: nnls needs the full data vector, and "
            f"this release of {strategy.selected!r} estimates its answers from "
            f"{'residual blocks' if isinstance(integer, HelmertBlocks) else 'marginal tables'}"
            f" without it ({config.domain.size:,} cells); use least_squares or auto"
        )
    if isinstance(integer, HelmertBlocks):
        for group in config.workload:
            try:
                check_answerable(integer, group.matrix)
            except UnsupportedQueryError as error:
                raise ConfigError(
                    f"{config.path}: workload group {group.name!r} cannot be answered from the "
                    f"residual strategy {strategy.selected!r}: {error}"
                ) from None
    elif isinstance(integer, TableKrons):
        for group in config.workload:
            try:
                table_krons.check_answerable(group.matrix, integer)
            except UnsupportedQueryError as error:
                raise ConfigError(
                    f"{config.path}: workload group {group.name!r} cannot be answered from the "
                    f"per-product tables of {strategy.selected!r}: {error}"
                ) from None
    elif plan == "vector":
        covariance_factor(strategy.quantized.matrix, None)
    elif plan == "chunked":
        check_on_cluster(integer, config.workload, config.domain, str(config.path))


def _answers(
    config: ReleaseConfig,
    group: WorkloadGroup,
    values: np.ndarray,
    standard_errors: np.ndarray,
    exact: bool,
) -> GroupAnswers:
    """One group's labelled answers."""
    estimates = np.asarray(values, dtype=np.float64)
    return GroupAnswers(group, config.domain, estimates, standard_errors, exact)


def _without_vector(strategy: ChosenStrategy, plan: str) -> bool:
    """Whether the release estimates its answers without the data vector."""
    return plan in TABLE_PLANS or isinstance(strategy.quantized.integer, HelmertBlocks)


def solver(config: ReleaseConfig, plan: str) -> str:
    """The reconstruction a release of this config runs: ``least_squares``, ``nnls``, or
    ``auto`` (least squares, then NNLS when the estimate calls for it)."""
    chosen = config.release.reconstruction
    if plan in TABLE_PLANS or (plan == "chunked" and chosen == "auto"):
        return "least_squares"
    if chosen == "auto":
        return "auto" if config.domain.size <= NNLS_LIMIT else "least_squares"
    return chosen


def _from_vector(
    config: ReleaseConfig,
    measured: Measurement,
    method: str,
    replicates: int,
    progress: Progress,
) -> tuple[list[GroupAnswers], np.ndarray, str, str]:
    """The workload answers from the data-vector estimate, the estimate, the solver used
    and how the standard errors were had (:func:`~dpmm.reconstruct.choice.solve_answers`,
    its bootstrap drawn from :meth:`Measurement.bootstrap_rng`)."""
    rng = measured.bootstrap_rng()
    solved = solve_answers(
        measured.strategy,
        measured.answers,
        measured.noise_std,
        [group.matrix for group in config.workload],
        method,
        lambda x: measured.simulate(x, rng),
        replicates=replicates,
        progress=progress,
    )
    groups = [
        GroupAnswers(group, config.domain, values, errors, solved.errors == EXACT, rms(linear))
        for group, values, errors, linear in zip(
            config.workload,
            solved.values,
            solved.standard_errors,
            solved.least_squares_errors,
            strict=True,
        )
    ]
    return groups, solved.estimate, solved.method, solved.errors


def _from_tables(
    config: ReleaseConfig, strategy: ChosenStrategy, y: np.ndarray, std: float, progress: Progress
) -> tuple[list[GroupAnswers], TableSource]:
    """Least-squares answers from the measured marginal tables, and the source of any
    least-squares table (for integer output)."""
    B, scale = strategy.quantized.integer, strategy.quantized.scale
    shape = tuple(config.domain.shape)
    measurements, start = [], 0
    for attrs, weight in zip(strategy_tables(B), B.weights.values(), strict=True):
        cells = math.prod(shape[i] for i in attrs)
        values = y[start : start + cells]
        measurements.append(MarginalMeasurement(attrs, values, std, weight / scale))
        start += cells
    P = MarginalsGram(
        shape,
        {mask: (w / scale) ** 2 / std**2 for mask, w in B.weights.items()},
    ).pinv()
    groups = []
    for done, group in enumerate(config.workload):
        progress(done, len(config.workload), group.name)
        blocks = table_form(group.matrix, shape)
        tables = marginal_tables(shape, measurements, needed_tables(blocks))
        values = answer_from_tables(blocks, {a: t.values for a, t in tables.items()})
        variances = query_variances(group.matrix, P)
        groups.append(_answers(config, group, values, np.sqrt(np.maximum(variances, 0.0)), True))
    progress(len(config.workload), len(config.workload), "")

    def tables(sets: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
        return {a: t.values for a, t in marginal_tables(shape, measurements, sets).items()}

    return groups, tables


def _from_table_krons(
    config: ReleaseConfig, strategy: ChosenStrategy, y: np.ndarray, std: float, progress: Progress
) -> tuple[list[GroupAnswers], TableSource]:
    """Answers from the per-block tables made consistent
    (:mod:`dpmm.reconstruct.table_krons`), with their exact standard errors, and the source
    of any table (for integer output): a marginal of the consistent tables."""
    A = strategy.quantized.matrix  # the blocks' answers are in its units
    blocks = [y[start:stop] for _, start, stop in A._spans()]
    tables = table_krons.consistent_tables(A, blocks)
    groups = []
    for done, group in enumerate(config.workload):
        progress(done, len(config.workload), group.name)
        values = table_krons.workload_answers(group.matrix, tables)
        variances = std**2 * table_krons.answer_variances(group.matrix, A)
        groups.append(_answers(config, group, values, np.sqrt(np.maximum(variances, 0.0)), True))
    progress(len(config.workload), len(config.workload), "")

    def marginals(sets: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
        return {s: table_krons.table_marginal(tables, s) for s in sets}

    return groups, marginals


def _on_cluster(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    record: MeasurementRecord,
    method: str,
    progress: Progress,
    dry_run: bool,
) -> tuple[list[GroupAnswers], ClusterAnswers]:
    """The answers of a measurement drawn on the cluster, as Dask arrays (the estimate is
    never gathered into this process), and the cluster's estimate behind them."""
    progress(0, 1 + len(config.workload), method)
    integer = strategy.quantized.integer
    solved = ClusterAnswers(integer, record, config.domain, method, dry_run=dry_run)
    groups = []
    for done, group in enumerate(config.workload, start=1):
        progress(done, 1 + len(config.workload), group.name)
        values, errors, rmse = solved.group(group)
        exact = solved.errors == EXACT
        groups.append(GroupAnswers(group, config.domain, values, errors, exact, rmse))
    return groups, solved


def wants_histogram(config: ReleaseConfig) -> bool:
    """Whether the release writes the estimated histogram (``release.histogram``)."""
    setting, cells = config.release.histogram, config.domain.size
    return cells <= VECTOR_LIMIT and (
        setting == "always" or (setting == "auto" and cells <= HISTOGRAM_LIMIT)
    )


def _from_blocks(
    config: ReleaseConfig, blocks: HelmertBlocks, record: MeasurementRecord, progress: Progress
) -> tuple[list[GroupAnswers], np.ndarray | None, TableSource]:
    """Least-squares answers per residual set (the quantization scale cancels), the
    least-squares histogram when the release writes one (real-valued output only), and
    the source of any least-squares table (for integer output)."""
    estimate = BlockEstimate(blocks, record.values, record.noise_variance())
    groups = []
    for done, group in enumerate(config.workload):
        progress(done, len(config.workload), group.name)
        answers = block_workload_answers(estimate, group.matrix)
        standard_errors = np.sqrt(np.maximum(answers.variances, 0.0))
        groups.append(_answers(config, group, answers.values, standard_errors, True))
    progress(len(config.workload), len(config.workload), "")

    def tables(sets: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
        return {a: m.values for a, m in block_marginals(estimate, sets).items()}

    histogram = wants_histogram(config) and not config.release.integer
    return groups, block_histogram(estimate) if histogram else None, tables


def _nonnegative(
    config: ReleaseConfig, measured: Measurement, estimate: np.ndarray, method: str, dry_run: bool
) -> np.ndarray:
    """The non-negative estimate integer output rounds: the release's NNLS estimate, or
    NNLS solved now (least squares answered, or a total is declared: NNLS constrained to
    it; deterministic, no bootstrap), above the rounding's NNLS limit for a fixed number
    of iterations from least squares rounded top-down. The plan's dry run rounds its zero
    estimate instead: NNLS held to a declared total far from its zero measurement took 11
    minutes on the SF1 tables (on real data, as long as without the total)."""
    declared = config.invariants.known_total
    iterations = rounding_iterations(config)
    if dry_run or (method == "nnls" and declared is None):
        return np.maximum(np.asarray(estimate, dtype=np.float64), 0.0)  # no −0.0
    setup = nnls_setup(measured.strategy, measured.noise_std)
    if iterations is None:
        total = "estimated" if declared is None else float(declared)
        estimate = setup.solve(measured.answers, total=total).x  # the release's tolerance
    else:  # least squares answered (NNLS is not its choice on this many cells)
        total = declared if declared is not None else rounded_total(math.fsum(estimate))
        start = top_down_rounding(np.reshape(estimate, config.domain.shape), total)
        estimate = setup.solve(
            measured.answers, total=float(total), start=start, max_iterations=iterations
        ).x
    return np.maximum(np.asarray(estimate, dtype=np.float64), 0.0)  # no −0.0 or rounding


def _silent(done: int, total: int, what: str) -> None:
    pass


def reconstruct(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    record: MeasurementRecord,
    plan: str,
    *,
    progress: Progress | None = None,
    replicates: int = REPLICATES,
) -> Reconstruction:
    """Estimate the workload answers of a release from its measurement.

    Args:
        config: The release config (workload, domain, reconstruction setting).
        strategy: The strategy the record measured.
        record: The persisted measurement.
        plan: ``vector``, ``tables``, ``worker-tables`` or ``chunked`` (see
            :func:`~dpmm.pipeline.counting_plan`); a chunked plan's answers and standard
            errors are Dask arrays, computed where they are written.
        progress: Called with ``(steps done, steps, what runs next)``.
        replicates: Simulated measurements for NNLS's bootstrap standard errors; 0 (the
            plan's dry run, whose answers mean nothing) reports least squares' instead,
            and no intervals (``half_widths`` None).
    """
    progress = progress or _silent
    started = time.perf_counter()
    measured = Measurement(strategy.quantized, record)  # in the strategy's own units
    method = solver(config, plan)
    errors, tables, solved = EXACT, None, None
    with blas_limit():  # BLAS threads that fit the cores this process owns
        if isinstance(strategy.quantized.integer, HelmertBlocks):
            groups, histogram, tables = _from_blocks(
                config, strategy.quantized.integer, record, progress
            )
        elif isinstance(strategy.quantized.integer, TableKrons):
            groups, tables = _from_table_krons(
                config, strategy, measured.answers, measured.noise_std, progress
            )
            histogram = None
        elif plan in TABLE_PLANS:
            groups, tables = _from_tables(
                config, strategy, measured.answers, measured.noise_std, progress
            )
            histogram = None
        elif plan == "chunked":
            dry_run = replicates == 0  # the plan's: nothing is solved
            groups, solved = _on_cluster(config, strategy, record, method, progress, dry_run)
            errors, histogram = solved.errors, None
        else:
            groups, histogram, method, errors = _from_vector(
                config, measured, method, replicates, progress
            )
            if config.release.integer:
                histogram = _nonnegative(config, measured, histogram, method, replicates == 0)
        linear = errors == EXACT
        if replicates:  # the plan's dry run states no intervals; rounding widens them
            intervals = Intervals(NoiseLaw.of(record), config.release.confidence)
            groups = _with_intervals(config, strategy, plan, groups, intervals, linear)
        rounding = None
        if config.release.integer:
            dry_run = replicates == 0
            if tables is not None:
                groups = integer_from_tables(config, groups, tables, dry_run)
                rounding = tables_rounding(config)
            elif solved is not None:
                groups = integer_on_cluster(config, groups, solved, dry_run)
                rounding = vector_rounding(config, on_cluster=True)
            else:
                groups, histogram = integer_from_vector(config, groups, histogram, dry_run)
                rounding = vector_rounding(config)
            errors = rounded_errors(errors)
    described = EXACT_INTERVALS if linear else NORMAL_INTERVALS
    if rounding is not None:
        described = f"{described}, widened by each answer's rounding to an integer"
    seconds = time.perf_counter() - started
    return Reconstruction(method, groups, histogram, seconds, errors, described, rounding)


def _with_intervals(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    plan: str,
    groups: Sequence[GroupAnswers],
    intervals: Intervals,
    linear: bool,
) -> list[GroupAnswers]:
    """The groups' answers with their intervals (:mod:`dpmm.pipeline.interval_stage`,
    :func:`~dpmm.pipeline.interval_stage.release_half_widths`); a normal approximation
    for an estimate not linear in the noise."""
    if not linear:
        return [
            replace(
                answers,
                half_widths=intervals.normal(answers.standard_errors),
                exact_intervals=False,
            )
            for answers in groups
        ]
    multisets = [group_multisets(config, strategy, plan, answers.group) for answers in groups]
    errors = [answers.standard_errors for answers in groups]
    terms = int(strategy.quantized.integer.shape[0])
    found = release_half_widths(intervals, multisets, errors, terms)
    return [
        replace(answers, half_widths=widths, exact_intervals=exact)
        for answers, (widths, exact) in zip(groups, found, strict=True)
    ]
