"""Block measurement from marginal tables against the dense quantized strategy."""

from __future__ import annotations

import itertools
from fractions import Fraction
from functools import reduce

import numpy as np
import pytest

from dpmm.errors import TooLargeError
from dpmm.linalg import AllRange, Dense, Identity, Kron, Ones, Prefix, VStack
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.measure import residual_blocks
from dpmm.measure.exact import MeasurementError
from dpmm.measure.quantize import QuantizationError
from dpmm.measure.residual_blocks import (
    block_answers,
    block_sensitivity,
    measure_blocks,
    quantize_blocks,
)
from dpmm.measure.residual_tables import count_marginals
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import optimize

SHAPE = (4, 5, 3)


def _predicate() -> Dense:
    rng = np.random.default_rng(7)
    return Dense(rng.integers(0, 2, size=(4, 5)).astype(float))


def workloads() -> dict[str, VStack]:
    """Prefix ⊗ identity, range ⊗ range and a custom predicate, with totals elsewhere."""
    return {
        "prefix_identity": VStack([Kron([Prefix(4), Identity(5), Ones(1, 3)])]),
        "range_range": VStack([Kron([AllRange(4), Ones(1, 5), AllRange(3)])]),
        "mixed": VStack(
            [
                Kron([Prefix(4), Identity(5), Ones(1, 3)]),
                Kron([Ones(1, 4), _predicate(), AllRange(3)]),
                Kron([Identity(4), Ones(1, 5), Ones(1, 3)]),
            ]
        ),
    }


def helmert_integer(n: int) -> np.ndarray:
    """Row k (1 ≤ k < n): k ones, then −k, then zeros — from the definition."""
    H = np.zeros((n - 1, n), dtype=np.int64)
    for k in range(1, n):
        H[k - 1, :k] = 1
        H[k - 1, k] = -k
    return H


def dense_integer_strategy(quantized) -> np.ndarray:
    """``B = [Q_S H_S P_S]`` with ``P_S`` the dense S-marginal map (int64)."""
    shape = quantized.domain_shape
    rows = []
    for mask in quantized.sets:
        members = [i for i in range(len(shape)) if mask >> i & 1]
        H = reduce(np.kron, [helmert_integer(shape[i]) for i in members], np.ones((1, 1), int))
        P = reduce(
            np.kron,
            [
                np.eye(n, dtype=np.int64) if mask >> i & 1 else np.ones((1, n), int)
                for i, n in enumerate(shape)
            ],
            np.ones((1, 1), int),
        )
        Q = quantized.integers[mask]
        Q = np.diag(Q) if Q.ndim == 1 else Q
        rows.append(Q @ H @ P)
    return np.vstack(rows)


