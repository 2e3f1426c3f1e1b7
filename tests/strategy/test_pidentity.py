"""OPT_0: the p-Identity loss is the real error, its gradient is exact, and it beats Identity."""

import numpy as np
import pytest
import scipy.linalg

from dpmm.error import expected_error, identity_error
from dpmm.errors import ArgumentError
from dpmm.linalg import AllRange, Identity, Prefix
from dpmm.linalg.pidentity import PIdentity, column_scale
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import pidentity
from dpmm.strategy.pidentity import (
    SCREEN_ITERATIONS,
    THETA_MAX,
    PIdentityTemplate,
    optimize_pidentity,
    semiseparable_generators,
)
from dpmm.strategy.template import MAX_ITERATIONS, descend, optimize_template

PRIVACY = {1: PureDP(1), 2: ZCDP("1/2")}


def _finite_differences(template, x, step=1e-6):
    grad = np.empty_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = step
        grad[k] = (template.loss_and_grad(x + e)[0] - template.loss_and_grad(x - e)[0]) / (2 * step)
    return grad


@pytest.mark.parametrize("norm", [1, 2])
def test_gradient_matches_finite_differences(norm):
    G = AllRange(9).gram().dense()
    template = PIdentityTemplate(G, 3, norm)
    x = np.random.default_rng(7).uniform(size=27)
    loss, grad = template.loss_and_grad(x)
    np.testing.assert_allclose(grad, _finite_differences(template, x), rtol=1e-6, atol=1e-6)
    dense = PIdentity(x.reshape(3, 9), norm).dense()
    assert loss == pytest.approx(np.trace(G @ np.linalg.inv(dense.T @ dense)), rel=1e-12)


@pytest.mark.parametrize("norm", [1, 2])
def test_loss_survives_huge_nearly_dependent_rows(norm):
    # A line search can try Θ with entries near 10¹⁰ and two nearly equal rows: forming
    # I + ΘΘᵀ and factoring it then fails, while the loss itself is well defined.
    G = Prefix(64).gram().dense()
    theta = np.random.default_rng(3).uniform(size=(4, 64))
    theta[1] = theta[0] * (1 + 1e-9)
    theta *= 1e10
    loss, grad = PIdentityTemplate(G, 4, norm).loss_and_grad(theta.reshape(-1))
    assert np.all(np.isfinite(grad))
    # Reference: trace(X⁻¹ Ĝ) with X = BᵀB, B = [I; Θ], through the n × n QR of B.
    scale = column_scale(theta, norm)
    upper = np.linalg.qr(np.concatenate([np.eye(64), theta]), mode="r")
    inner = scipy.linalg.solve_triangular(upper, scale[:, None] * G * scale, trans="T")
    reference = np.trace(scipy.linalg.solve_triangular(upper, inner.T, trans="T"))
    assert loss == pytest.approx(reference, rel=1e-6)


@pytest.mark.parametrize("norm", [1, 2])
def test_optimized_loss_is_the_expected_error(norm):
    W = Prefix(48)
    A, loss = optimize_pidentity(
        W.gram().dense(), norm=norm, restarts=1, rng=np.random.default_rng(1)
    )
    privacy = PRIVACY[norm]
    assert A.sensitivity(norm) == pytest.approx(1.0)
    assert expected_error(W, A, privacy) == pytest.approx(privacy.noise_variance(1.0) * loss)


@pytest.mark.parametrize("W", [AllRange(64), Prefix(64)], ids=["allrange", "prefix"])
@pytest.mark.parametrize("norm", [1, 2])
def test_opt0_beats_identity(W, norm):
    A, _ = optimize_pidentity(W.gram().dense(), norm=norm, restarts=1, rng=np.random.default_rng(2))
    privacy = PRIVACY[norm]
    assert A.p == 4  # HDMM's p = n / 16
    assert expected_error(W, A, privacy) < 0.8 * identity_error(W, privacy)


def test_best_restart_is_kept():
    G = AllRange(32).gram().dense()
    template = PIdentityTemplate(G, 2, 1)
    result = optimize_template(template, restarts=3, rng=np.random.default_rng(3))
    rng = np.random.default_rng(3)  # the same three random starts, each descended alone
    ends = [descend(template, template.initial(rng), MAX_ITERATIONS)[1] for _ in range(3)]
    assert result.loss == pytest.approx(min(ends))
    assert template.loss_and_grad(result.params)[0] == pytest.approx(result.loss)


@pytest.mark.parametrize(
    ("gram", "kwargs"),
    [
        (np.ones((3, 4)), {"norm": 1}),
        (np.array([[1.0, 2.0], [0.0, 1.0]]), {"norm": 1}),
        (np.eye(3), {"norm": 3}),
        (np.eye(3), {"norm": 1, "p": 0}),
        (np.eye(3), {"norm": 1, "restarts": 0}),
    ],
)
def test_bad_inputs_are_refused(gram, kwargs):
    with pytest.raises(ArgumentError):
        optimize_pidentity(gram, **kwargs)


@pytest.mark.parametrize("W", [AllRange(40), Prefix(40)], ids=["allrange", "prefix"])
@pytest.mark.parametrize("norm", [1, 2])
def test_structured_gram_path_matches_the_dense_path(W, norm, monkeypatch):
    # The sweeps of OPT_⊗ pass G / trace(G): rounding must not hide the structure.
    G = W.gram().dense()
    G = G / np.trace(G)
    structured = PIdentityTemplate(G, 3, norm)
    monkeypatch.setattr(pidentity, "semiseparable_generators", lambda gram: None)
    dense = PIdentityTemplate(G, 3, norm)
    assert structured.generators is not None and dense.generators is None
    x = np.random.default_rng(11).uniform(size=3 * 40)
    x[x < 0.1] = 0.0
    loss, grad = structured.loss_and_grad(x)
    dense_loss, dense_grad = dense.loss_and_grad(x)
    assert loss == pytest.approx(dense_loss, rel=1e-12)
    np.testing.assert_allclose(grad, dense_grad, rtol=1e-9, atol=1e-12 * np.abs(grad).max())


