"""Lower bounds on the error of every workload factorization mechanism (seed 004, §5.3).

For any ε-LDP ``Q`` let ``X = QᵀD⁻¹Q``, so the objective is ``L(Q) = tr[X⁺ WᵀW]``.
Column u of ``D^{-1/2}Q`` has squared norm ``Σ_o Q[o,u]²/D_o``; the privacy constraint
makes each row's probabilities ``p_o = Q[o,·]/D_o`` lie within a factor e^ε of each other,
which bounds ``Σ_u p_o,u² ≤ (e^ε+1)²/(4 e^ε n)`` (the maximum is at a ``1/(e^ε+1)`` share of
entries on the upper bound). Hence ``tr X ≤ (e^ε+1)²/(4e^ε)``, and by Cauchy–Schwarz
``tr(X⁺M) · tr(X) ≥ (tr M^{1/2})²`` (the SVD bound argument) gives, with σ the singular
values of W:

    ``L(Q) ≥ 4e^ε (Σ σ_i)² / (e^ε+1)²``.

A sharper form uses that ``X 1 = 1`` always (columns of Q sum to 1): with
``P = I − 11ᵀ/n`` and σ' the singular values of ``W P``,

    ``L(Q) ≥ ‖W 1‖²/n + 4e^ε (Σ σ'_i)² / (e^ε−1)²``,

which grows like 1/ε² as it must. The average-case variance per user is
``(L − ‖W‖_F²)/n`` and the worst case is at least that; :func:`worst_case_lower_bound`
returns the larger of the two bounds, translated.

Example:
    >>> import numpy as np
    >>> from dpmm.local.mechanism import randomized_response, worst_case_variance
    >>> bound = worst_case_lower_bound(np.eye(8), 1.0)
    >>> bool(0 < bound < worst_case_variance(np.eye(8), randomized_response(8, 1.0)))
    True
"""

from __future__ import annotations

import math

import numpy as np

from dpmm.local.mechanism import as_dense_workload

__all__ = ["objective_lower_bound", "worst_case_lower_bound"]


def objective_lower_bound(W: object, epsilon: float) -> float:
    """The larger of the two bounds on ``tr[(QᵀD⁻¹Q)⁺ WᵀW]`` over all ε-LDP Q (module doc)."""
    W = as_dense_workload(W)
    n = W.shape[1]
    scale = math.exp(epsilon)
    nuclear = np.linalg.svd(W, compute_uv=False).sum()
    plain = 4 * scale * nuclear**2 / (scale + 1) ** 2
    centered = W - W.mean(axis=1, keepdims=True)  # W P
    nuclear_centered = np.linalg.svd(centered, compute_uv=False).sum()
    total_row = W.sum(axis=1)
    sharp = float(total_row @ total_row) / n + 4 * scale * nuclear_centered**2 / (scale - 1) ** 2
    return float(max(plain, sharp))


def worst_case_lower_bound(W: object, epsilon: float) -> float:
    """A lower bound on the per-user worst-case variance ``max_u z_u`` of every mechanism."""
    W = as_dense_workload(W)
    n = W.shape[1]
    return max(0.0, (objective_lower_bound(W, epsilon) - float((W**2).sum())) / n)
