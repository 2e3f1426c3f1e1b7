"""Workload non-negative least squares (WNNLS; seed 004, Appendix A).

Least squares gives unbiased workload answers ``W x̂`` that may be impossible
(negative counts). WNNLS keeps the workload answers as close as possible to
that unbiased estimate while insisting on a non-negative data vector:

    ``x̃ = argmin_{x ≥ 0} ‖W x − W x̂‖²``   (and ``Σx = total`` when known).

``W x̃`` is the projection of ``W x̂`` onto the convex cone ``{W x : x ≥ 0}``,
which holds the true answers, so its distance to the truth never exceeds that
of ``W x̂``. The solver is the same accelerated projected gradient as
:func:`~dpmm.reconstruct.nnls`, on ``½ xᵀ(WᵀW)x − (WᵀW x̂)ᵀx``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmm.linalg import Matrix
from dpmm.reconstruct.gram import gram_operator, largest_gram_eigenvalue
from dpmm.reconstruct.least_squares import least_squares
from dpmm.reconstruct.projected_gradient import minimize_nonnegative_quadratic
from dpmm.reconstruct.protocol import (
    DEFAULT_TOLERANCE,
    Estimate,
    ReconstructionError,
    check_total,
    nonnegative_estimate,
    resolve_total,
)

__all__ = ["workload_nnls"]


def workload_nnls(
    W: Matrix,
    A: Matrix,
    y: Any,
    *,
    noise_std: float | np.ndarray | None = None,
    total: float | str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int | None = None,
) -> Estimate:
    """The non-negative x whose workload answers are closest to the least-squares ones.

    Args:
        W: The workload (its columns are the cells of the data vector).
        A: The measured strategy.
        y: The noisy answers, one per row of A.
        noise_std: Noise standard deviation(s) of y (generalized least squares).
        total: A known total ``Σ x``, or ``"estimated"`` for the least-squares one.
        tolerance: Relative KKT residual ``‖G(x)‖ / ‖WᵀW x̂‖`` to stop at.
        max_iterations: Iteration limit.

    Raises:
        ReconstructionError: W and A have different column counts, or bad measurements.

    Example:
        >>> import numpy as np
        >>> from dpmm.linalg import Identity, Prefix
        >>> estimate = workload_nnls(Prefix(2), Identity(2), np.array([3.0, -1.0]))
        >>> np.round(estimate.x, 3)
        array([2.5, 0. ])
    """
    if not isinstance(W, Matrix) or W.shape[1] != A.shape[1]:
        columns = W.shape[1] if isinstance(W, Matrix) else type(W).__name__
        raise ReconstructionError(
            f"The workload has {columns} columns but strategy {A!r} has {A.shape[1]:,}; "
            "both must be over the same cells."
        )
    known_total = check_total(total)
    unbiased = least_squares(A, y, noise_std=noise_std, tolerance=min(tolerance, 1e-8))
    known_total = resolve_total(known_total, float(unbiased.x.sum()))
    gram = gram_operator(W)
    solution = minimize_nonnegative_quadratic(
        lambda v: gram @ v,
        np.asarray(gram @ unbiased.x, dtype=np.float64),
        unbiased.x,
        largest_gram_eigenvalue(W),
        total=known_total,
        tolerance=tolerance,
        max_iterations=max_iterations,
    )
    return nonnegative_estimate(solution, "workload_nnls", unbiased.noise_std, total, known_total)
