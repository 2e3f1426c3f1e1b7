"""(Generalized) least squares: closed form where the structure has one, else LSMR.

``x̂ = (AᵀD⁻²A)⁺ AᵀD⁻² y`` with ``D = diag(noise_std)``. The pseudo-inverse of the
Gram is never formed densely for a large matrix: the whitened strategy's own
:meth:`~dpmm.linalg.Matrix.gram_pinv` gives it where its type knows a closed form (a
Kronecker product the product of its factors', a weighted union of marginals the
marginal algebra's, the tree, wavelet, prefix, range, eigen-design, p-Identity and
residual strategies theirs). Anything else is solved by
:func:`scipy.sparse.linalg.lsmr` on the implicit operator.

With a known total ``1ᵀx = T`` the estimate is the equality-constrained GLS
``x̂_T = x̂ + P1 (T − 1ᵀx̂) / (1ᵀP1)``, ``P = (AᵀD⁻²A)⁺``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg, lsmr

from dpmm.linalg import Marginals, Matrix, Product, Sparse, VStack, Weighted
from dpmm.linalg.marginals import mask_members
from dpmm.reconstruct.protocol import (
    DEFAULT_TOLERANCE,
    Estimate,
    ReconstructionError,
    check_measurements,
    check_total,
)

__all__ = ["least_squares", "whiten"]


def whiten(A: Matrix, noise_std: float | np.ndarray | None) -> Matrix:
    """``D⁻¹ A``, keeping the structure when the noise is constant on each block.

    A scalar (or absent) ``noise_std`` leaves A unchanged: a common scale does not
    change the estimate. A union of marginals or a vertical stack whose blocks each
    have one noise level stays a union of marginals or a stack of weighted blocks, so
    its Gram keeps its closed-form pseudo-inverse.
    """
    if noise_std is None or np.ndim(noise_std) == 0:
        return A
    scales = np.asarray(noise_std, dtype=np.float64)
    per_block = _block_constant(A, scales)
    if per_block is not None and isinstance(A, Marginals):
        weights = {
            tuple(mask_members(mask)): weight / scale
            for (mask, weight), scale in zip(A.weights.items(), per_block, strict=True)
        }
        return Marginals(A.domain_shape, weights)
    if per_block is not None and isinstance(A, VStack):
        return VStack(
            [Weighted(1.0 / s, block) for block, s in zip(A.blocks, per_block, strict=True)]
        )
    return Product([Sparse(sp.diags_array(1.0 / scales)), A])


def _block_constant(A: Matrix, scales: np.ndarray) -> list[float] | None:
    if not isinstance(A, VStack):
        return None
    levels = []
    for start, stop in zip(A.offsets[:-1], A.offsets[1:], strict=True):
        block = scales[start:stop]
        if block.size and np.any(block != block[0]):
            return None
        levels.append(float(block[0]) if block.size else 1.0)
    return levels


def least_squares(
    A: Matrix,
    y: object,
    *,
    noise_std: float | np.ndarray | None = None,
    total: float | str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int | None = None,
) -> Estimate:
    """The (generalized) least-squares estimate ``argmin ‖D⁻¹(A x − y)‖²``.

    Args:
        A: The measured strategy.
        y: The noisy answers, one per row of A.
        noise_std: Noise standard deviation: one number, or one per row (GLS).
        total: A known total ``Σ x``; the estimate is then constrained to it.
            ``"estimated"`` changes nothing here: least squares already matches its
            own estimate of the total.
        tolerance: LSMR's ``atol``/``btol`` when there is no closed form.
        max_iterations: LSMR's iteration limit (default: 4 · min(A.shape)).

    Returns:
        An :class:`Estimate`; ``residual`` is LSMR's relative normal-equation
        residual ``‖AᵀD⁻¹r‖ / (‖D⁻¹A‖‖D⁻¹r‖)`` (0 for a closed form).

    Raises:
        ReconstructionError: inconsistent shapes, a non-finite answer, a bad noise
            scale or a negative total.

    Example:
        >>> import numpy as np
        >>> from dpmm.linalg import Hierarchical
        >>> estimate = least_squares(Hierarchical(2), np.array([4.0, 1.0, 2.0]))
        >>> np.round(estimate.x, 6)
        array([1.333333, 2.333333])
    """
    values, scales = check_measurements(A, y, noise_std)
    known_total = check_total(total)
    if isinstance(known_total, str):
        known_total = None
    whitened = whiten(A, scales)
    # A common scale cancels out of the estimate; per-row scales whiten the rows.
    rhs = values if np.ndim(scales) == 0 else values / np.asarray(scales)
    pinv = whitened.gram_pinv()
    if pinv is not None:
        x = np.asarray(pinv @ (whitened.T @ rhs), dtype=np.float64).reshape(-1)
        iterations, residual, converged = 0, 0.0, True
    else:
        x, iterations, residual, converged = _lsmr(whitened, rhs, tolerance, max_iterations)
    if known_total is not None:
        direction = _apply_pinv(whitened, pinv, np.ones(A.shape[1]), tolerance)
        mass = float(direction.sum())
        if mass <= 0:
            raise ReconstructionError(
                "The known total cannot be imposed: the strategy does not measure the total."
            )
        x = x + direction * ((known_total - float(x.sum())) / mass)
    return Estimate(x, "least_squares", scales, known_total, iterations, residual, converged)


def _lsmr(
    A: Matrix, rhs: np.ndarray, tolerance: float, max_iterations: int | None
) -> tuple[np.ndarray, int, float, bool]:
    # LSMR's own default (min(m, n) steps) is exact only in exact arithmetic.
    limit = 4 * min(A.shape) if max_iterations is None else max_iterations
    result = lsmr(A, rhs, atol=tolerance, btol=tolerance, maxiter=limit)
    x, stop, iterations = result[0], result[1], result[2]
    norm_ar, norm_a, norm_r = result[4], result[5], result[3]
    residual = float(norm_ar / max(norm_a * norm_r, np.finfo(float).tiny))
    return np.asarray(x, dtype=np.float64), int(iterations), residual, stop in (0, 1, 2, 4, 5)


def _apply_pinv(
    whitened: Matrix, pinv: Matrix | None, vector: np.ndarray, tolerance: float
) -> np.ndarray:
    """``(AᵀA)⁺ v``: structured when possible, else conjugate gradients on ``AᵀA``."""
    if pinv is not None:
        return np.asarray(pinv @ vector, dtype=np.float64).reshape(-1)
    n = whitened.shape[1]
    gram = LinearOperator((n, n), matvec=lambda v: whitened.T @ (whitened @ v), dtype=np.float64)
    solution, info = cg(gram, vector, rtol=min(tolerance, 1e-10), maxiter=10 * n)
    if info != 0:
        raise ReconstructionError(
            "Conjugate gradients did not converge on the strategy's Gram; "
            "the strategy may not have full column rank."
        )
    return np.asarray(solution, dtype=np.float64)
