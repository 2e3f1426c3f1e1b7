"""Size guards, factor-wise operations at scale, and clear errors on bad input."""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest

from dpmm.errors import DpmmError, TooLargeError
from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    HStack,
    Identity,
    Kron,
    Marginal,
    Marginals,
    MarginalsGram,
    Matrix,
    Ones,
    Prefix,
    Product,
    RangeQueries,
    Sum,
    VStack,
    Weighted,
    query_variances,
    trace_of_product,
)

from .conftest import ALL_KINDS, CATALOGUE, assert_close


@pytest.fixture
def no_dense_kron(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any Kron is densified or read column block by column block."""

    def refuse(self: Kron, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{self!r} was densified")

    monkeypatch.setattr(Kron, "_dense", refuse)
    monkeypatch.setattr(Kron, "_column_blocks", refuse)


# -- dense() refuses large matrices -------------------------------------------------------
def test_dense_refuses_a_huge_kron_without_allocating() -> None:
    W = Kron([AllRange(1024)] * 3)
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError) as caught:
            W.dense()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert f"{524_800**3:,} × {1024**3:,}" in str(caught.value)
    assert "AllRange(1024)" in str(caught.value)
    assert isinstance(caught.value, DpmmError)
    assert isinstance(caught.value, MemoryError)


def test_dense_limit_is_a_parameter() -> None:
    with pytest.raises(TooLargeError, match="10 × 10"):
        Prefix(10).dense(limit=99)
    assert_close(Prefix(10).dense(limit=100), np.tril(np.ones((10, 10))))


# -- structured operations stay factor-wise at scale --------------------------------------
def test_huge_kron_sensitivity_and_gram_are_factorwise(no_dense_kron: None) -> None:
    A = AllRange(1024)
    W = Kron([A] * 3)
    start = time.perf_counter()
    busiest = 512 * 513  # the middle cells lie in the most intervals
    assert W.sensitivity(1) == pytest.approx(float(busiest) ** 3)
    assert W.sensitivity(2) == pytest.approx(float(busiest) ** 1.5)
    gram = W.gram()
    assert time.perf_counter() - start < 2.0
    assert isinstance(gram, Kron)
    assert gram.shape == (1024**3, 1024**3)
    columns = np.eye(1024)[:, [0, 1, 511, 1023]]
    for factor in gram.factors:
        assert_close(factor @ columns, A.T @ (A @ columns))


def test_huge_prefix_trace_of_gram_times_its_pinv(no_dense_kron: None) -> None:
    W = Kron([Prefix(512)] * 3)
    start = time.perf_counter()
    result = trace_of_product(W.gram(), W.gram().pinv())
    assert time.perf_counter() - start < 5.0
    assert result == pytest.approx(512**3, rel=1e-9)  # the rank of a full-rank Gram
    with pytest.raises(TooLargeError, match="column norms"):
        W.column_norms(1)  # 512³ norms would be a 1 GB vector
    assert W.sensitivity(1) == pytest.approx(512.0**3)


def test_marginals_over_a_huge_domain_stay_in_the_algebra() -> None:
    shape = (100,) * 14
    W = Marginals(shape, {(0, 1): 1.0, (2, 3, 4): -2.0})
    start = time.perf_counter()
    assert W.sensitivity(1) == pytest.approx(3.0)
    assert W.sensitivity(2) == pytest.approx(math.sqrt(5.0))
    gram = W.gram()
    # Row spaces of the two marginals meet only in the total query.
    assert trace_of_product(gram, gram.pinv()) == pytest.approx(100**2 + 100**3 - 1)
    marginal = Marginal(shape, [0, 1])
    variances = query_variances(marginal, gram.pinv())
    assert variances.shape == (100**2,)
    assert variances.sum() == pytest.approx(trace_of_product(marginal.gram(), gram.pinv()))
    assert time.perf_counter() - start < 1.0
    with pytest.raises(TooLargeError, match=f"{100**14:,} × {100**14:,}"):
        gram.dense()


# -- bad inputs -----------------------------------------------------------------------------
BAD_INPUTS = {
    "product-inner-sizes": (lambda: Product([Prefix(3), Prefix(4)]), "inner sizes differ"),
    "matmul-inner-sizes": (lambda: Prefix(3) @ Ones(4, 2), "Cannot multiply Prefix"),
    "product-empty": (lambda: Product([]), "at least one factor"),
    "vstack-columns": (lambda: VStack([Prefix(3), Ones(2, 4)]), r"one column count, got \[3, 4\]"),
    "vstack-empty": (lambda: VStack([]), "at least one block"),
    "hstack-rows": (lambda: HStack([Prefix(3), Ones(2, 3)]), r"one row count, got \[2, 3\]"),
    "sum-shapes": (lambda: Sum([Prefix(3), Ones(3, 4)]), r"one shape, got \[\(3, 3\), \(3, 4\)\]"),
    "add-shapes": (lambda: Prefix(3) + Prefix(4), "one shape"),
    "subtract-shapes": (lambda: Prefix(3) - Identity(2), "one shape"),
    "kron-empty": (lambda: Kron([]), "at least one factor"),
    "range-high": (lambda: RangeQueries(5, [(0, 2), (1, 5)]), r"Interval 1 = \[1, 5\].*\[0, 4\]"),
    "range-low": (lambda: RangeQueries(5, [(-1, 2)]), r"Interval 0 = \[-1, 2\]"),
    "range-reversed": (lambda: RangeQueries(5, [(3, 2)]), "low ≤ high"),
    "hierarchical-b1": (lambda: Hierarchical(8, 1), "branching factor must be at least 2, got 1"),
    "hierarchical-b0": (lambda: Hierarchical(8, 0), "at least 2, got 0"),
    "hierarchical-empty": (lambda: Hierarchical(0, 2), "at least one cell"),
    "haar-empty": (lambda: Haar(0), "at least one cell"),
    "dense-nan": (lambda: Dense([[1.0, np.nan]]), "finite"),
    "dense-1d": (lambda: Dense([1.0, 2.0]), "2-D array"),
    "weight-inf": (lambda: Weighted(np.inf, Prefix(2)), "finite"),
    "negative-shape": (lambda: Ones(-1, 2), "non-negative"),
    "scalar-matmul": (lambda: Prefix(2) @ 3, "use \\*"),
    "diagonal-non-square": (lambda: Ones(2, 3).gram().dot(Ones(3, 2)).diagonal(), "square"),
    "marginal-attr": (lambda: Marginal((2, 3), [2]), "position 2 is outside 0..1"),
    "marginal-name": (lambda: Marginal((2, 3), ["age"]), "'age' given by name needs a Domain"),
    "marginal-shape": (lambda: Marginal((2, 0), [0]), "positive sizes"),
    "marginals-empty": (lambda: Marginals((2, 3), {}), "at least one attribute set"),
    "marginals-twice": (lambda: Marginals((2, 3), {(0, 1): 1.0, (1, 0): 2.0}), "twice"),
    "algebra-outside": (lambda: MarginalsGram((2, 3), {0b100: 1.0}), "outside the domain"),
    "trace-shapes": (lambda: trace_of_product(Prefix(2), Ones(3, 3)), "needs X of shape"),
    "variance-shapes": (lambda: query_variances(Prefix(2), Identity(3)), "needs P of shape"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_value_error_with_a_clear_message(case: str) -> None:
    build, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        build()


def test_kron_of_a_non_matrix_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Kron factors must be dpmm matrices, got ndarray"):
        Kron([np.eye(2)])


def test_subclass_without_matmat_is_refused() -> None:
    with pytest.raises(TypeError, match="must implement _matmat"):

        class Broken(Matrix):
            def _rmatmat(self, X: np.ndarray) -> np.ndarray:
                return X


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_unsupported_norm_is_refused_by_every_type(kind: str) -> None:
    M = CATALOGUE[kind]()
    for operation in (M.column_norms, M.sensitivity):
        with pytest.raises(ValueError, match="Only the 1-, 2- and ∞-norms are supported, got p=3"):
            operation(3)


def test_range_queries_refuse_fractional_bounds():
    from dpmm.linalg import RangeQueries

    with pytest.raises(ValueError, match="integer cell indices"):
        RangeQueries(4, [[0.5, 2.7]])
    assert RangeQueries(4, [[0.0, 2.0]]).shape == (1, 4)


def test_gram_and_pinv_are_computed_once_per_matrix():
    from dpmm.linalg import AllRange, Haar, Hierarchical, Kron

    for matrix in (AllRange(6), Haar(8), Hierarchical(9, 3), Kron([AllRange(3), Haar(4)])):
        assert matrix.gram() is matrix.gram()
        assert matrix.gram().pinv() is matrix.gram().pinv()
        assert matrix.pinv() is matrix.pinv()


def test_haar_over_a_power_of_two_inverts_its_gram_through_its_orthogonal_rows():
    import numpy as np

    from dpmm.linalg import Haar, Product

    inverse = Haar(16).gram().pinv()
    assert isinstance(inverse, Product)  # Yᵀ D⁻² Y, no dense inversion
    dense = Haar(16).dense()
    np.testing.assert_allclose(inverse.dense(), np.linalg.inv(dense.T @ dense), atol=1e-12)


def test_pickled_matrices_leave_their_caches_behind():
    import pickle

    import numpy as np

    from dpmm.linalg import AllRange, Hierarchical, Kron

    matrix = Kron([AllRange(5), Hierarchical(6, 2)])
    matrix.gram().pinv()
    copy = pickle.loads(pickle.dumps(matrix))
    assert "_computed" not in copy.__dict__
    assert "_computed" not in copy.factors[0].__dict__
    np.testing.assert_array_equal(copy.dense(), matrix.dense())
    np.testing.assert_allclose(copy.gram().pinv().dense(), matrix.gram().pinv().dense())
