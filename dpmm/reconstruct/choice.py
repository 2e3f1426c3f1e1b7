"""Which solver ``auto`` reconstruction uses: a rule on the strategy and the noisy estimate.

NNLS (constrained to the least-squares total) beats least squares when the data are sparse
and the strategy aggregates cells, and loses otherwise. Measured on AllRange workloads
over the DPBench histograms (``benchmarks/reconstruction.py``, ratio LS / NNLS+T of the
mean squared workload error, above 1 means NNLS wins):

* NETTRACE (97 % empty cells), hierarchical or wavelet: 1.9–5.2 at n = 1024 and 4096,
  ε = 0.1 and 1;
* HEPTH (14–21 % empty), hierarchical or wavelet: 0.73–1.01;
* the identity strategy: 0.07–0.67 on either dataset except one setting (1.52): clipping
  independent per-cell noise at zero biases every long range.

The data's sparsity is not public, but the least-squares estimate is (post-processing of
the measurement): about half of an empty cell's estimates fall below zero, so the share
of negative cells is ≈ ½ × the share of empty cells plus a few percent. It was 0.48–0.49
on NETTRACE and 0.08–0.28 on HEPTH in every setting above, hence the cut at
:data:`NEGATIVE_SHARE`. Choosing from the estimate spends no budget.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Hierarchical, Identity
    >>> prefers_nnls(Hierarchical(4), np.array([-1.0, -2.0, 5.0, 0.5]))
    True
    >>> prefers_nnls(Identity(4), np.array([-1.0, -2.0, 5.0, 0.5]))
    False
"""

from __future__ import annotations

import numpy as np

from dpmm.linalg import Identity, Kron, Matrix, Weighted

__all__ = ["NEGATIVE_SHARE", "prefers_nnls", "reads_single_cells"]

#: NNLS is chosen when at least this share of the least-squares cells is negative.
NEGATIVE_SHARE = 0.4


def reads_single_cells(A: Matrix) -> bool:
    """Whether A measures each cell on its own (identity, weighted or Kron of identities)."""
    while isinstance(A, Weighted):
        A = A.base
    if isinstance(A, Kron):
        return all(reads_single_cells(factor) for factor in A.factors)
    return isinstance(A, Identity)


def prefers_nnls(A: Matrix, least_squares_estimate: np.ndarray) -> bool:
    """Whether NNLS (with the least-squares total) should replace least squares.

    Args:
        A: the measured strategy.
        least_squares_estimate: the least-squares estimate of the data vector from A's
            noisy answers.
    """
    if reads_single_cells(A):
        return False
    estimate = np.asarray(least_squares_estimate)
    return bool(estimate.size) and float(np.mean(estimate < 0)) >= NEGATIVE_SHARE
