"""The optimal strategy for one attribute under Gaussian noise, with a certificate.

With L2 sensitivity, a strategy matters only through ``X = AᵀA``: its error
at unit noise is ``tr(G X⁻¹)`` (``G = WᵀW``) and its squared sensitivity is
``max_j X_jj``. So the best strategy solves the convex program

    ``min tr(G X⁻¹)  subject to  X ≻ 0, X_jj ≤ 1``.

Its Lagrange dual has a closed form: for weights ``e`` on the simplex, with
``M(e) = E^{1/2} G E^{1/2}`` and ``T(e) = tr(M(e)^{1/2})``,

    ``OPT = max_e T(e)²``,

and ``e`` uniform gives ``T² = (Σσ(W))²/n``, the SVD bound — so every dual
value is a certified lower bound at least that good. For a given ``e`` the
primal point ``X = E^{-1/2} M^{1/2} E^{-1/2}`` (scaled to ``max X_jj = 1``)
has error ``T · max_j (M^{1/2})_jj / e_j``. At the optimum every column has
unit norm, ``(M^{1/2})_jj = T e_j``, which gives the multiplicative update
``e ← diag(M^{1/2}) / T`` (damped). The strategy is ``A = M^{1/4} E^{-1/2}``
scaled, so ``AᵀA = X``. Each step is one symmetric eigendecomposition, O(n³).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpmm.errors import TooLargeError
from dpmm.linalg import Dense
from dpmm.strategy.time_budget import check_time

__all__ = ["MAX_SIZE", "GaussianOptimum", "nonsingular", "optimal_gaussian_factor"]

#: Largest attribute solved (one dense eigendecomposition per step; on AllRange the gap is
#: below 10⁻³ after 5 steps, 1.1 s at 1024 cells and 7.6 s at 2048 on two threads, ~8x per
#: doubling: hdmm.md's AllRange(4096) is in range, 8192 would take ~15 minutes).
MAX_SIZE = 4096

#: Relative eigenvalue below which the workload Gram counts as singular.
SINGULAR = 1e-10

#: Certified relative gap (primal / dual − 1) at which the iteration stops.
GAP = 1e-3

#: Exponent of the multiplicative step (column norms scale roughly like e^{-1/2}).
STEP = 1.5

#: Most steps of the multiplicative update.
MAX_STEPS = 500


@dataclass(frozen=True)
class GaussianOptimum:
    """A strategy of unit L2 sensitivity, its error ``tr(G (AᵀA)⁻¹)``, and the dual bound."""

    strategy: Dense
    error: float
    lower_bound: float

    @property
    def gap(self) -> float:
        """``error / lower_bound − 1``: how far from optimal the strategy can be, at most."""
        return self.error / self.lower_bound - 1


def _root_and_fourth_root(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, vectors = np.linalg.eigh(M)
    values = np.clip(values, 0, None)
    root = (vectors * np.sqrt(values)) @ vectors.T
    fourth = (vectors * np.sqrt(np.sqrt(values))) @ vectors.T
    return root, fourth


def nonsingular(gram: np.ndarray) -> bool:
    """Whether the symmetric ``gram`` has full rank by this solver's test (its least
    eigenvalue above :data:`SINGULAR` times its largest)."""
    spectrum = np.linalg.eigvalsh(gram)
    return bool(spectrum[0] > SINGULAR * spectrum[-1])


def optimal_gaussian_factor(gram: np.ndarray) -> GaussianOptimum:
    """The L2-optimal strategy for a workload of full column rank with Gram ``gram``.

    It stops at the certified relative gap :data:`GAP`, or after :data:`MAX_STEPS` steps.

    Args:
        gram: ``WᵀW`` as a dense symmetric positive definite n × n array (n ≤ :data:`MAX_SIZE`).

    Raises:
        TooLargeError: n exceeds :data:`MAX_SIZE`.
        ValueError: ``gram`` is not square, symmetric, finite, or is singular.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> optimum = optimal_gaussian_factor(Prefix(16).gram().dense())
        >>> optimum.gap < 1e-3, optimum.strategy.sensitivity(2) <= 1 + 1e-9
        (True, True)
    """
    G = np.asarray(gram, dtype=float)
    n = G.shape[0]
    if G.ndim != 2 or G.shape != (n, n) or not np.all(np.isfinite(G)):
        raise ValueError(f"The workload Gram must be a finite square array, got shape {G.shape}")
    if n > MAX_SIZE:
        raise TooLargeError(
            f"The Gaussian-optimal strategy is solved densely up to {MAX_SIZE:,} cells, not {n:,}"
        )
    if not np.allclose(G, G.T, rtol=1e-10, atol=1e-12 * np.abs(G).max()):
        raise ValueError("The workload Gram must be symmetric")
    if np.any(np.diag(G) <= 0):
        raise ValueError(
            "Every cell must be read by some query (the Gram has a zero diagonal entry)"
        )
    if not nonsingular(G):
        raise ValueError("The workload Gram is singular; this solver needs full column rank")
    e = np.full(n, 1.0 / n)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    lower = 0.0
    for _ in range(MAX_STEPS):
        check_time()
        scale = np.sqrt(e)
        root, fourth = _root_and_fourth_root(scale[:, None] * G * scale[None, :])
        diagonal = np.diag(root)
        total = float(diagonal.sum())
        lower = max(lower, total**2)
        column_norms = diagonal / (total * e)  # X_jj of the unscaled primal point
        error = total**2 * float(column_norms.max())
        if best is None or error < best[0]:
            best = (error, fourth, e)
        if best[0] <= lower * (1 + GAP):
            break
        # Damped fixed-point step toward unit column norms; renormalized onto the simplex.
        e = e * column_norms**STEP
        e /= e.sum()
    error, fourth, e = best
    strategy = fourth / np.sqrt(e)[None, :]
    strategy /= math.sqrt(float((strategy**2).sum(axis=0).max()))
    return GaussianOptimum(Dense(strategy, full_column_rank=True), error, lower)