@pytest.mark.parametrize(
    "G",
    [
        Identity(6).dense(),
        np.diag(np.arange(1.0, 7.0)) + 0.5,
        (lambda B: B.T @ B)(np.random.default_rng(5).uniform(size=(8, 6))),
    ],
    ids=["identity", "diag-plus-ones", "random"],
)
def test_other_grams_are_not_taken_as_semiseparable(G):
    assert semiseparable_generators(G) is None
    x = np.random.default_rng(2).uniform(size=12)
    loss, _ = PIdentityTemplate(G, 2, 1).loss_and_grad(x)
    dense = PIdentity(x.reshape(2, 6), 1).dense()
    assert loss == pytest.approx(np.trace(G @ np.linalg.inv(dense.T @ dense)), rel=1e-12)


def test_total_gram_is_semiseparable_and_exact():
    G = np.full((6, 6), 2.0)  # Total's Gram, weighted: lower[min] · upper[max] with ones
    assert semiseparable_generators(G) is not None
    x = np.random.default_rng(2).uniform(size=12)
    loss, _ = PIdentityTemplate(G, 2, 2).loss_and_grad(x)
    dense = PIdentity(x.reshape(2, 6), 2).dense()
    assert loss == pytest.approx(np.trace(G @ np.linalg.inv(dense.T @ dense)), rel=1e-12)


def test_a_slightly_perturbed_range_gram_is_dense():
    G = AllRange(16).gram().dense()
    G[3, 9] = G[9, 3] = G[3, 9] * (1 + 1e-9)
    assert semiseparable_generators(G) is None


@pytest.mark.parametrize("W", [AllRange(48), Prefix(48)], ids=["allrange", "prefix"])
def test_closed_form_gram_operator_gives_the_expected_error(W):
    A, loss = optimize_pidentity(W.gram(), norm=1, restarts=2, rng=np.random.default_rng(4))
    assert expected_error(W, A, PureDP(1)) == pytest.approx(
        PureDP(1).noise_variance(1.0) * loss, rel=1e-10
    )
    # Same optimum as from the dense array: the same starts give the same path.
    _, loss_dense = optimize_pidentity(
        W.gram().dense(), norm=1, restarts=2, rng=np.random.default_rng(4)
    )
    assert loss == pytest.approx(loss_dense, rel=1e-6)


def test_screened_restarts_keep_the_best_point_seen():
    G = AllRange(32).gram().dense()
    _, loss = optimize_pidentity(G, norm=1, restarts=3, rng=np.random.default_rng(3))
    template = PIdentityTemplate(G, 2, 1)
    screened = optimize_template(
        template, restarts=3, rng=np.random.default_rng(3), max_iterations=SCREEN_ITERATIONS
    )
    assert loss <= screened.loss


@pytest.mark.parametrize("seed", range(8))
def test_loss_of_an_identity_optimal_workload_is_not_an_artifact_of_rounding(seed):
    # The identity is optimal for Prefix(6) with p = 1; unbounded, L-BFGS-B pushed one Θ
    # entry towards 10⁹, where the Woodbury loss cancels to less than the true error (0 for
    # that column), and OPT_⊗ then reported a total error of 0.
    G = Prefix(6).gram().dense()
    G /= np.trace(G)
    A, loss = optimize_pidentity(G, norm=1, rng=np.random.default_rng(seed))
    assert A.theta.max() <= THETA_MAX
    dense = A.dense()
    assert loss == pytest.approx(np.trace(G @ np.linalg.inv(dense.T @ dense)), rel=1e-9)
    assert loss >= 1 - 1e-9  # nothing beats the identity here


def test_woodbury_loss_is_accurate_at_the_bound():
    theta = np.array([[THETA_MAX, 0.5, 0.0, 2.0]])
    G = AllRange(4).gram().dense()
    loss, _ = PIdentityTemplate(G, 1, 1).loss_and_grad(theta.ravel())
    dense = PIdentity(theta, 1).dense()
    assert loss == pytest.approx(np.trace(G @ np.linalg.inv(dense.T @ dense)), rel=1e-9)


def test_large_fits_start_with_light_columns_and_small_ones_as_hdmm():
    """HDMM's start (Θ uniform on [0, 1]) for small fits; large fits scaled to column weight w."""
    rng = np.random.default_rng(11)
    small = PIdentityTemplate.from_generators(np.arange(1.0, 513), np.arange(512.0, 0, -1), 32, 1)
    assert small.initial(rng).max() > 0.9  # unscaled: entries on [0, 1]
    n, p = 4096, 256
    large = PIdentityTemplate.from_generators(np.arange(1.0, n + 1), np.arange(n, 0.0, -1), p, 1)
    columns = large.initial(rng).reshape(p, n).sum(axis=0)
    # Each column sums p uniforms on [0, 2w/p]: mean w, sd w·sqrt(1/(3p)) ≈ 0.036 w; the mean
    # of 4,096 columns is within 6 sd / 64 of w.
    w = pidentity.START_COLUMN_WEIGHT
    assert abs(columns.mean() - w) < 6 * 0.036 * w / 64
    assert pidentity.iteration_budget(n) == (
        pidentity.LARGE_SCREEN_ITERATIONS,
        pidentity.LARGE_ITERATIONS,
    )
