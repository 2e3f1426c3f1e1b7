"""Seed 003's expected squared errors of the sum algorithms: bias² plus variance.

For a fixed threshold ``θ`` (``T = diag(min(u, θ))``) and measurement budget ``ε``, with
``v(s)`` the variance of Laplace noise of scale ``s`` (``2 s²``, seed 003's formulas) and
``G = (AᵀA)⁻¹``, the total expected squared error over the ``p`` queries is

* bias² (every algorithm): ``‖W (D − T) x‖²``;
* Identity: ``v(1/ε) · ‖W T‖_F²``;
* Workload: ``p · v(‖W T‖₁/ε)``;
* TiMM (appendix A.3): ``v(Δ(A T)/ε) · tr(W G Wᵀ)``;
* TaMM (appendix A.4): ``v(Δ(A)/ε) · tr(W T G T Wᵀ)``;
* SQM: ``Σ_q v(min(θ_q, u_q)/ε_q)`` with each query's own threshold and budget.

The bias reads the true counts: these functions analyse an algorithm on known data (tests,
benchmarks), they are not part of any release. With ``discrete=True`` the variance is that
of the integer discrete Laplace the exact samplers draw, ``2 e^(−1/s) / (1 − e^(−1/s))²``.

Example:
    >>> from dpmm.sums.buckets import prefix_sum_workload
    >>> workload = prefix_sum_workload(width=10, buckets=4, queries=4)
    >>> x = np.array([1, 0, 0, 2])
    >>> expected_error("identity", workload, x, 20, Fraction(1))
    ErrorBreakdown(bias_squared=1600.0, variance=5600.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg import Matrix, trace_of_product
from dpmm.sums.buckets import PrefixSumWorkload
from dpmm.sums.mechanisms import batch_sensitivity, sqm_sensitivities

__all__ = ["ErrorBreakdown", "expected_error", "laplace_variance", "truncation_bias"]


@dataclass(frozen=True)
class ErrorBreakdown:
    """Total expected squared error split into squared bias and variance."""

    bias_squared: float
    variance: float

    @property
    def total(self) -> float:
        """``bias_squared + variance``."""
        return self.bias_squared + self.variance


def laplace_variance(scale: Fraction | float, *, discrete: bool = False) -> float:
    """``2 s²`` (continuous Laplace) or the discrete Laplace's ``2q/(1 − q)²``, ``q = e^(−1/s)``."""
    s = float(scale)
    if not discrete:
        return 2.0 * s * s
    q = math.exp(-1.0 / s)
    return 2.0 * q / (1.0 - q) ** 2


def truncation_bias(
    workload: PrefixSumWorkload, counts: np.ndarray, thresholds: int | list[int | None] | None
) -> np.ndarray:
    """``W (D − T) x`` per query (one threshold for all, or one per query as in SQM)."""
    x = np.asarray(counts, dtype=np.int64)
    exact = workload.true_answers(x)
    if not isinstance(thresholds, list):
        return exact - workload.answer(x, workload.truncated_weights(thresholds))
    truncated = [
        workload.answer(x, workload.truncated_weights(theta))[query]
        for query, theta in enumerate(thresholds)
    ]
    return exact - np.array(truncated)


def expected_error(
    algorithm: str,
    workload: PrefixSumWorkload,
    counts: np.ndarray,
    thresholds: int | list[int | None] | None,
    epsilon: Fraction,
    *,
    strategy: Matrix | None = None,
    discrete: bool = False,
) -> ErrorBreakdown:
    """The seed's bias² + variance of ``algorithm`` for given threshold(s) and ``ε``.

    Args:
        algorithm: ``sqm``, ``identity``, ``workload``, ``timm`` or ``tamm``.
        workload: The prefix-sum workload.
        counts: The true people per bucket (for the bias).
        thresholds: The threshold (``None``: NoTrunc); for ``sqm`` one per query.
        epsilon: The measurement budget (for ``sqm``: each query's).
        strategy: TiMM's or TaMM's strategy ``A``.
        discrete: Use the discrete Laplace variance instead of ``2 s²``.
    """
    bias = truncation_bias(workload, counts, thresholds)
    bias_squared = float(np.sum(bias.astype(np.float64) ** 2))
    if algorithm == "sqm":
        if not isinstance(thresholds, list):
            thresholds = [thresholds] * workload.queries
        variance = sum(
            laplace_variance(sensitivity / epsilon, discrete=discrete)
            for sensitivity in sqm_sensitivities(workload, thresholds)
        )
        return ErrorBreakdown(bias_squared, float(variance))
    if isinstance(thresholds, list):
        raise DpmmError(f"{algorithm} uses one threshold for all queries, not a list.")
    weights = workload.truncated_weights(thresholds)
    sensitivity = Fraction(batch_sensitivity(algorithm, workload, weights, strategy))
    unit = laplace_variance(sensitivity / epsilon, discrete=discrete)
    if algorithm == "identity":
        reads = workload.queries_per_bucket()
        return ErrorBreakdown(
            bias_squared, unit * float(np.sum(reads * weights.astype(float) ** 2))
        )
    if algorithm == "workload":
        return ErrorBreakdown(bias_squared, unit * workload.queries)
    if strategy is None:
        raise DpmmError(f"The error of {algorithm} needs its strategy.")
    answered = workload.matrix if algorithm == "timm" else workload.weighted(weights)
    trace = trace_of_product(answered.gram(), strategy.gram().pinv())
    return ErrorBreakdown(bias_squared, unit * trace)
