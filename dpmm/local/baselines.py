"""Baseline LDP mechanisms as strategy matrices, and the per-user matrix mechanism (seed 004, §6.1).

Every finite-output baseline is a column-stochastic ε-LDP ``Q``; the workload is then
answered with the optimal reconstruction of :func:`~dpmm.local.mechanism.reconstruction`,
exactly as the optimized mechanism is, so only the strategies differ.

* Randomized response: report the truth with probability ∝ e^ε, anything else ∝ 1.
* Hadamard response: with K the smallest power of two above n, user u reports a row o of
  the K × K Sylvester–Hadamard matrix H with probability ∝ e^ε where ``H[o, u+1] = +1``
  and ∝ 1 elsewhere (column 0, all ones, carries no information and is skipped).
* Hierarchical (branching b, Hadamard oracle): the b-ary tree over the cells without its
  root; a user picks one of its h levels uniformly and reports the node holding them there
  through Hadamard response over that level's nodes.
* Fourier: the user picks one parity ``(−1)^⟨S,u⟩`` with ``1 ≤ |S| ≤ k`` uniformly and
  reports it through binary randomized response (outputs: (S, ±1)).

The matrix mechanism run per user is not a finite-output mechanism: each user releases
``A e_u + noise`` and the server sums ``W A⁺ (·)``. Its estimate is unbiased and its
variance does not depend on the data, so worst case = average case = the noise variance
computed analytically (:func:`per_user_matrix_mechanism_variance`); it enters the
comparison through that number.

Example:
    >>> import numpy as np
    >>> from dpmm.local.mechanism import check_ldp
    >>> for Q in (hadamard(5, 1.0), hierarchical(16, 1.0), fourier(8, 1.0, 2)):
    ...     check_ldp(Q, 1.0)
    >>> hadamard(5, 1.0).shape, hierarchical(16, 1.0).shape, fourier(8, 1.0, 2).shape
    ((8, 5), (40, 16), (12, 8))
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
from scipy.linalg import hadamard as sylvester_hadamard

from dpmm.errors import ArgumentError
from dpmm.local.mechanism import as_dense_workload, randomized_response
from dpmm.local.workloads import subset_bits

__all__ = [
    "baseline_strategies",
    "fourier",
    "hadamard",
    "hierarchical",
    "per_user_matrix_mechanism_variance",
    "randomized_response",
]


def hadamard(n: int, epsilon: float, blocks: int = 1) -> np.ndarray:
    """Hadamard response over n types, optionally split into blocks (Acharya et al.).

    With ``blocks = B`` the types are cut into B consecutive groups of ``s = ⌈n/B⌉``; each
    group has its own Hadamard code of size K (smallest power of two above s), and a user
    reports (group, code row) with probability ∝ e^ε on the +1 rows of their own code and
    ∝ 1 everywhere else. B = 1 is classic Hadamard response; larger B suits large ε.
    """
    if not 1 <= blocks <= n:
        raise ArgumentError(f"Hadamard response needs 1 ≤ blocks ≤ n = {n}, got {blocks}.")
    group = -(-n // blocks)
    size = 1 << int(group).bit_length()  # smallest power of two strictly above the group
    code = sylvester_hadamard(size)[:, 1 : group + 1] > 0
    group_of, position = np.divmod(np.arange(n), group)
    weights = np.ones((blocks, size, n))
    weights[group_of, :, np.arange(n)] = np.where(code[:, position].T, math.exp(epsilon), 1.0)
    weights = weights.reshape(blocks * size, n)
    return weights / weights.sum(axis=0, keepdims=True)


def hierarchical(n: int, epsilon: float, branching: int = 4, blocks: int = 1) -> np.ndarray:
    """The b-ary tree mechanism (root excluded) with a Hadamard oracle per level.

    ``blocks`` is passed to each level's :func:`hadamard` (capped by its node count).
    """
    if branching < 2:
        raise ArgumentError(f"The branching factor must be at least 2, got {branching}.")
    levels = []
    # Node sizes b, b², … until one node would hold every cell (the root, never measured).
    size = 1
    while size < n:
        levels.append(size)
        size *= branching
    parts = []
    for cells_per_node in levels:
        nodes = -(-n // cells_per_node)
        node_of = np.arange(n) // cells_per_node
        oracle = hadamard(nodes, epsilon, min(blocks, nodes))
        parts.append(oracle[:, node_of])
    return np.vstack(parts) / len(parts)


def fourier(n: int, epsilon: float, k: int) -> np.ndarray:
    """Sample one parity of order 1…k uniformly, report it by randomized response."""
    bits = subset_bits(n)
    d = bits.shape[1]
    subsets = [s for size in range(1, min(k, d) + 1) for s in combinations(range(d), size)]
    report_truth = math.exp(epsilon) / (math.exp(epsilon) + 1.0)
    rows = []
    for subset in subsets:
        odd = bits[:, list(subset)].sum(axis=1) % 2
        rows.append(np.where(odd == 0, report_truth, 1.0 - report_truth))  # output +1
        rows.append(np.where(odd == 1, report_truth, 1.0 - report_truth))  # output −1
    return np.vstack(rows) / len(subsets)


def baseline_strategies(n: int, epsilon: float) -> dict[str, np.ndarray]:
    """Every finite-output baseline over n types, by name: the competitors of the optimizer.

    Randomized response; Hadamard response and the hierarchical mechanism (branching 4)
    with every block count B = 1, 2, 4, … ≤ n; Fourier with every order k = 1…d when
    n = 2^d. The matrix mechanism run per user is not among them: its reports are
    continuous, so it has no strategy matrix the protocol could sample.

    Example:
        >>> names = list(baseline_strategies(8, 1.0))
        >>> len(names), names[:3], names[-1]
        (12, ['randomized response', 'Hadamard (B=1)', 'hierarchical (b=4, B=1)'], 'Fourier (k=3)')
    """
    strategies = {"randomized response": randomized_response(n, epsilon)}
    blocks = 1
    while blocks <= n:
        strategies[f"Hadamard (B={blocks})"] = hadamard(n, epsilon, blocks)
        strategies[f"hierarchical (b=4, B={blocks})"] = hierarchical(n, epsilon, 4, blocks)
        blocks *= 2
    d = int(n).bit_length() - 1
    if n >= 2 and 1 << d == n:
        for k in range(1, d + 1):
            strategies[f"Fourier (k={k})"] = fourier(n, epsilon, k)
    return strategies


#: Relative cut-off below which singular values (eigenvalues of WᵀW) count as zero.
PINV_RCOND = 1e-10


def _per_user_strategy(W: np.ndarray, norm: int) -> np.ndarray:
    """A strategy for one user's data: (WᵀW)^{1/4} for L2 (the SVD-bound shape), else best of
    identity, W and (WᵀW)^{1/4} by the Laplace error."""
    values, vectors = np.linalg.eigh(W.T @ W)
    # Eigenvalues at rounding level are zeros of a rank-deficient WᵀW (e.g. parities):
    # kept, their fourth roots (~1e-4) would enter A⁺ as huge spurious directions.
    values = np.where(values > PINV_RCOND * values.max(), values, 0.0)
    root = (vectors * np.sqrt(np.sqrt(values))) @ vectors.T
    if norm == 2:
        return root
    candidates = [np.eye(W.shape[1]), W, root]
    return min(candidates, key=lambda A: _noise_variance(W, A, 1.0, 1, 0.0))


def _replace_sensitivity(A: np.ndarray, norm: int) -> float:
    """``max_{u,u'} ‖A e_u − A e_u'‖``: LDP protects a user's whole value (replacement)."""
    if norm == 2:
        gram = A.T @ A
        d = np.diag(gram)
        return float(math.sqrt(max(0.0, (d[:, None] + d[None, :] - 2 * gram).max())))
    best = 0.0
    # O(n² p) time; chunks keep the p × n × chunk difference array near 2^22 entries.
    chunk = max(1, (1 << 22) // (A.shape[0] * A.shape[1]))
    for start in range(0, A.shape[1], chunk):
        block = A[:, start : start + chunk]
        best = max(best, float(np.abs(A[:, :, None] - block[:, None, :]).sum(axis=0).max()))
    return best


def _noise_variance(W: np.ndarray, A: np.ndarray, epsilon: float, norm: int, delta: float) -> float:
    """Per-user total variance of ``W A⁺ (A e_u + noise)``."""
    sensitivity = _replace_sensitivity(A, norm)
    if norm == 1:
        per_entry = 2.0 * (sensitivity / epsilon) ** 2  # Laplace(Δ₁/ε)
    else:
        per_entry = (sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon) ** 2
    # ‖W A⁺‖_F² = tr(A⁺ᵀ WᵀW A⁺): never forms the p × rows(A) reconstruction.
    A_pinv = np.linalg.pinv(A, rcond=PINV_RCOND)
    return float(per_entry * np.sum((W.T @ W @ A_pinv) * A_pinv))


def per_user_matrix_mechanism_variance(
    W: object, epsilon: float, noise: str = "laplace", delta: float = 1e-6
) -> float:
    """Per-user (worst = average case) variance of the matrix mechanism run on each user.

    Laplace noise gives ε-LDP with the replacement L1 sensitivity; Gaussian noise (the
    classic ``σ = Δ₂ √(2 ln(1.25/δ)) / ε`` calibration) gives only (ε, δ)-LDP, so it is a
    weaker guarantee than every other mechanism here and is reported for reference.

    Args:
        W: The workload.
        epsilon: The privacy budget.
        noise: ``"laplace"`` or ``"gaussian"``.
        delta: δ of the Gaussian version.
    """
    W = as_dense_workload(W)
    if noise not in ("laplace", "gaussian"):
        raise ArgumentError(f"noise must be 'laplace' or 'gaussian', got {noise!r}.")
    norm = 1 if noise == "laplace" else 2
    A = _per_user_strategy(W, norm)
    return _noise_variance(W, A, epsilon, norm, delta)
