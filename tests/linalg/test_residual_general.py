"""ResidualBlockStrategy and its Gram against dense computations on small domains."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.errors import ArgumentError, DomainError
from dpmm.linalg import (
    AllRange,
    Dense,
    Identity,
    Kron,
    Marginals,
    Ones,
    Prefix,
    VStack,
    query_variances,
    trace_of_product,
)
from dpmm.linalg.residual_general import ResidualBlockStrategy, split_factor
from dpmm.linalg.residuals import helmert

SHAPE = (3, 4)


def _random_blocks(rng: np.random.Generator) -> dict[int, object]:
    # ∅ scalar, {0} diagonal, {1} and {0, 1} dense (random invertible squares).
    return {
        0: 0.7,
        0b01: rng.uniform(0.5, 2.0, size=2),
        0b10: rng.normal(size=(3, 3)) + 2 * np.eye(3),
        0b11: rng.normal(size=(6, 6)) + 3 * np.eye(6),
    }


def _dense_strategy(blocks: dict[int, object]) -> np.ndarray:
    """``[L_S R_S]`` built from the dense residuals."""
    rows = []
    for mask, block in blocks.items():
        R = ResidualBlockStrategy(SHAPE, {mask: 1.0}).dense()
        if isinstance(block, np.ndarray):
            L = np.diag(block) if block.ndim == 1 else block
        else:
            L = block * np.eye(R.shape[0])
        rows.append(L @ R)
    return np.concatenate(rows)


@pytest.fixture
def strategy() -> tuple[ResidualBlockStrategy, np.ndarray]:
    blocks = _random_blocks(np.random.default_rng(7))
    return ResidualBlockStrategy(SHAPE, blocks), _dense_strategy(blocks)


def _workload() -> VStack:
    return VStack(
        [
            Kron([Prefix(3), AllRange(4)]),
            Kron([Identity(3), Ones(1, 4)]),
            2.0 * Kron([Ones(1, 3), Prefix(4)]),
            Kron([Ones(1, 3), Ones(1, 4)]),
        ]
    )


def test_split_factor_reassembles_the_factor() -> None:
    for factor in (Prefix(5), AllRange(4), Identity(3), Ones(1, 6)):
        part = split_factor(factor)
        n = factor.shape[1]
        rebuilt = np.outer(part.a, np.ones(n)) + part.B @ helmert(n)
        np.testing.assert_allclose(rebuilt, factor.dense(), atol=1e-12)


def test_matvec_adjoint_gram_and_pinv_match_dense(strategy) -> None:
    A, dense = strategy
    np.testing.assert_allclose(A.dense(), dense, atol=1e-12)
    y = np.random.default_rng(1).normal(size=A.shape[0])
    np.testing.assert_allclose(A.T @ y, dense.T @ y, atol=1e-12)
    np.testing.assert_allclose(A.gram().dense(), dense.T @ dense, atol=1e-10)
    np.testing.assert_allclose(A.gram().pinv().dense(), np.linalg.pinv(dense.T @ dense), atol=1e-9)
    np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(dense), atol=1e-9)


def test_column_norms_and_sensitivity(strategy) -> None:
    A, dense = strategy
    norms = np.linalg.norm(dense, axis=0)
    np.testing.assert_allclose(A.column_norms(2), norms, atol=1e-12)
    # Random dense blocks do not have constant diagonals: the bound is above the max.
    assert A.sensitivity(2) >= norms.max() - 1e-12
    assert A.uniform_column_norm(2) is None
    assert A.sensitivity(1) == pytest.approx(np.abs(dense).sum(axis=0).max())


def test_scalar_blocks_give_the_exact_uniform_sensitivity() -> None:
    A = ResidualBlockStrategy(SHAPE, {0: 1.0, 0b01: 2.0, 0b10: 0.5, 0b11: 1.5})
    norms = np.linalg.norm(A.dense(), axis=0)
    assert np.ptp(norms) < 1e-12
    assert A.uniform_column_norm(2) == pytest.approx(norms[0], rel=1e-14)


def test_trace_and_variances_against_dense(strategy) -> None:
    A, dense = strategy
    W = _workload()
    P = np.linalg.pinv(dense.T @ dense)
    Wd = W.dense()
    covariance = Wd @ P @ Wd.T
    # trace(WᵀW (AᵀA)⁺) through the structured hook, on a Sum of Kron Grams.
    assert trace_of_product(W.gram(), A.gram().pinv()) == pytest.approx(
        np.trace(covariance), rel=1e-10
    )
    variances = query_variances(W, A.gram().pinv())
    np.testing.assert_allclose(variances, np.diag(covariance), rtol=1e-9, atol=1e-12)


def test_trace_against_a_marginal_gram(strategy) -> None:
    A, dense = strategy
    W = Marginals(SHAPE, {(0,): 1.0, (0, 1): 2.0})
    expected = np.trace(W.gram().dense() @ np.linalg.pinv(dense.T @ dense))
    assert trace_of_product(W.gram(), A.gram().pinv()) == pytest.approx(expected, rel=1e-10)


def test_row_space_projector_matches_dense() -> None:
    A = ResidualBlockStrategy(SHAPE, {0: 1.0, 0b10: 2.0 * np.eye(3)})
    dense = A.dense()
    expected = np.linalg.pinv(dense.T @ dense) @ (dense.T @ dense)
    np.testing.assert_allclose(A.row_space_projector().dense(), expected, atol=1e-12)


def test_bad_blocks_raise() -> None:
    with pytest.raises(DomainError, match="bit mask"):
        ResidualBlockStrategy(SHAPE, {0b100: 1.0})
    with pytest.raises(DomainError, match="needs 6 columns"):
        ResidualBlockStrategy(SHAPE, {0b11: np.eye(5)})
    with pytest.raises(ArgumentError, match="must be finite"):
        ResidualBlockStrategy(SHAPE, {0b01: float("inf")})


def test_dense_block_on_the_empty_set_has_the_dense_sensitivity() -> None:
    blocks = {0: np.array([[1.5]]), 0b01: 1.0}
    A = ResidualBlockStrategy(SHAPE, blocks)
    dense = _dense_strategy(blocks)
    assert A.sensitivity(2) == pytest.approx(np.sqrt((dense**2).sum(axis=0)).max(), rel=1e-12)


def test_a_singular_block_gives_the_least_squares_variances() -> None:
    # Set {1}'s block reads only two of its three residual directions (M = LᵀL is
    # singular); the workload reads only those two, so it is supported, and its variances
    # are those of the dense pinv.
    rng = np.random.default_rng(3)
    kept = rng.normal(size=(2, 3))
    blocks = {0: 1.0, 0b10: kept}
    A = ResidualBlockStrategy(SHAPE, blocks)
    dense = _dense_strategy(blocks)
    factor = 0.5 * np.ones((2, 4)) + rng.normal(size=(2, 2)) @ kept @ helmert(4)
    W = Kron([Ones(1, 3), Dense(factor)])
    P = np.linalg.pinv(dense.T @ dense)
    Wd = W.dense()
    variances = query_variances(W, A.gram().pinv())
    np.testing.assert_allclose(variances, np.diag(Wd @ P @ Wd.T), rtol=1e-8)
