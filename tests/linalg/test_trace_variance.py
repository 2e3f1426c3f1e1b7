"""``trace_of_product`` and ``query_variances`` against numpy, one structured path at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    Sum,
    VStack,
    Weighted,
    query_variances,
    trace_of_product,
)
from dpmm.linalg.elementary import RangeQueries

from .conftest import (
    ORACLE,
    WEIGHTS,
    assert_close,
    attribute_sets,
    dense_of,
    marginals,
    marginals_grams,
    matrices,
    small_domains,
    well_conditioned,
    with_cols,
    with_shape,
)


def assert_trace(X: Matrix, Y: Matrix) -> None:
    expected = np.trace(dense_of(X) @ dense_of(Y))
    scale = max(1.0, float(np.abs(dense_of(X)).sum() * np.abs(dense_of(Y)).max(initial=0)))
    assert trace_of_product(X, Y) == pytest.approx(expected, rel=1e-7, abs=1e-9 * scale)


def assert_variances(W: Matrix, P: Matrix) -> None:
    Wd, Pd = dense_of(W), dense_of(P)
    assert_close(query_variances(W, P), np.diag(Wd @ Pd @ Wd.T), rtol=1e-6)


# -- strategies over one domain shape -------------------------------------------------------
@st.composite
def krons_over(draw: st.DrawFn, shape: tuple[int, ...], max_rows: int = 4) -> Kron:
    """A Kron whose factor i has ``shape[i]`` columns (mixed, possibly nested, factor types)."""
    return Kron([draw(with_cols(n, max_rows, depth=1)) for n in shape])


@st.composite
def workloads_over(draw: st.DrawFn, shape: tuple[int, ...]) -> Matrix:
    """W in {Kron, VStack of Krons, Weighted, Marginal, Marginals, Dense} over ``shape``."""
    kind = draw(st.sampled_from(["kron", "vstack", "weighted", "marginal", "marginals", "dense"]))
    if kind == "kron":
        return draw(krons_over(shape))
    if kind == "vstack":
        return VStack([draw(krons_over(shape, 3)) for _ in range(draw(st.integers(2, 3)))])
    if kind == "weighted":
        return Weighted(draw(WEIGHTS), draw(workloads_over(shape)))
    if kind == "marginal":
        return Marginal(shape, draw(attribute_sets(len(shape))))
    if kind == "marginals":
        return draw(marginals(shape))
    cells = math.prod(shape)
    rows = draw(st.integers(1, 8))
    return Dense(
        well_conditioned(rows, cells, draw(st.integers(0, rows)), draw(st.integers(0, 99)))
    )


@st.composite
def symmetric_over(draw: st.DrawFn, shape: tuple[int, ...]) -> Matrix:
    """P in {Kron pinv, MarginalsGram pinv, Sum, Dense, Weighted}: symmetric, over ``shape``."""
    kind = draw(st.sampled_from(["kron", "marginals", "sum", "dense", "weighted"]))
    if kind == "kron":
        return draw(krons_over(shape)).gram().pinv()
    if kind == "marginals":
        return draw(marginals_grams(shape)).pinv()
    if kind == "sum":
        return Sum([draw(symmetric_over(shape)) for _ in range(2)])
    if kind == "weighted":
        return Weighted(draw(WEIGHTS), draw(symmetric_over(shape)))
    cells = math.prod(shape)
    half = well_conditioned(cells, cells, cells, draw(st.integers(0, 99)))
    return Dense(half + half.T)


# -- trace_of_product ---------------------------------------------------------------------
@ORACLE
@given(shape=small_domains(), data=st.data())
def test_trace_kron_grams(shape, data) -> None:
    W, A = data.draw(krons_over(shape)), data.draw(krons_over(shape))
    assert_trace(W.gram(), A.gram())
    assert_trace(W.gram(), A.gram().pinv())
    assert_trace(A.gram().pinv(), W.gram())


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_trace_union_of_krons_against_kron_strategy(shape, data) -> None:
    W = VStack([data.draw(krons_over(shape, 3)) for _ in range(data.draw(st.integers(2, 3)))])
    A = data.draw(krons_over(shape))
    union_gram = W.gram()
    assert isinstance(union_gram, Sum)
    assert_trace(union_gram, A.gram().pinv())
    assert_trace(A.gram().pinv(), union_gram)


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_trace_marginal_algebra_pairs(shape, data) -> None:
    X, Y = data.draw(marginals_grams(shape)), data.draw(marginals_grams(shape))
    assert_trace(X, Y)
    assert_trace(X, Y.pinv())  # Y.pinv() of a singular Y is numpy's pinv (test_oracle)
    W = data.draw(marginals(shape))
    assert trace_of_product(W.gram(), W.gram().pinv()) == pytest.approx(
        np.linalg.matrix_rank(dense_of(W))
    )


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_trace_marginal_algebra_against_kron(shape, data) -> None:
    G = data.draw(marginals_grams(shape))
    K = data.draw(krons_over(shape))
    assert_trace(G, K.gram())
    assert_trace(K.gram().pinv(), G)
    assert_trace(G, Kron([data.draw(with_shape(n, n)) for n in shape]))


@ORACLE
@given(X=matrices(max_cols=30, depth=1), data=st.data())
def test_trace_generic_pairs(X: Matrix, data) -> None:
    rows, cols = X.shape
    Y = data.draw(
        st.sampled_from(
            [
                lambda: data.draw(with_shape(cols, rows)),
                lambda: X.T,
                lambda: Weighted(data.draw(WEIGHTS), X.T),
                lambda: Product([X.T, Prefix(rows)]),
                lambda: Ones(cols, rows),
            ]
        )
    )()
    assert_trace(X, Y)
    assert_trace(Y, X)


@pytest.mark.parametrize(
    ("X", "Y"),
    [
        (Identity(6), Prefix(6)),
        (Prefix(6).gram(), Identity(6)),
        (Ones(6, 6), Prefix(6)),
        (Ones(2, 5), Prefix(5) @ Ones(5, 2)),
        (Weighted(-3.0, Prefix(4)), Dense(well_conditioned(4, 4, 2, 5))),
        (Dense(well_conditioned(3, 5, 3, 1)), Dense(well_conditioned(5, 3, 3, 2))),
        (Prefix(5) @ Prefix(5).T, Prefix(5).gram().pinv()),
        (Kron([Ones(1, 2), Ones(2, 1)]), Identity(2)),
        (Kron([Prefix(2), Ones(2, 3)]), Kron([Identity(2), Ones(3, 2)])),
    ],
    ids=repr,
)
def test_trace_named_pairs(X: Matrix, Y: Matrix) -> None:
    assert_trace(X, Y)
    assert_trace(Y, X)


# -- query_variances ----------------------------------------------------------------------
@ORACLE
@given(shape=small_domains(), data=st.data())
def test_query_variances(shape, data) -> None:
    W = data.draw(workloads_over(shape))
    P = data.draw(symmetric_over(shape))
    assert_variances(W, P)


@ORACLE
@given(W=matrices(), data=st.data())
def test_query_variances_of_any_workload(W: Matrix, data) -> None:
    n = W.shape[1]
    P = data.draw(
        st.sampled_from(
            [
                lambda: Identity(n),
                lambda: W.gram(),
                lambda: data.draw(with_cols(n, depth=1)).gram().pinv(),
                lambda: Weighted(-1.0, data.draw(with_cols(n, depth=1)).gram()),
            ]
        )
    )()
    assert_variances(W, P)


@ORACLE
@given(shape=small_domains(), data=st.data())
def test_query_variances_marginals_against_their_algebra(shape, data) -> None:
    W = data.draw(marginals(shape))
    P = data.draw(marginals_grams(shape))
    assert_variances(W, P)
    assert_variances(W, P.pinv())
    for mask in W.weights:
        marginal = Marginal(shape, [i for i in range(len(shape)) if mask >> i & 1])
        assert_variances(marginal, P)


@pytest.mark.parametrize(
    ("W", "P"),
    [
        (Prefix(5), Identity(5)),
        (Kron([Prefix(3), Identity(2)]), Kron([Prefix(3), Prefix(2)]).gram().pinv()),
        # Kron factors not aligned with P's: the generic path.
        (Kron([Prefix(2), Prefix(3)]), Kron([Prefix(3), Prefix(2)]).gram().pinv()),
        (Kron([Ones(1, 3), Prefix(4)]), Marginals((3, 4), {(0,): 1.0, (1,): 2.0}).gram().pinv()),
        (Marginal((3, 4), [1]), Marginals((3, 4), {(0, 1): 1.0}).gram()),
        (Weighted(-2.0, Marginals((2, 3), {(0,): 1.0, (): 3.0})), Identity(6)),
    ],
    ids=repr,
)
def test_query_variances_named_pairs(W: Matrix, P: Matrix) -> None:
    assert_variances(W, P)


def test_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs X of shape"):
        trace_of_product(Prefix(3), Prefix(4))
    with pytest.raises(ValueError, match="needs P of shape"):
        query_variances(Prefix(3), Identity(4))


def test_other_factorizations_of_the_same_cells_fall_back_to_the_generic_path() -> None:
    # (2, 3), (3, 2) and (6,) give 6 × 6 matrices with no shared marginal algebra.
    G = Marginals((2, 3), {(0,): 1.0, (): 2.0}).gram()
    H = Marginals((3, 2), {(1,): 1.0}).gram()
    F = Marginals((6,), {(0,): 3.0}).gram()
    for other in (H, F, H.pinv()):
        assert_trace(G, other)
        assert_trace(other, G)
        assert_close(dense_of(G @ other), dense_of(G) @ dense_of(other))
    assert_variances(Marginal((2, 3), [0]), H)
    assert_variances(Marginals((3, 2), {(0,): 1.0, (1,): -1.0}), G.pinv())
    with pytest.raises(ValueError, match=r"over \(2, 3\) and \(3, 2\)"):
        G.dot_algebra(H)


@pytest.mark.parametrize("dense_on_the_left", [True, False])
def test_trace_of_a_dense_matrix_against_a_structured_one_in_blocks(monkeypatch, dense_on_the_left):
    # Below the dense limit both sides are made dense; force the column-block path,
    # where an explicit array is read row-block by row-block instead of multiplied.
    from dpmm.linalg import trace as trace_module

    monkeypatch.setattr(trace_module, "DENSE_LIMIT", 40)
    rng = np.random.default_rng(11)
    W = rng.normal(size=(5, 24))
    gram = Dense(W.T @ W)
    structured = Hierarchical(24, 3).gram().pinv()
    expected = float(np.trace(gram.array @ structured.dense()))
    pair = (gram, structured) if dense_on_the_left else (structured, gram)
    assert trace_of_product(*pair) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [2, 7, 40])
def test_interval_variances_read_the_prefix_sums_covariance(n: int) -> None:
    """Many intervals over few cells: ``Var(S_h − S_{l−1})`` equals ``diag(W P Wᵀ)``."""
    rng = np.random.default_rng(n)
    root = rng.normal(size=(n, n))
    P = Dense(root @ root.T)
    pairs = [tuple(sorted(rng.integers(0, n, size=2))) for _ in range(3 * n)]
    for W in (AllRange(n), RangeQueries(n, pairs)):
        assert W.shape[0] > W.shape[1]
        expected = np.einsum("ij,jk,ik->i", W.dense(), P.dense(), W.dense())
        np.testing.assert_allclose(query_variances(W, P), expected, rtol=1e-10, atol=1e-10)


def test_column_blocks_of_a_wide_matrix_stay_within_the_limit() -> None:
    """The identity columns a block is computed from count too: a 100 × 5,050 matrix read
    in blocks of at most 10⁴ entries never builds an identity of more than 10⁴ entries."""
    W = AllRange(100).T  # 100 × 5,050
    blocks = list(W._column_blocks(limit=10_000))
    assert all(block.shape[1] * W.shape[1] <= 10_000 for _, block in blocks)
    np.testing.assert_array_equal(np.hstack([b for _, b in blocks]), W.dense())
