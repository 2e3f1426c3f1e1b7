"""Block reconstruction against dense least squares on the quantized strategy."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import reduce

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import AllRange, Dense, Identity, Kron, Marginals, Ones, Prefix, VStack, Weighted
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.measure import measure, quantize
from dpmm.measure.exact import analyze_strategy, exact_answers
from dpmm.privacy import ZCDP
from dpmm.reconstruct import residual_blocks
from dpmm.reconstruct.residual_blocks import (
    BlockEstimate,
    block_marginals,
    block_noise_coefficients,
    block_workload_answers,
    check_answerable,
    iter_block_marginals,
)
from dpmm.strategy import optimize
from dpmm.strategy.marginal_optimal import cell_variances, marginal_optimal
from tests.conftest import helmert_integer

SHAPE = (4, 5, 3)
#: The grid of the quantized strategies (fine enough to compare with the unquantized one).
BITS = 20


def _predicate() -> Dense:
    rng = np.random.default_rng(7)
    return Dense(rng.integers(0, 2, size=(4, 5)).astype(float))


WORKLOADS = {
    "prefix_identity": VStack([Kron([Prefix(4), Identity(5), Ones(1, 3)])]),
    "range_range": VStack([Kron([AllRange(4), Ones(1, 5), AllRange(3)])]),
    "mixed": VStack(
        [
            Kron([Prefix(4), Identity(5), Ones(1, 3)]),
            Weighted(-2.0, Kron([Ones(1, 4), _predicate(), AllRange(3)])),
            Kron([Identity(4), Ones(1, 5), Ones(1, 3)]),
            Kron([Ones(1, 4), Ones(1, 5), Ones(1, 3)]),
        ]
    ),
}
#: Marginals each workload's strategy can answer (subsets of the sets it reads).
MARGINALS = {
    "prefix_identity": [(), (0,), (1,), (0, 1)],
    "range_range": [(), (0,), (2,), (0, 2)],
    "mixed": [(), (0,), (1,), (2,), (0, 1), (1, 2)],
}


def marginal_map(shape, attrs) -> np.ndarray:
    factors = [np.eye(n) if i in attrs else np.ones((1, n)) for i, n in enumerate(shape)]
    return reduce(np.kron, factors, np.ones((1, 1)))


def dense_integer_strategy(blocks) -> np.ndarray:
    """``B = [Q_S H_S P_S]`` of a HelmertBlocks, from the definition (float64)."""
    shape = blocks.domain_shape
    rows = []
    for mask in blocks.sets:
        members = [i for i in range(len(shape)) if mask >> i & 1]
        H = reduce(np.kron, [helmert_integer(shape[i]) for i in members], np.ones((1, 1), int))
        Q = blocks.integers[mask]
        Q = np.diag(Q) if Q.ndim == 1 else Q
        rows.append(Q @ H @ marginal_map(shape, members))
    return np.vstack(rows).astype(np.float64)


def data(records=300, seed=0) -> np.ndarray:
    return data_of(SHAPE, records, seed)


def data_of(shape, records=300, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(records, rng.dirichlet(np.ones(int(np.prod(shape)))))


@dataclass(frozen=True)
class Case:
    name: str
    W: object
    A: object
    x: np.ndarray
    quantized: object
    record: object
    estimate: BlockEstimate

    @property
    def blocks(self):
        return self.quantized.integer

    @property
    def variance(self) -> float:
        """The variance of every noisy integer answer."""
        return self.record.noise_variance()


def estimate_of(quantized, record) -> BlockEstimate:
    return BlockEstimate(quantized.integer, record.values, record.noise_variance())


@pytest.fixture(scope="module", params=sorted(WORKLOADS))
def case(request) -> Case:
    W = WORKLOADS[request.param]
    A = optimize(W, "residual", ZCDP(1))
    x = data()
    quantized = quantize(A, bits=BITS)
    record = measure(quantized, x, ZCDP(1), rng=np.random.default_rng(3))
    return Case(request.param, W, A, x, quantized, record, estimate_of(quantized, record))


def test_answers_equal_dense_least_squares(case):
    B = dense_integer_strategy(case.blocks)
    x_hat = np.linalg.pinv(B) @ case.record.values
    result = block_workload_answers(case.estimate, case.W)
    np.testing.assert_allclose(result.values, case.W.dense() @ x_hat, rtol=1e-9, atol=1e-8)
    # The quantization scale cancels: least squares on A_q with the answers / scale agree.
    A_q = case.quantized.matrix.dense()
    x_q = np.linalg.pinv(A_q) @ (case.record.values / case.quantized.scale)
    np.testing.assert_allclose(result.values, case.W.dense() @ x_q, rtol=1e-7, atol=1e-6)


def test_variances_equal_dense_covariance(case):
    B = dense_integer_strategy(case.blocks)
    Wd = case.W.dense()
    spread = Wd @ np.linalg.pinv(B)  # (BᵀB)⁺ = B⁺B⁺ᵀ, without squaring the condition
    covariance = case.variance * spread @ spread.T
    result = block_workload_answers(case.estimate, case.W)
    np.testing.assert_allclose(result.variances, np.diag(covariance), rtol=1e-7)


def test_noise_coefficients_are_the_dense_rows(case):
    """Each answer's coefficients on the integer noise are its row of ``W B⁺`` (the noise
    rows side by side per set, so compared as multisets of magnitudes), with or without
    the measurement, and none past the work limit."""
    B = dense_integer_strategy(case.blocks)
    expected = case.W.dense() @ np.linalg.pinv(B)
    found = block_noise_coefficients(case.blocks, case.W, 1 << 22)
    assert found is not None
    rows = [row for _, block in found for row in block]  # terms read different sets
    assert len(rows) == expected.shape[0]
    for row, dense in zip(rows, expected, strict=True):
        kept = np.sort(np.abs(row[np.abs(row) > 1e-9 * np.abs(dense).max()]))
        dense = np.sort(np.abs(dense[np.abs(dense) > 1e-9 * np.abs(dense).max()]))
        np.testing.assert_allclose(kept, dense, rtol=1e-7, atol=1e-12 * dense.max())
    variances = block_workload_answers(case.estimate, case.W).variances
    norms = np.array([np.sum(row**2) for row in rows])
    np.testing.assert_allclose(case.variance * norms, variances, rtol=1e-7)
    entries = sum(row.size for row in rows)
    assert block_noise_coefficients(case.blocks, case.W, entries // 4) is None


def test_sum_of_variances_is_near_the_unquantized_strategy(case):
    quantized_sum = block_workload_answers(case.estimate, case.W).variances.sum() / case.variance
    quantized_sum *= float(case.record.sensitivity)  # at unit sensitivity (units cancel)
    Wd = case.W.dense()
    A = case.A
    ideal = np.trace(Wd @ np.linalg.pinv(A.gram().dense()) @ Wd.T) * A.sensitivity(2) ** 2
    assert abs(quantized_sum / ideal - 1) < 1e-4


def test_marginals_equal_dense_least_squares(case):
    B = dense_integer_strategy(case.blocks)
    pinv = np.linalg.pinv(B)
    x_hat = pinv @ case.record.values
    tables = block_marginals(case.estimate, MARGINALS[case.name])
    for attrs in MARGINALS[case.name]:
        P = marginal_map(SHAPE, attrs)
        table = tables[attrs]
        assert table.values.shape == tuple(SHAPE[i] for i in attrs)
        np.testing.assert_allclose(table.values.reshape(-1), P @ x_hat, rtol=1e-9, atol=1e-8)
        covariance = case.variance * P @ pinv @ pinv.T @ P.T
        np.testing.assert_allclose(table.variances.reshape(-1), np.diag(covariance), rtol=1e-7)


def test_marginals_workload_matches_tables(case):
    sets = [a for a in MARGINALS[case.name] if a]
    W = Marginals(SHAPE, {a: 1.0 for a in sets})
    tables = block_marginals(case.estimate, sets)
    result = block_workload_answers(case.estimate, W)
    np.testing.assert_allclose(
        result.values, np.concatenate([tables[a].values.reshape(-1) for a in sets])
    )


def test_monte_carlo_variance_and_unbiasedness():
    W = WORKLOADS["mixed"]
    A = optimize(W, "residual", ZCDP(1))
    x = data()
    quantized = quantize(A, bits=BITS)
    record = measure(quantized, x, ZCDP(1), rng=np.random.default_rng(0))
    exact = exact_answers(analyze_strategy(quantized.integer), x).astype(np.float64)
    sigma = np.sqrt(record.noise_variance())
    rng = np.random.default_rng(11)
    trials = 600
    answers = np.stack(
        [
            block_workload_answers(
                BlockEstimate(
                    quantized.integer, exact + rng.normal(0, sigma, exact.size), sigma**2
                ),
                W,
            ).values
            for _ in range(trials)
        ]
    )
    predicted = block_workload_answers(estimate_of(quantized, record), W).variances
    empirical = answers.var(axis=0)
    # Per query: relative sd of a sample variance is √(2/n); the sum is steadier.
    assert np.all(np.abs(empirical / predicted - 1) < 6 * np.sqrt(2 / trials))
    assert abs(empirical.sum() / predicted.sum() - 1) < 0.12
    truth = W.dense() @ x
    assert np.all(np.abs(answers.mean(axis=0) - truth) < 5 * np.sqrt(predicted / trials))


def test_estimate_is_shared_and_only_needed_sets_are_touched(case):
    estimate = estimate_of(case.quantized, case.record)
    block_workload_answers(estimate, Kron([Ones(1, 4), Ones(1, 5), Ones(1, 3)]))
    assert list(estimate._cache) == [0]
    first = block_workload_answers(estimate, case.W)
    np.testing.assert_array_equal(
        first.values,
        block_workload_answers(estimate_of(case.quantized, case.record), case.W).values,
    )


def test_check_answerable_agrees_with_the_answers(case):
    check_answerable(case.blocks, case.W)  # answered above: no error
    check_answerable(case.blocks, Marginals(SHAPE, {a: 1.0 for a in MARGINALS[case.name] if a}))
    for W in (
        Kron([Identity(4), Identity(5), Identity(3)]),
        Kron([Identity(4), Identity(5)]),
        np.eye(60),
    ):
        with pytest.raises(UnsupportedQueryError) as refused:
            check_answerable(case.blocks, W)
        with pytest.raises(UnsupportedQueryError) as failed:
            block_workload_answers(case.estimate, W)
        assert str(refused.value) == str(failed.value)


def test_errors(case):
    estimate = case.estimate
    with pytest.raises(UnsupportedQueryError, match="not measured"):
        block_workload_answers(estimate, Kron([Identity(4), Identity(5), Identity(3)]))
    with pytest.raises(UnsupportedQueryError, match="not a union"):
        block_workload_answers(estimate, Kron([Identity(4), Identity(5)]))
    with pytest.raises(UnsupportedQueryError, match="not a union"):
        block_workload_answers(estimate, VStack([Kron([Identity(20), Identity(3)])]))
    with pytest.raises(UnsupportedQueryError, match="outside"):
        block_marginals(estimate, [(0, 5)])
    with pytest.raises(UnsupportedQueryError, match="not measured"):
        block_marginals(estimate, [(0, 1, 2)])
    with pytest.raises(UnsupportedQueryError, match="Matrix"):
        block_workload_answers(estimate, np.eye(60))
    with pytest.raises(UnsupportedQueryError, match="answers"):
        BlockEstimate(case.blocks, case.record.values[:-1], case.variance)


def _all_marginals(shape, sizes) -> list[tuple[int, ...]]:
    return [c for k in sizes for c in itertools.combinations(range(len(shape)), k)]


@pytest.mark.parametrize(
    ("shape", "sizes"), [((2, 3, 4), (0, 1, 2)), ((3, 1, 2, 3), (2, 3)), ((4, 3), (1, 2))]
)
def test_closed_form_marginals_equal_dense_least_squares(shape, sizes):
    queries = _all_marginals(shape, sizes)
    W = Marginals(shape, dict.fromkeys(queries, 1.0))
    A = marginal_optimal(W, ZCDP(1))
    rng = np.random.default_rng(7)
    x = rng.integers(0, 5, size=math.prod(shape))
    quantized = quantize(A, bits=BITS)
    record = measure(quantized, x, ZCDP(1), rng=rng)
    estimate = estimate_of(quantized, record)
    pinv = np.linalg.pinv(dense_integer_strategy(quantized.integer))
    x_hat = pinv @ record.values
    tables = block_marginals(estimate, queries)
    # σ² is stated for the quantized strategy, whose weights are within 2^-BITS of A's.
    expected = cell_variances(W, A, ZCDP(1))
    for attrs in queries:
        P = marginal_map(shape, attrs)
        table = tables[attrs]
        assert table.values.shape == table.variances.shape == tuple(shape[i] for i in attrs)
        np.testing.assert_allclose(table.values.reshape(-1), P @ x_hat, rtol=1e-9, atol=1e-8)
        covariance = record.noise_variance() * P @ pinv @ pinv.T @ P.T
        np.testing.assert_allclose(table.variances.reshape(-1), np.diag(covariance), rtol=1e-7)
        mask = sum(1 << i for i in attrs)
        np.testing.assert_allclose(table.variances, expected[mask], rtol=1e-4)


def test_closed_form_estimates_are_unbiased_with_the_stated_variance():
    shape = (3, 4, 2)
    A = marginal_optimal(Marginals(shape, dict.fromkeys(_all_marginals(shape, (2,)), 1.0)), ZCDP(1))
    quantized = quantize(A)
    rng = np.random.default_rng(8)
    x = rng.integers(0, 20, size=math.prod(shape))
    truth = x.reshape(shape).sum(axis=1)
    errors = []
    for _ in range(30):
        record = measure(quantized, x, ZCDP(1), rng=rng)
        (table,) = iter_block_marginals(estimate_of(quantized, record), [(2, 0)])
        assert table.attrs == (0, 2)
        errors.append(((table.values - truth) ** 2 / table.variances).mean())
    assert 0.7 < np.mean(errors) < 1.3  # 180 cells: sd ≈ 0.1


def test_marginals_stream_in_batches_with_the_same_answers(monkeypatch):
    shape = (3, 2, 4, 3)
    queries = _all_marginals(shape, (0, 1, 2, 3))
    A = marginal_optimal(Marginals(shape, dict.fromkeys(queries, 1.0)), ZCDP(1))
    quantized = quantize(A)
    record = measure(quantized, data_of(shape), ZCDP(1), rng=np.random.default_rng(2))
    whole = block_marginals(estimate_of(quantized, record), queries)
    monkeypatch.setattr(residual_blocks, "BATCH_CELLS", 8)  # a table or two per batch
    streamed = iter_block_marginals(estimate_of(quantized, record), [*queries, queries[-1]])
    seen = []
    for table in streamed:
        seen.append(table.attrs)
        np.testing.assert_allclose(table.values, whole[table.attrs].values, rtol=1e-12)
        np.testing.assert_allclose(table.variances, whole[table.attrs].variances, rtol=1e-12)
    assert sorted(seen) == sorted(whole)  # every query once, duplicates answered once


def test_a_marginal_needing_an_unmeasured_residual_is_refused():
    shape = (2, 3, 2)
    A = ResidualBlockStrategy(shape, {0: 1.0, 0b001: 1.0, 0b010: 1.0, 0b011: 1.0})
    quantized = quantize(A)
    record = measure(quantized, np.ones(12, dtype=np.int64), ZCDP(1), rng=np.random.default_rng(1))
    estimate = estimate_of(quantized, record)
    with pytest.raises(UnsupportedQueryError, match=r"needs the residual on \[2\]"):
        block_marginals(estimate, [(0, 2)])
    with pytest.raises(UnsupportedQueryError, match="outside"):
        block_marginals(estimate, [(5,)])
    assert list(block_marginals(estimate, [(1, 0)])) == [(0, 1)]
