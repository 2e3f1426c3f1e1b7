"""Residual block strategies quantized to integer blocks ``[Q_S H_S]`` and measured exactly.

Everything is checked against the dense integer strategy built from the definition
(``Q_S`` times the integer Helmert rows of S times the S-marginal map), never against the
package's own products: the answers, both sensitivities (exact per cell, or the bound
above ``EXACT_CELLS``), the recorded cost and the noise actually drawn.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import reduce

import numpy as np
import pytest

from dpmm.errors import DomainError, TooLargeError
from dpmm.linalg import AllRange, Dense, Identity, Kron, Marginals, Ones, Prefix, VStack
from dpmm.linalg import helmert_blocks as helmert_module
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.measure import measure
from dpmm.measure.exact import MeasurementError, analyze_strategy, exact_answers
from dpmm.measure.quantize import QuantizationError, QuantizedStrategy, quantize
from dpmm.measure.tables import MarginalCounts, count_marginals, marginal_answers
from dpmm.privacy import ZCDP, PureDP
from dpmm.reconstruct.residual_blocks import BlockEstimate
from dpmm.strategy import optimize
from dpmm.strategy.marginal_optimal import marginal_optimal
from tests.conftest import helmert_integer

SHAPE = (4, 5, 3)
#: The grid of the tests that compare with the unquantized strategy (the old block default).
BITS = 20


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


def block_integer(blocks: HelmertBlocks, mask: int) -> np.ndarray:
    """``Q_S H_S`` (rows × cells of S, int64), from the definition."""
    shape = blocks.domain_shape
    members = [i for i in range(len(shape)) if mask >> i & 1]
    H = reduce(np.kron, [helmert_integer(shape[i]) for i in members], np.ones((1, 1), int))
    Q = blocks.integers[mask]
    return (np.diag(Q) if Q.ndim == 1 else Q) @ H


def dense_integer_strategy(blocks: HelmertBlocks) -> np.ndarray:
    """``B = [Q_S H_S P_S]`` with ``P_S`` the dense S-marginal map (int64)."""
    shape = blocks.domain_shape
    rows = []
    for mask in blocks.sets:
        P = reduce(
            np.kron,
            [
                np.eye(n, dtype=np.int64) if mask >> i & 1 else np.ones((1, n), int)
                for i, n in enumerate(shape)
            ],
            np.ones((1, 1), int),
        )
        rows.append(block_integer(blocks, mask) @ P)
    return np.vstack(rows)


def brute_force_norms(B: np.ndarray) -> tuple[int, int]:
    """``(max column L1 norm, max column sum of squares)`` in Python integers."""
    exact = B.astype(object)
    return max(abs(exact).sum(axis=0).tolist()), max((exact * exact).sum(axis=0).tolist())


def sum_of_block_maxima(blocks: HelmertBlocks) -> tuple[int, int]:
    """``Σ_S max_j`` of each block's column L1 norms and sums of squares (the bound)."""
    l1 = l2 = 0
    for mask in blocks.sets:
        block_l1, block_l2 = brute_force_norms(block_integer(blocks, mask))
        l1, l2 = l1 + block_l1, l2 + block_l2
    return l1, l2


