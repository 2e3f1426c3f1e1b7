"""``diag(W P Wᵀ)`` for a workload W and a symmetric P: the per-query variance factor.

With ``P = (AᵀA)⁺`` this is, up to the noise constant, the variance of every
least-squares answer. The diagonal is linear in P and splits over W's blocks;
a Kron W against a Kron P is the Kron of per-factor diagonals, and a marginal
against the marginal algebra is constant over the table's cells. Intervals are
differences of prefix sums, so many intervals over few cells read their variances from
the prefix sums' covariance ``L P Lᵀ`` (``n × n``, L the prefix matrix).
"""

from __future__ import annotations

import math

import numpy as np

from dpmm.linalg.base import DENSE_LIMIT, Matrix, check_dense_size
from dpmm.linalg.combinators import Dense, Sparse, Sum, VStack, Weighted
from dpmm.linalg.elementary import Identity, Prefix, RangeQueries
from dpmm.linalg.hierarchy import TreeGramInverse
from dpmm.linalg.kron import Kron, kron_rows
from dpmm.linalg.marginals import Marginal, MarginalsGram

__all__ = ["query_variances"]


def query_variances(W: Matrix, P: Matrix) -> np.ndarray:
    """The diagonal of ``W @ P @ Wᵀ`` (one entry per row of W), P symmetric.

    Example:
        >>> from dpmm.linalg import Prefix, Identity
        >>> query_variances(Prefix(3), Identity(3))
        array([1., 2., 3.])
    """
    if P.shape != (W.shape[1], W.shape[1]):
        raise ValueError(f"diag(W P Wᵀ) needs P of shape {W.shape[1]}², got {P!r}")
    check_dense_size(1, W.shape[0], f"the per-query variances of {W!r}")
    return _variances(W, P)


def _variances(W: Matrix, P: Matrix) -> np.ndarray:
    W, P = _single_factor(W), _single_factor(P)
    if isinstance(W, VStack):
        return np.concatenate([_variances(block, P) for block in W.blocks])
    if isinstance(W, Weighted):
        return W.weight**2 * _variances(W.base, P)
    if isinstance(P, Weighted):
        return P.weight * _variances(W, P.base)
    if isinstance(P, Sum):
        return np.sum([_variances(W, term) for term in P.terms], axis=0)
    if (
        isinstance(W, Marginal)
        and isinstance(P, MarginalsGram)
        and W.domain_shape == P.domain_shape
    ):
        return np.full(W.shape[0], _marginal_variance(W, P))
    if isinstance(W, Identity):
        return P.diagonal()
    if isinstance(W, Prefix) and isinstance(P, TreeGramInverse):
        return P.prefix_variances()
    if isinstance(W, RangeQueries) and W.shape[0] > W.shape[1] and W.shape[1] ** 2 <= DENSE_LIMIT:
        return _interval_variances(W, P)
    if isinstance(W, Kron) and isinstance(P, MarginalsGram):
        return _variances(W, P.as_kron_sum())
    if (
        isinstance(W, Kron)
        and isinstance(P, Kron)
        and P.is_square_over([w.shape[1] for w in W.factors])
    ):
        parts = [_variances(w, p) for w, p in zip(W.factors, P.factors, strict=True)]
        return kron_rows(parts)
    return _generic(W, P)


def _single_factor(M: Matrix) -> Matrix:
    """A Kron product of one factor is that factor (its structure is the factor's)."""
    return M.factors[0] if isinstance(M, Kron) and len(M.factors) == 1 else M


def _marginal_variance(W: Marginal, P: MarginalsGram) -> float:
    # M_S C(a) M_Sᵀ = ⊗_{i∈S} (I or J) · Π_{i∉S} (n_i if i∈a else n_i²): its diagonal is
    # constant. All a at once, one attribute at a time: a loop over the a's took 2 s of the
    # 364 three-way marginals of the Adult domain.
    weights = np.fromiter(P.coefficients.values(), dtype=np.float64, count=len(P.coefficients))
    for i, n in enumerate(W.domain_shape):
        if not W.mask >> i & 1:
            weights = weights * np.where(P.membership[:, i], float(n), float(n) * n)
    return math.fsum(weights)


def _interval_variances(W: RangeQueries, P: Matrix) -> np.ndarray:
    """``Var(S_h − S_{l−1})`` for each interval ``[l, h]``, from the covariance of the
    prefix sums ``S`` (padded with ``S_{−1} = 0``): O(n² + cost(P) on n columns + m)."""
    n = W.shape[1]
    prefix = Prefix(n)
    covariance = np.zeros((n + 1, n + 1))
    covariance[1:, 1:] = prefix._matmat(P._matmat(prefix.T.dense()))
    low, high = W.low, W.high + 1
    diagonal = np.diagonal(covariance)
    return diagonal[high] + diagonal[low] - 2.0 * covariance[high, low]


def _generic(W: Matrix, P: Matrix) -> np.ndarray:
    """Rows of W in blocks: ``Σ_j (Wᵀ)_{j,i} (P Wᵀ)_{j,i}`` — O(cost(P Wᵀ))."""
    if isinstance(W, Dense | Sparse) and isinstance(P, Dense | Sparse) and W.size <= DENSE_LIMIT:
        dense_w = W.dense()
        return np.einsum("ij,ij->i", dense_w, P._matmat(dense_w.T).T)
    variances = np.empty(W.shape[0])
    for start, block in W.T._column_blocks():
        variances[start : start + block.shape[1]] = np.einsum("ji,ji->i", block, P._matmat(block))
    return variances
