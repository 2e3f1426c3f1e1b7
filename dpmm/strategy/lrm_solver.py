"""The workload decomposition of the Low-Rank Mechanism (seed 002, Algorithms 1 and 2).

LRM factors an ``m × n`` workload as ``W ≈ B L`` with ``B`` of shape ``m × r``
and ``L`` of shape ``r × n`` by solving (seed 002, Formula 8)::

    minimize ½ tr(BᵀB)   s.t.   ‖W − B L‖_F ≤ γ,   every column of L in the unit ball

with the inexact augmented Lagrangian method: for a penalty ``β`` and a
multiplier ``Π`` it alternately minimizes

    J(B, L) = ½ tr(BᵀB) + ⟨Π, W − BL⟩ + β/2 ‖W − BL‖_F²

over ``B`` (closed form, Eq. 9) and over ``L`` (Nesterov's accelerated
projected gradient, Algorithm 2), then updates ``Π ← Π + β (W − BL)`` and
doubles ``β`` every ten rounds (Algorithm 1).

Started as the seed writes it (``Π = 0``, ``β = 1``, random rows), Algorithm 1
stalls: the first B-step shrinks every direction of W, the multiplier then needs
dozens of penalty doublings to restore ``BL ≈ W``, and the iterate it returns is
no better than its start. :func:`decompose_workload` lists the changes.

The seed's ball is the L1 ball (Laplace noise, sensitivity = largest column L1
norm). For Gaussian noise the sensitivity is the largest column L2 norm, so the
same program runs with the L2 ball instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from dpmm.errors import ArgumentError
from dpmm.linalg.spectral import thin_svd
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.l1_ball import project_columns

__all__ = [
    "LowRankDecomposition",
    "augmented_lagrangian",
    "decompose_workload",
    "initial_strategy",
    "mean_and_centered",
    "row_space",
    "update_B",
    "update_L",
    "warm_start",
]

#: The penalty doubles after this many rounds of Algorithm 1 (seed 002, line 10).
PENALTY_DOUBLING_PERIOD = 10
#: Algorithm 1 stops once the penalty reaches this value ("β sufficiently large").
MAX_PENALTY = 1e8
#: Most B/L alternations per augmented-Lagrangian round (the inner "while not converged").
MAX_ALTERNATIONS = 2
#: Most accelerated gradient steps per L update (Algorithm 2's loop). From a warm start
#: the subproblem moves little per round, and the rounds' multiplier updates matter more
#: than solving each subproblem exactly (the method is "inexact" by design).
MAX_GRADIENT_STEPS = 20
#: Norm of each random padding row relative to a typical row of the start.
PADDING_WEIGHT = 1e-2
#: Singular values of L below this fraction of the largest count as zero (dpmm's
#: pseudo-inverse drops Gram eigenvalues below 1e-10 of the largest, i.e. σ below 1e-5).
SUPPORT_RATIO = 1e-4
#: ``β σ²`` for a typical singular value σ of the first L (see :func:`initial_penalty`).
INITIAL_SHRINK_RATIO = 100.0


@dataclass(frozen=True)
class LowRankDecomposition:
    """``W ≈ B L`` with every column of ``L`` inside the unit ``norm``-ball.

    Attributes:
        B: The ``m × r`` recombination matrix.
        L: The ``r × n`` strategy (the queries that are measured).
        residual: ``‖W − B L‖_F``, the relaxation actually reached (at most γ if converged).
        iterations: Rounds of the augmented Lagrangian method that were run.
        norm: 1 (L1 balls, Laplace noise) or 2 (L2 balls, Gaussian noise).
        start: The starting L of Algorithm 1 (an exact decomposition of W).
        best: The iterate L with the least ``score`` (``L`` itself when no score was given).
        best_score: That score (inf when no score was given).
    """

    B: np.ndarray
    L: np.ndarray
    residual: float
    iterations: int
    norm: int
    start: np.ndarray
    best: np.ndarray
    best_score: float

    @property
    def sensitivity(self) -> float:
        """The largest column ``norm``-norm of ``L`` (at most 1)."""
        return float(np.linalg.norm(self.L, ord=self.norm, axis=0).max(initial=0.0))

    def variance_error(self, privacy: PrivacyParameter) -> float:
        """The seed's expected total squared error ``v(Δ(L)) · ‖B‖_F²`` (Lemma 1).

        Answers are ``B (L x + noise)``; when ``BL ≠ W`` they also carry the
        data-dependent bias ``(BL − W) x``, whose square is at most
        ``residual² · ‖x‖₂²`` (Theorem 3) and is not included here.
        """
        return privacy.noise_variance(self.sensitivity) * float(np.sum(self.B * self.B))


def augmented_lagrangian(
    W: np.ndarray, B: np.ndarray, L: np.ndarray, multiplier: np.ndarray, beta: float
) -> float:
    """``J(B, L) = ½ tr(BᵀB) + ⟨Π, W − BL⟩ + β/2 ‖W − BL‖_F²``; cost O(m r n)."""
    gap = W - B @ L
    return float(0.5 * np.sum(B * B) + np.sum(multiplier * gap) + 0.5 * beta * np.sum(gap * gap))


def update_B(W: np.ndarray, L: np.ndarray, multiplier: np.ndarray, beta: float) -> np.ndarray:
    """The minimizer of J over B (seed 002, Eq. 9): ``(βW + Π) Lᵀ (β L Lᵀ + I)⁻¹``.

    Cost O(m r n + r² n + r³); the system is symmetric positive definite.
    """
    rank = L.shape[0]
    system = beta * (L @ L.T) + np.eye(rank)
    right = L @ (beta * W + multiplier).T  # r × m
    return scipy.linalg.solve(system, right, assume_a="pos").T


def update_L(
    W: np.ndarray,
    B: np.ndarray,
    L: np.ndarray,
    multiplier: np.ndarray,
    beta: float,
    *,
    norm: int,
    tolerance: float,
) -> np.ndarray:
    """Minimize J over L in the column balls by accelerated projected gradient (Algorithm 2).

    ``J`` in L is ``β/2 ⟨L, BᵀB L⟩ − ⟨Bᵀ(βW + Π), L⟩ + const``, whose gradient is
    Lipschitz with constant ``β λ_max(BᵀB)``. Algorithm 2 finds a step by doubling
    a guess until a quadratic upper bound holds; the exact constant is the
    smallest step that bound accepts, so it is used directly.
    Each step costs O(r² n) plus one projection (a sort, O(r n log r)).
    """
    gram = B.T @ B
    linear = B.T @ (beta * W + multiplier)
    lipschitz = beta * float(scipy.linalg.eigvalsh(gram)[-1])
    if lipschitz <= 0:
        return L  # B = 0: J does not depend on L
    previous = L
    search = L
    momentum = 1.0
    for _ in range(MAX_GRADIENT_STEPS):
        gradient = beta * (gram @ search) - linear
        current = project_columns(search - gradient / lipschitz, norm)
        step = float(np.linalg.norm(current - previous))
        if step <= tolerance * max(float(np.linalg.norm(current)), 1e-300):
            return current
        next_momentum = (1.0 + math.sqrt(1.0 + 4.0 * momentum * momentum)) / 2.0
        search = current + ((momentum - 1.0) / next_momentum) * (current - previous)
        previous, momentum = current, next_momentum
    return previous


def scaled_into_balls(L: np.ndarray, norm: int) -> np.ndarray:
    """``L`` divided by its largest column ``norm``-norm (so that largest norm is exactly 1)."""
    largest = float(np.linalg.norm(L, ord=norm, axis=0).max(initial=0.0))
    return L / largest if largest > 0 else L


def row_space(L: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L's thin SVD ``U, σ, Vᵀ`` without the singular values below ``SUPPORT_RATIO σ_max``."""
    left, singular, right = thin_svd(L)
    keep = singular > SUPPORT_RATIO * singular[0]
    return left[:, keep], singular[keep], right[keep]


