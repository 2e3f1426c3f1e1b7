"""The per-type hooks: exact integer column norms, closed-form Gram inverses, traces.

Each hook is checked against the dense matrix, and the base class's defaults against a
type that overrides nothing: it must be refused (integer norms) or sent down the generic
path (Gram inverse, trace), never given another type's answer.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpmm.errors import NotIntegerError, TooLargeError
from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    Product,
    RangeQueries,
    Sparse,
    Sum,
    VStack,
    Weighted,
    trace_of_product,
)
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy

from ..conftest import INTEGER_STRATEGIES


class Plain(Matrix):
    """A new type that overrides no hook: a dense array behind a bare product."""

    def __init__(self, array: np.ndarray) -> None:
        super().__init__(array.shape)
        self.array = np.asarray(array, dtype=np.float64)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.array @ X

    def _rmatmat(self, X: np.ndarray) -> np.ndarray:
        return self.array.T @ X


def _orthonormal(n: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))[0]


# -- integer column norms -------------------------------------------------------------------
@pytest.mark.parametrize(
    "A",
    [
        *INTEGER_STRATEGIES,
        HelmertBlocks((2, 3), {0b01: np.array([3]), 0b10: np.array([[2, 0], [1, 1]])}),
        Kron([Marginal((2, 3), [0]), Weighted(-3.0, Sparse(np.array([[0.0, 2.0], [5.0, 0.0]])))]),
        VStack([Marginals((2, 2), {(0,): 2, (1,): -1}), Dense(np.arange(4.0).reshape(1, 4))]),
    ],
    ids=repr,
)
def test_integer_column_norms_are_the_dense_ones(A: Matrix) -> None:
    dense = A.dense()
    l1, l2_squared, bound = A.integer_column_norms()
    assert l1.dtype == l2_squared.dtype == np.int64
    np.testing.assert_array_equal(l1, np.abs(dense).sum(axis=0))
    np.testing.assert_array_equal(l2_squared, (dense * dense).sum(axis=0))
    assert bound >= np.abs(dense).max(initial=0)


@pytest.mark.parametrize(
    "A",
    [
        Plain(np.eye(3)),  # integer entries, but nothing says so
        Product([Prefix(3), Prefix(3)]),
        Sum([Identity(3), Identity(3)]),
        Prefix(3).T,
        EigenStrategy([np.eye(2)], [np.array([1.0, 4.0])]),
        Dense([[0.5, 1.0]]),
        Sparse(np.array([[0.0, 1.5]])),
        Weighted(0.5, Identity(2)),
        Marginals((2, 3), {(0,): 1.0, (1,): 0.25}),
        Kron([Identity(2), Dense([[1.0, 1.5]])]),
        VStack([Identity(2), Weighted(1.5, Ones(1, 2))]),
    ],
    ids=repr,
)
def test_matrices_not_known_to_be_integer_are_refused(A: Matrix) -> None:
    with pytest.raises(NotIntegerError):
        A.integer_column_norms()


@pytest.mark.parametrize(
    "A",
    [
        Dense([[2.0**31, 0.0], [2.0**31, 1.0]]),  # a column's sum of squares is 2**63
        Weighted(2.0**31, Dense([[2.0**31]])),
        Kron([Dense([[2.0**21]]), Dense([[2.0**21]]), Dense([[2.0**21]])]),
        VStack([Dense([[3.0 * 2**29]])] * 2),
        Marginals((2,), {(0,): 2.0**31, (): 2.0**31}),
    ],
    ids=repr,
)
def test_norms_beyond_int64_are_refused_before_they_wrap(A: Matrix) -> None:
    with pytest.raises(TooLargeError, match="too large"):
        A.integer_column_norms()


def test_a_union_of_marginals_on_a_huge_domain_gives_one_norm() -> None:
    A = Marginals((2**10,) * 3, {(0,): 1, (0, 1): 2, (1, 2): 3})
    l1, l2_squared, bound = A.integer_column_norms()
    assert l1.tolist() == [6] and l2_squared.tolist() == [14] and bound == 3


# -- closed-form Gram pseudo-inverses --------------------------------------------------------
def _eigen(weights: list[np.ndarray]) -> EigenStrategy:
    return EigenStrategy([_orthonormal(w.size, w.size) for w in weights], weights)


CLOSED_FORMS = {
    "identity": lambda: Identity(4),
    "ones": lambda: Ones(3, 5),
    "prefix": lambda: Prefix(6),
    "allrange": lambda: AllRange(5),
    "hierarchical": lambda: Hierarchical(7, 3),
    "haar": lambda: Haar(8),
    "marginal": lambda: Marginal((3, 2, 2), [0, 2]),
    "marginals": lambda: Marginals((3, 4), {(0,): 2.0, (0, 1): 0.5}),
    "weighted": lambda: Weighted(-2.0, Prefix(4)),
    "kron": lambda: Kron([Hierarchical(4), Ones(1, 3), Identity(2)]),
    "kron-small-dense-factor": lambda: Kron([Dense(np.arange(6.0).reshape(3, 2)), Prefix(3)]),
    "vstack-of-marginals": lambda: VStack(
        [Weighted(0.5, Marginal((3, 4), [0])), Weighted(2.0, Marginal((3, 4), [1]))]
    ),
    "vstack-one-block": lambda: VStack([Kron([Prefix(3), AllRange(2)])]),
    "pidentity": lambda: PIdentity(np.array([[1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 1.0, 0.0]]), 1),
    "eigen": lambda: _eigen([np.array([1.0, 2.0, 0.5]), np.array([3.0, 1.0])]),
    "eigen-unmeasured-direction": lambda: _eigen([np.array([1.0, 0.0, 2.0, 4.0])]),
    "residual": lambda: ResidualBlockStrategy((2, 3), {0: 1.0, 0b01: 2.0, 0b10: 0.5}),
    "residual-blocks": lambda: ResidualBlockStrategy(
        (3, 3), {0: 2.0, 0b01: np.array([1.0, 3.0]), 0b11: np.arange(1.0, 17.0).reshape(4, 4)}
    ),
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_gram_pinv_is_the_pseudo_inverse_of_the_gram(name: str) -> None:
    A = CLOSED_FORMS[name]()
    pinv = A.gram_pinv()
    assert pinv is not None
    dense = A.dense()
    expected = np.linalg.pinv(dense.T @ dense, rcond=1e-10, hermitian=True)
    np.testing.assert_allclose(pinv.dense(), expected, atol=1e-9 * max(1, abs(expected).max()))
    assert A.gram_pinv() is pinv  # computed once per matrix


@pytest.mark.parametrize(
    "A",
    [
        Plain(np.eye(3)),
        Dense(np.eye(3)),
        Sparse(sp.eye_array(3)),
        RangeQueries(4, [(0, 1), (1, 3)]),
        Haar(11),  # not a power of two: its rows are not orthogonal
        VStack([Identity(8), Hierarchical(8)]),
        Product([Prefix(3), Prefix(3)]),
        Weighted(0.0, Identity(3)),
        # A factor with no closed form, too large to invert densely:
        Kron([Prefix(2), Product([Ones(5000, 1), Ones(1, 5000)])]),
    ],
    ids=repr,
)
def test_types_without_a_closed_form_leave_the_gram_to_iteration(A: Matrix) -> None:
    assert A.gram_pinv() is None


# -- traces ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("X", "Y"),
    [
        (Identity(4), Prefix(4)),
        (Ones(3, 4), Plain(np.arange(12.0).reshape(4, 3))),
        (Kron([Prefix(2), AllRange(3)]), Kron([Hierarchical(2).gram(), Plain(np.ones((3, 6)))])),
        (Kron([Ones(2, 3), Identity(2)]), Kron([Plain(np.ones((3, 2))), Prefix(2)])),
        (Plain(np.arange(9.0).reshape(3, 3)), Plain(np.eye(3) + 1)),
    ],
    ids=repr,
)
def test_trace_hooks_agree_with_the_dense_trace(X: Matrix, Y: Matrix) -> None:
    expected = np.trace(X.dense() @ Y.dense())
    assert trace_of_product(X, Y) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert trace_of_product(Y, X) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_a_type_without_hooks_takes_the_generic_trace() -> None:
    assert Plain(np.eye(2))._trace_dot(Identity(2)) is NotImplemented
