"""Expected-error formulas against Monte-Carlo, dense algebra, and HDMM's measured figures."""

from itertools import combinations

import numpy as np
import pytest

from dpmm.error import (
    expected_error,
    identity_error,
    noise_variance,
    per_query_variance,
    rmse,
    svd_bound,
)
from dpmm.errors import TooLargeError, UnsupportedQueryError
from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginals,
    Ones,
    Prefix,
    VStack,
    Weighted,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.workload import census_sf1, census_w1

TRIALS = 40_000


def simulate(W, A, privacy, seed):
    """Empirical per-query squared errors of least squares over TRIALS noisy measurements.

    Test-only floating-point noise: the error formula concerns the noise's variance.
    """
    rng = np.random.default_rng(seed)
    sensitivity = A.sensitivity(privacy.norm)
    shape = (A.shape[0], TRIALS)
    if privacy.norm == 1:
        noise = rng.laplace(scale=sensitivity / float(privacy.epsilon), size=shape)
    else:
        noise = rng.normal(scale=np.sqrt(sensitivity**2 / (2 * float(privacy.rho))), size=shape)
    # W x̂ − W x = W A⁺ (noise): least squares is unbiased, so this is the whole error.
    errors = W.dense() @ (np.linalg.pinv(A.dense()) @ noise)
    return (errors**2).mean(axis=1)


CASES = [
    ("allrange-hier", AllRange(8), Hierarchical(8, 2), PureDP(1)),
    ("prefix-haar", Prefix(16), Haar(16), PureDP("1/2")),
    ("allrange-hier-gauss", AllRange(8), Hierarchical(8, 3), ZCDP("1/2")),
    ("kron", Kron([Prefix(4), AllRange(3)]), Kron([Hierarchical(4, 2), Identity(3)]), ZCDP(1)),
    (
        "marginals",
        Marginals((3, 4, 2), {s: 1.0 for s in combinations(range(3), 2)}),
        Marginals((3, 4, 2), {(0, 1): 1.0, (1, 2): 0.5, (0, 2): 2.0}),
        ZCDP("1/4"),
    ),
    (
        "union-vs-kron",
        VStack([Kron([Prefix(3), Ones(1, 4)]), Kron([Identity(3), Prefix(4)])]),
        Kron([Hierarchical(3, 2), Haar(4)]),
        PureDP(2),
    ),
]


@pytest.mark.parametrize(("name", "W", "A", "privacy"), CASES, ids=[c[0] for c in CASES])
def test_total_error_matches_monte_carlo_within_3_percent(name, W, A, privacy):
    empirical = simulate(W, A, privacy, seed=sum(map(ord, name))).sum()
    assert expected_error(W, A, privacy) == pytest.approx(empirical, rel=0.03)


@pytest.mark.parametrize(("name", "W", "A", "privacy"), CASES, ids=[c[0] for c in CASES])
def test_per_query_variance_matches_monte_carlo(name, W, A, privacy):
    empirical = simulate(W, A, privacy, seed=1 + sum(map(ord, name)))
    predicted = per_query_variance(W, A, privacy)
    assert predicted.shape == (W.shape[0],)
    np.testing.assert_allclose(predicted, empirical, rtol=0.06)
    assert predicted.sum() == pytest.approx(expected_error(W, A, privacy), rel=1e-9)


def test_monte_carlo_rejects_a_wrong_noise_scale():
    # The comparison can fail: noise drawn at ε = 1.1 instead of 1 is detected.
    W, A = AllRange(8), Hierarchical(8, 2)
    empirical = simulate(W, A, PureDP("1.1"), seed=7).sum()
    assert expected_error(W, A, PureDP(1)) != pytest.approx(empirical, rel=0.03)


def test_structured_error_equals_the_dense_formula():
    rng = np.random.default_rng(3)
    W = Kron([Dense(rng.normal(size=(5, 4))), Prefix(3), AllRange(2)])
    A = Kron([Dense(rng.normal(size=(6, 4))), Hierarchical(3, 2), Identity(2)])
    Wd, Ad = W.dense(), A.dense()
    trace = np.trace(Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T)
    for privacy, sens in ((PureDP(1), np.abs(Ad).sum(0).max()), (ZCDP(1), None)):
        sens = np.sqrt((Ad**2).sum(0)).max() if sens is None else sens
        expected = privacy.noise_variance(sens) * trace
        assert expected_error(W, A, privacy) == pytest.approx(expected, rel=1e-9)
        assert rmse(W, A, privacy) == pytest.approx(np.sqrt(expected / W.shape[0]), rel=1e-9)


def test_noise_variance_uses_the_privacy_norm():
    A = Hierarchical(8, 2)  # every column in 4 nodes: ‖A‖₁ = 4, ‖A‖₂ = 2
    assert noise_variance(A, PureDP(1)) == pytest.approx(2 * 16)
    assert noise_variance(A, ZCDP("1/2")) == pytest.approx(4)


def test_unsupported_workload_is_refused():
    with pytest.raises(UnsupportedQueryError, match="cannot answer workload"):
        expected_error(Identity(4), Ones(1, 4), PureDP(1))
    marginal_strategy = Marginals((3, 4), {(0,): 1.0})
    with pytest.raises(UnsupportedQueryError):
        expected_error(Marginals((3, 4), {(1,): 1.0}), marginal_strategy, ZCDP(1))
    # A total is answerable from a single marginal.
    assert expected_error(Ones(1, 12), marginal_strategy, ZCDP(1)) > 0