def data(shape=SHAPE, seed=0, records=200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(records, rng.dirichlet(np.ones(int(np.prod(shape)))))


def closed_form(shape=SHAPE, sizes=(0, 1, 2)) -> ResidualBlockStrategy:
    """The closed-form optimum for all marginals of the given sizes: one scalar per set."""
    sets = [c for k in sizes for c in itertools.combinations(range(len(shape)), k)]
    return marginal_optimal(Marginals(shape, dict.fromkeys(sets, 1.0)), ZCDP(1))


def records_of(x: np.ndarray, shape=SHAPE) -> np.ndarray:
    """One record per count of the data vector, in cell order."""
    cells = np.array(list(itertools.product(*[range(n) for n in shape])))
    return np.repeat(cells, x, axis=0)


def cost(record) -> Fraction:
    """The zCDP cost of the noise a record says it drew: ``Δ₂² / (2σ²)``."""
    return record.sensitivity / (2 * record.sigma2)


@pytest.fixture(scope="module", params=sorted(workloads()))
def strategy(request) -> ResidualBlockStrategy:
    A = optimize(workloads()[request.param], "residual", ZCDP(1))
    assert isinstance(A, ResidualBlockStrategy)
    return A


def test_some_blocks_are_dense(strategy):
    assert any(isinstance(b, np.ndarray) for b in strategy.blocks.values())


def test_quantized_strategy_is_close_and_matches_integer_dense(strategy):
    quantized = quantize(strategy, bits=BITS)
    assert isinstance(quantized, QuantizedStrategy)
    assert isinstance(quantized.integer, HelmertBlocks)
    B = dense_integer_strategy(quantized.integer)
    # The quantized strategy A_q = B / 2^k has nearly A's Gram (rank-deficient blocks are
    # reduced to their row space, so compare Grams rather than rows).
    A = strategy.dense()
    gram = B.T.astype(float) @ B / quantized.scale**2
    assert np.abs(gram - A.T @ A).max() < 1e-4 * np.abs(A.T @ A).max()
    # ... its residual-block form is exactly the same matrix, and so is the integer one's.
    assert isinstance(quantized.matrix, ResidualBlockStrategy)
    np.testing.assert_allclose(quantized.matrix.dense(), B / quantized.scale, atol=1e-12)
    np.testing.assert_array_equal(np.rint(quantized.integer.dense()), B)


def test_exact_answers_equal_dense_integer_product(strategy):
    quantized = quantize(strategy, bits=BITS)
    blocks = quantized.integer
    exact = analyze_strategy(blocks)
    x = data()
    B = dense_integer_strategy(blocks)
    answers = exact_answers(exact, x)
    assert answers.dtype == np.int64
    np.testing.assert_array_equal(answers, B @ x)
    np.testing.assert_array_equal(blocks.table_answers(blocks.marginal_tables(x)), B @ x)
    # Tables counted from records give the same answers as the data vector.
    records = records_of(x)
    counts = count_marginals([records[:77], records[77:]], SHAPE, blocks.table_sets())
    np.testing.assert_array_equal(marginal_answers(exact, counts), B @ x)
    np.testing.assert_array_equal(blocks.table_answers(counts.tables), B @ x)


def test_sensitivity_and_cost_are_exact(strategy):
    quantized = quantize(strategy, bits=BITS)
    B = dense_integer_strategy(quantized.integer)
    dense_l1, dense_squared = brute_force_norms(B)
    exact = analyze_strategy(quantized.integer)
    assert exact.column_l2_squared.size == B.shape[1]  # one value per cell: exact
    assert exact.sensitivity_l2_squared == dense_squared
    assert exact.sensitivity_l1 == dense_l1
    assert exact.entry_bound >= int(np.abs(B).max())
    record = measure(quantized, data(), ZCDP("1/3"), rng=np.random.default_rng(1))
    assert record.norm == "l2" and record.noise == "discrete_gaussian"
    assert record.sensitivity == dense_squared
    assert record.quantization_scale == quantized.scale
    assert record.privacy == ZCDP("1/3")
    assert record.shape == B.shape and record.values.shape == (B.shape[0],)
    assert cost(record) <= Fraction(1, 3) and cost(record) > Fraction(1, 3) * (1 - 2**-18)


def test_bound_path_is_an_upper_bound(strategy, monkeypatch):
    quantized = quantize(strategy, bits=BITS)
    exact = analyze_strategy(quantized.integer)
    monkeypatch.setattr(helmert_module, "EXACT_CELLS", 10)
    bound = analyze_strategy(quantized.integer)
    assert bound.column_l2_squared.size == 1  # one value: the bound, not per cell
    assert bound.sensitivity_l2_squared >= exact.sensitivity_l2_squared
    assert bound.sensitivity_l1 >= exact.sensitivity_l1
    assert (bound.sensitivity_l1, bound.sensitivity_l2_squared) == sum_of_block_maxima(
        quantized.integer
    )
    record = measure(quantized, data(), ZCDP(1), rng=np.random.default_rng(2))
    assert record.sensitivity == bound.sensitivity_l2_squared and cost(record) <= 1
    # The cost of the noise actually added (exact Δ²) is below the recorded bound's.
    assert Fraction(exact.sensitivity_l2_squared) / (2 * record.sigma2) <= cost(record)
    # The answers do not depend on which path found the sensitivity.
    np.testing.assert_array_equal(
        exact_answers(bound, data()), dense_integer_strategy(quantized.integer) @ data()
    )


def test_noise_has_the_recorded_variance():
    strategy = optimize(workloads()["mixed"], "residual", ZCDP(1))
    quantized = quantize(strategy, bits=BITS)
    x = data()
    exact = exact_answers(analyze_strategy(quantized.integer), x)
    records = [measure(quantized, x, ZCDP(1), rng=np.random.default_rng(s)) for s in range(100)]
    draws = np.stack([record.values - exact for record in records])
    variance = records[0].noise_variance()
    assert abs(variance / float(records[0].sigma2) - 1) < 1e-12  # σ² is large here
    # The sample variance of n draws has relative standard deviation √(2/n): allow 5 of them.
    assert abs(draws.var() / variance - 1) < 5 * np.sqrt(2 / draws.size)
    assert abs(draws.mean()) < 4 * np.sqrt(variance / draws.size)


def test_marginal_counts_are_measured_like_the_vector():
    strategy = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    quantized = quantize(strategy, bits=BITS)
    x = data()
    counts = MarginalCounts(SHAPE, quantized.integer.marginal_tables(x))
    from_tables = measure(quantized, counts, ZCDP(1), rng=np.random.default_rng(5))
    from_vector = measure(quantized, x, ZCDP(1), rng=np.random.default_rng(5))
    np.testing.assert_array_equal(from_tables.values, from_vector.values)
    assert from_tables.strategy_fingerprint == from_vector.strategy_fingerprint
    assert from_tables.strategy_fingerprint == quantized.integer.digest()


def test_gaussian_noise_only_under_zcdp():
    strategy = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    quantized = quantize(strategy, bits=BITS)
    l1, _ = brute_force_norms(dense_integer_strategy(quantized.integer))
    record = measure(quantized, data(), PureDP(1), rng=np.random.default_rng(3))
    assert record.norm == "l1" and record.noise == "discrete_laplace"
    assert record.sigma2 is None and record.scale == Fraction(l1)
    assert record.sensitivity == l1 and record.privacy == PureDP(1)


def test_rank_deficient_block_is_reduced_to_its_row_space():
    # The predicate's sub-workload leaves one direction of set {1, 2} unread.
    A = optimize(workloads()["mixed"], "residual", ZCDP(1))
    block = A.blocks[0b110]
    assert np.linalg.matrix_rank(block, tol=1e-8 * np.linalg.norm(block, 2)) < block.shape[1]
    quantized = quantize(A, bits=BITS)
    Q = quantized.integer.integers[0b110]
    assert Q.shape[0] < Q.shape[1] and np.linalg.matrix_rank(Q.astype(float)) == Q.shape[0]
    G = quantized.integer.normalized(0b110) / quantized.scale
    np.testing.assert_allclose(G.T @ G, block.T @ block, atol=1e-5)


def test_scalar_blocks_stay_diagonal():
    A = ResidualBlockStrategy((3, 4), {0: 0.5, 1: 1.0, 2: 2.0, 3: np.eye(6)})
    quantized = quantize(A)
    assert quantized.integer.integers[1].ndim == 1 and quantized.integer.integers[3].ndim == 2
    x = data((3, 4))
    np.testing.assert_array_equal(
        exact_answers(analyze_strategy(quantized.integer), x),
        dense_integer_strategy(quantized.integer) @ x,
    )


def test_plain_residual_strategy_is_measured_too():
    A = ResidualBlockStrategy((2, 3), {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    quantized = quantize(A, bits=24)
    # Plain residuals: every column has Σ_S Π(1 − 1/n_i) = 2.5 (up to quantization).
    squared = analyze_strategy(quantized.integer).sensitivity_l2_squared
    assert abs(squared / quantized.scale**2 - 2.5) < 1e-7


def test_quantization_errors():
    A = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    with pytest.raises(QuantizationError, match="bits"):
        quantize(A, bits=0)
    with pytest.raises(QuantizationError, match="no block"):
        quantize(ResidualBlockStrategy((2, 3), {1: 0.0}))
    with pytest.raises(QuantizationError, match="not finite"):
        quantize(ResidualBlockStrategy((2, 3), {1: np.array([np.inf])}))
    # A diagonal row of weight zero would measure nothing.
    with pytest.raises(QuantizationError, match="rounds to zero"):
        quantize(ResidualBlockStrategy((3,), {1: np.array([1.0, 0.0])}), bits=4)
    with pytest.raises(QuantizationError, match="loses rank"):
        quantize(ResidualBlockStrategy((3,), {1: np.diag([1.0, 1e-3])}), bits=3)
    with pytest.raises(QuantizationError, match="differ too much in scale"):
        quantize(ResidualBlockStrategy((2, 3), {1: 1.0, 2: 1e-15}), bits=52)
    # A QuantizationError is a MeasurementError: nothing was drawn.
    assert issubclass(QuantizationError, MeasurementError)


def test_measurement_errors():
    A = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    quantized = quantize(A, bits=BITS)
    x = data()
    with pytest.raises(MeasurementError, match="integer counts"):
        measure(quantized, x.astype(float), ZCDP(1))
    with pytest.raises(MeasurementError, match="was not counted"):
        measure(quantized, MarginalCounts(SHAPE, {}), ZCDP(1))
    with pytest.raises(MeasurementError, match="over"):
        measure(quantized, MarginalCounts((4, 5), {}), ZCDP(1))
    bad = {
        (): np.array(4),
        (0,): np.array([1, 1, 1, 1]),
        (1,): np.ones(5, int),
        (0, 1): np.ones((4, 5), int),
    }
    assert sorted(bad) == sorted(quantized.integer.table_sets())
    with pytest.raises(MeasurementError, match="disagree"):
        measure(quantized, MarginalCounts(SHAPE, bad), ZCDP(1))
    negative = {**bad, (0,): np.array([-1, 5, 0, 0])}
    with pytest.raises(MeasurementError, match="negative"):
        measure(quantized, MarginalCounts(SHAPE, negative), ZCDP(1))
    with pytest.raises(MeasurementError, match="overflow"):
        measure(quantized, x * 2**40, ZCDP(1))
    with pytest.raises(MeasurementError, match="together"):
        measure(quantized, x, ZCDP(1), measurement_id="only-an-id")
    # The integer strategy itself raises the domain's errors.
    with pytest.raises(DomainError, match="disagree"):
        quantized.integer.table_answers(bad)
    with pytest.raises(TooLargeError, match="overflow"):
        quantized.integer.table_answers(quantized.integer.marginal_tables(x * 2**40))


def test_helmert_blocks_refuse_bad_blocks():
    with pytest.raises(DomainError, match="bit mask"):
        HelmertBlocks((2, 3), {4: np.array([1])})
    with pytest.raises(DomainError, match="int64"):
        HelmertBlocks((2, 3), {2: np.array([1.0, 2.0])})
    with pytest.raises(DomainError, match="2 columns"):
        HelmertBlocks((2, 3), {2: np.array([[1, 2, 3]])})
    with pytest.raises(DomainError, match="0 columns"):
        HelmertBlocks((1, 3), {1: np.zeros(0, dtype=np.int64)})


def test_too_large_block_is_refused(monkeypatch):
    A = optimize(workloads()["prefix_identity"], "residual", ZCDP(1))
    quantized = quantize(A, bits=BITS)
    monkeypatch.setattr(helmert_module, "MAX_BLOCK_ENTRIES", 10)
    with pytest.raises(TooLargeError, match="entries"):
        quantized.integer.integer_column_norms()
    with pytest.raises(MeasurementError, match="cannot be found"):
        analyze_strategy(quantized.integer)
    with pytest.raises(MeasurementError, match="cannot be found"):
        measure(quantized, data(), ZCDP(1))


def _random_strategy(rng: np.random.Generator) -> ResidualBlockStrategy:
    """Random dense and scalar blocks on a random subset of the sets of a small domain."""
    shape = (int(rng.integers(2, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 4)))
    blocks: dict[int, float | np.ndarray] = {}
    for mask in range(1 << len(shape)):
        rank = math.prod(shape[i] - 1 for i in range(len(shape)) if mask >> i & 1)
        if rank == 0 or rng.random() < 0.3:
            continue
        if rng.random() < 0.5:
            blocks[mask] = float(rng.uniform(0.1, 3.0))
        else:
            rows = int(rng.integers(1, rank + 1))  # square, or wide of full row rank
            blocks[mask] = rng.uniform(0.5, 2.0) * rng.standard_normal((rows, rank))
    if not blocks:
        blocks[0] = 1.0
    return ResidualBlockStrategy(shape, blocks)


def test_recorded_sensitivity_is_the_brute_force_column_norm(monkeypatch):
    rng = np.random.default_rng(2024)
    checked = 0
    for _ in range(20):
        A = _random_strategy(rng)
        bits = int(rng.integers(3, 14))
        while True:  # a random block may lose rank on a coarse grid: use a finer one
            try:
                quantized = quantize(A, bits=bits)
                break
            except QuantizationError:
                bits += 1
                assert bits <= 24
        blocks = quantized.integer
        B = np.rint(blocks.dense()).astype(np.int64)
        np.testing.assert_array_equal(B, dense_integer_strategy(blocks))  # the definition
        l1, l2_squared = brute_force_norms(B)
        exact = analyze_strategy(blocks)
        assert exact.sensitivity_l2_squared == l2_squared
        assert exact.sensitivity_l1 == l1
        assert exact.entry_bound >= int(np.abs(B).max())
        # Beyond EXACT_CELLS the recorded value is Σ_S max_j, never below the largest column.
        with monkeypatch.context() as patched:
            patched.setattr(helmert_module, "EXACT_CELLS", B.shape[1] - 1)
            bound = analyze_strategy(blocks)
        assert bound.column_l2_squared.size == 1
        assert bound.sensitivity_l2_squared >= l2_squared
        assert bound.sensitivity_l1 >= l1
        assert (bound.sensitivity_l1, bound.sensitivity_l2_squared) == sum_of_block_maxima(blocks)
        checked += 1
    assert checked == 20


def test_products_of_a_negative_one_entry_block_match_its_answers():
    x = np.array([5, 1])
    negative = HelmertBlocks((2,), {1: np.array([[-3]])})
    np.testing.assert_array_equal(
        negative @ x.astype(float), negative.table_answers(negative.marginal_tables(x))
    )


def test_a_one_column_block_keeps_its_rows():
    tall = HelmertBlocks((2,), {1: np.array([[1], [2]])})
    assert tall.dense().shape == tall.shape


def test_closed_form_strategy_is_measured_exactly(monkeypatch):
    quantized = quantize(closed_form(), bits=BITS)
    blocks = quantized.integer
    assert all(Q.ndim == 1 for Q in blocks.integers.values())  # one diagonal block per set
    B = dense_integer_strategy(blocks)
    x = data()
    answers = blocks.table_answers(blocks.marginal_tables(x))
    np.testing.assert_array_equal(answers, B @ x)
    # Divided by G_S = Q_S √c, the integer answers are the residuals R_S x.
    G = np.concatenate([blocks.normalized(mask) for mask in blocks.sets])
    unit = ResidualBlockStrategy(SHAPE, dict.fromkeys(blocks.sets, 1.0))
    np.testing.assert_allclose(answers / G, unit @ x.astype(float), rtol=1e-9, atol=1e-9)
    # Column norms from cumulative sums: the brute-force ones per cell, Σ_S max_j above.
    l1, l2_squared = brute_force_norms(B)
    exact = analyze_strategy(blocks)
    assert (exact.sensitivity_l1, exact.sensitivity_l2_squared) == (l1, l2_squared)
    np.testing.assert_array_equal(exact.column_l2_squared, (B * B).sum(axis=0))
    with monkeypatch.context() as patched:
        patched.setattr(helmert_module, "EXACT_CELLS", 10)
        bound = analyze_strategy(blocks)
    assert (bound.sensitivity_l1, bound.sensitivity_l2_squared) == sum_of_block_maxima(blocks)
    record = measure(quantized, x, ZCDP("1/3"), rng=np.random.default_rng(1))
    assert record.sensitivity == l2_squared
    assert Fraction(1, 3) * (1 - Fraction(1, 2**18)) < cost(record) <= Fraction(1, 3)


def test_a_diagonal_block_is_never_made_dense(monkeypatch):
    quantized = quantize(closed_form(), bits=BITS)
    expected = analyze_strategy(quantized.integer)
    monkeypatch.setattr(helmert_module, "MAX_BLOCK_ENTRIES", 1)  # refuses every dense block
    found = analyze_strategy(quantized.integer)
    np.testing.assert_array_equal(found.column_l2_squared, expected.column_l2_squared)
    np.testing.assert_array_equal(found.column_l1, expected.column_l1)
    # Sums of squares past int64 are found in Python integers, and refused.
    with pytest.raises(TooLargeError, match="overflow"):
        HelmertBlocks((3,), {1: np.array([2**31, 2**31])}).integer_column_norms()
    fits = HelmertBlocks((3,), {1: np.array([2**30, 2**29])}).integer_column_norms()
    assert fits[1].tolist() == [2**60 + 2**58, 2**60 + 2**58, 2**60]


def test_sets_sharing_a_block_share_one_integer_array():
    quantized = quantize(closed_form((3,) * 6, sizes=(2,)))
    pairs = [Q for mask, Q in quantized.integer.integers.items() if mask.bit_count() == 2]
    assert len(pairs) == 15 and all(Q is pairs[0] for Q in pairs)
    assert not pairs[0].flags.writeable


def test_counted_tables_are_measured_like_the_vector():
    quantized = quantize(closed_form())
    x = data()
    records = records_of(x)
    counts = count_marginals([records[:70], records[70:]], SHAPE, quantized.integer.table_sets())
    from_tables = measure(quantized, counts, ZCDP(1), rng=np.random.default_rng(3))
    from_vector = measure(quantized, x, ZCDP(1), rng=np.random.default_rng(3))
    np.testing.assert_array_equal(from_tables.values, from_vector.values)
    assert cost(from_tables) == cost(from_vector) <= 1


def test_noise_on_every_residual_row_has_the_stated_variance():
    # 190 pairs of 3-level attributes, 4 rows each: 50 draws give 9,500 samples per row
    # position (the sampler's per-call cost makes repeats the slow axis).
    shape = (3,) * 20
    quantized = quantize(closed_form(shape, sizes=(1, 2)))
    blocks = quantized.integer
    rng = np.random.default_rng(4)
    records = np.stack([rng.integers(0, 3, size=30) for _ in shape], axis=1)
    counts = count_marginals([records], shape, blocks.table_sets())
    exact = blocks.table_answers(counts.tables)
    draws = [measure(quantized, counts, ZCDP(1), rng=rng) for _ in range(50)]
    noise = np.stack([record.values - exact for record in draws]).astype(np.float64)
    variance = draws[0].noise_variance()
    pairs = [t for t, mask in enumerate(blocks.sets) if mask.bit_count() == 2]
    rows = blocks.offsets[pairs][:, None] + np.arange(4)
    ratio = (noise[:, rows] ** 2).mean(axis=(0, 1)) / variance
    np.testing.assert_allclose(ratio, 1, atol=0.06)  # 9,500 samples: sd 1.5 %
    assert abs(noise.mean()) < 4 * np.sqrt(variance / noise.size)
    # In residual coordinates ẑ_r = y_r / G_r: the variance the estimate states, σ²/G_r².
    G = np.concatenate([blocks.normalized(mask) for mask in blocks.sets])
    estimate = BlockEstimate(blocks, draws[0].values, variance)
    stated = np.concatenate([estimate.coefficients(mask)[1] for mask in blocks.sets]) ** 2
    np.testing.assert_allclose(stated, variance / G**2, rtol=1e-12)
    empirical = ((noise / G) ** 2).mean(axis=0)
    assert abs(empirical.sum() / stated.sum() - 1) < 0.03  # 40,000 samples: sd 0.7 %


def test_a_tiny_budget_is_kept():
    # σ² beyond what the int64 sampler takes is rounded up, never down.
    quantized = quantize(closed_form((10, 10, 10), sizes=(3,)))
    rho = Fraction(1, 10**6)
    record = measure(
        quantized, np.zeros(1000, dtype=np.int64), ZCDP(rho), rng=np.random.default_rng(6)
    )
    assert record.sigma2 >= record.sensitivity / (2 * rho)
    assert cost(record) <= rho
