"""Non-negative (generalized) least squares on implicit strategies.

``x̂ = argmin_{x ≥ 0} ‖D⁻¹(A x − y)‖²`` (and ``Σx = total`` when the total is
known), warm-started from least squares. A Kronecker Gram whose factors have dense
eigendecompositions is solved by ADMM (:mod:`~dpmm.reconstruct.admm`: each step an
exact solve in the factors' eigenbases); every other strategy by the accelerated
projected gradient of :mod:`~dpmm.reconstruct.projected_gradient`, with step ``1/L``
for ``L`` the largest eigenvalue of ``AᵀD⁻²A`` (Kronecker strategies: the product of
their factors'; otherwise Lanczos on the implicit Gram). Both stop on the same KKT
residual. Counts are non-negative, so this projection can only bring the
estimate's strategy answers closer to the truth (seed 000: a large gain on
sparse data).

A Dask array ``y`` (shaped as the Kronecker strategy's output tensor) runs the
same solver chunk by chunk: see :mod:`~dpmm.reconstruct.chunked`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from dpmm.linalg import (
    Dense,
    Matrix,
    Product,
    Weighted,
    check_dense_size,
)
from dpmm.reconstruct.admm import KronSpectrum, kron_spectrum, minimize_kron_quadratic
from dpmm.reconstruct.gram import gram_operator, largest_gram_eigenvalue
from dpmm.reconstruct.least_squares import least_squares, whiten
from dpmm.reconstruct.projected_gradient import minimize_nonnegative_quadratic
from dpmm.reconstruct.protocol import (
    DEFAULT_TOLERANCE,
    Estimate,
    check_measurements,
    check_noise_std,
    check_total,
    nonnegative_estimate,
    resolve_total,
)

__all__ = ["NNLSSetup", "nnls", "nnls_setup"]

#: A strategy without a structured Gram, on at most this many cells, gets its Gram and the
#: Gram's Cholesky factor computed once (:func:`nnls_setup`): each iteration is then one
#: n × n product instead of a product with A and one with Aᵀ, and the least-squares start
#: two triangular solves instead of LSMR.
DENSE_GRAM_LIMIT = 4096


@dataclass(frozen=True, eq=False)
class NNLSSetup:
    """What NNLS needs of a strategy and its noise scales, computed once for many solves
    (a bootstrap's replicates): the whitened strategy, its Gram as an operator, the step's
    Lipschitz constant and, for a dense Gram, its Cholesky factor; for a Kronecker Gram
    (:func:`~dpmm.reconstruct.admm.kron_spectrum`), its spectrum, and then ADMM solves."""

    A: Matrix
    scales: float | np.ndarray | None
    whitened: Matrix
    gram: Matrix
    lipschitz: float
    cholesky: tuple[np.ndarray, bool] | None
    spectrum: KronSpectrum | None = None

    def solve(
        self,
        y: np.ndarray,
        *,
        total: float | str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        max_iterations: int | None = None,
        start: np.ndarray | None = None,
    ) -> Estimate:
        """:func:`nnls` of this strategy's answers ``y`` (a numpy vector), warm-started
        from least squares or from ``start`` (projected onto the feasible set first)."""
        values, scales = check_measurements(self.A, y, self.scales)
        known_total = check_total(total)
        # A common scale cancels out of the estimate; per-row scales whiten the rows.
        rhs = values if np.ndim(scales) == 0 else values / np.asarray(scales)
        linear = np.asarray(self.whitened.T @ rhs, dtype=np.float64)
        if start is not None:
            start = np.asarray(start, dtype=np.float64).reshape(-1)
        elif self.cholesky is not None:
            start = scipy.linalg.cho_solve(self.cholesky, linear)
        else:
            fit = least_squares(self.A, values, noise_std=scales, tolerance=min(tolerance, 1e-8))
            start = fit.x
        known_total = resolve_total(known_total, float(start.sum()))
        gram = self.gram
        # ADMM where the Gram is a Kronecker product with a spectrum, else projected gradient.
        solve, hessian = (
            (minimize_kron_quadratic, self.spectrum)
            if self.spectrum is not None
            else (minimize_nonnegative_quadratic, lambda v: gram @ v)
        )
        solution = solve(
            hessian,
            linear,
            start,
            self.lipschitz,
            total=known_total,
            tolerance=tolerance,
            max_iterations=max_iterations,
        )
        return nonnegative_estimate(solution, "nnls", scales, total, known_total)


def nnls_setup(A: Matrix, noise_std: float | np.ndarray | None = None) -> NNLSSetup:
    """:class:`NNLSSetup` for ``A`` and its measurements' noise standard deviation(s).

    Raises:
        ReconstructionError: a bad noise scale.
    """
    scales = check_noise_std(noise_std, A.shape[0])
    whitened = whiten(A, scales)
    gram = gram_operator(whitened)
    unweighted = gram.base if isinstance(gram, Weighted) else gram
    if isinstance(unweighted, Product) and A.shape[1] <= DENSE_GRAM_LIMIT:
        check_dense_size(A.shape[0], A.shape[1], f"the Gram of {A!r}")
        dense = np.asarray(whitened.dense(), dtype=np.float64)
        matrix = dense.T @ dense
        try:
            cholesky = scipy.linalg.cho_factor(matrix)
        except np.linalg.LinAlgError:  # singular: least squares finds the start
            cholesky = None
        largest = float(scipy.linalg.eigvalsh(matrix, subset_by_index=[A.shape[1] - 1] * 2)[0])
        return NNLSSetup(A, scales, whitened, Dense(matrix), largest, cholesky)
    lipschitz = largest_gram_eigenvalue(whitened)
    return NNLSSetup(A, scales, whitened, gram, lipschitz, None, kron_spectrum(gram))


def nnls(
    A: Matrix,
    y: Any,
    *,
    noise_std: float | np.ndarray | None = None,
    total: float | str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int | None = None,
) -> Estimate:
    """Non-negative (generalized) least squares: ``argmin_{x ≥ 0} ‖D⁻¹(A x − y)‖²``.

    Args:
        A: The measured strategy.
        y: The noisy answers (a numpy vector; or a Dask array shaped as the output
            tensor of a Kronecker A, for the chunked solver).
        noise_std: Noise standard deviation: one number, or one per row.
        total: A known total ``Σ x`` the estimate must match exactly, or ``"estimated"``
            for the least-squares estimate of the total (post-processing; on sparse data
            it removes the upward bias of clipping, see :func:`resolve_total`).
        tolerance: Relative KKT residual ``‖G(x)‖ / ‖AᵀD⁻²y‖`` to stop at, ``G`` the
            gradient mapping (zero exactly at the optimum).
        max_iterations: Iteration limit (ADMM or projected-gradient iterations, by the
            solver the strategy gets).

    Returns:
        An :class:`Estimate` with ``x ≥ 0``; ``residual`` is the relative KKT residual.

    Example:
        >>> import numpy as np
        >>> from dpmm.linalg import Identity
        >>> nnls(Identity(3), np.array([2.0, -1.0, 0.5])).x
        array([2. , 0. , 0.5])
    """
    if hasattr(y, "dask"):
        from dpmm.reconstruct.chunked import chunked_nnls

        return chunked_nnls(A, y, noise_std, total, tolerance, max_iterations)
    values, scales = check_measurements(A, y, noise_std)
    setup = nnls_setup(A, scales)
    return setup.solve(values, total=total, tolerance=tolerance, max_iterations=max_iterations)
