"""OPT_M: the loss is the real error, its gradient is exact, it beats uniform weights and
its strategy answers the workload."""

from itertools import combinations

import numpy as np
import pytest

from dpmm.error import expected_error
from dpmm.errors import ArgumentError, TooLargeError
from dpmm.linalg import AllRange, Identity, Kron, Marginals, Ones, Prefix, VStack, Weighted
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy.marginal_optimal import marginal_projection, workload_marginals
from dpmm.strategy.weighted_marginals import (
    MarginalWeightsTemplate,
    optimize_marginal_weights,
    select_marginal_weights,
)

PRIVACY = {1: PureDP(1), 2: ZCDP("1/2")}


def _all_k_way(shape, k):
    return Marginals(shape, {s: 1.0 for s in combinations(range(len(shape)), k)})


WORKLOADS = {
    "two-way": _all_k_way((3, 2, 4, 2), 2),
    "mixed": Marginals((2, 3, 4), {(0, 1): 1.0, (2,): 2.0}),
    "kron-union": VStack(
        [
            Kron([Identity(3), Ones(1, 2), Identity(2)]),
            Weighted(0.5, Kron([Ones(2, 3), Ones(1, 2), Ones(2, 2)])),
        ]
    ),
}


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("name", WORKLOADS)
def test_gradient_matches_finite_differences_and_loss_matches_dense(name, norm):
    W = WORKLOADS[name]
    template = MarginalWeightsTemplate(*workload_marginals(W, repeated_totals=True), norm)
    x = np.random.default_rng(11).uniform(0.2, 1.0, size=1 << template.bits)
    loss, grad = template.loss_and_grad(x)
    step = 1e-6
    numeric = [
        (template.loss_and_grad(x + step * e)[0] - template.loss_and_grad(x - step * e)[0])
        / (2 * step)
        for e in np.eye(x.size)
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6 * np.abs(grad).max())
    A = Marginals(template.shape, {template.expand(k): x[k] for k in range(x.size)})
    dense_A, dense_W = A.dense(), W.dense()
    sensitivity = np.linalg.norm(dense_A, ord=norm, axis=0).max()
    trace = np.trace(dense_W.T @ dense_W @ np.linalg.pinv(dense_A.T @ dense_A))
    assert loss == pytest.approx(sensitivity**2 * trace, rel=1e-9)


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("name", WORKLOADS)
def test_optimum_is_the_real_error_supports_the_workload_and_beats_uniform(name, norm):
    W = WORKLOADS[name]
    privacy = PRIVACY[norm]
    A, loss = optimize_marginal_weights(W, norm=norm, rng=np.random.default_rng(12))
    assert expected_error(W, A, privacy) == pytest.approx(privacy.noise_variance(1) * loss)
    # The strategy answers W exactly: W A⁺ A = W.
    dense_W, dense_A = W.dense(), A.dense()
    np.testing.assert_allclose(dense_W @ np.linalg.pinv(dense_A) @ dense_A, dense_W, atol=1e-8)
    shape, coefficients = workload_marginals(W, repeated_totals=True)
    own_tables = [tuple(i for i in range(len(shape)) if a >> i & 1) for a in coefficients]
    uniform = Marginals(shape, dict.fromkeys(own_tables, 1.0))
    assert loss <= expected_error(W, uniform, privacy) / privacy.noise_variance(1) * (1 + 1e-9)


def test_opt_m_improves_on_uniform_two_way_marginals_of_binary_attributes():
    W = _all_k_way((2,) * 6, 2)
    _, loss = optimize_marginal_weights(W, norm=1, restarts=1, rng=np.random.default_rng(13))
    assert loss < 0.9 * expected_error(W, W, PureDP(1)) / 2


def test_attributes_no_query_reads_get_no_weight():
    W = Marginals((3, 4, 5, 2), {(0, 2): 1.0, (2,): 1.0})
    A, _ = optimize_marginal_weights(W, norm=2, restarts=1, rng=np.random.default_rng(14))
    assert all(mask & 0b1010 == 0 for mask in A.weights)


def test_select_uses_the_privacy_norm():
    W = WORKLOADS["mixed"]
    A = select_marginal_weights(W, ZCDP(1))
    assert isinstance(A, Marginals)
    assert expected_error(W, A, ZCDP(1)) <= expected_error(W, W, ZCDP(1)) * (1 + 1e-9)


@pytest.mark.parametrize("norm", [1, 2])
def test_other_factors_enter_through_the_closest_marginal_workload(norm: int) -> None:
    """HDMM's marginals approximation: the loss is the projected workload's error, and the
    strategy answers the true workload, better than the unit-weight tables it reads."""
    W = VStack([Kron([Prefix(8), Identity(3)]), Kron([Ones(1, 8), AllRange(3)])])
    A, loss = optimize_marginal_weights(W, norm=norm, rng=np.random.default_rng(3))
    prefix, ranges = marginal_projection(Prefix(8)), marginal_projection(AllRange(3))
    projected = Marginals(
        (8, 3),
        {
            (0, 1): float(np.sqrt(prefix[0])),
            (1,): float(np.sqrt(prefix[1] + ranges[0])),
            (): float(np.sqrt(ranges[1])),
        },
    )
    privacy, variance = (ZCDP(0.5), 1) if norm == 2 else (PureDP(1), 2)  # noise per unit
    assert expected_error(projected, A, privacy) == pytest.approx(variance * loss, rel=1e-6)
    unit = Marginals((8, 3), {(0, 1): 1.0, (1,): 1.0})
    assert expected_error(W, A, privacy) < expected_error(W, unit, privacy)


def test_bad_inputs_are_refused():
    with pytest.raises(ArgumentError):
        optimize_marginal_weights(WORKLOADS["mixed"], norm=3)
    with pytest.raises(ArgumentError):
        optimize_marginal_weights(WORKLOADS["mixed"], norm=1, restarts=0)
    with pytest.raises(TooLargeError):
        optimize_marginal_weights(_all_k_way((2,) * 21, 2), norm=1)
