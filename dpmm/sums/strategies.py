"""Hierarchical strategies for TiMM and TaMM, chosen for ``W`` or for ``W T``.

Seed 003 selects its strategies with ektelo's GreedyH (a hierarchical strategy). dpmm's
``optimize(W, "hierarchical", ε)`` picks the branching ``b ∈ 2…16`` of the tree of interval
counts that minimizes the exact expected error, which is the hierarchical choice the seed
allows: TiMM asks it for ``W`` (the strategy ignores truncation), TaMM for ``W T``.

TaMM needs a new choice for every private threshold. :class:`TreeChooser` makes that
choice cheap for a fixed prefix-sum workload on a domain small enough to handle densely:
the error of tree ``A_b`` on ``W diag(t)`` is ``Δ(A_b)² · tr(diag(t) WᵀW diag(t) G_b)`` with
``G_b = (A_bᵀA_b)⁻¹``, i.e. ``Δ(A_b)² · tᵀ K_b t`` with ``K_b = WᵀW ∘ G_b``. ``K_b`` is
computed once (``O(n³)`` per branching); each choice then costs ``O(n²)`` per branching.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.linalg import Hierarchical, Matrix, check_dense_size
from dpmm.privacy import PureDP
from dpmm.strategy import optimize
from dpmm.sums.buckets import PrefixSumWorkload

__all__ = ["TreeChooser", "tree_strategy"]

#: Branching factors :class:`TreeChooser` considers (those of ``optimize``'s hierarchical).
BRANCHINGS = range(2, 17)


def tree_strategy(workload: PrefixSumWorkload, weights: np.ndarray, privacy: PureDP) -> Matrix:
    """The hierarchical strategy ``optimize`` selects for ``W diag(weights)``.

    Pass all-ones weights for TiMM's ``W``, the truncated weights for TaMM's ``W T``.
    """
    return optimize(workload.weighted(weights), "hierarchical", privacy)


class TreeChooser:
    """Best-branching trees for ``W diag(t)`` of one prefix-sum workload, for any ``t``.

    Example:
        >>> from dpmm.sums.buckets import prefix_sum_workload
        >>> chooser = TreeChooser(prefix_sum_workload(1, 64, 64), branchings=[2, 4, 8])
        >>> chooser.choose(np.ones(64))
        Hierarchical(64, b=8)
    """

    def __init__(self, workload: PrefixSumWorkload, branchings: Iterable[int] = BRANCHINGS):
        n = workload.size
        check_dense_size(n, n * len(list(branchings)), "the tree-choice tables of a sum workload")
        # Prefix queries: buckets j and k are read together by the queries reading max(j, k).
        covered = workload.queries_per_bucket().astype(np.float64)
        cells = np.arange(n)
        workload_gram = covered[np.maximum.outer(cells, cells)]
        self._trees: list[tuple[Hierarchical, float, np.ndarray]] = []
        for branching in branchings:
            if branching < 2 or branching > max(n, 2):
                raise ArgumentError(f"A tree branching must lie in 2…{n}, got {branching}.")
            tree = Hierarchical(n, branching)
            gram_inverse = np.linalg.inv(tree.gram().dense())  # trees have full column rank
            self._trees.append((tree, tree.sensitivity(1), workload_gram * gram_inverse))

    def errors(self, weights: np.ndarray) -> dict[int, float]:
        """``Δ(A_b)² · tᵀ K_b t`` per branching: the error up to the factor ``2/ε²``."""
        t = np.asarray(weights, dtype=np.float64)
        return {
            tree.branching: sensitivity**2 * float(t @ (table @ t))
            for tree, sensitivity, table in self._trees
        }

    def choose(self, weights: np.ndarray) -> Hierarchical:
        """The tree with the least expected error on ``W diag(weights)``."""
        errors = self.errors(weights)
        best = min(errors, key=errors.__getitem__)
        return next(tree for tree, _, _ in self._trees if tree.branching == best)
