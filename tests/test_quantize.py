"""Tests of dpmm.measure.quantize: integer grids, kept structure, error change, exact measuring."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpmm.error import expected_error, noise_variance
from dpmm.linalg import (
    AllRange,
    Dense,
    Hierarchical,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    Product,
    Sparse,
    Transposed,
    VStack,
    Weighted,
)
from dpmm.linalg.pidentity import PIdentity, PIdentityGram
from dpmm.measure import (
    DEFAULT_BITS,
    MeasurementMismatch,
    QuantizationError,
    QuantizedStrategy,
    analyze_strategy,
    load_measurement,
    measure,
    quantize,
)
from dpmm.measure.quantize import measurable
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP

from .conftest import INTEGER_STRATEGIES

PRIVACIES = [PureDP(1), ZCDP("1/2")]


def gaussian(rows: int, cols: int, seed: int) -> Dense:
    return Dense(np.random.default_rng(seed).normal(size=(rows, cols)))


def is_integral(matrix: Matrix) -> bool:
    dense = matrix.dense()
    return bool(np.array_equal(dense, np.rint(dense)))


REAL_STRATEGIES = [
    gaussian(64, 32, seed=0),
    Dense([[0.3, -0.7], [1e-3, 0.2]]),
    Dense([[250.5, 3.0], [-17.25, 1000.0]]),
    Sparse(np.array([[0.0, 0.31], [2.5, 0.0], [0.0, -1.7]])),
    Weighted(0.3, Hierarchical(32, 2)),
    Weighted(2.5, gaussian(5, 4, seed=1)),
    Kron([gaussian(16, 8, seed=2), gaussian(12, 6, seed=3)]),
    Kron([Identity(3), gaussian(4, 2, seed=4)]),
    Marginals((3, 4, 5), {(0, 1): 0.37, (1, 2): 1.9, (0,): 2.2}),
    VStack([Identity(4), Weighted(0.01, Ones(1, 4)), gaussian(3, 4, seed=5)]),
    Product([gaussian(3, 4, seed=6), Prefix(4)]),
    Transposed(gaussian(4, 3, seed=7)),
]


@pytest.mark.parametrize("A", INTEGER_STRATEGIES, ids=repr)
def test_integer_strategies_come_back_unchanged(A: Matrix) -> None:
    quantized = quantize(A)
    assert quantized.integer is A
    assert quantized.scale == 1
    assert quantized.matrix is A


@pytest.mark.parametrize("bits", [4, DEFAULT_BITS, 20])
@pytest.mark.parametrize("A", REAL_STRATEGIES, ids=repr)
def test_real_strategies_land_on_an_integer_grid_close_to_a(A: Matrix, bits: int) -> None:
    quantized = quantize(A, bits=bits)
    assert type(quantized.scale) is int and quantized.scale & (quantized.scale - 1) == 0
    assert is_integral(quantized.integer)
    if bits <= DEFAULT_BITS:  # finer grids can outgrow int64 column norms on a Kron
        analyze_strategy(quantized.integer)  # measurable as it is
    dense = A.dense()
    assert np.allclose(quantized.matrix.dense(), quantized.integer.dense() / quantized.scale)
    # A rounded quantity moves by at most 2**-bits of its largest magnitude; a product of two
    # rounded quantities (a Kron, a rounded weight on a rounded base) by about twice that.
    tolerance = 2.0**-bits * np.abs(dense).max() * 2 * (1 + 2.0**-bits)
    assert np.abs(quantized.matrix.dense() - dense).max() <= tolerance


def test_a_dense_strategy_within_one_is_within_two_to_minus_bits() -> None:
    A = Dense(np.random.default_rng(8).uniform(-1, 1, size=(20, 10)))
    quantized = quantize(A, bits=10)
    assert quantized.scale == 2**10
    assert np.abs(quantized.matrix.dense() - A.dense()).max() <= 2.0**-11


def test_the_grid_is_coarsened_to_the_smallest_exact_scale() -> None:
    quantized = quantize(Dense([[0.5, 0.25], [1.0, 0.0]]), bits=16)
    assert quantized.scale == 4
    assert np.array_equal(quantized.integer.dense(), [[2, 1], [4, 0]])


def test_ties_round_half_to_even() -> None:
    quantized = quantize(Dense([[0.5 + 2.0**-9, 0.5 + 3 * 2.0**-9]]), bits=8)
    # 128.5 → 128 and 129.5 → 130, both even, so the grid coarsens to 1/128.
    assert quantized.scale == 128
    assert np.array_equal(quantized.integer.dense(), [[64, 65]])


def test_kron_stays_a_kron_of_quantized_factors() -> None:
    A = Kron([gaussian(16, 8, seed=2), Identity(3), gaussian(12, 6, seed=3)])
    quantized = quantize(A)
    assert isinstance(quantized.integer, Kron)
    assert quantized.integer.factors[1] is A.factors[1]
    scales = [quantize(factor).scale for factor in A.factors]
    assert quantized.scale == scales[0] * scales[1] * scales[2]


def test_weighted_keeps_its_integer_base_and_gets_an_integer_weight() -> None:
    tree = Hierarchical(32, 2)
    quantized = quantize(Weighted(0.3, tree), bits=8)
    assert isinstance(quantized.integer, Weighted) and quantized.integer.base is tree
    assert (quantized.integer.weight, quantized.scale) == (77.0, 256)


def test_marginals_stay_marginals_with_integer_weights() -> None:
    A = Marginals((3, 4, 5), {(0, 1): 0.37, (1, 2): 1.9, (0,): 2.2})
    quantized = quantize(A, bits=8)
    assert isinstance(quantized.integer, Marginals)
    weights = list(quantized.integer.weights.values())
    assert all(float(weight).is_integer() for weight in weights)
    assert list(quantized.integer.weights) == list(A.weights)
    assert np.allclose(np.array(weights) / quantized.scale, [0.37, 1.9, 2.2], rtol=2.0**-8)


def test_a_stack_brings_its_blocks_to_one_scale() -> None:
    big = Kron([Identity(100), Hierarchical(64)])  # 12,700 × 6,400: never made dense
    A = VStack([big, Weighted(0.1, Ones(1, 6400))])
    quantized = quantize(A)
    assert isinstance(quantized.integer, VStack)
    top, bottom = quantized.integer.blocks
    assert isinstance(top, Weighted) and top.base is big
    assert top.weight == quantized.scale
    assert isinstance(bottom, Weighted) and bottom.base is A.blocks[1].base
    assert abs(bottom.weight / quantized.scale - 0.1) <= 0.1 * 2.0**-DEFAULT_BITS


def test_unstructured_types_too_large_to_make_dense_are_refused() -> None:
    with pytest.raises(QuantizationError, match="too large"):
        quantize(Product([Identity(10_000), Identity(10_000)]))


@pytest.mark.parametrize("bits", [0, 53, 2.5, True])
def test_bits_out_of_range_are_refused(bits: object) -> None:
    with pytest.raises(QuantizationError, match="bits"):
        quantize(Identity(3), bits=bits)


def test_only_matrices_and_power_of_two_scales_are_accepted() -> None:
    with pytest.raises(QuantizationError, match="a dpmm"):
        quantize(np.eye(3))
    with pytest.raises(QuantizationError, match="power of two"):
        QuantizedStrategy(Identity(3), 3)


# --- expected error ------------------------------------------------------------------------

ERROR_CASES = {
    "dense": (Prefix(32), gaussian(64, 32, seed=0)),
    "kron": (
        Kron([AllRange(8), Prefix(6)]),
        Kron([gaussian(16, 8, seed=2), gaussian(12, 6, seed=3)]),
    ),
    "marginals": (
        VStack([Marginal((3, 4, 5), attrs) for attrs in ([0, 1], [1, 2], [0])]),
        Marginals((3, 4, 5), {(0, 1): 0.37, (1, 2): 1.9, (0,): 2.2}),
    ),
    "weighted-tree": (AllRange(32), Weighted(0.3, Hierarchical(32, 2))),
}


def quantization_error_change(
    W: Matrix, A: Matrix, quantized: QuantizedStrategy, privacy: PureDP | ZCDP
) -> float:
    """The relative change of expected error from measuring ``quantized`` instead of ``A``,
    each with its own sensitivity."""
    return expected_error(W, quantized.matrix, privacy) / expected_error(W, A, privacy) - 1


@pytest.mark.parametrize("privacy", PRIVACIES, ids=str)
@pytest.mark.parametrize("case", ERROR_CASES)
def test_the_default_grid_changes_expected_error_by_less_than_a_thousandth(
    case: str, privacy: PureDP | ZCDP
) -> None:
    W, A = ERROR_CASES[case]
    change = quantization_error_change(W, A, quantize(A), privacy)
    assert abs(change) < 1e-3


@pytest.mark.parametrize("privacy", PRIVACIES, ids=str)
@pytest.mark.parametrize("case", ["dense", "kron", "marginals"])
def test_a_coarse_grid_changes_expected_error_measurably(case: str, privacy) -> None:
    W, A = ERROR_CASES[case]
    change = quantization_error_change(W, A, quantize(A, bits=2), privacy)
    assert abs(change) > 1e-3


def test_the_quantized_matrix_has_the_integer_strategy_sensitivity() -> None:
    _, A = ERROR_CASES["dense"]
    quantized = quantize(A, bits=3)
    exact_l1 = Fraction(analyze_strategy(quantized.integer).sensitivity_l1, quantized.scale)
    assert quantized.matrix.sensitivity(1) == pytest.approx(float(exact_l1), rel=1e-12)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.slow
def test_measuring_the_integer_strategy_estimates_the_quantized_answers(tmp_path: Path) -> None:
    A = gaussian(6, 4, seed=9)
    quantized = quantize(A)
    x = np.array([5, 0, 12, 3])
    privacy = ZCDP("1/2")
    store = tmp_path / "measurements"
    store.mkdir()
    repeats = 150
    rng = np.random.default_rng(11)
    exact = analyze_strategy(quantized.integer)
    with Ledger.init(tmp_path / "ledger.sqlite") as ledger:
        ledger.grant("survey", ZCDP(repeats))
        estimates = []
        for repeat in range(repeats):
            reservation = ledger.reserve("survey", privacy, release_id=f"r{repeat}")
            record = measure(
                quantized,
                x,
                privacy,
                store=store,
                measurement_id=f"m{repeat}",
                ledger=ledger,
                reservation=reservation,
                rng=rng,
            )
            assert record.sensitivity == Fraction(exact.sensitivity_l2_squared)
            assert record.sensitivity.denominator == 1
            assert record.quantization_scale == quantized.scale
            estimates.append(record.values / record.quantization_scale)
    estimates = np.array(estimates)
    target = quantized.matrix @ x.astype(np.float64)
    variance = noise_variance(quantized.matrix, privacy)
    assert float(record.sigma2) / quantized.scale**2 == pytest.approx(variance, rel=1e-9)
    standard_error = np.sqrt(variance / repeats)
    assert np.all(np.abs(estimates.mean(axis=0) - target) < 5 * standard_error)
    assert estimates.var(axis=0, ddof=1).mean() == pytest.approx(variance, rel=0.2)


def test_a_record_keeps_its_quantization_and_refuses_another(tmp_path: Path) -> None:
    quantized = quantize(gaussian(6, 4, seed=3))
    assert quantized.scale > 1
    store = tmp_path / "measurements"
    store.mkdir()
    x = np.array([1, 2, 3, 4])
    with Ledger.init(tmp_path / "ledger.sqlite") as ledger:
        ledger.grant("survey", ZCDP(2))
        first = ledger.reserve("survey", ZCDP(1), release_id="r1")
        options = {"store": store, "measurement_id": "m", "ledger": ledger}
        record = measure(quantized, x, ZCDP(1), reservation=first, **options)
        assert record.quantization_scale == quantized.scale
        assert load_measurement(store, "m").quantization_scale == quantized.scale
        # The same integer matrix presented as unquantized is another request.
        second = ledger.reserve("survey", ZCDP(1), release_id="r2")
        with pytest.raises(MeasurementMismatch, match="quantization_scale"):
            measure(quantized.integer, x, ZCDP(1), reservation=second, **options)


def test_a_marginal_weight_far_below_the_others_keeps_the_norms_exact() -> None:
    # An optimizer may leave a table at a weight 10⁻³⁰ of the others: rounded on its own
    # grid it made the largest weight overflow the exact norms at every grid tried.
    from dpmm.linalg import Marginals
    from dpmm.measure.exact import analyze_strategy
    from dpmm.measure.quantize import measurable

    A = Marginals((3, 2, 4), {(0, 1): 1.0, (1, 2): 0.37, (0, 1, 2): 1e-30})
    quantized = measurable(A)
    weights = list(quantized.integer.weights.values())
    assert weights[-1] == 1 and min(weights) >= 1  # every table still measured
    assert analyze_strategy(quantized.integer).sensitivity_l1 > 0
    np.testing.assert_allclose(quantized.matrix.dense(), A.dense(), atol=2.0**-12)


def test_a_rounded_p_identity_keeps_its_proof_of_independent_columns():
    """Its identity block survives rounding, so its error needs no SVD; a rounded dense
    strategy without such rows makes no promise."""
    from dpmm.linalg.pidentity import PIdentity
    from dpmm.privacy import PureDP

    theta = np.random.default_rng(5).uniform(size=(3, 24)) * (np.arange(24) % 4 == 0)
    quantized = quantize(PIdentity(theta, 1), bits=10)
    assert quantized.matrix.known_full_column_rank
    unproved = Dense(quantized.matrix.dense())  # same numbers, no promise: the SVD route
    W = AllRange(24)
    assert expected_error(W, quantized.matrix, PureDP(1)) == pytest.approx(
        expected_error(W, unproved, PureDP(1)), rel=1e-9
    )
    wide = quantize(Dense(np.random.default_rng(6).uniform(size=(30, 24)) + 0.1), bits=10)
    assert not wide.matrix.known_full_column_rank


def test_a_p_identity_keeps_its_structure_and_its_integers() -> None:
    """The quantized p-Identity is its diagonal over its Θ rows: the very integers its
    rounded dense array has, and a Gram whose (Woodbury) inverse is the dense one's."""
    rng = np.random.default_rng(3)
    theta = rng.uniform(size=(4, 64)) * (rng.uniform(size=(4, 64)) < 0.3) * 5
    strategy = PIdentity(theta, norm=1)
    quantized = measurable(strategy)
    dense = quantize(Dense(strategy.dense()), bits=DEFAULT_BITS)
    assert isinstance(quantized.integer, VStack)
    assert np.array_equal(quantized.integer.dense(), dense.integer.dense())
    assert quantized.scale == dense.scale
    gram = quantized.matrix.gram()
    assert isinstance(gram.base, PIdentityGram)
    expected = np.linalg.inv(quantized.matrix.dense().T @ quantized.matrix.dense())
    assert np.allclose(
        gram.pinv().dense(), expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max()
    )


def test_a_table_block_weight_far_below_the_others_keeps_the_norms_exact() -> None:
    # OPT_+'s budget split may leave a block nearly nothing (one the other tables answer
    # better): rounded on its own grid, it made the others' column norms overflow.
    from dpmm.linalg import Identity, Prefix
    from dpmm.linalg.table_krons import TableKrons
    from dpmm.measure.exact import analyze_strategy
    from dpmm.measure.quantize import measurable

    A = TableKrons(
        (3, 2, 4),
        [
            ((0, 1), (Prefix(3), Identity(2)), 1.0),
            ((1, 2), (Identity(2), Prefix(4)), 0.37),
            ((2,), (Identity(4),), 1e-30),
        ],
    )
    quantized = measurable(A)
    weights = [table.weight for table in quantized.integer.tables]
    assert weights[-1] == 1 and min(weights) >= 1  # every table still measured
    assert analyze_strategy(quantized.integer).sensitivity_l1 > 0
    np.testing.assert_allclose(quantized.matrix.dense(), A.dense(), atol=2.0**-12)
