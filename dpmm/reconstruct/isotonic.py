"""Isotonic regression of answers to a monotone query family (seed 003).

Prefix sums of counts never decrease. The weighted least-squares projection of
noisy prefix answers onto non-decreasing sequences
(:func:`scipy.optimize.isotonic_regression`, pool-adjacent-violators) is
feasible by construction, and since the true answers lie in that convex cone
the projection is never farther from them than the noisy answers are (in the
weighted norm).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import isotonic_regression

from dpmm.reconstruct.answers import WorkloadAnswers
from dpmm.reconstruct.protocol import ReconstructionError

__all__ = ["isotonic"]


def isotonic(
    answers: WorkloadAnswers | np.ndarray,
    *,
    weights: np.ndarray | None = None,
    increasing: bool = True,
) -> WorkloadAnswers | np.ndarray:
    """The closest monotone sequence to ``answers`` in weighted least squares.

    Args:
        answers: Answers to queries ordered so that their true values are monotone
            (e.g. prefix sums); a :class:`WorkloadAnswers` or a vector.
        weights: Positive weight per answer; by default ``1 / standard_error²`` for a
            :class:`WorkloadAnswers` with finite positive errors (the generalized
            least-squares projection), else equal weights.
        increasing: Non-decreasing (default) or non-increasing.

    Returns:
        The same type as given. A :class:`WorkloadAnswers` keeps the least-squares
        standard errors, with ``method="isotonic"`` and ``exact_errors=False``.

    Raises:
        ReconstructionError: non-finite answers or bad weights.

    Example:
        >>> isotonic(np.array([1.0, 3.0, 2.0, 4.0]))
        array([1. , 2.5, 2.5, 4. ])
    """
    is_result = isinstance(answers, WorkloadAnswers)
    values = np.asarray(answers.values if is_result else answers, dtype=np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ReconstructionError("Isotonic regression needs a vector of finite answers.")
    if weights is None and is_result:
        errors = answers.standard_errors
        if np.all(np.isfinite(errors)) and np.all(errors > 0):
            weights = 1.0 / errors**2
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != values.shape or not np.all(np.isfinite(weights) & (weights > 0)):
            raise ReconstructionError(
                f"Isotonic weights must be {values.size:,} positive finite numbers."
            )
    fitted = isotonic_regression(values, weights=weights, increasing=increasing).x
    if not is_result:
        return fitted
    return dataclasses.replace(answers, values=fitted, method="isotonic", exact_errors=False)