def test_mismatched_columns_are_refused():
    with pytest.raises(ValueError, match="has 4 columns but strategy"):
        expected_error(Identity(4), Identity(5), PureDP(1))


@pytest.mark.parametrize("privacy", [PureDP(1), ZCDP("1/2")])
def test_svd_bound_is_below_every_strategy_for_gaussian_and_tight_for_identity(privacy):
    W = AllRange(16)
    bound = svd_bound(W, privacy)
    if privacy.norm == 2:
        for A in (Identity(16), Hierarchical(16, 2), Hierarchical(16, 4), Haar(16), Prefix(16)):
            assert expected_error(W, A, privacy) >= bound * (1 - 1e-9)
    assert svd_bound(Identity(9), privacy) == pytest.approx(privacy.noise_variance(1) * 9)


def test_svd_bound_of_a_union_matches_the_dense_singular_values():
    W = VStack([Kron([Prefix(3), Ones(1, 5)]), Weighted(2.0, Kron([Identity(3), AllRange(5)]))])
    singular = np.linalg.svd(W.dense(), compute_uv=False)
    expected = 2 * singular.sum() ** 2 / W.shape[1]
    assert svd_bound(W, PureDP(1)) == pytest.approx(expected, rel=1e-9)


def test_identity_error_is_the_frobenius_norm():
    W = Kron([Prefix(5), AllRange(4)])
    assert identity_error(W, PureDP(1)) == pytest.approx(2 * (W.dense() ** 2).sum())
    assert identity_error(W, PureDP(1)) == pytest.approx(
        expected_error(W, Kron([Identity(5), Identity(4)]), PureDP(1))
    )


def test_per_query_variance_refuses_a_huge_output():
    with pytest.raises(TooLargeError):
        per_query_variance(Kron([AllRange(1024)] * 3), Kron([Identity(1024)] * 3), PureDP(1))


def _exact_marginals(sizes, k):
    return Marginals(sizes, {s: 1.0 for s in combinations(range(len(sizes)), k)})


# HDMM's measured figures (../shared/anchors/hdmm.md, ε = 1, Laplace): Identity TSE, SVD bound.
ANCHORS = [
    ("allrange_256", lambda: AllRange(256), 5.65811e06, 544326),
    ("allrange_1024", lambda: AllRange(1024), 3.58963e08, 1.28014e07),
    ("prefix_1024", lambda: Prefix(1024), 1.0496e06, 17337.7),
    ("range2d_64", lambda: Kron([AllRange(64)] * 2), 4.18796e09, 2.32725e08),
    ("range2d_256", lambda: Kron([AllRange(256)] * 2), 1.60071e13, 1.48145e11),
    ("prefix_x_identity_256", lambda: Kron([Prefix(256), Identity(256)]), 1.68428e07, 800594),
    ("marg2_ten8", lambda: _exact_marginals([10] * 8, 2), 5.6e09, 121405),
    ("marg3_ten8", lambda: _exact_marginals([10] * 8, 3), 1.12e10, 4.36493e06),
    (
        "marg2_adultlike",
        lambda: _exact_marginals([9, 16, 7, 15, 6, 5, 2, 2, 42, 41], 2),
        2.81196e11,
        370772,
    ),
    ("marg2_bin15", lambda: _exact_marginals([2] * 15, 2), 6.88128e06, 14684.1),
    ("sf1", census_sf1, 3.79971e07, 18159.2),
    ("census_w1", census_w1, 2.23512e06, 18159.2),
]


#: Anchors whose SVD bound takes seconds (the census unions' nuclear norms).
SLOW_ANCHORS = {"sf1", "census_w1"}


@pytest.mark.parametrize(
    ("name", "build", "identity", "bound"),
    [
        pytest.param(*a, marks=pytest.mark.slow) if a[0] in SLOW_ANCHORS else pytest.param(*a)
        for a in ANCHORS
    ],
    ids=[a[0] for a in ANCHORS],
)
def test_identity_error_and_svd_bound_match_hdmm(name, build, identity, bound):
    W = build()
    assert identity_error(W, PureDP(1)) == pytest.approx(identity, rel=1e-5)
    assert svd_bound(W, PureDP(1)) == pytest.approx(bound, rel=1e-5)


def test_marginal_algebra_error_equals_the_dense_formula():
    # Both Grams in the marginal algebra: the error is read from shared eigenspaces.
    from dpmm.linalg.residual_general import ResidualBlockStrategy

    W = Marginals((3, 4, 2), {(0, 1): 1.0, (2,): 2.0, (): 0.5})
    for A in (
        Marginals((3, 4, 2), {(0, 1): 1.0, (1, 2): 0.5, (0, 2): 2.0}),
        ResidualBlockStrategy((3, 4, 2), {0: 1.0, 0b001: 0.7, 0b010: 1.3, 0b011: 2.0, 0b100: 0.4}),
    ):
        Wd, Ad = W.dense(), A.dense()
        trace = np.trace(Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T)
        expected = ZCDP(1).noise_variance(float(np.sqrt((Ad**2).sum(axis=0)).max())) * trace
        assert expected_error(W, A, ZCDP(1)) == pytest.approx(expected, rel=1e-9)
