"""The p-Identity strategy of HDMM's OPT_0 template, with a Woodbury inverse of its Gram.

``A = [I; Θ] D``: the identity stacked on ``p`` extra non-negative queries ``Θ``
(``p × n``), every column scaled by ``D`` to unit ``norm``-norm, so the
sensitivity is exactly 1. With ``d = 1/diag(D)`` (the columns' norms before
scaling) and ``X = I + ΘᵀΘ``:

* ``AᵀA = D X D`` and ``(AᵀA)⁻¹ = D⁻¹ X⁻¹ D⁻¹``;
* ``X⁻¹ = I − Θᵀ M⁻¹ Θ`` with the small ``M = I_p + ΘΘᵀ`` (Woodbury), so an
  inverse costs O(n p²) to set up and O(n p) per vector — never an n × n inverse;
* ``trace(G (AᵀA)⁻¹) = Σ_j d_j² G_jj − trace(M⁻¹ (ΘD⁻¹) G (ΘD⁻¹)ᵀ)``: p products
  with G, which is OPT_0's loss.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg

from dpmm.errors import ArgumentError
from dpmm.linalg.base import Matrix, Symmetric, _check_norm
from dpmm.linalg.combinators import Dense, Product

__all__ = [
    "PIdentity",
    "PIdentityGram",
    "PIdentityGramInverse",
    "column_scale",
    "woodbury_factor",
    "woodbury_solve",
]


def column_scale(theta: np.ndarray, norm: int) -> np.ndarray:
    """``d``: the ``norm``-norm of every column of ``[I; Θ]`` (Θ ≥ 0), i.e. ``1 / diag(D)``.

    Example:
        >>> column_scale(np.array([[3.0, 0.0]]), norm=2)
        array([3.16227766, 1.        ])
    """
    if norm == 1:
        return 1.0 + theta.sum(axis=0)
    if norm == 2:
        return np.sqrt(1.0 + np.einsum("ij,ij->j", theta, theta))
    raise ArgumentError(f"A p-Identity strategy is normalized in the 1- or 2-norm, got {norm!r}")


def _check_theta(theta: object) -> np.ndarray:
    array = np.array(theta, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] < 1:
        raise ArgumentError(f"A p-Identity's Θ must be a p × n array with n ≥ 1, got {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ArgumentError("A p-Identity's Θ must have finite, non-negative entries")
    return array


def woodbury_factor(theta: np.ndarray) -> tuple[np.ndarray, bool]:
    """A triangular factor of ``M = I_p + ΘΘᵀ`` for ``scipy.linalg.cho_solve``.

    It is the R of the QR of ``[I_p; Θᵀ]``: ``M = RᵀR``, so R is M's Cholesky factor up to
    row signs, which ``cho_solve`` does not need. Forming ΘΘᵀ and factoring it fails once Θ
    has entries near 10¹⁰ and nearly dependent rows (M's unit floor drowns in rounding), as
    a line search can try; the QR does not. O(n p²), like the product it replaces.
    """
    p = theta.shape[0]
    stacked = np.concatenate([np.eye(p), theta.T], axis=0)
    upper = scipy.linalg.qr(stacked, mode="r", check_finite=False)[0][:p]
    return upper, False


#: Largest bound on the condition number of ``M = I_p + ΘΘᵀ`` for which
#: :func:`woodbury_solve` uses M's Cholesky factor: its solves then lose at most ~8 of
#: 16 digits (optimized strategies sit near 10²–10³); beyond it, the QR of ``[I_p; Θᵀ]``.
CHOLESKY_CONDITION_LIMIT = 1e8


@functools.lru_cache(maxsize=64)
def _strictly_lower(p: int) -> tuple[np.ndarray, np.ndarray]:
    """The indices below the diagonal of a p × p array (the fits ask for a few p, often)."""
    return np.tril_indices(p, -1)


def woodbury_solve(theta: np.ndarray) -> np.ndarray:
    """``M⁻¹ Θ`` for ``M = I_p + ΘΘᵀ`` (which is also ``Θ (I + ΘᵀΘ)⁻¹``).

    M's eigenvalues are at least 1 and at most its largest absolute row sum, so that sum
    bounds its condition number. Below :data:`CHOLESKY_CONDITION_LIMIT`, M is formed
    and factored (``ΘΘᵀ``, then a p × p inverse and one ``p × p × n`` product: the
    fastest BLAS calls); above it, :func:`woodbury_factor`'s QR keeps full accuracy.

    Example:
        >>> theta = np.array([[1.0, 2.0], [0.0, 1.0]])
        >>> M = np.eye(2) + theta @ theta.T
        >>> bool(np.allclose(woodbury_solve(theta), np.linalg.solve(M, theta)))
        True
    """
    p = theta.shape[0]
    small = theta @ theta.T
    small[np.diag_indices(p)] += 1.0
    if np.abs(small).sum(axis=1).max() <= CHOLESKY_CONDITION_LIMIT:
        # LAPACK directly: SciPy's wrappers' checks cost more than the p × p work itself.
        factor, info = scipy.linalg.lapack.dpotrf(small, lower=False)
        if info == 0:
            inverse, info = scipy.linalg.lapack.dpotri(factor, lower=False)
        if info == 0:  # otherwise rounding made M look indefinite: take the QR below
            lower = _strictly_lower(p)  # dpotri fills the upper triangle only
            inverse[lower] = inverse.T[lower]
            return inverse @ theta
    return scipy.linalg.cho_solve(woodbury_factor(theta), theta, check_finite=False)


class PIdentity(Matrix):
    """``[I; Θ] D``: HDMM's p-Identity strategy, columns scaled to unit ``norm``-norm.

    Example:
        >>> A = PIdentity(np.array([[1.0, 1.0, 0.0]]), norm=1)
        >>> A.dense().round(3)
        array([[0.5, 0. , 0. ],
               [0. , 0.5, 0. ],
               [0. , 0. , 1. ],
               [0.5, 0.5, 0. ]])
        >>> A.sensitivity(1)
        1.0
    """

    closed_form_gram_pinv = True

    def __init__(self, theta: np.ndarray, norm: int) -> None:
        self.theta = _check_theta(theta)
        self.norm = int(norm) if norm in (1, 2) else norm
        self.scale = column_scale(self.theta, self.norm)  # d = 1 / diag(D)
        p, n = self.theta.shape
        # The identity block alone has full column rank.
        super().__init__((n + p, n), full_column_rank=True)

    @property
    def p(self) -> int:
        """The number of extra queries (rows of Θ)."""
        return self.theta.shape[0]

    # O(n p) per column.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        scaled = X / self.scale[:, None]
        return np.vstack([scaled, self.theta @ scaled])

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        n = self.shape[1]
        return (Y[:n] + self.theta.T @ Y[n:]) / self.scale[:, None]

    def _dense(self) -> np.ndarray:
        return np.vstack([np.eye(self.shape[1]), self.theta]) / self.scale[None, :]

    def gram(self) -> PIdentityGram:
        return PIdentityGram(self.theta, self.scale)

    def pinv(self) -> Matrix:
        # Full column rank: A⁺ = (AᵀA)⁻¹ Aᵀ, with the Woodbury inverse.
        return Product([self.gram().pinv(), self.T])

    def column_norms(self, p: float = 1) -> np.ndarray:
        p = _check_norm(p)
        if p == np.inf:
            return np.maximum(1.0, self.theta.max(axis=0, initial=0.0)) / self.scale
        return column_scale(self.theta, int(p)) / self.scale

    def uniform_column_norm(self, p: float = 1) -> float | None:
        return 1.0 if _check_norm(p) == self.norm else None

    def __repr__(self) -> str:
        return f"PIdentity(n={self.shape[1]}, p={self.p}, norm={self.norm})"


class PIdentityGram(Symmetric, Matrix):
    """``D (I + ΘᵀΘ) D``, the Gram of a :class:`PIdentity`, with ``d = 1/diag(D)``."""

    def __init__(self, theta: np.ndarray, scale: np.ndarray) -> None:
        self.theta = theta
        self.scale = scale
        n = theta.shape[1]
        super().__init__((n, n), full_column_rank=True)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        scaled = X / self.scale[:, None]
        return (scaled + self.theta.T @ (self.theta @ scaled)) / self.scale[:, None]

    def diagonal(self) -> np.ndarray:
        return (1.0 + np.einsum("ij,ij->j", self.theta, self.theta)) / self.scale**2

    def pinv(self) -> PIdentityGramInverse:
        return PIdentityGramInverse(self.theta, self.scale)

    def __repr__(self) -> str:
        return f"PIdentityGram(n={self.shape[0]}, p={self.theta.shape[0]})"


class PIdentityGramInverse(Symmetric, Matrix):
    """``D⁻¹ (I − Θᵀ M⁻¹ Θ) D⁻¹``: the inverse Gram of a p-Identity, in Woodbury form."""

    def __init__(self, theta: np.ndarray, scale: np.ndarray) -> None:
        self.theta = theta
        self.scale = scale
        # Θ D⁻¹ folds the outer scaling in: the inverse is diag(d) − Θ_sᵀ M⁻¹ Θ_s.
        self._scaled_theta = theta * scale[None, :]
        self._woodbury_factor = woodbury_factor(theta)  # of M = I_p + ΘΘᵀ, Θ unscaled
        n = theta.shape[1]
        super().__init__((n, n), full_column_rank=True)

    def _solve(self, rhs: np.ndarray) -> np.ndarray:
        """``M⁻¹ rhs``."""
        return scipy.linalg.cho_solve(self._woodbury_factor, rhs, check_finite=False)

    # O(n p) per column after the O(n p²) setup.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        ts = self._scaled_theta
        return (self.scale**2)[:, None] * X - ts.T @ self._solve(ts @ X)

    def _dense(self) -> np.ndarray:
        ts = self._scaled_theta
        return np.diag(self.scale**2) - ts.T @ self._solve(ts)

    def diagonal(self) -> np.ndarray:
        ts = self._scaled_theta
        return self.scale**2 - np.einsum("ij,ij->j", ts, self._solve(ts))

    def pinv(self) -> PIdentityGram:
        return PIdentityGram(self.theta, self.scale)

    def _trace_dot(self, other: Matrix) -> float:
        """``trace(other @ self)`` with p products by ``other``: O(n² p) for a dense ``other``."""
        if other.shape != self.shape:
            return NotImplemented
        ts = self._scaled_theta
        diagonal = other.array.diagonal() if isinstance(other, Dense) else other.diagonal()
        # A prefix or all-range Gram applies itself in O(n p): skip its dense array.
        if isinstance(other, Dense) and getattr(other, "generators", None) is None:
            applied = ts @ other.array  # Θ_s G, p × n: the one O(n² p) BLAS call
            cross = np.einsum("ij,ij->", self._solve(applied), ts)
        else:
            applied = other._matmat(np.ascontiguousarray(ts.T))  # G Θ_sᵀ, n × p
            cross = np.einsum("ji,ij->", applied, self._solve(ts))
        return float(diagonal @ self.scale**2 - cross)

    def __repr__(self) -> str:
        return f"PIdentityGramInverse(n={self.shape[0]}, p={self.theta.shape[0]})"
