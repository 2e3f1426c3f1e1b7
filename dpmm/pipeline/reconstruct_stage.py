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
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpmm.blas_threads import blas_limit
from dpmm.config import ReleaseConfig
from dpmm.domain import Domain
from dpmm.errors import ConfigError, UnsupportedQueryError
from dpmm.linalg import MarginalsGram, query_variances
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.measure.measurement import Measurement
from dpmm.measure.record import MeasurementRecord
from dpmm.measure.tables import strategy_tables
from dpmm.pipeline.strategy_stage import VECTOR_LIMIT, ChosenStrategy
from dpmm.reconstruct import (
    MarginalMeasurement,
    covariance_factor,
    least_squares,
    marginal_tables,
    nnls,
    workload_answers,
)
from dpmm.reconstruct.choice import prefers_nnls
from dpmm.reconstruct.residual_blocks import (
    BlockEstimate,
    block_histogram,
    block_workload_answers,
    check_answerable,
)
from dpmm.strategy.selection import Progress
from dpmm.workload import WorkloadGroup
from dpmm.workload.labels import query_labels
from dpmm.workload.table_form import answer_from_tables, needed_tables, table_form

__all__ = [
    "HISTOGRAM_LIMIT",
    "NNLS_LIMIT",
    "GroupAnswers",
    "Reconstruction",
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


@dataclass(frozen=True, eq=False)
class GroupAnswers:
    """One workload group's answers: an estimate and standard error per query, and labels."""

    group: WorkloadGroup
    domain: Domain
    values: np.ndarray
    standard_errors: np.ndarray
    exact_errors: bool

    @property
    def name(self) -> str:
        """The workload group's name."""
        return self.group.name

    @property
    def kind(self) -> str:
        """The workload group's kind."""
        return self.group.kind

    @cached_property
    def labels(self) -> list[str]:
        """One label per query, built when first read (the answers' writer): the plan's
        dry run and the audit never need them, and 2·10⁷ labels take seconds."""
        return query_labels(self.group, self.domain)

    @property
    def expected_rmse(self) -> float:
        """Root of the mean squared standard error: the group's expected RMSE."""
        return float(np.sqrt(np.mean(self.standard_errors**2))) if self.values.size else 0.0


@dataclass(frozen=True, eq=False)
class Reconstruction:
    """The released estimate: answers per group and, with the full vector, the histogram."""

    method: str
    groups: list[GroupAnswers]
    histogram: np.ndarray | None
    seconds: float


def check_reconstructable(config: ReleaseConfig, strategy: ChosenStrategy, plan: str) -> None:
    """Fail now, before any noise is drawn, if the answers or their standard errors cannot
    be had.

    Raises:
        TooLargeError: The strategy has no structured Gram inverse and too many cells.
        ConfigError: A workload group cannot be answered from the residual sets measured.
    """
    integer = strategy.quantized.integer
    if isinstance(integer, HelmertBlocks):
        for group in config.workload:
            try:
                check_answerable(integer, group.matrix)
            except UnsupportedQueryError as error:
                raise ConfigError(
                    f"{config.path}: workload group {group.name!r} cannot be answered from the "
                    f"residual strategy {strategy.selected!r}: {error}"
                ) from None
    elif plan == "vector":
        covariance_factor(strategy.quantized.matrix, None)


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


def solver(config: ReleaseConfig, plan: str) -> str:
    """The reconstruction a release of this config runs: ``least_squares``, ``nnls``, or
    ``auto`` (least squares, then NNLS when the estimate calls for it)."""
    chosen = config.release.reconstruction
    if plan == "tables":
        return "least_squares"
    if chosen == "auto":
        return "auto" if config.domain.size <= NNLS_LIMIT else "least_squares"
    return chosen


def _from_vector(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    y: np.ndarray,
    std: float,
    method: str,
    progress: Progress,
) -> tuple[list[GroupAnswers], np.ndarray, str]:
    """The workload answers from the data-vector estimate, the estimate, and the solver used.

    ``auto`` takes least squares, then NNLS when :func:`~dpmm.reconstruct.choice.prefers_nnls`
    says the estimate looks sparse and the strategy aggregates cells.
    """
    A = strategy.quantized.matrix
    steps = len(config.workload) + 1
    progress(0, steps, method)
    # NNLS keeps the least-squares total (post-processing): without it, clipping the
    # empty cells of sparse data biases every long range upwards.
    if method == "nnls":
        estimate = nnls(A, y, noise_std=std, total="estimated")
    else:
        estimate = least_squares(A, y, noise_std=std)
        if method == "auto":
            method = "nnls" if prefers_nnls(A, estimate.x) else "least_squares"
            if method == "nnls":
                estimate = nnls(A, y, noise_std=std, total="estimated")
    groups = []
    for done, group in enumerate(config.workload, start=1):
        progress(done, steps, group.name)
        answers = workload_answers(group.matrix, A, estimate)
        groups.append(
            _answers(config, group, answers.values, answers.standard_errors, answers.exact_errors)
        )
    progress(steps, steps, "")
    return groups, np.asarray(estimate.x, dtype=np.float64), method


def _from_tables(
    config: ReleaseConfig, strategy: ChosenStrategy, y: np.ndarray, std: float, progress: Progress
) -> list[GroupAnswers]:
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
    return groups


def wants_histogram(config: ReleaseConfig) -> bool:
    """Whether the release writes the estimated histogram (``release.histogram``)."""
    setting, cells = config.release.histogram, config.domain.size
    return cells <= VECTOR_LIMIT and (
        setting == "always" or (setting == "auto" and cells <= HISTOGRAM_LIMIT)
    )


def _from_blocks(
    config: ReleaseConfig, blocks: HelmertBlocks, record: MeasurementRecord, progress: Progress
) -> tuple[list[GroupAnswers], np.ndarray | None]:
    """Least-squares answers per residual set (the quantization scale cancels), and the
    least-squares histogram when the release writes one."""
    estimate = BlockEstimate(blocks, record.values, record.noise_variance())
    groups = []
    for done, group in enumerate(config.workload):
        progress(done, len(config.workload), group.name)
        answers = block_workload_answers(estimate, group.matrix)
        standard_errors = np.sqrt(np.maximum(answers.variances, 0.0))
        groups.append(_answers(config, group, answers.values, standard_errors, True))
    progress(len(config.workload), len(config.workload), "")
    return groups, block_histogram(estimate) if wants_histogram(config) else None


def _silent(done: int, total: int, what: str) -> None:
    pass


def reconstruct(
    config: ReleaseConfig,
    strategy: ChosenStrategy,
    record: MeasurementRecord,
    plan: str,
    *,
    progress: Progress | None = None,
) -> Reconstruction:
    """Estimate the workload answers of a release from its measurement.

    Args:
        config: The release config (workload, domain, reconstruction setting).
        strategy: The strategy the record measured.
        record: The persisted measurement.
        plan: ``vector`` or ``tables`` (see :func:`~dpmm.pipeline.counting_plan`).
        progress: Called with ``(steps done, steps, what runs next)``: the solve, then
            each workload group's answers.
    """
    progress = progress or _silent
    started = time.perf_counter()
    measured = Measurement(strategy.quantized, record)  # in the strategy's own units
    y, std = measured.answers, measured.noise_std
    method = solver(config, plan)
    with blas_limit():  # BLAS threads that fit the cores this process owns
        if isinstance(strategy.quantized.integer, HelmertBlocks):
            groups, histogram = _from_blocks(config, strategy.quantized.integer, record, progress)
        elif plan == "tables":
            groups, histogram = _from_tables(config, strategy, y, std, progress), None
        else:
            groups, histogram, method = _from_vector(config, strategy, y, std, method, progress)
    return Reconstruction(method, groups, histogram, time.perf_counter() - started)
