"""Least squares against the dense pseudo-inverse: structured closed forms, LSMR, GLS, totals."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Prefix,
    Product,
    Sparse,
    VStack,
    Weighted,
)
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.reconstruct import least_squares


def _dense_gls(A: Matrix, y: np.ndarray, std: np.ndarray | float) -> np.ndarray:
    std = np.broadcast_to(np.asarray(std, dtype=float), y.shape)
    return np.linalg.pinv(A.dense() / std[:, None]) @ (y / std)


def _basis(n: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))[0]


STRUCTURED = {
    "kron": lambda: Kron([Hierarchical(6, 2), Prefix(3), Identity(2)]),
    "kron-haar": lambda: Kron([Haar(8), AllRange(4)]),
    "marginals": lambda: Marginals((3, 4, 2), {(0, 1): 1.0, (1, 2): 0.5, (): 2.0}),
    "weighted-tree": lambda: Weighted(3.0, Hierarchical(10, 3)),
    "pidentity": lambda: PIdentity(np.random.default_rng(6).uniform(size=(3, 9)), 2),
    "eigen": lambda: EigenStrategy(
        [_basis(4, 7), _basis(3, 8)], [np.array([1.0, 2.0, 0.5, 3.0]), np.array([1.0, 4.0, 2.0])]
    ),
    "eigen-unmeasured-direction": lambda: EigenStrategy(
        [_basis(6, 9)], np.array([1.0, 0.0, 2.0, 0.5, 0.0, 3.0])
    ),
    "residual-blocks": lambda: ResidualBlockStrategy(
        (3, 4), {0: 1.0, 0b01: np.array([2.0, 0.5]), 0b11: np.ones((2, 6)) + np.eye(2, 6)}
    ),
}


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_structured_least_squares_is_the_dense_pinv_solution(name: str) -> None:
    rng = np.random.default_rng(1)
    A = STRUCTURED[name]()
    assert A.gram_pinv() is not None  # the closed form, not LSMR
    y = rng.normal(size=A.shape[0]) * 5
    estimate = least_squares(A, y)
    assert estimate.iterations == 0
    np.testing.assert_allclose(estimate.x, np.linalg.pinv(A.dense()) @ y, atol=1e-9)


@pytest.mark.parametrize("name", ["pidentity", "eigen", "eigen-unmeasured-direction"])
def test_optimized_templates_take_their_closed_form_gls(name: str) -> None:
    rng = np.random.default_rng(10)
    A = STRUCTURED[name]()
    y = rng.normal(size=A.shape[0]) * 4
    estimate = least_squares(A, y, noise_std=2.5)
    assert estimate.iterations == 0 and estimate.residual == 0.0
    np.testing.assert_allclose(estimate.x, _dense_gls(A, y, 2.5), atol=1e-9)
    constrained = least_squares(A, y, noise_std=2.5, total=3.0)
    assert constrained.iterations == 0 and constrained.x.sum() == pytest.approx(3.0)


def test_marginals_of_rank_deficient_union_give_minimum_norm_solution() -> None:
    # Marginals on (0,) and (1,) do not determine x: the pseudo-inverse picks the min-norm one.
    rng = np.random.default_rng(2)
    A = Marginals((3, 4), {(0,): 1.0, (1,): 1.0})
    y = rng.normal(size=A.shape[0])
    np.testing.assert_allclose(least_squares(A, y).x, np.linalg.pinv(A.dense()) @ y, atol=1e-10)


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: Dense(rng.normal(size=(40, 15))),
        lambda rng: VStack([Identity(20), Hierarchical(20, 2)]),
        lambda rng: Product([Sparse(np.diag(rng.uniform(1, 2, 12))), Prefix(12)]),
    ],
)
def test_generic_least_squares_uses_lsmr_and_matches_pinv(make) -> None:
    rng = np.random.default_rng(3)
    A = make(rng)
    assert A.gram_pinv() is None
    y = rng.normal(size=A.shape[0])
    estimate = least_squares(A, y, tolerance=1e-13)
    assert estimate.iterations > 0 and estimate.converged
    np.testing.assert_allclose(estimate.x, np.linalg.pinv(A.dense()) @ y, atol=1e-7)


@pytest.mark.parametrize(
    "A",
    [
        Marginals((3, 4, 2), {(0, 1): 1.0, (1, 2): 2.0, (2,): 1.0}),
        VStack([Hierarchical(16, 2), Identity(16)]),
        Kron([Hierarchical(4, 2), Identity(3)]),
    ],
)
def test_weighted_measurements_give_generalized_least_squares(A: Matrix) -> None:
    rng = np.random.default_rng(4)
    blocks = A.blocks if isinstance(A, VStack) else [A]
    std = np.concatenate([np.full(b.shape[0], rng.uniform(0.5, 4.0)) for b in blocks])
    if len(blocks) == 1:
        std = rng.uniform(0.5, 4.0, A.shape[0])  # one scale per row
    y = rng.normal(size=A.shape[0]) * 3
    estimate = least_squares(A, y, noise_std=std, tolerance=1e-13)
    np.testing.assert_allclose(estimate.x, _dense_gls(A, y, std), atol=1e-7)
    # GLS differs from OLS here: the weights matter.
    assert not np.allclose(estimate.x, np.linalg.pinv(A.dense()) @ y, atol=1e-3)


def test_weighted_marginals_keep_their_closed_form() -> None:
    from dpmm.reconstruct import whiten

    A = Marginals((3, 4), {(0,): 1.0, (0, 1): 1.0})
    std = np.concatenate([np.full(3, 2.0), np.full(12, 0.5)])
    assert whiten(A, std).gram_pinv() is not None


@pytest.mark.parametrize("A", [Kron([Hierarchical(6, 2), Identity(3)]), Dense(np.eye(6) + 1)])
def test_known_total_is_the_equality_constrained_gls(A: Matrix) -> None:
    rng = np.random.default_rng(5)
    y = rng.normal(size=A.shape[0]) * 4
    estimate = least_squares(A, y, total=7.0, tolerance=1e-13)
    assert estimate.x.sum() == pytest.approx(7.0)
    # KKT of min ‖Ax − y‖² s.t. 1ᵀx = T: the gradient Aᵀ(Ax − y) is parallel to 1.
    gradient = A.dense().T @ (A.dense() @ estimate.x - y)
    np.testing.assert_allclose(gradient, gradient.mean(), atol=1e-7)