def least_squares_scale(W: np.ndarray, L: np.ndarray) -> float:
    """``‖W L⁺‖_F²``: the least ``‖B‖_F²`` with ``B L = W``, or inf if W leaves L's row space."""
    _, singular, right = row_space(L)
    coefficients = W @ right.T
    outside = np.linalg.norm(W - coefficients @ right) > 1e-9 * np.linalg.norm(W)
    return math.inf if outside else float(np.sum((coefficients / singular) ** 2))


def _padded(L: np.ndarray, rank: int, rng: np.random.Generator) -> np.ndarray:
    """``L`` with small random rows appended up to ``rank`` rows (or cut to ``rank`` rows).

    Algorithm 1 never moves a zero row (its column of B stays zero, so its gradient
    is zero); small random rows give it the freedom ``r > rank(W)`` is meant to give,
    while adding almost nothing to the column norms of the start.
    """
    if L.shape[0] >= rank:
        return L[:rank]
    extra = rng.standard_normal((rank - L.shape[0], L.shape[1]))
    extra *= PADDING_WEIGHT / np.linalg.norm(extra, axis=1, keepdims=True)
    typical = float(np.linalg.norm(L)) / math.sqrt(max(L.shape[0], 1))
    return np.vstack([L, typical * extra])


def initial_strategy(
    W: np.ndarray,
    singular_values: np.ndarray,
    right_vectors: np.ndarray,
    rank: int,
    norm: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The best exact start among noise on data, noise on queries and W's singular basis.

    The seed leaves the start open. Each candidate is an exact decomposition
    (``BL = W``) scaled into the balls; the one with the least ``‖W L⁺‖_F²`` wins:

    * noise on data (``L = I``) when ``n ≤ r``;
    * noise on queries (``L = W``) when ``m ≤ r``, or on a basis of W's rows;
    * the scaled SVD ``L = Vᵀ / c`` (``B = U Σ c``): the feasible point whose error
      Lemma 1 gives as ``2 Δ² ‖B‖_F² / ε² = 2 c² ‖W‖_F² / ε²``;
    * the mean query and the centred queries (:func:`mean_and_centered`);
    * the eigen-design shape ``L = Σ^½ Vᵀ / c``, optimal for L2 balls when its column
      norms agree; on workloads with one dominant direction (WDiscrete's all-ones part)
      it starts ten times lower than the scaled SVD.

    ``singular_values`` and ``right_vectors`` are W's, numerically non-zero ones only.
    """
    m, n = W.shape
    candidates = []
    if n <= rank:
        candidates.append(np.eye(n))
    if m <= rank:
        candidates.append(W)
    # A basis of W's queries (pivoted QR picks independent rows): noise on fewer queries.
    workload_rank = right_vectors.shape[0]
    if workload_rank <= rank:
        pivots = scipy.linalg.qr(W.T, mode="r", pivoting=True)[1][:workload_rank]
        candidates.append(W[np.sort(pivots)])
    if m + 1 <= rank:
        candidates.append(mean_and_centered(W, norm))
    leading = slice(0, min(rank, workload_rank))
    candidates.append(right_vectors[leading])
    candidates.append(np.sqrt(singular_values[leading])[:, None] * right_vectors[leading])
    scaled = [scaled_into_balls(_padded(L, rank, rng), norm) for L in candidates]
    return min(scaled, key=lambda L: least_squares_scale(W, L))


def mean_and_centered(W: np.ndarray, norm: int) -> np.ndarray:
    """``[t · w̄ᵀ; W − 1 w̄ᵀ]`` with ``w̄`` the mean query, ``t`` balancing the two blocks.

    ``W = (1/t) 1 · (t w̄ᵀ) + I · (W − 1 w̄ᵀ)`` is exact with ``‖B‖_F² = m / t² + m``;
    ``t`` minimizes Lemma 1's ``Δ(t)² (m / t² + m)`` (a one-dimensional search, O(n) per
    value). When the queries share a large common part (WDiscrete's all-ones part) the
    centred queries are small and sparse-like, so the sensitivity no longer grows with n
    the way the dense singular vectors' does.
    """
    m = W.shape[0]
    mean = W.mean(axis=0)
    centered = W - mean
    mean_norms = np.abs(mean) if norm == 1 else mean * mean
    rest_norms = np.linalg.norm(centered, ord=norm, axis=0)
    rest_norms = rest_norms if norm == 1 else rest_norms**2

    def bound(log_weight: float) -> float:
        weight = math.exp(log_weight)
        column = mean_norms * (weight if norm == 1 else weight**2) + rest_norms
        sensitivity = float(column.max()) if norm == 1 else math.sqrt(float(column.max()))
        return sensitivity**2 * (m / weight**2 + m)

    best = scipy.optimize.minimize_scalar(bound, bounds=(-12.0, 12.0), method="bounded")
    return np.vstack([math.exp(float(best.x)) * mean, centered])


def warm_start(W: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(B, Π) = (W L⁺, W (LᵀL)⁺)``: the exact B of an exact start and its KKT multiplier.

    At an exact decomposition the B-step is stationary iff ``B = Π Lᵀ``; the least
    ``‖B‖_F`` with ``BL = W`` is ``W L⁺``, and ``Π = B (L⁺)ᵀ`` satisfies both. With
    ``Π = 0`` (the seed's start) the first rounds instead shrink B towards zero and
    break ``BL = W`` by a wide margin, which the penalty then takes dozens of
    doublings to repair: Algorithm 1 stalls.
    """
    left, singular, right = row_space(L)
    inverse_t = (left / singular) @ right  # (L⁺)ᵀ, r × n
    B = W @ inverse_t.T
    return B, B @ inverse_t


def initial_penalty(L: np.ndarray) -> float:
    """A first penalty ``β`` at which the B step keeps every direction of ``L`` almost whole.

    Eq. 9 shrinks the part of W along a singular direction ``σ`` of L by
    ``β σ² / (1 + β σ²)``. With ``β = 1`` (the seed's start) and ``σ² ≈ n / r`` well
    below one (small domains) the first rounds drop most of W and the method stalls in
    a rank-deficient L; starting at ``β σ² = 100`` for the typical ``σ² = ‖L‖_F² / r``
    keeps the start near-feasible. Never below the seed's 1.
    """
    typical = float(np.sum(L * L)) / L.shape[0]
    return max(1.0, INITIAL_SHRINK_RATIO / typical)


def numerical_rank(singular_values: np.ndarray, shape: tuple[int, int]) -> int:
    """How many singular values exceed ``σ_max · max(m, n) · eps`` (numpy's default)."""
    if singular_values.size == 0:
        return 0
    floor = singular_values[0] * max(shape) * np.finfo(np.float64).eps
    return int(np.count_nonzero(singular_values > floor))


def decompose_workload(
    W: np.ndarray,
    *,
    norm: int,
    rank: int | None,
    gamma: float,
    max_iterations: int,
    tolerance: float,
    rng: np.random.Generator,
    score: Callable[[np.ndarray], float] | None = None,
) -> LowRankDecomposition:
    """Run Algorithm 1 on the dense workload ``W`` (see the module docstring).

    Differences from the seed's pseudo-code, each fixing a stall:

    * the start is an exact decomposition (:func:`initial_strategy`) with its least
      ``B`` and KKT multiplier (:func:`warm_start`), not ``Π = 0``;
    * the first penalty is scaled to L (:func:`initial_penalty`), not 1;
    * each L update takes the exact Lipschitz step ``1 / (β λ_max(BᵀB))``;
    * Algorithm 1 is a local method on a non-convex program, so the iterate with the
      least ``score`` (for instance the exact least-squares error of the strategy it
      yields) is kept alongside the last one.

    Args:
        W: The ``m × n`` workload.
        norm: 1 (L1 balls, Laplace) or 2 (L2 balls, Gaussian).
        rank: Rows of L; default ``⌈1.2 · rank(W)⌉``.
        gamma: The relaxation ``‖W − BL‖_F ≤ γ``.
        max_iterations: Most rounds of Algorithm 1.
        tolerance: Relative tolerance of the inner loops and of the settling of ``‖B‖_F²``.
        rng: Draws the padding rows of the start.
        score: Rates an iterate L (lower is better), called once per round.

    Raises:
        ArgumentError: a parameter is out of range (rank < 1, γ < 0, ...).
    """
    if W.ndim != 2 or W.size == 0:
        raise ArgumentError(f"The workload must be a non-empty 2-D array, got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ArgumentError("The workload has entries that are not finite numbers")
    if not (gamma >= 0 and math.isfinite(gamma)):
        raise ArgumentError(f"gamma must be a non-negative number, got {gamma!r}")
    if max_iterations < 1:
        raise ArgumentError(f"max_iterations must be at least 1, got {max_iterations!r}")
    if not tolerance > 0:
        raise ArgumentError(f"tolerance must be positive, got {tolerance!r}")
    _, singular_values, right_vectors = thin_svd(W)
    workload_rank = numerical_rank(singular_values, W.shape)
    if workload_rank == 0:
        raise ArgumentError("The workload is zero: there is nothing to decompose")
    if rank is None:
        rank = math.ceil(1.2 * workload_rank)  # the seed's default r = 1.2 · rank(W)
    if rank < 1:
        raise ArgumentError(f"rank must be at least 1, got {rank!r}")

    L = start = initial_strategy(
        W, singular_values[:workload_rank], right_vectors[:workload_rank], rank, norm, rng
    )
    B, multiplier = warm_start(W, L)
    beta = initial_penalty(L)
    best, best_score = L, (math.inf if score is None else score(L))
    iteration = 0
    previous_scale = float(np.sum(B * B))
    for iteration in range(1, max_iterations + 1):
        objective = augmented_lagrangian(W, B, L, multiplier, beta)
        for _ in range(MAX_ALTERNATIONS):
            B = update_B(W, L, multiplier, beta)
            L = update_L(W, B, L, multiplier, beta, norm=norm, tolerance=tolerance)
            updated = augmented_lagrangian(W, B, L, multiplier, beta)
            converged = abs(objective - updated) <= tolerance * max(abs(updated), 1e-300)
            objective = updated
            if converged:
                break
        gap = W - B @ L
        residual = float(np.linalg.norm(gap))
        if score is not None:
            rating = score(L)
            if rating < best_score:
                best, best_score = L, rating
        scale = float(np.sum(B * B))
        settled = abs(scale - previous_scale) <= tolerance * scale
        previous_scale = scale
        if (residual <= gamma and settled) or beta >= MAX_PENALTY:
            break
        if iteration % PENALTY_DOUBLING_PERIOD == 0:
            beta *= 2.0
        multiplier += beta * gap
    residual = float(np.linalg.norm(W - B @ L))
    if score is None:
        best = L
    return LowRankDecomposition(
        B=B,
        L=L,
        residual=residual,
        iterations=iteration,
        norm=norm,
        start=start,
        best=best,
        best_score=best_score,
    )