def data(shape=SHAPE, seed=0, records=200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(records, rng.dirichlet(np.ones(int(np.prod(shape)))))


@pytest.fixture(scope="module", params=sorted(workloads()))
def strategy(request) -> ResidualBlockStrategy:
    A = optimize(workloads()[request.param], "residual", ZCDP(1))
    assert isinstance(A, ResidualBlockStrategy)
    return A


def test_some_blocks_are_dense(strategy):
    assert any(isinstance(b, np.ndarray) for b in strategy.blocks.values())


def test_quantized_strategy_is_close_and_matches_integer_dense(strategy):
    quantized = quantize_blocks(strategy)
    B = dense_integer_strategy(quantized)
    # The quantized strategy A_q = B / 2^k has nearly A's Gram (rank-deficient blocks are
    # reduced to their row space, so compare Grams rather than rows).
    A = strategy.dense()
    gram = B.T.astype(float) @ B / quantized.scale**2
    assert np.abs(gram - A.T @ A).max() < 1e-4 * np.abs(A.T @ A).max()
    # ... and its residual-block form is exactly the same matrix.
    np.testing.assert_allclose(quantized.strategy().dense(), B / quantized.scale, atol=1e-12)


def test_exact_answers_equal_dense_integer_product(strategy):
    quantized = quantize_blocks(strategy)
    x = data()
    B = dense_integer_strategy(quantized)
    answers = block_answers(quantized, x)
    assert answers.dtype == np.int64
    np.testing.assert_array_equal(answers, B @ x)
    # Tables counted from records give the same answers as the data vector.
    records = np.array(list(itertools.product(*[range(n) for n in SHAPE])))
    repeated = np.repeat(records, x, axis=0)
    sets = [[i for i in range(3) if m >> i & 1] for m in quantized.sets]
    counts = count_marginals([repeated[:77], repeated[77:]], SHAPE, sets)
    np.testing.assert_array_equal(block_answers(quantized, counts), B @ x)


def test_sensitivity_and_rho_are_exact(strategy):
    quantized = quantize_blocks(strategy)
    B = dense_integer_strategy(quantized).astype(object)
    dense_squared = max((B * B).sum(axis=0).tolist())
    squared, exact = block_sensitivity(quantized)
    assert exact and squared == dense_squared
    m = measure_blocks(quantized, data(), ZCDP("1/3"), rng=np.random.default_rng(1))
    assert m.sensitivity_exact and m.squared_sensitivity == dense_squared
    assert m.rho == Fraction(dense_squared) / (2 * m.sigma2)
    assert m.rho <= Fraction(1, 3) and m.rho > Fraction(1, 3) * (1 - 2**-18)
    assert m.requested_rho == Fraction(1, 3)


def test_bound_path_is_an_upper_bound(strategy, monkeypatch):
    quantized = quantize_blocks(strategy)
    exact, _ = block_sensitivity(quantized)
    monkeypatch.setattr(residual_blocks, "EXACT_CELLS", 10)
    bound, flag = block_sensitivity(quantized)
    assert not flag and bound >= exact
    m = measure_blocks(quantized, data(), ZCDP(1), rng=np.random.default_rng(2))
    assert not m.sensitivity_exact and m.rho <= 1
    # The cost of the noise actually added (exact Δ²) is below the recorded bound.
    assert Fraction(exact) / (2 * m.sigma2) <= m.rho


def test_noise_has_the_recorded_variance():
    strategy = optimize(workloads()["mixed"], "residual", ZCDP(1))
    quantized = quantize_blocks(strategy)
    x = data()
    exact = block_answers(quantized, x)
    draws = np.stack(
        [
            measure_blocks(quantized, x, ZCDP(1), rng=np.random.default_rng(s)).values - exact
            for s in range(100)
        ]
    )
    sigma2 = float(measure_blocks(quantized, x, ZCDP(1), rng=np.random.default_rng(0)).sigma2)
    # The sample variance of n draws has relative standard deviation √(2/n): allow 5 of them.
    assert abs(draws.var() / sigma2 - 1) < 5 * np.sqrt(2 / draws.size)
    assert abs(draws.mean()) < 4 * np.sqrt(sigma2 / draws.size)


def test_rank_deficient_block_is_reduced_to_its_row_space():
    # The predicate's sub-workload leaves one direction of set {1, 2} unread.
    A = optimize(workloads()["mixed"], "residual", ZCDP(1))
    block = A.blocks[0b110]
    assert np.linalg.matrix_rank(block, tol=1e-8 * np.linalg.norm(block, 2)) < block.shape[1]
    quantized = quantize_blocks(A)
    Q = quantized.integers[0b110]
    assert Q.shape[0] < Q.shape[1] and np.linalg.matrix_rank(Q.astype(float)) == Q.shape[0]
    G = quantized.normalized(0b110) / quantized.scale
    np.testing.assert_allclose(G.T @ G, block.T @ block, atol=1e-5)


def test_scalar_blocks_stay_diagonal():
    A = ResidualBlockStrategy((3, 4), {0: 0.5, 1: 1.0, 2: 2.0, 3: np.eye(6)})
    quantized = quantize_blocks(A)
    assert quantized.integers[1].ndim == 1 and quantized.integers[3].ndim == 2
    x = data((3, 4))
    np.testing.assert_array_equal(
        block_answers(quantized, x), dense_integer_strategy(quantized) @ x
    )


def test_plain_residual_strategy_is_measured_too():
    A = ResidualBlockStrategy((2, 3), {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    quantized = quantize_blocks(A, bits=30)
    # Plain residuals: every column has Σ_S Π(1 − 1/n_i) = 2.5 (up to quantization).
    squared, _ = block_sensitivity(quantized)
    assert abs(squared / quantized.scale**2 - 2.5) < 1e-7


def test_errors():
    A = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    x = data()
    with pytest.raises(QuantizationError, match="ResidualBlockStrategy"):
        quantize_blocks(ResidualStrategy((2, 3), {0: 1.0}))
    with pytest.raises(QuantizationError, match="bits"):
        quantize_blocks(A, bits=0)
    with pytest.raises(QuantizationError, match="no block"):
        quantize_blocks(ResidualBlockStrategy((2, 3), {1: 0.0}))
    with pytest.raises(MeasurementError, match="zCDP"):
        measure_blocks(A, x, PureDP(1))
    with pytest.raises(MeasurementError, match="integer counts"):
        measure_blocks(A, x.astype(float), ZCDP(1))
    with pytest.raises(MeasurementError, match="was not counted"):
        measure_blocks(A, MarginalCounts(SHAPE, {}), ZCDP(1))
    with pytest.raises(MeasurementError, match="over"):
        measure_blocks(A, MarginalCounts((4, 5), {}), ZCDP(1))
    bad = {
        (): np.array(4),
        (0,): np.array([1, 1, 1, 1]),
        (1,): np.ones(5, int),
        (0, 1): np.ones((4, 5), int),
    }
    with pytest.raises(MeasurementError, match="disagree"):
        measure_blocks(A, MarginalCounts(SHAPE, bad), ZCDP(1))
    negative = {**bad, (0,): np.array([-1, 5, 0, 0])}
    with pytest.raises(MeasurementError, match="negative"):
        measure_blocks(A, MarginalCounts(SHAPE, negative), ZCDP(1))
    with pytest.raises(MeasurementError, match="overflow"):
        measure_blocks(A, x * 2**40, ZCDP(1), bits=20)


def test_too_large_block_is_refused(monkeypatch):
    A = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    monkeypatch.setattr(residual_blocks, "MAX_BLOCK_ENTRIES", 10)
    with pytest.raises(TooLargeError):
        block_sensitivity(quantize_blocks(A))
