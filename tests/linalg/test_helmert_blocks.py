"""The integer Helmert rows and their transposes, against dense matrices from the definition."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.linalg.helmert_blocks import (
    helmert_norms,
    helmert_row_norms,
    helmert_transpose,
    integer_helmert,
)
from dpmm.linalg.residuals import helmert
from tests.conftest import helmert_integer


@pytest.mark.parametrize("n", [2, 3, 7])
def test_integer_rows_are_the_scaled_helmert_matrix(n):
    H = integer_helmert(np.eye(n, dtype=np.int64), 0)
    np.testing.assert_array_equal(H, helmert_integer(n))
    np.testing.assert_allclose(H / np.sqrt(helmert_norms(n))[:, None], helmert(n))
    np.testing.assert_array_equal(np.diag(helmert_norms(n)), H @ H.T)


def test_row_norms_of_a_set_are_the_kronecker_product():
    expected = np.kron(helmert_norms(3), helmert_norms(4))
    np.testing.assert_array_equal(helmert_row_norms((3, 4)), expected)
    assert helmert_row_norms(()).tolist() == [1]


@pytest.mark.parametrize(
    ("entries", "of"),
    [("signed", lambda H: H), ("absolute", np.abs), ("squared", lambda H: H * H)],
)
def test_transposes_equal_the_dense_products(entries, of):
    rng = np.random.default_rng(5)
    shape = (4, 3, 5)  # transposed along the middle axis (length n − 1 = 3: n = 4)
    table = rng.integers(-50, 50, size=shape)
    dense = of(helmert_integer(4))
    expected = np.einsum("ijk,jm->imk", table, dense)
    result = helmert_transpose(table, 1, entries)
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, expected)
    # Python integers stay exact where int64 would overflow.
    huge = table.astype(object) * 2**70
    np.testing.assert_array_equal(
        helmert_transpose(huge, 1, entries), expected.astype(object) * 2**70
    )
