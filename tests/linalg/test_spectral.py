"""Nuclear norms of unions of Kronecker products against numpy's SVD."""

import numpy as np
import pytest
import scipy.linalg

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import AllRange, Dense, Identity, Kron, Ones, Prefix, VStack, Weighted, spectral
from dpmm.linalg.spectral import joint_eigenbasis, nuclear_norm, row_gram, thin_svd


def _factor_pool(rng):
    # Totals, identities and their stacks commute per attribute (the split path); Prefix,
    # AllRange and random factors do not (the dense path).
    return [
        [Ones(1, 2), Identity(2), VStack([Identity(2), Ones(1, 2)])],
        [Ones(1, 3), Identity(3), Prefix(3), Dense(rng.normal(size=(2, 3)))],
        [Ones(1, 4), Identity(4), AllRange(4)],
    ]


@pytest.mark.parametrize("dense_enough", [0, 1024])
@pytest.mark.parametrize("seed", range(12))
def test_union_nuclear_norm_matches_numpy(seed, dense_enough, monkeypatch):
    # dense_enough = 0 forces the attribute split on these small unions.
    monkeypatch.setattr(spectral, "_DENSE_ENOUGH", dense_enough)
    rng = np.random.default_rng(seed)
    pool = _factor_pool(rng)
    blocks = []
    for _ in range(rng.integers(1, 7)):
        factors = [options[rng.integers(len(options))] for options in pool]
        blocks.append(Weighted(float(rng.uniform(0.5, 2.0)), Kron(factors)))
    blocks.append(blocks[0])  # a repeated product merges with its twin
    W = VStack(blocks)
    expected = np.linalg.svd(W.dense(), compute_uv=False).sum()
    assert nuclear_norm(W) == pytest.approx(expected, rel=1e-9)


def test_union_with_a_non_kron_block_uses_the_dense_path():
    W = VStack([Kron([Prefix(3), Identity(2)]), Dense(np.arange(12.0).reshape(2, 6))])
    expected = np.linalg.svd(W.dense(), compute_uv=False).sum()
    assert nuclear_norm(W) == pytest.approx(expected, rel=1e-9)


def test_joint_eigenbasis_of_commuting_grams():
    ones, eye = np.ones((4, 4)), np.eye(4)
    mixed = 3 * eye + 2 * ones
    basis = joint_eigenbasis([ones, eye, mixed])
    for gram in (ones, eye, mixed):
        rotated = basis.T @ gram @ basis
        np.testing.assert_allclose(rotated, np.diag(np.diagonal(rotated)), atol=1e-12)


def test_joint_eigenbasis_refuses_grams_that_do_not_commute():
    with pytest.raises(UnsupportedQueryError, match="two of size 4 do not"):
        joint_eigenbasis([Prefix(4).gram().dense(), AllRange(4).gram().dense()])


def test_row_gram_is_w_w_transpose():
    W = VStack([Kron([Prefix(3), Ones(1, 2)]), Weighted(2.0, Kron([Identity(3), AllRange(2)]))])
    np.testing.assert_allclose(row_gram(W), W.dense() @ W.dense().T)


def test_thin_svd_falls_back_to_gesvd_when_gesdd_does_not_converge(monkeypatch):
    calls = []
    original = scipy.linalg.svd

    def gesdd_fails(array, full_matrices=True, lapack_driver="gesdd"):
        calls.append(lapack_driver)
        if lapack_driver == "gesdd":
            raise np.linalg.LinAlgError("SVD did not converge")
        return original(array, full_matrices=full_matrices, lapack_driver=lapack_driver)

    monkeypatch.setattr(scipy.linalg, "svd", gesdd_fails)
    array = np.random.default_rng(3).normal(size=(5, 8))
    U, s, Vt = thin_svd(array)
    assert calls == ["gesdd", "gesvd"]
    assert U.shape == (5, 5) and Vt.shape == (5, 8)
    np.testing.assert_allclose((U * s) @ Vt, array, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 7), (3, 5), (0, 4)])
def test_the_projector_onto_a_ones_matrix_row_space_is_the_dense_one(shape):
    ones = Ones(*shape)
    dense = ones.gram().dense()
    expected = np.linalg.pinv(dense) @ dense
    np.testing.assert_allclose(spectral.row_space_projector(ones).dense(), expected, atol=1e-12)
