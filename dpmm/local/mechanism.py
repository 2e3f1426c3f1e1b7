"""Strategy matrices of ε-LDP mechanisms and their exact error (seed 004, §2.2–§3, §5.2).

A mechanism with finitely many outputs is a column-stochastic strategy matrix ``Q``
(m outputs × n user types): a user of type u reports output o with probability
``Q[o, u]``. It is ε-LDP exactly when every output row satisfies
``max_u Q[o, u] ≤ e^ε · min_u Q[o, u]``.

The server counts the reports (``y[o]`` = users who reported o) and answers the workload
``W`` (p × n) by ``V y``. The reconstruction that minimizes total variance among all
unbiased ones (``V Q = W``) is ``V = W (QᵀD⁻¹Q)⁺ QᵀD⁻¹`` with ``D = diag(Q 1)``. A user of
type u then contributes ``z_u = Σ_j [Σ_o V[j,o]² Q[o,u] − W[j,u]²]`` to the total
variance, so ``Var = Σ_u x_u z_u``:

* worst case (every user of the worst type): ``N · max_u z_u``;
* average case (``x_u = N/n``): ``N/n · Σ_u z_u = N/n · (tr[(QᵀD⁻¹Q)⁺ WᵀW] − ‖W‖_F²)``.

Variances here are per user (N = 1): multiply by N for N users. The normalized variance
(one average query, data vector divided by N) is ``max_u z_u / (p N)``, so the number of
users needed to reach normalized variance α is ``max_u z_u / (p α)``.

Example:
    >>> import numpy as np
    >>> Q = randomized_response(3, 1.0)
    >>> check_ldp(Q, 1.0)
    >>> z = per_user_variance(np.eye(3), Q)
    >>> bool(np.allclose(z, z[0])), round(float(z[0]), 3)
    (True, 4.36)
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve
from scipy.linalg.lapack import dpocon, dpotrf

from dpmm.errors import DpmmError, UnsupportedQueryError

__all__ = [
    "LdpViolationError",
    "as_dense_workload",
    "check_ldp",
    "check_strategy",
    "per_user_variance",
    "per_user_variance_from_gram",
    "randomized_response",
    "reconstruction",
    "sample_complexity",
    "strategy_gram",
    "worst_case_variance",
]

#: Relative slack allowed when checking a floating-point strategy (rounding only).
FLOAT_TOLERANCE = 1e-9
#: Above this reciprocal condition number (LAPACK's estimate) ``QᵀD⁻¹Q`` is inverted by
#: Cholesky; below it, by its eigendecomposition, whose cut-off (10·n·eps) it stays well
#: above, so both give the same variances.
WELL_CONDITIONED = 1e-10


class LdpViolationError(DpmmError, ValueError):
    """A strategy matrix is not a valid ε-LDP mechanism."""


def as_dense_workload(W: object) -> np.ndarray:
    """The workload as a dense float64 array (dpmm ``Matrix`` objects are densified)."""
    dense = getattr(W, "dense", None)
    array = np.asarray(dense() if callable(dense) else W, dtype=np.float64)
    if array.ndim != 2:
        raise UnsupportedQueryError(f"The workload must be a 2-d matrix, got shape {array.shape}.")
    return array


def randomized_response(n: int, epsilon: float) -> np.ndarray:
    """Warner's randomized response: report the truth with probability ∝ e^ε, others ∝ 1."""
    scale = math.exp(epsilon)
    return (np.eye(n) * (scale - 1.0) + 1.0) / (scale + n - 1.0)


def check_strategy(Q: np.ndarray, *, tolerance: float = FLOAT_TOLERANCE) -> np.ndarray:
    """``Q`` as a float array after checking it is non-negative and column-stochastic.

    Raises:
        LdpViolationError: ``Q`` is not 2-d, has a negative entry, or a column not summing to 1.
    """
    Q = np.asarray(Q, dtype=np.float64)
    if Q.ndim != 2 or Q.size == 0:
        raise LdpViolationError(f"A strategy matrix must be a non-empty 2-d array, got {Q.shape}.")
    if not np.all(np.isfinite(Q)) or Q.min() < 0:
        raise LdpViolationError("A strategy matrix must have finite, non-negative entries.")
    sums = Q.sum(axis=0)
    worst = int(np.argmax(np.abs(sums - 1.0)))
    if abs(sums[worst] - 1.0) > tolerance:
        raise LdpViolationError(
            f"Column {worst} of the strategy sums to {sums[worst]!r}, not 1 (it is not a "
            "probability distribution over outputs)."
        )
    return Q


def check_ldp(Q: np.ndarray, epsilon: float, *, tolerance: float = FLOAT_TOLERANCE) -> None:
    """Raise unless ``Q`` is column-stochastic and ``max_u Q[o,u] ≤ e^ε min_u Q[o,u]`` per row.

    ``tolerance`` only absorbs float rounding; :mod:`dpmm.local.protocol` certifies the
    quantized matrix users actually sample from with exact integer arithmetic.

    Raises:
        LdpViolationError: naming the first output row whose ratio exceeds e^ε.

    Example:
        >>> import numpy as np
        >>> try:
        ...     check_ldp(np.array([[0.9, 0.1], [0.1, 0.9]]), 1.0)
        ... except LdpViolationError as error:
        ...     print(str(error)[:48])
        Output row 0 of the strategy has probability rat
    """
    Q = check_strategy(Q, tolerance=tolerance)
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise LdpViolationError(f"ε must be a positive finite number, got {epsilon!r}.")
    bound = math.exp(epsilon)
    high, low = Q.max(axis=1), Q.min(axis=1)
    bad = np.flatnonzero(high > bound * low * (1.0 + tolerance))
    if bad.size:
        row = int(bad[0])
        ratio = math.inf if low[row] == 0 else high[row] / low[row]
        raise LdpViolationError(
            f"Output row {row} of the strategy has probability ratio {ratio:.4g} > "
            f"e^ε = {bound:.4g} (ε = {epsilon:g}), so it is not ε-LDP."
        )


