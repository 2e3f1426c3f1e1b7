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
* ``auto`` — every method above that applies, keeping the one with the least
  exact expected error; never worse than identity.

Example:
    >>> from dpmm.linalg import AllRange
    >>> from dpmm.privacy import PureDP
    >>> optimize(AllRange(64), "hierarchical", PureDP(1))
    Hierarchical(64, b=13)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dpmm.error import expected_error
from dpmm.errors import ConfigError, DpmmError
from dpmm.linalg import Haar, Hierarchical, Identity, Marginals, Matrix, Ones
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.product import best_kron_strategy, kron_terms

__all__ = ["METHODS", "optimize"]

#: Largest branching factor the hierarchical method considers.
MAX_BRANCHING = 16


def _identity_candidates(n: int) -> Sequence[Matrix]:
    return [Identity(n)]


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


def _workload(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    terms = kron_terms(W)
    if len(terms) == 1 and terms[0].weight != 0:
        return W
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


def _auto(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    best = METHODS["identity"](W, privacy)
    best_error = expected_error(W, best, privacy)
    for name in ("hierarchical", "wavelet", "workload", "marginals"):
        try:
            candidate = METHODS[name](W, privacy)
            error = expected_error(W, candidate, privacy)
        except DpmmError:
            continue  # a method that does not apply to this workload is skipped
        if error < best_error:
            best, best_error = candidate, error
    return best


METHODS: dict[str, Callable[[Matrix, PrivacyParameter], Matrix]] = {
    "identity": _per_attribute(_identity_candidates),
    "hierarchical": _per_attribute(_tree_candidates),
    "wavelet": _per_attribute(_wavelet_candidates),
    "workload": _workload,
    "marginals": _marginal_support,
    "auto": _auto,
}


def optimize(W: Matrix, method: str, privacy: PrivacyParameter) -> Matrix:
    """The strategy ``method`` selects for workload ``W`` under ``privacy``.

    Raises:
        ConfigError: ``method`` is not one of :data:`METHODS`.
    """
    try:
        select = METHODS[method]
    except KeyError:
        known = ", ".join(METHODS)
        raise ConfigError(
            f"Unknown strategy method '{method}' (expected one of: {known})"
        ) from None
    return select(W, privacy)
