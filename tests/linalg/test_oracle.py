"""The oracle test: every operation of every implicit matrix against its dense matrix.

Each ``check_*`` function takes one matrix and compares one family of
operations with numpy on ``M.dense()`` (itself checked against ``M @ I``). The
checks run on a fixed catalogue of every type and on hypothesis-generated
instances of random small shapes and nesting.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
from hypothesis import assume, given
from scipy.sparse.linalg import LinearOperator, aslinearoperator, lsmr

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import (
    Dense,
    HStack,
    Kron,
    MarginalsGram,
    Matrix,
    Ones,
    Prefix,
    Product,
    Sparse,
    Sum,
    Transposed,
    Weighted,
)
from dpmm.measure.quantize import quantize
from dpmm.strategy import METHODS

from .conftest import (
    ALL_KINDS,
    CATALOGUE,
    OPTIMIZER_WORKLOADS,
    ORACLE,
    PRIVACY,
    assert_close,
    compatible_pairs,
    dense_of,
    krons,
    matrices,
    optimized,
    pinv_oracle,
    same_shape_pairs,
    sparse_array,
    square_matrices,
    symmetric_matrices,
)

NORMS = (1, 2, np.inf)


def _probes(M: Matrix, columns: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(M.shape))
    return rng.standard_normal((M.shape[1], columns)), rng.standard_normal((M.shape[0], columns))


# -- the checks ---------------------------------------------------------------------------
def check_matmul(M: Matrix) -> None:
    D = dense_of(M)
    X, _ = _probes(M)
    assert_close(M @ X, D @ X)
    assert_close(M.matmat(X), D @ X)
    vector = M @ X[:, 0]
    assert vector.shape == (M.shape[0],)
    assert_close(vector, D @ X[:, 0])
    assert_close(M.matvec(X[:, 0]), D @ X[:, 0])


def check_transpose(M: Matrix) -> None:
    D = dense_of(M)
    _, Y = _probes(M)
    assert M.T.shape == M.H.shape == D.T.shape
    assert_close(M.T @ Y, D.T @ Y)
    assert_close(M.rmatmat(Y), D.T @ Y)
    assert_close(M.rmatvec(Y[:, 0]), D.T @ Y[:, 0])
    assert_close(dense_of(M.T), D.T)
    assert_close(dense_of(M.H), D.T)
    assert_close(dense_of(M.T.T), D)
    assert_close(Y.T @ M, Y.T @ D)
    assert_close(Y[:, 0] @ M, Y[:, 0] @ D)


def check_scipy_interop(M: Matrix) -> None:
    D = dense_of(M)
    X, Y = _probes(M)
    operator = aslinearoperator(M)
    assert isinstance(operator, LinearOperator)
    assert_close(operator.matvec(X[:, 0]), D @ X[:, 0])
    assert_close(operator.rmatvec(Y[:, 0]), D.T @ Y[:, 0])
    assert_close(operator.matmat(X), D @ X)
    target = Y[:, 0]
    solution = lsmr(M, target, atol=1e-12, btol=1e-12, maxiter=20 * max(M.shape))[0]
    assert solution.shape == (M.shape[1],)
    assert np.all(np.isfinite(solution))
    residual = np.linalg.norm(D @ solution - target)
    assert residual <= np.linalg.norm(target) * (1 + 1e-9)  # LSMR's residual only decreases
    singular = np.linalg.svd(D, compute_uv=False)
    largest = singular.max(initial=0.0)
    if not np.any((singular > 1e-14 * largest) & (singular < 1e-3 * largest)):
        # Well conditioned: LSMR reaches the least-squares residual.
        best = np.linalg.lstsq(D, target, rcond=None)[0]
        optimal = np.linalg.norm(D @ best - target)
        assert residual <= optimal + 1e-6 * (1 + np.linalg.norm(target))


def check_gram(M: Matrix) -> None:
    D = dense_of(M)
    gram = M.gram()
    assert gram.shape == (M.shape[1], M.shape[1])
    assert_close(dense_of(gram), D.T @ D)


def check_norms(M: Matrix) -> None:
    D = dense_of(M)
    for p in NORMS:
        expected = np.linalg.norm(D, ord=p, axis=0)
        assert_close(M.column_norms(p), expected)
        assert M.sensitivity(p) == pytest.approx(expected.max(initial=0.0), rel=1e-9, abs=1e-9)
        uniform = M.uniform_column_norm(p)
        if uniform is not None:
            assert_close(expected, np.full(M.shape[1], uniform))


def check_pinv(M: Matrix) -> None:
    D = dense_of(M)
    assert_close(dense_of(M.pinv()), pinv_oracle(D), rtol=1e-6)


def check_gram_pinv(M: Matrix) -> None:
    D = dense_of(M)
    gram = M.gram()
    assert_close(dense_of(gram.pinv()), pinv_oracle(D.T @ D), rtol=1e-6)


def check_spectrum(M: Matrix) -> None:
    D = dense_of(M)
    expected = np.linalg.svd(D, compute_uv=False)
    assert M.nuclear_norm() == pytest.approx(expected.sum(), rel=1e-7, abs=1e-7)
    # Structured types may leave out zero singular values; every non-zero one must be there.
    actual = np.sort(M.singular_values())[::-1]
    width = max(actual.size, expected.size)
    pad = np.zeros(width)
    assert_close(np.r_[actual, pad][:width], np.r_[expected, pad][:width])


def check_full_column_rank_claim(M: Matrix) -> None:
    if M.known_full_column_rank:
        assert np.linalg.matrix_rank(dense_of(M)) == M.shape[1]


def check_gram_eigh(M: Matrix) -> None:
    gram = M.gram()
    expected = dense_of(gram)
    values, vectors = gram.eigh()
    V = dense_of(vectors)
    assert values.shape == (gram.shape[0],)
    assert_close(np.sort(values), np.linalg.eigvalsh(expected))
    assert_close(V.T @ V, np.eye(gram.shape[0]))
    assert_close((V * values) @ V.T, expected)


def check_square(M: Matrix) -> None:
    if M.shape[0] != M.shape[1]:
        return
    D = dense_of(M)
    assert_close(M.diagonal(), np.diag(D))
    assert M.trace() == pytest.approx(np.trace(D), rel=1e-9, abs=1e-9)


CHECKS = [
    check_matmul,
    check_transpose,
    check_scipy_interop,
    check_gram,
    check_norms,
    check_pinv,
    check_gram_pinv,
    check_spectrum,
    check_full_column_rank_claim,
    check_gram_eigh,
    check_square,
]


# -- the catalogue: every type on every run ----------------------------------------------
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__[6:])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_catalogue(kind: str, check) -> None:
    check(CATALOGUE[kind]())


def test_catalogue_covers_transposed_and_every_type() -> None:
    names = {type(CATALOGUE[kind]()).__name__ for kind in ALL_KINDS}
    expected = {
        "Identity", "Ones", "Prefix", "AllRange", "RangeQueries", "Haar", "Hierarchical",
        "Dense", "Sparse", "Weighted", "Kron", "VStack", "HStack", "Product", "Sum",
        "Transposed", "Marginal", "Marginals", "MarginalsGram",
        "EigenStrategy", "EigenGram", "PIdentity", "PIdentityGram", "PIdentityGramInverse",
        "LowRankStrategy", "LowRankGram", "ResidualGram",
        "ResidualBlockStrategy", "ResidualBlockGram", "HelmertBlocks",
    }  # fmt: skip
    assert expected <= names


def _types_within(M: Matrix) -> set[str]:
    """The type names of ``M`` and of every matrix it is built from."""
    names = {type(M).__name__}
    for attribute in ("factors", "blocks", "terms", "base"):
        parts = getattr(M, attribute, None)
        for part in [parts] if isinstance(parts, Matrix) else parts or []:
            if isinstance(part, Matrix):
                names |= _types_within(part)
    return names


@pytest.mark.parametrize("privacy", sorted(PRIVACY))
def test_catalogue_covers_every_type_optimize_returns(privacy: str) -> None:
    """Every type a method returns on the small workloads, and in its quantized forms (the
    integer matrix measured, ``A_q`` used to reconstruct), has an instance in the catalogue."""
    catalogued = set().union(*(_types_within(CATALOGUE[kind]()) for kind in ALL_KINDS))
    returned: dict[str, str] = {}
    for workload in OPTIMIZER_WORKLOADS:
        for method in METHODS:
            try:
                A = optimized(workload, method, privacy)
            except UnsupportedQueryError:
                continue
            quantized = quantize(A)
            for M in (A, quantized.integer, quantized.matrix):
                for name in _types_within(M):
                    returned.setdefault(name, f"{method} on {workload}")
    assert {"EigenStrategy", "Kron", "Dense"} <= set(returned)
    missing = {name: where for name, where in returned.items() if name not in catalogued}
    assert not missing, f"types returned but not in the catalogue: {missing}"


# -- random shapes -----------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__[6:])
@ORACLE
@given(M=matrices())
def test_random_matrices(check, M: Matrix) -> None:
    check(M)


@ORACLE
@given(M=square_matrices())
def test_random_square_diagonal_and_trace(M: Matrix) -> None:
    check_square(M)


@ORACLE
@given(S=symmetric_matrices())
def test_random_symmetric_eigh(S: Matrix) -> None:
    expected = dense_of(S)
    values, vectors = S.eigh()
    V = dense_of(vectors)
    assert_close(np.sort(values), np.linalg.eigvalsh(expected))
    assert_close(V.T @ V, np.eye(S.shape[0]))
    assert_close((V * values) @ V.T, expected)
    # The pseudo-inverse jumps where a singular value crosses the rank cutoff (1e-10 of the
    # largest), so near it the oracle's side is rounding, not a property of dpmm (found by
    # hypothesis: Sparse(14×14) ⊗ Ones(2×2) + Dense(28×28) with one at 1.024e-10).
    singular = np.linalg.svd(expected, compute_uv=False)
    relative = singular / max(float(singular.max(initial=0.0)), np.finfo(float).tiny)
    assume(not np.any((relative > 1e-12) & (relative < 1e-8)))
    assert_close(dense_of(S.pinv()), pinv_oracle(expected), rtol=1e-6)
    check_square(S)


def test_pinv_of_a_nearly_symmetric_matrix_is_not_symmetrized() -> None:
    D = np.array([[2.0, 1.0 + 4e-6], [1.0, 3.0]])
    assert_close(dense_of(Dense(D).pinv()), np.linalg.pinv(D), rtol=1e-10)
    assert_close(dense_of(Dense(D.T @ D).pinv()), np.linalg.pinv(D.T @ D), rtol=1e-10)


def test_pinv_of_a_rank_deficient_gram_does_not_invert_rounding_noise() -> None:
    # Rank 16 of 38: the formed Gram has eigenvalues near 1e-14 of the largest where the
    # truth is zero, above numpy's default cutoff of 1e-15 (found by hypothesis).
    M = HStack([Prefix(16), Sparse(sparse_array(16, 22, 175))]) + Ones(16, 38)
    D = dense_of(M)
    assert_close(dense_of(M.gram().pinv()), pinv_oracle(D.T @ D), rtol=1e-6)


@ORACLE
@given(K=krons())
def test_kron_gram_eigh_is_factorwise(K: Kron) -> None:
    gram = K.gram()
    assert isinstance(gram, Kron)
    pairs = gram.factor_eigh()
    for (values, vectors), factor in zip(pairs, gram.factors, strict=True):
        V = dense_of(vectors)
        assert_close((V * values) @ V.T, dense_of(factor))
    values, vectors = gram.eigh()
    assert_close(values, reduce(np.kron, [v for v, _ in pairs]))
    assert_close(dense_of(vectors), reduce(np.kron, [dense_of(V) for _, V in pairs]))
    V = dense_of(vectors)
    assert_close((V * values) @ V.T, dense_of(gram))


@ORACLE
@given(K=krons())
def test_kron_structured_operations(K: Kron) -> None:
    D = dense_of(K)
    assert_close(dense_of(K.gram()), D.T @ D)
    assert_close(dense_of(K.pinv()), pinv_oracle(D), rtol=1e-6)
    for p in NORMS:
        assert_close(K.column_norms(p), np.linalg.norm(D, ord=p, axis=0))
        assert K.sensitivity(p) == pytest.approx(np.linalg.norm(D, ord=p, axis=0).max())
    assert K.nuclear_norm() == pytest.approx(np.linalg.svd(D, compute_uv=False).sum())


# -- composition -------------------------------------------------------------------------
def _check_product(A: Matrix, B: Matrix) -> None:
    product = A @ B
    # Two elements of one domain's marginal algebra multiply within it; all else is lazy.
    closed = (
        isinstance(A, MarginalsGram)
        and isinstance(B, MarginalsGram)
        and A.domain_shape == B.domain_shape
    )
    assert isinstance(product, MarginalsGram if closed else Product)
    expected = dense_of(A) @ dense_of(B)
    assert_close(dense_of(product), expected)
    assert_close(dense_of(product.T), expected.T)
    assert_close(dense_of(product.gram()), expected.T @ expected)


def _check_linear_combinations(A: Matrix, B: Matrix) -> None:
    DA, DB = dense_of(A), dense_of(B)
    total = A + B
    assert isinstance(total, Sum)
    assert_close(dense_of(total), DA + DB)
    assert_close(dense_of(A - B), DA - DB)
    assert_close(dense_of(3 * A), 3 * DA)
    assert_close(dense_of(A * 3), 3 * DA)
    assert_close(dense_of(-A), -DA)
    assert_close(dense_of(0.5 * (A - B)), 0.5 * (DA - DB))
    assert_close(dense_of((A + B).T), (DA + DB).T)
    assert_close(dense_of((A - B).gram()), (DA - DB).T @ (DA - DB))


@ORACLE
@given(pair=compatible_pairs())
def test_product_matches_dense_product(pair: tuple[Matrix, Matrix]) -> None:
    _check_product(*pair)


@ORACLE
@given(pair=same_shape_pairs())
def test_sums_and_scalings_match_dense(pair: tuple[Matrix, Matrix]) -> None:
    _check_linear_combinations(*pair)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_catalogue_composition(kind: str) -> None:
    M = CATALOGUE[kind]()
    _check_product(M.T, M)
    _check_product(M, Weighted(2.0, M.T))
    _check_linear_combinations(M, Weighted(-0.5, M))
    _check_linear_combinations(M, M)


def test_transpose_of_a_type_without_closed_form_is_transposed() -> None:
    for kind in ("transposed-prefix", "transposed-allrange", "transposed-ranges"):
        assert isinstance(CATALOGUE[kind](), Transposed)