def strategy_gram(Q: np.ndarray) -> np.ndarray:
    """``QᵀD⁻¹Q`` with ``D = diag(Q 1)``; outputs that never occur (zero rows) are dropped."""
    totals = Q.sum(axis=1)
    used = totals > 0
    scaled = Q[used] / totals[used, None]
    return Q[used].T @ scaled  # O(m n²)


def _gram_pinv(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(X⁺, Π)`` of a symmetric PSD Gram: its pseudo-inverse and the projector onto its range.

    Eigenvalues below 10·n·eps of the largest are the rounding noise of a singular Gram.
    """
    values, vectors = np.linalg.eigh(X)
    kept = values > 10 * X.shape[0] * np.finfo(np.float64).eps * max(values.max(), 0.0)
    basis = vectors[:, kept]
    return (basis / values[kept]) @ basis.T, basis @ basis.T


def _unsupported(residual: float) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        "The workload is not in the row space of the strategy matrix, so the mechanism "
        f"cannot estimate it without bias (max |VQ − W| = {residual:.3g})."
    )


def reconstruction(W: object, Q: np.ndarray) -> np.ndarray:
    """The variance-optimal unbiased reconstruction ``V = W (QᵀD⁻¹Q)⁺ QᵀD⁻¹`` (p × m).

    Raises:
        UnsupportedQueryError: some workload query lies outside the row space of ``Q``
            (no unbiased estimate of it exists from this mechanism's reports).
    """
    W = as_dense_workload(W)
    Q = check_strategy(Q)
    totals = Q.sum(axis=1)
    inv_totals = np.divide(1.0, totals, out=np.zeros_like(totals), where=totals > 0)
    X_pinv, _ = _gram_pinv(strategy_gram(Q))
    V = (W @ X_pinv) @ (Q.T * inv_totals)
    # Unbiasedness V Q = W fails exactly when W leaves the row space of Q.
    residual = np.abs(V @ Q - W).max()
    if residual > 1e-6 * max(1.0, np.abs(W).max()):
        raise _unsupported(residual)
    return V


def per_user_variance_from_gram(gram_W: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """The per-user variances ``z_u`` of the optimal reconstruction from ``WᵀW`` alone.

    Column o of V has ``‖V e_o‖² = p_oᵀ X⁺ WᵀW X⁺ p_o`` with ``p_o = Q[o]/D_o`` and
    ``X = QᵀD⁻¹Q``, so ``z_u = Σ_o Q[o,u] ‖V e_o‖² − (WᵀW)_uu`` costs O(m n² + n³) and
    never forms the p × m matrix V (AllRange at n = 256 has p = 32,896).

    Raises:
        UnsupportedQueryError: W is not in the row space of Q: ``W(I − Π) ≠ 0`` for Π the
            projector onto the row space, read off ``diag((I − Π) WᵀW (I − Π))``.
    """
    gram_W = np.asarray(gram_W, dtype=np.float64)
    Q = check_strategy(Q)
    totals = Q.sum(axis=1)
    used = totals > 0
    P = Q[used] / totals[used, None]
    X = Q[used].T @ P
    upper, info = dpotrf(X, lower=0)
    if info == 0 and dpocon(upper, float(np.abs(X).sum(axis=0).max()))[0] > WELL_CONDITIONED:
        # Invertible: Q has full column rank, every W is in its row space; X⁻¹ by Cholesky.
        PX = cho_solve((upper, False), P.T, check_finite=False).T
    else:
        X_pinv, projector = _gram_pinv(X)
        outside = gram_W - projector @ gram_W
        outside -= outside @ projector  # (I − Π) WᵀW (I − Π)
        residual = math.sqrt(max(0.0, float(np.diag(outside).max())))  # max column norm
        if residual > 1e-6 * max(1.0, math.sqrt(float(np.diag(gram_W).max()))):
            raise _unsupported(residual)
        PX = P @ X_pinv
    column_norms = np.einsum("ou,ou->o", PX @ gram_W, PX)  # ‖V e_o‖², O(m n²)
    return column_norms @ Q[used] - np.diag(gram_W)


def per_user_variance(W: object, Q: np.ndarray, V: np.ndarray | None = None) -> np.ndarray:
    """``z_u = Σ_j [Σ_o V[j,o]² Q[o,u] − W[j,u]²]``: the variance one user of type u adds.

    Without V, the optimal reconstruction's, computed from ``WᵀW``
    (:func:`per_user_variance_from_gram`).
    """
    W = as_dense_workload(W)
    if V is None:
        return per_user_variance_from_gram(W.T @ W, Q)
    Q = check_strategy(Q)
    return (np.asarray(V, dtype=np.float64) ** 2).sum(axis=0) @ Q - (W**2).sum(axis=0)


def worst_case_variance(W: object, Q: np.ndarray, users: int = 1) -> float:
    """Total variance when all ``users`` have the worst type: ``users · max_u z_u``."""
    return float(users * per_user_variance(W, Q).max())


def sample_complexity(worst_variance: float, queries: int, alpha: float = 0.01) -> float:
    """Users needed for normalized worst-case variance ``alpha``: ``max_u z_u / (p α)``.

    Args:
        worst_variance: The per-user worst-case variance ``max_u z_u``.
        queries: Number of workload queries p.
        alpha: Target variance of one average query on the normalized data vector x / N.
    """
    if not alpha > 0:
        raise DpmmError(f"The target normalized variance must be positive, got {alpha!r}.")
    return float(worst_variance / (queries * alpha))
