"""Strategy selection: ``optimize(W, method, privacy)`` returns the strategy matrix A to measure.

Methods:

* ``identity`` — one noisy count per cell (a Kron of identities).
* ``hierarchical`` — per attribute, the b-ary tree of interval counts whose
  branching b ∈ 2…16 minimizes the exact expected error (seed 000's H_b);
  attributes chosen jointly by coordinate descent for unions of products.
* ``wavelet`` — per attribute, the Haar wavelet (seed 000's Y).
* ``workload`` — measure the workload itself (seed 003's "Workload" baseline);
  only where its Gram's pseudo-inverse is structured (Kron, marginals) or small.
* ``marginals`` — every marginal table that some product of the workload
  reads (the attributes it does not total), each measured once with unit
  weight: the starting point of HDMM's OPT_M, without its weight search.
* ``eigen`` — seed 000's eigen-design: the eigenvectors of WᵀW, one weight
  each from a convex program (:mod:`dpmm.strategy.eigen`).
* ``hdmm`` — the best of HDMM's templates: ``hdmm_kron`` (OPT_⊗, OPT_0 for one
  attribute), ``hdmm_marginals`` (OPT_M), ``hdmm_union`` (OPT_+)
  (:mod:`dpmm.strategy.hdmm`).
* ``lrm`` — seed 002's Low-Rank Mechanism (:mod:`dpmm.strategy.lrm`).
* ``marginal_optimal`` — the optimal Gaussian strategy for unions of marginals
  (:mod:`dpmm.strategy.marginal_optimal`).
* ``residual`` — per residual subspace, the optimal measurement of the workload's
  part there, then the optimal budget split (QuerySmasher's decomposition) for
  unions of Kron products under Gaussian noise (:mod:`dpmm.strategy.residual`).
* ``auto`` — every method above that applies, keeping the one with the least
  exact expected error; never worse than identity. :func:`select_strategy`
  returns the record of every candidate (error, time, or why it did not apply).
  For a union of marginals under Gaussian noise, ``marginal_optimal`` is the
  proven optimum of the total squared error (ResidualPlanner: no Gaussian
  matrix mechanism does better), so ``auto`` runs it and identity (the
  baseline) only, recording the others as not tried.

Example:
    >>> from dpmm.linalg import AllRange
    >>> from dpmm.privacy import PureDP
    >>> optimize(AllRange(64), "hierarchical", PureDP(1))
    Hierarchical(64, b=13)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from dpmm.errors import ArgumentError, DpmmError
from dpmm.linalg import Haar, Hierarchical, Identity, Kron, Marginal, Marginals, Matrix, Ones
from dpmm.linalg.base import DENSE_LIMIT
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.eigen import select_eigen
from dpmm.strategy.gaussian_optimal import MAX_SIZE as MAX_GAUSSIAN_SIZE
from dpmm.strategy.gaussian_optimal import nonsingular
from dpmm.strategy.hdmm import TEMPLATES, select_hdmm
from dpmm.strategy.lrm import select_lrm
from dpmm.strategy.marginal_optimal import (
    marginal_optimal,
    marginal_strategies_bound,
    workload_marginals,
)
from dpmm.strategy.product import best_kron_strategy, kron_terms
from dpmm.strategy.residual import residual_strategy
from dpmm.strategy.selection import (
    Candidate,
    ClassBound,
    Progress,
    ProvenOptimum,
    Selection,
    select,
)

__all__ = [
    "AUTO_CANDIDATES",
    "CLASS_BOUNDS",
    "METHODS",
    "PROVEN_MARGINAL_OPTIMUM",
    "PROVEN_ONE_ATTRIBUTE_OPTIMUM",
    "STRATEGY_METHODS",
    "Candidate",
    "Selection",
    "optimize",
    "select_strategy",
]

#: Largest branching factor the hierarchical method considers.
MAX_BRANCHING = 16


def _tree_candidates(n: int) -> Sequence[Matrix]:
    if n == 1:
        return [Identity(1)]
    return [Hierarchical(n, b) for b in range(2, min(n, MAX_BRANCHING) + 1)]


def _wavelet_candidates(n: int) -> Sequence[Matrix]:
    return [Haar(n)]


def _per_attribute(
    candidates: Callable[[int], Sequence[Matrix]],
) -> Callable[[Matrix, PrivacyParameter], Matrix]:
    def method(W: Matrix, privacy: PrivacyParameter) -> Matrix:
        return best_kron_strategy(W, candidates, privacy.norm)[0]

    return method


def _identity(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    """One count per cell: the Kron of identities (or one identity on one attribute)."""
    if isinstance(W, Marginal | Marginals):
        # Without listing every marginal's d factors (166,751 marginals × 100 attributes).
        shape = W.domain_shape
    else:
        shape = tuple(factor.shape[1] for factor in kron_terms(W)[0].factors)
    return Identity(shape[0]) if len(shape) == 1 else Kron([Identity(n) for n in shape])


def _workload(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    terms = kron_terms(W)
    if len(terms) == 1 and terms[0].weight != 0:
        return W
    if W.known_full_column_rank and W.shape[1] ** 2 <= DENSE_LIMIT:
        return W  # its error needs no inverse; a release inverts the Gram densely
    W.gram().pinv()  # raises TooLargeError where the Gram has no usable structure
    return W


def _is_total(factor: Matrix) -> bool:
    return isinstance(factor, Ones) and factor.shape[0] == 1


def _marginal_support(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    """Every marginal table some product of W reads (its non-total attributes), unit weights."""
    terms = kron_terms(W)
    shape = tuple(factor.shape[1] for factor in terms[0].factors)
    sets = {
        tuple(i for i, factor in enumerate(term.factors) if not _is_total(factor)): 1.0
        for term in terms
    }
    return Marginals(shape, sets)


METHODS: dict[str, Callable[[Matrix, PrivacyParameter], Matrix]] = {
    "identity": _identity,
    "hierarchical": _per_attribute(_tree_candidates),
    "wavelet": _per_attribute(_wavelet_candidates),
    "workload": _workload,
    "marginals": _marginal_support,
    "eigen": select_eigen,
    "hdmm": select_hdmm,
    **TEMPLATES,
    "lrm": select_lrm,
    "marginal_optimal": marginal_optimal,
    "residual": residual_strategy,
}

#: Every name ``optimize`` accepts.
STRATEGY_METHODS = (*METHODS, "auto")

#: The candidates ``auto`` tries, in order; the first (identity) is the one to beat.
#: LRM is left out: on the seed's workloads (benchmarks/lrm.py, n = 128…8192) OPT_0,
#: hierarchical or wavelet beat it wherever they ran, except WRelated at n ≥ 4096 (1.4-2.7x
#: better than identity, where OPT_0 and the eigen-design were not run); it needs the
#: workload densely and takes seconds to minutes. ``optimize(W, "lrm")`` runs it.
#: Cheap first: closed forms and convex programs in seconds, then the long searches
#: (p-Identity fits per attribute and sweep, the eigen-design's L1 reduction, one OPT_⊗
#: per part of a union), which a time budget may cut short.
AUTO_CANDIDATES = (
    "identity",
    "hierarchical",
    "wavelet",
    "workload",
    "marginals",
    "hdmm_marginals",
    "marginal_optimal",
    "residual",
    "hdmm_kron",
    "eigen",
    "hdmm_union",
)


_MARGINAL_ALGEBRA = ClassBound(
    marginal_strategies_bound,
    "the least error of any strategy in the marginal algebra (the SVD bound of the "
    "workload's projection onto it)",
)

#: Candidates whose strategies all lie in a class with a floor on their error: ``auto``
#: skips them when the floor is no lower than the best error found before them.
CLASS_BOUNDS = {"marginals": _MARGINAL_ALGEBRA, "hdmm_marginals": _MARGINAL_ALGEBRA}


#: Recorded for every other candidate where ``marginal_optimal`` is the proven optimum.
PROVEN_MARGINAL_OPTIMUM = (
    "not tried: marginal_optimal is the proven optimum for marginal workloads under "
    "Gaussian noise (ResidualPlanner)"
)


#: Recorded for every other candidate where OPT_0's certified Gaussian factor is the optimum.
PROVEN_ONE_ATTRIBUTE_OPTIMUM = (
    "not tried: on one attribute under Gaussian noise hdmm_kron solves the convex program "
    "over every strategy, to within its certified gap (0.1 %)"
)


def _certified_one_attribute(W: Matrix) -> bool:
    """Whether ``W`` is over one attribute whose Gram OPT_0 solves to a certified optimum:
    at most :data:`~dpmm.strategy.gaussian_optimal.MAX_SIZE` cells and nonsingular (the
    solver's own test)."""
    n = W.shape[1]
    if len(kron_terms(W)[0].factors) != 1 or not 2 <= n <= MAX_GAUSSIAN_SIZE:
        return False
    return nonsingular(W.gram().dense())


def _proven_optimum(W: Matrix, privacy: PrivacyParameter) -> ProvenOptimum | None:
    """The candidate that is provably the least total squared error, else None.

    * A union of marginals: ``marginal_optimal``. ResidualPlanner (Xiao et al., NeurIPS
      2023, arXiv 2305.08175) proves its strategy optimal among all Gaussian matrix
      mechanisms for a (weighted) union of marginals under the sum of cell variances,
      each weighted by its marginal's squared weight: exactly what
      :func:`dpmm.error.expected_error` measures with Gaussian noise (variance ∝ L2
      sensitivity²).
    * One attribute with a nonsingular Gram: ``hdmm_kron``, whose factor solves the
      convex program over every strategy's Gram to a certified gap
      (:mod:`dpmm.strategy.gaussian_optimal`): no other candidate is more than 0.1 %
      better (prefix_1024 under ρ: the residual method took 50 s for 7 % more error).

    Under Laplace noise (L1 sensitivity) neither holds, so every candidate is tried there.
    """
    if privacy.norm != 2:
        return None
    try:
        workload_marginals(W)
    except DpmmError:  # not a union of marginals
        pass
    else:
        return ProvenOptimum("marginal_optimal", PROVEN_MARGINAL_OPTIMUM)
    if _certified_one_attribute(W):
        return ProvenOptimum("hdmm_kron", PROVEN_ONE_ATTRIBUTE_OPTIMUM)
    return None


def select_strategy(
    W: Matrix,
    method: str,
    privacy: PrivacyParameter,
    *,
    progress: Progress | None = None,
    budget: float = math.inf,
    candidates: Sequence[str] = AUTO_CANDIDATES,
) -> Selection:
    """The strategy ``method`` selects for ``W``, with the record of every candidate tried.

    ``auto`` tries ``candidates`` (by default :data:`AUTO_CANDIDATES`; the first is the
    baseline) and keeps the least exact expected error (never worse than the baseline);
    for a union of marginals under Gaussian noise it runs only the proven optimum
    ``marginal_optimal`` and the baseline, and records the others as not tried
    (:data:`PROVEN_MARGINAL_OPTIMUM`). Any other method is one candidate.
    ``progress`` is called with ``(candidates done, total, candidate name)``; ``auto``'s
    candidates after the baseline search for at most ``budget`` seconds in all
    (:func:`dpmm.strategy.selection.select`).

    Raises:
        ArgumentError: ``method`` is not one of :data:`METHODS` or ``auto``.
    """
    if method == "auto":
        proven = _proven_optimum(W, privacy)
        if proven is not None and proven.method not in candidates:
            proven = None
        return select(
            W,
            privacy,
            METHODS,
            candidates,
            progress=progress,
            proven=proven,
            budget=budget,
            bounds=CLASS_BOUNDS,
        )
    if method not in METHODS:
        known = ", ".join(STRATEGY_METHODS)
        raise ArgumentError(f"Unknown strategy method '{method}' (expected one of: {known})")
    if progress is not None:
        progress(0, 1, method)
    start = time.perf_counter()
    strategy = METHODS[method](W, privacy)
    candidate = Candidate(method, time.perf_counter() - start, strategy)
    if progress is not None:
        progress(1, 1, method)
    return Selection(candidate, (candidate,))


def optimize(W: Matrix, method: str, privacy: PrivacyParameter) -> Matrix:
    """The strategy ``method`` selects for workload ``W`` under ``privacy``.

    Raises:
        ArgumentError: ``method`` is not one of :data:`METHODS` or ``auto``.
    """
    return select_strategy(W, method, privacy).strategy
