"""What every reconstruction solver shares: its signature, its result, its input checks.

A solver turns noisy strategy answers ``y = A x + noise`` into an estimate
``x̂`` of the data vector. Solvers are plain functions with one keyword-only
signature (:class:`Solver`), so a release configuration can swap
:func:`~dpmm.reconstruct.least_squares` for :func:`~dpmm.reconstruct.nnls`
without touching anything else.

Noise may differ between measured blocks: ``noise_std`` is a scalar (every
answer has the same noise) or one standard deviation per row of ``A``. Least
squares is then the generalized least squares ``min ‖D⁻¹(A x − y)‖²`` with
``D = diag(noise_std)``, whose estimate has covariance ``(AᵀD⁻²A)⁺``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg import Matrix
from dpmm.reconstruct.projected_gradient import Solution

__all__ = [
    "DEFAULT_TOLERANCE",
    "ESTIMATED_TOTAL",
    "Estimate",
    "ReconstructionError",
    "Solver",
    "check_measurements",
    "check_total",
    "nonnegative_estimate",
    "resolve_total",
]

#: Relative optimality residual at which the iterative solvers stop.
DEFAULT_TOLERANCE = 1e-6


class ReconstructionError(DpmmError, ValueError):
    """Measurements, noise scales or a known total that a solver cannot use."""


@dataclass(frozen=True, eq=False)
class Estimate:
    """A reconstructed data vector and how it was obtained.

    Attributes:
        x: The estimate ``x̂`` (a numpy array, or a Dask array from the chunked solver).
        method: ``"least_squares"``, ``"nnls"`` or ``"workload_nnls"``.
        noise_std: The noise standard deviation(s) the solver weighted the rows by
            (``None`` when not given: rows were weighted equally).
        total: The known total ``Σ x`` the estimate was constrained to, if any (None when
            it was constrained to the least-squares estimate of the total).
        iterations: Solver iterations (0 for a closed form).
        residual: The relative optimality residual reached (see each solver).
        converged: Whether ``residual`` reached the requested tolerance.
    """

    x: Any
    method: str
    noise_std: float | np.ndarray | None
    total: float | None
    iterations: int
    residual: float
    converged: bool


class Solver(Protocol):
    """The shared signature of :func:`least_squares` and :func:`nnls` (and of
    ``functools.partial(workload_nnls, W)``)."""

    def __call__(
        self,
        A: Matrix,
        y: Any,
        *,
        noise_std: float | np.ndarray | None = None,
        total: float | str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        max_iterations: int | None = None,
    ) -> Estimate: ...


def check_measurements(
    A: Matrix, y: object, noise_std: float | np.ndarray | None
) -> tuple[np.ndarray, float | np.ndarray | None]:
    """Validate ``y`` against ``A`` and ``noise_std``; return them as float arrays.

    Raises:
        ReconstructionError: ``A`` is not a dpmm matrix, ``y`` has the wrong length or a
            non-finite value, or a noise standard deviation is not positive and finite.

    Example:
        >>> from dpmm.linalg import Identity
        >>> check_measurements(Identity(2), [1, 2], None)
        (array([1., 2.]), None)
    """
    if not isinstance(A, Matrix):
        raise ReconstructionError(f"The strategy must be a dpmm matrix, got {type(A).__name__}.")
    values = np.asarray(y, dtype=np.float64)
    if values.ndim != 1 or values.shape[0] != A.shape[0]:
        raise ReconstructionError(
            f"The measurements have shape {values.shape} but strategy {A!r} has "
            f"{A.shape[0]:,} rows; pass one noisy answer per row."
        )
    bad = np.count_nonzero(~np.isfinite(values))
    if bad:
        raise ReconstructionError(
            f"The measurements contain {bad:,} NaN or infinite values; "
            "every noisy answer must be a finite number."
        )
    return values, check_noise_std(noise_std, A.shape[0])


def check_noise_std(noise_std: float | np.ndarray | None, rows: int) -> float | np.ndarray | None:
    """A positive scalar, or a positive vector of length ``rows`` (a constant vector → scalar)."""
    if noise_std is None:
        return None
    scales = np.asarray(noise_std, dtype=np.float64)
    if scales.ndim == 1 and scales.shape[0] != rows:
        raise ReconstructionError(
            f"noise_std has {scales.shape[0]:,} entries but there are {rows:,} measurements; "
            "give one standard deviation per measurement or a single number."
        )
    if scales.ndim > 1:
        raise ReconstructionError(
            f"noise_std must be a number or a vector, got an array of shape {scales.shape}."
        )
    if not np.all(np.isfinite(scales)) or not np.all(scales > 0):
        raise ReconstructionError(
            "Every noise standard deviation must be a positive finite number."
        )
    if scales.ndim == 0:
        return float(scales)
    if rows and np.all(scales == scales[0]):
        return float(scales[0])
    return scales


#: ``total=ESTIMATED_TOTAL``: constrain ``Σx`` to the least-squares estimate of the total.
ESTIMATED_TOTAL = "estimated"


def check_total(total: float | str | None) -> float | str | None:
    """A known total must be a non-negative finite number, ``"estimated"`` or ``None``."""
    if total is None or (isinstance(total, str) and total == ESTIMATED_TOTAL):
        return total
    if isinstance(total, str):
        raise ReconstructionError(
            f"The total must be a number or {ESTIMATED_TOTAL!r}, got {total!r}."
        )
    value = float(total)
    if not np.isfinite(value) or value < 0:
        raise ReconstructionError(
            f"The known total must be a non-negative finite number, got {total!r}."
        )
    return value


def resolve_total(total: float | str | None, least_squares_total: float) -> float | None:
    """The total a constrained solver uses: the known one, or the least-squares estimate's.

    The least-squares (GLS) total is the minimum-variance unbiased estimate of ``Σx`` from
    the measurements, so constraining NNLS to it is post-processing: no extra budget. It
    removes NNLS's upward bias on sparse data (every clipped cell adds mass), which
    otherwise accumulates in long range queries.
    """
    if isinstance(total, str):
        return max(float(least_squares_total), 0.0)
    return total


def nonnegative_estimate(
    solution: Solution,
    method: str,
    noise_std: float | np.ndarray | None,
    total: float | str | None,
    used: float | None,
) -> Estimate:
    """The :class:`Estimate` of a non-negative solver's :class:`Solution`.

    ``total`` is the total the caller was given and ``used`` the one it constrained to.
    The estimate reports ``used``, unless it was estimated from the measurements
    (``total="estimated"``); then None, because that total carries the least-squares
    total's error and its standard error must not be taken as zero.
    """
    return Estimate(
        solution.x,
        method,
        noise_std,
        None if isinstance(total, str) else used,
        solution.iterations,
        solution.residual,
        solution.converged,
    )
