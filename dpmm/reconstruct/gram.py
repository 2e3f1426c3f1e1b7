"""A strategy's Gram ``AᵀA`` as the iterative solvers apply it, and a bound on its largest
eigenvalue (their step size): for projected gradient and ADMM in memory
(:mod:`~dpmm.reconstruct.nnls`), on the cluster (:mod:`~dpmm.reconstruct.chunked`) and
for workload-weighted NNLS (:mod:`~dpmm.reconstruct.workload_nnls`).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh

from dpmm.linalg import (
    AllRange,
    Hierarchical,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Matrix,
    Prefix,
    Product,
    Weighted,
)

__all__ = ["gram_operator", "largest_gram_eigenvalue"]

#: Safety factor on the Lanczos estimate of the largest eigenvalue (Ritz values are low).
EIGENVALUE_MARGIN = 1.02

#: Types whose implicit Gram is at least as cheap to apply as ``Aᵀ(A x)``.
_CHEAP_GRAM = (Kron, Marginal, Marginals, Identity, Prefix, AllRange, Hierarchical)


def gram_operator(A: Matrix) -> Matrix:
    """``AᵀA`` as an implicit matrix: the structured Gram where it is cheap, else ``Aᵀ A``."""
    if isinstance(A, Weighted):  # (c·B)ᵀ(c·B) = c²·BᵀB: B's structure, kept
        return Weighted(A.weight**2, gram_operator(A.base))
    if isinstance(A, _CHEAP_GRAM):
        return A.gram()
    return Product([A.T, A])


def largest_gram_eigenvalue(A: Matrix) -> float:
    """An upper bound (within :data:`EIGENVALUE_MARGIN`) on the largest eigenvalue of ``AᵀA``.

    Example:
        >>> from dpmm.linalg import Identity, Kron, Ones
        >>> round(largest_gram_eigenvalue(Kron([Identity(3), Ones(1, 4)])), 6)
        4.08
    """
    if type(A) is Kron:
        distinct = {id(factor): factor for factor in A.factors}
        exact = {key: _exact_largest(factor) for key, factor in distinct.items()}
        return EIGENVALUE_MARGIN * float(np.prod([exact[id(f)] for f in A.factors]))
    return EIGENVALUE_MARGIN * _exact_largest(A)


def _exact_largest(A: Matrix) -> float:
    n = A.shape[1]
    if isinstance(A, Identity):
        return 1.0
    gram = gram_operator(A)
    if n <= 64:
        return float(scipy.linalg.eigvalsh(gram.dense())[-1])
    operator = LinearOperator((n, n), matvec=gram.matvec, dtype=np.float64)
    # A fixed, non-sparse start vector: no seed needed, and it is not orthogonal to the
    # top eigenvector of any Gram met in practice.
    start = 1.0 + 0.5 * np.sin(np.arange(n) * 2.399963)
    value = eigsh(operator, k=1, which="LA", v0=start, tol=1e-6, return_eigenvectors=False)
    return float(value[0])
