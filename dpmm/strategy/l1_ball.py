"""Euclidean projection of every column of a matrix onto a norm ball.

The Low-Rank Mechanism (seed 002) keeps each column of its strategy ``L`` in
the unit ball of the sensitivity norm: the L1 ball for Laplace noise, the L2
ball for Gaussian noise. Its projected-gradient steps need the nearest
feasible matrix in Frobenius norm, which splits into one projection per column.

The L1 projection is the sorting method of Duchi, Shalev-Shwartz, Singer and
Chandra (2008): the projection of ``v`` onto ``{u : ‖u‖₁ ≤ z}`` is the
soft-threshold ``sign(v) · max(|v| − θ, 0)`` whose threshold ``θ ≥ 0`` makes
the result's L1 norm exactly ``z`` (``θ = 0`` when ``v`` is already inside).
"""

from __future__ import annotations

import numpy as np

from dpmm.errors import ArgumentError

__all__ = ["l1_thresholds", "project_columns", "project_columns_l1", "project_columns_l2"]


def _check_radius(radius: float) -> float:
    radius = float(radius)
    if not np.isfinite(radius) or radius <= 0:
        raise ArgumentError(
            f"The radius of a norm ball must be positive and finite, got {radius!r}"
        )
    return radius


def l1_thresholds(X: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """The soft-threshold ``θⱼ ≥ 0`` that projects column j of ``X`` onto the L1 ball.

    Columns already inside the ball get ``θⱼ = 0``. Cost: one sort of ``|X|``
    along the columns, ``O(r n log r)`` for an ``r × n`` matrix.

    Example:
        >>> l1_thresholds(np.array([[3.0, 0.2], [1.0, 0.3]]))
        array([2., 0.])
    """
    radius = _check_radius(radius)
    magnitudes = np.abs(np.asarray(X, dtype=np.float64))
    if magnitudes.ndim != 2:
        raise ValueError(f"Expected a 2-D array, got {magnitudes.ndim} dimensions")
    rows = magnitudes.shape[0]
    if rows == 0:
        return np.zeros(magnitudes.shape[1])
    descending = -np.sort(-magnitudes, axis=0)
    excess = np.cumsum(descending, axis=0) - radius
    counts = np.arange(1, rows + 1, dtype=np.float64)[:, None]
    # The support of the projection is the k largest magnitudes, k the last index where the
    # k-th largest still exceeds the threshold that its prefix would need (Duchi et al., Fig. 1).
    active = descending * counts > excess
    support = rows - np.argmax(active[::-1], axis=0)  # last True, 1-based
    columns = np.arange(magnitudes.shape[1])
    theta = excess[support - 1, columns] / support
    inside = magnitudes.sum(axis=0) <= radius
    return np.where(inside, 0.0, np.maximum(theta, 0.0))


def project_columns_l1(X: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Each column of ``X`` projected onto ``{u : ‖u‖₁ ≤ radius}`` (Euclidean projection).

    Example:
        >>> project_columns_l1(np.array([[3.0, 0.2], [1.0, -0.3]]))
        array([[ 1. ,  0.2],
               [ 0. , -0.3]])
    """
    X = np.asarray(X, dtype=np.float64)
    theta = l1_thresholds(X, radius)
    return np.sign(X) * np.maximum(np.abs(X) - theta, 0.0)


def project_columns_l2(X: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Each column of ``X`` projected onto ``{u : ‖u‖₂ ≤ radius}``: long columns are shortened.

    Example:
        >>> project_columns_l2(np.array([[3.0, 0.6], [4.0, 0.0]]))
        array([[0.6, 0.6],
               [0.8, 0. ]])
    """
    radius = _check_radius(radius)
    X = np.asarray(X, dtype=np.float64)
    norms = np.sqrt((X * X).sum(axis=0))
    scale = np.where(norms > radius, radius / np.where(norms > 0, norms, 1.0), 1.0)
    return X * scale


def project_columns(X: np.ndarray, norm: int, radius: float = 1.0) -> np.ndarray:
    """Project every column of ``X`` onto the ``norm``-ball (``norm`` is 1 or 2) of ``radius``."""
    if norm == 1:
        return project_columns_l1(X, radius)
    if norm == 2:
        return project_columns_l2(X, radius)
    raise ArgumentError(f"Column projections exist for the 1- and 2-norms only, got norm={norm!r}")
