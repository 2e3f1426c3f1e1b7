"""Expected error of the matrix mechanism, exactly, through the matrices' structure.

Answering workload ``W`` by measuring strategy ``A`` with noise of variance
``v`` per answer and least-squares reconstruction gives unbiased answers with
covariance ``v · W (AᵀA)⁺ Wᵀ``. So (DESIGN.md §4, seed 000):

* total squared error  ``v · trace(WᵀW (AᵀA)⁺)``,
* per-query variance   ``v · diag(W (AᵀA)⁺ Wᵀ)``,
* with ``v = 2 ‖A‖₁² / ε²`` (Laplace, pure ε-DP) or ``v = ‖A‖₂² / (2ρ)`` (Gaussian, ρ-zCDP).

A :class:`~dpmm.linalg.table_krons.TableKrons` strategy (OPT_+ on a large domain) is
answered from its blocks' consistent tables instead, whose covariance
(:mod:`dpmm.reconstruct.table_krons`) takes the place of ``(AᵀA)⁺``.

The SVD bound ``v₁ · (Σ σᵢ(W))² / n`` (``v₁`` the variance at sensitivity 1)
is the least total squared error any strategy can reach under Gaussian noise,
and a lower bound under Laplace noise (Li & Miklau).
"""

from __future__ import annotations

import math

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import DENSE_LIMIT, MarginalsGram, Matrix, query_variances, trace_of_product
from dpmm.linalg.spectral import nuclear_norm, row_space_projector
from dpmm.linalg.table_krons import TableKrons
from dpmm.privacy import PrivacyParameter
from dpmm.reconstruct.table_krons import answer_error, answer_variances

__all__ = [
    "expected_error",
    "identity_error",
    "noise_variance",
    "per_query_variance",
    "rmse",
    "svd_bound",
]

#: Relative slack when deciding whether a workload lies in a strategy's row space.
SUPPORT_TOLERANCE = 1e-8


def noise_variance(A: Matrix, privacy: PrivacyParameter) -> float:
    """The variance of the noise on each answer of strategy ``A`` under ``privacy``.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> from dpmm.privacy import PureDP
        >>> noise_variance(Prefix(4), PureDP(1))   # sensitivity 4: 2·4²/1²
        32.0
    """
    return privacy.noise_variance(A.sensitivity(privacy.norm))


def _check_shapes(W: Matrix, A: Matrix) -> None:
    if W.shape[1] != A.shape[1]:
        raise ValueError(
            f"Workload {W!r} has {W.shape[1]:,} columns but strategy {A!r} has {A.shape[1]:,}"
        )


def _same_algebra(workload_gram: Matrix, strategy_gram: Matrix) -> bool:
    return (
        isinstance(workload_gram, MarginalsGram)
        and isinstance(strategy_gram, MarginalsGram)
        and workload_gram.domain_shape == strategy_gram.domain_shape
    )


def _algebra_trace(workload_gram: MarginalsGram, strategy_gram: MarginalsGram, power: int) -> float:
    """``Σ_b mult(b) λ_b(WᵀW) λ_b(AᵀA)^power`` over A's non-zero eigenvalues.

    With both Grams in the marginal algebra they share the eigenspaces E_b: power 0 gives
    ``trace(WᵀW P_A)`` (the row-space projector), power −1 gives ``trace(WᵀW (AᵀA)⁺)``,
    without writing either matrix back in the C(a) basis.
    """
    mine = workload_gram.eigenvalues()
    return math.fsum(
        workload_gram.multiplicity(b) * mine[b] * value**power
        for b, value in strategy_gram.eigenvalues().items()
        if b in mine
    )


def _check_supported(W: Matrix, A: Matrix, workload_gram: Matrix) -> None:
    """Raise unless every query of W is a linear combination of A's queries."""
    if A.known_full_column_rank:
        return
    total = workload_gram.trace()
    if _same_algebra(workload_gram, A.gram()):
        captured = _algebra_trace(workload_gram, A.gram(), 0)
    else:
        captured = trace_of_product(workload_gram, row_space_projector(A))
    if captured < total * (1 - SUPPORT_TOLERANCE) - SUPPORT_TOLERANCE:
        raise UnsupportedQueryError(
            f"Strategy {A!r} cannot answer workload {W!r}: "
            f"{1 - captured / total:.3g} of the workload lies outside the strategy's row space"
        )


def expected_error(
    W: Matrix, A: Matrix, privacy: PrivacyParameter, *, variance: float | None = None
) -> float:
    """Total expected squared error over all queries of ``W``, measuring ``A``.

    ``variance`` is the noise variance per answer of ``A``; by default the continuous one
    for ``privacy`` at A's sensitivity (a release states the exact discrete one, see
    :func:`dpmm.measure.mechanism.planned_noise_variance`).

    Example:
        >>> from dpmm.linalg import Identity, Prefix
        >>> from dpmm.privacy import PureDP
        >>> expected_error(Prefix(4), Identity(4), PureDP(1))   # 2 · (1+2+3+4)
        20.0
    """
    _check_shapes(W, A)
    v = noise_variance(A, privacy) if variance is None else variance
    if isinstance(A, TableKrons):  # answered from its consistent tables, not the stack's LS
        return v * answer_error(W, A)
    workload_gram = W.gram()
    _check_supported(W, A, workload_gram)
    if A is W and A.known_full_column_rank:  # trace(WᵀW (WᵀW)⁻¹): no inverse needed
        trace = float(A.shape[1])
    elif _same_algebra(workload_gram, A.gram()):
        trace = _algebra_trace(workload_gram, A.gram(), -1)
    else:
        trace = trace_of_product(workload_gram, A.gram().pinv())
    return v * trace


def per_query_variance(W: Matrix, A: Matrix, privacy: PrivacyParameter) -> np.ndarray:
    """The variance of each query's least-squares answer (one entry per row of ``W``)."""
    _check_shapes(W, A)
    if isinstance(A, TableKrons):
        return noise_variance(A, privacy) * answer_variances(W, A)
    _check_supported(W, A, W.gram())
    return noise_variance(A, privacy) * query_variances(W, A.gram().pinv())


def rmse(W: Matrix, A: Matrix, privacy: PrivacyParameter) -> float:
    """Root mean squared error per query: ``√(expected_error / queries)``."""
    return math.sqrt(expected_error(W, A, privacy) / W.shape[0])


def identity_error(W: Matrix, privacy: PrivacyParameter, *, variance: float | None = None) -> float:
    """Total expected squared error of the Identity strategy: ``v₁ · ‖W‖_F²``.

    ``variance`` is the noise variance of one count (``v₁``); by default the continuous one.
    """
    unit = privacy.noise_variance(1.0) if variance is None else variance
    return unit * W.gram().trace()


def svd_bound(W: Matrix, privacy: PrivacyParameter, *, dense_limit: int = DENSE_LIMIT) -> float:
    """The SVD lower bound ``v₁ · (Σ σᵢ(W))² / n`` on the total squared error.

    ``dense_limit``: the most entries of a dense Gram decomposed where W has no structure
    that gives its singular values (see :func:`dpmm.linalg.spectral.nuclear_norm`).

    Example:
        >>> from dpmm.linalg import Identity
        >>> from dpmm.privacy import ZCDP
        >>> svd_bound(Identity(8), ZCDP("1/2"))   # identity is optimal: v₁ · n
        8.0
    """
    return privacy.noise_variance(1.0) * nuclear_norm(W, dense_limit) ** 2 / W.shape[1]
