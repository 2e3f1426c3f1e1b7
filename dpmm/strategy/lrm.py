"""The Low-Rank Mechanism (seed 002) as a dpmm strategy.

LRM decomposes the workload as ``W ≈ B L`` (see :mod:`dpmm.strategy.lrm_solver`)
and measures ``L``. dpmm then answers W by least squares from L's noisy
answers, which needs W inside L's row space *exactly*; the relaxed program
(γ > 0) only promises ``‖W − BL‖_F ≤ γ``. :func:`complete_row_space` closes
the gap without raising the sensitivity:

1. L's singular directions below ``1e-4 σ_max`` are dropped (least squares would
   drop them anyway, and they carry almost no weight);
2. the part of W left outside L's row space, ``E = W (I − P_L)``, is measured
   by ``t`` times an orthonormal basis of E's row space, appended to L;
3. the stack is divided by its largest column norm (sensitivity exactly 1).

Because the appended rows are orthogonal to L's row space, the least-squares
error splits as ``s(t)² (‖W L⁺‖_F² + ‖E‖_F² / t²)`` with ``s(t)`` the largest
column norm of the stack; ``t`` minimizes it (a one-dimensional search).

For Laplace noise (``privacy.norm == 1``) the columns of L lie in L1 balls as
in the seed; for Gaussian noise (``norm == 2``) they lie in L2 balls, the L2
sensitivity's analogue.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.optimize

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Dense, Matrix
from dpmm.linalg.spectral import thin_svd
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.low_rank_matrix import LowRankStrategy
from dpmm.strategy.lrm_solver import (
    LowRankDecomposition,
    decompose_workload,
    least_squares_scale,
    row_space,
    scaled_into_balls,
)
from dpmm.strategy.restarts import restart_generator

__all__ = [
    "DEFAULT_GAMMA",
    "complete_row_space",
    "completed_scale",
    "lrm_decomposition",
    "lrm_strategy",
    "select_lrm",
    "strategy_from_decomposition",
]

#: The seed's default relaxation γ of ``‖W − BL‖_F`` (Table 1).
DEFAULT_GAMMA = 0.01
#: Default number of augmented-Lagrangian rounds (Algorithm 1's outer loop).
DEFAULT_MAX_ITERATIONS = 60
#: Default relative tolerance of the inner loops and of the settling of ``‖B‖_F²``.
DEFAULT_TOLERANCE = 1e-4
#: Parts of W outside the row space below this fraction of ``‖W‖_F`` are left out.
NEGLIGIBLE_RESIDUAL = 1e-12
#: The appended rows' weight is kept above this fraction of L's largest singular value,
#: so that least squares (which drops relatively tiny singular values) still sees them.
SMALLEST_APPENDED_WEIGHT = 1e-3


def lrm_decomposition(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    rank: int | None = None,
    gamma: float = DEFAULT_GAMMA,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tolerance: float = DEFAULT_TOLERANCE,
    rng: np.random.Generator | None = None,
) -> LowRankDecomposition:
    """The seed's relaxed decomposition ``W ≈ B L`` (Formula 8), before completion.

    Arguments are those of :func:`lrm_strategy`.
    """
    generator = restart_generator(rng)
    workload = W.dense()
    return decompose_workload(
        workload,
        norm=privacy.norm,
        rank=rank,
        gamma=gamma,
        max_iterations=max_iterations,
        tolerance=tolerance,
        rng=generator,
        score=lambda L: completed_scale(workload, L, privacy.norm),
    )


def completed_scale(W: np.ndarray, L: np.ndarray, norm: int) -> float:
    """``‖W A⁺‖_F²`` for ``A = complete_row_space(W, L, norm)``: its exact error over ``v(1)``.

    This is dpmm's least-squares error of the strategy an iterate L yields (sensitivity 1),
    the quantity :func:`lrm_strategy` minimizes in the end.
    """
    return least_squares_scale(W, complete_row_space(W, L, norm))


def _column_norms(L: np.ndarray, norm: int) -> np.ndarray:
    return np.linalg.norm(L, ord=norm, axis=0)


def complete_row_space(W: np.ndarray, L: np.ndarray, norm: int) -> np.ndarray:
    """A strategy with sensitivity 1 whose row space holds W's (see the module docstring).

    Example:
        >>> W = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
        >>> A = complete_row_space(W, np.array([[0.5, 0.5, 0.0]]), norm=1)
        >>> A.shape, round(float(np.abs(A).sum(axis=0).max()), 12)
        ((2, 3), 1.0)
        >>> bool(np.allclose(W @ np.linalg.pinv(A) @ A, W))
        True
    """
    _, singular, right = row_space(L)
    kept = (right.T * singular).T  # Σ Vᵀ; the left factor U is orthonormal
    # Rotating L's rows by Uᵀ keeps the row space but changes the column norms, so keep L
    # itself unless some directions had to go (then U = L V Σ⁻¹ on the kept directions).
    base = L if singular.size == min(L.shape) else ((L @ right.T) / singular) @ kept
    coefficients = W @ right.T
    outside = W - coefficients @ right
    total = float(np.linalg.norm(W))
    if float(np.linalg.norm(outside)) <= NEGLIGIBLE_RESIDUAL * total:
        return scaled_into_balls(base, norm)
    _, outside_singular, outside_right = thin_svd(outside)
    directions = outside_right[outside_singular > NEGLIGIBLE_RESIDUAL * total]
    inside_scale = float(np.sum((coefficients / singular) ** 2))  # ‖W L⁺‖_F²
    outside_scale = float(np.sum(outside_singular**2))
    base_norms = _column_norms(base, norm)
    direction_norms = _column_norms(directions, norm)

    def stack_norm(weight: float) -> float:
        if norm == 1:
            return float((base_norms + weight * direction_norms).max())
        return float(np.sqrt(base_norms**2 + (weight * direction_norms) ** 2).max())

    def error(log_weight: float) -> float:
        weight = math.exp(log_weight)
        return stack_norm(weight) ** 2 * (inside_scale + outside_scale / weight**2)

    largest = float(singular[0])
    low = math.log(SMALLEST_APPENDED_WEIGHT * largest)
    high = math.log(10.0 * max(largest, 1.0))
    best = scipy.optimize.minimize_scalar(error, bounds=(low, high), method="bounded")
    weight = math.exp(float(best.x))
    return scaled_into_balls(np.vstack([base, weight * directions]), norm)


def _check_support(W: np.ndarray, A: np.ndarray) -> None:
    basis = row_space(A)[2]
    outside = float(np.linalg.norm(W - (W @ basis.T) @ basis))
    if outside > 1e-9 * float(np.linalg.norm(W)):
        raise UnsupportedQueryError(
            f"The low-rank strategy leaves {outside / np.linalg.norm(W):.3g} of the workload "
            "outside its row space"
        )


def lrm_strategy(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    rank: int | None = None,
    gamma: float = DEFAULT_GAMMA,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tolerance: float = DEFAULT_TOLERANCE,
    rng: np.random.Generator | None = None,
) -> LowRankStrategy:
    """The Low-Rank Mechanism's strategy ``L`` for workload ``W`` (seed 002).

    Returned as a :class:`LowRankStrategy` (thin SVD), whose Gram, pseudo-inverse and
    traces never form an ``n × n`` array.

    Columns of the result have ``privacy.norm``-norm at most 1 (L1 for Laplace noise,
    as in the seed; L2 for Gaussian noise), so its sensitivity is 1, and W lies in its
    row space, so dpmm's least squares answers W exactly in expectation.

    Args:
        W: The workload (``m × n``); it is made dense (size-guarded).
        privacy: Its ``norm`` selects the L1 or L2 balls.
        rank: Rows ``r`` of L before completion; default ``⌈1.2 · rank(W)⌉`` (the seed's).
        gamma: The relaxation ``‖W − BL‖_F ≤ γ`` of Formula 8.
        max_iterations: Rounds of the augmented Lagrangian method (Algorithm 1).
        tolerance: Relative tolerance of its inner loops.
        rng: Draws the random rows of the starting point; a fresh unseeded
            generator when None.

    Raises:
        ArgumentError: A parameter is out of range or W is zero.
        TooLargeError: W is too large to hold densely.

    Example:
        >>> from dpmm.privacy import PureDP
        >>> W = Dense([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
        >>> A = lrm_strategy(W, PureDP(1), rng=np.random.default_rng())
        >>> round(A.sensitivity(1), 12)
        1.0
    """
    decomposition = lrm_decomposition(
        W,
        privacy,
        rank=rank,
        gamma=gamma,
        max_iterations=max_iterations,
        tolerance=tolerance,
        rng=rng,
    )
    return strategy_from_decomposition(W.dense(), decomposition)


def strategy_from_decomposition(
    W: np.ndarray, decomposition: LowRankDecomposition
) -> LowRankStrategy:
    """The completed strategy of the best iterate, or of the start if that is better.

    Raises:
        UnsupportedQueryError: the completion failed to hold W's row space (a bug guard).
    """
    # Algorithm 1 is a local method on a non-convex program: keep its start (an exact
    # decomposition at least as good as noise on data or on queries) if it did not improve.
    norm = decomposition.norm
    candidates = [
        complete_row_space(W, decomposition.best, norm),
        complete_row_space(W, decomposition.start, norm),
    ]
    strategy = min(candidates, key=lambda A: least_squares_scale(W, A))
    _check_support(W, strategy)
    return LowRankStrategy(strategy)


def select_lrm(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    """``lrm_strategy`` with the seed's default settings (the ``"lrm"`` method).

    Returned as a :class:`~dpmm.linalg.Dense`: strategies of the registered methods are
    saved with :mod:`dpmm.linalg.serialize`, which does not know LowRankStrategy yet.
    """
    return Dense(lrm_strategy(W, privacy).array)
