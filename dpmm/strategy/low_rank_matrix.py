"""A wide strategy ``A`` (``r × n``, ``r < n``) kept with its thin SVD.

The Low-Rank Mechanism (seed 002) measures a strategy with a few hundred rows
over a domain of thousands of cells. As a generic :class:`~dpmm.linalg.Dense`
its Gram ``AᵀA`` is a dense ``n × n`` array and its pseudo-inverse an ``O(n³)``
dense ``pinv``. With the thin SVD ``A = U diag(s) Vᵀ`` (``V`` of shape ``n × k``,
``k = rank A``) everything the matrix mechanism needs stays thin:

* ``AᵀA = V diag(s²) Vᵀ`` and ``(AᵀA)⁺ = V diag(1/s²) Vᵀ`` (:class:`LowRankGram`);
* the row-space projector is ``V Vᵀ``;
* ``trace(G · V diag(d) Vᵀ) = Σ_j d_j · v_jᵀ G v_j``: one product ``G V``, O(cost(G) k).

Singular values below ``1e-10`` of the largest count as zero, as in
:meth:`dpmm.linalg.Matrix.pinv`.
"""

from __future__ import annotations

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg import Matrix
from dpmm.linalg.base import PINV_TOLERANCE, _check_norm, _pnorm
from dpmm.linalg.spectral import thin_svd

__all__ = ["LowRankGram", "LowRankStrategy"]


class LowRankGram(Matrix):
    """``V diag(d) Vᵀ`` for ``V`` with orthonormal columns (``n × k``) and weights ``d``.

    Example:
        >>> V = np.linalg.qr(np.arange(12.0).reshape(4, 3) ** 2 + 1)[0]
        >>> G = LowRankGram(V, np.array([4.0, 1.0, 0.25]))
        >>> bool(np.allclose(G.pinv().dense(), np.linalg.pinv(G.dense())))
        True
    """

    def __init__(self, basis: np.ndarray, values: np.ndarray) -> None:
        basis = np.asarray(basis, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if basis.ndim != 2 or basis.shape[1] != values.size:
            raise DpmmError(
                f"A low-rank Gram needs one value per basis column: "
                f"basis {basis.shape}, {values.size} values"
            )
        super().__init__((basis.shape[0], basis.shape[0]))
        self.basis = basis
        self.values = values

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.basis @ (self.values[:, None] * (self.basis.T @ X))  # O(n k columns)

    def _adjoint(self) -> LowRankGram:
        return self

    def pinv(self) -> LowRankGram:
        """``V diag(d⁺) Vᵀ`` (zero weights stay zero)."""
        safe = np.where(self.values != 0, self.values, 1.0)
        return LowRankGram(self.basis, np.where(self.values != 0, 1.0 / safe, 0.0))

    def diagonal(self) -> np.ndarray:
        return (self.basis * self.basis) @ self.values

    def trace(self) -> float:
        return float(self.values.sum())

    def _trace_dot(self, other: Matrix) -> float | object:
        """``trace(V diag(d) Vᵀ G) = Σ_j d_j v_jᵀ G v_j``; cost one ``G V`` product."""
        if other.shape != self.shape:
            return NotImplemented
        applied = np.asarray(other @ self.basis)  # n × k
        return float(np.einsum("ij,ij,j->", self.basis, applied, self.values))

    def __repr__(self) -> str:
        return f"LowRankGram({self.shape[0]}, rank {self.basis.shape[1]})"


class LowRankStrategy(Matrix):
    """A dense ``r × n`` strategy that answers Gram, pseudo-inverse and traces thinly.

    Args:
        array: The strategy's entries (``r × n``, typically ``r ≪ n``).

    Example:
        >>> A = LowRankStrategy(np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]]))
        >>> bool(np.allclose(A.pinv().dense(), np.linalg.pinv(A.dense())))
        True
        >>> A.sensitivity(1)
        2.0
    """

    def __init__(self, array: np.ndarray) -> None:
        array = np.array(array, dtype=np.float64)
        if array.ndim != 2 or not np.all(np.isfinite(array)):
            raise DpmmError("A low-rank strategy needs a 2-D array of finite numbers")
        super().__init__(array.shape)
        self.array = array
        # Thin SVD of the short side: O(r² n) for r ≤ n.
        left, singular, right = thin_svd(array)
        largest = float(singular[0]) if singular.size else 0.0
        keep = singular > PINV_TOLERANCE * largest if largest > 0 else singular > 0
        self.left = left[:, keep]
        self.singular = singular[keep]
        self.right = right[keep].T  # n × k, orthonormal columns

    @property
    def rank(self) -> int:
        """The numerical rank ``k``."""
        return int(self.singular.size)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.array @ X

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return self.array.T @ X

    def _dense(self) -> np.ndarray:
        return self.array

    @property
    def known_full_column_rank(self) -> bool:
        return self.rank == self.shape[1]

    def gram(self) -> LowRankGram:
        """``AᵀA = V diag(s²) Vᵀ``."""
        return LowRankGram(self.right, self.singular**2)

    def pinv(self) -> Matrix:
        """``A⁺ = V diag(1/s) Uᵀ`` as a dense ``n × r`` matrix."""
        from dpmm.linalg import Dense

        return Dense((self.right / self.singular) @ self.left.T)

    def row_space_projector(self) -> LowRankGram:
        """``V Vᵀ``, the orthogonal projector onto the row space."""
        return LowRankGram(self.right, np.ones(self.rank))

    def column_norms(self, p: float = 1) -> np.ndarray:
        return _pnorm(self.array, _check_norm(p))

    def __repr__(self) -> str:
        return f"LowRankStrategy({self.shape[0]} × {self.shape[1]}, rank {self.rank})"
