"""Standard errors of least-squares workload answers against Monte Carlo and dense formulas."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.linalg import AllRange, Hierarchical, Identity, Kron, Marginals, Prefix, VStack
from dpmm.reconstruct import least_squares, nnls, workload_answers

DRAWS = 2000


def _monte_carlo(W, A, std, rng, total=None, draws=DRAWS):
    truth = rng.poisson(5, A.shape[1]).astype(float)
    clean = A @ truth
    answers = []
    for _ in range(draws):
        y = clean + rng.normal(0, 1, A.shape[0]) * std
        estimate = least_squares(A, y, noise_std=std, total=None if total is None else truth.sum())
        answers.append(W @ estimate.x)
    estimate = least_squares(A, clean, noise_std=std, total=None if total is None else truth.sum())
    return np.std(answers, axis=0, ddof=1), workload_answers(W, A, estimate)


@pytest.mark.parametrize(
    ("W", "A", "std"),
    [
        (Prefix(12), Hierarchical(12, 3), 2.0),
        (Kron([Prefix(4), Identity(3)]), Kron([Hierarchical(4, 2), Identity(3)]), 0.5),
        (Marginals((3, 4), {(0,): 1.0, (1,): 1.0}), Marginals((3, 4), {(0, 1): 1.0}), 1.5),
        (AllRange(8), VStack([Identity(8), Hierarchical(8, 2)]), None),
    ],
)
def test_least_squares_standard_errors_match_monte_carlo(W, A, std) -> None:
    rng = np.random.default_rng(30)
    draws = DRAWS
    if std is None:  # per-block noise, no closed form (LSMR per draw: fewer draws)
        std = np.concatenate([np.full(8, 3.0), np.full(A.shape[0] - 8, 0.7)])
        draws = 1000
    simulated, answers = _monte_carlo(W, A, std, rng, draws=draws)
    assert answers.exact_errors and answers.method == "least_squares"
    # 2000 draws: the sample std is within ~3.2% (1σ); 15% catches a √2 or factor-2 error.
    np.testing.assert_allclose(simulated, answers.standard_errors, rtol=0.15)
    assert np.mean(simulated / answers.standard_errors) == pytest.approx(1.0, abs=0.04)


def test_standard_errors_with_known_total_match_monte_carlo() -> None:
    rng = np.random.default_rng(31)
    W, A = Prefix(10), Hierarchical(10, 2)
    simulated, answers = _monte_carlo(W, A, 1.0, rng, total=True)
    # The last prefix is the total itself: no error at all.
    assert answers.standard_errors[-1] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(simulated[:-1], answers.standard_errors[:-1], rtol=0.15)


def test_nnls_answers_report_least_squares_errors_and_say_so() -> None:
    rng = np.random.default_rng(32)
    A, W = Hierarchical(16, 2), Prefix(16)
    y = rng.normal(size=A.shape[0])
    nn = nnls(A, y, noise_std=2.0)
    ls = least_squares(A, y, noise_std=2.0)
    nn_answers, ls_answers = workload_answers(W, A, nn), workload_answers(W, A, ls)
    assert not nn_answers.exact_errors and nn_answers.method == "nnls"
    np.testing.assert_allclose(nn_answers.standard_errors, ls_answers.standard_errors)
    np.testing.assert_allclose(nn_answers.values, W @ nn.x)


def test_an_invertible_gram_gives_its_inverse_as_the_covariance():
    """A quantized p-Identity (its diagonal over its Θ rows) takes the Gram's own Woodbury
    inverse, shared with the expected error's, instead of a dense pseudo-inverse."""
    from dpmm.linalg.pidentity import PIdentity
    from dpmm.measure.quantize import measurable
    from dpmm.reconstruct.answers import covariance_factor

    rng = np.random.default_rng(4)
    theta = rng.uniform(size=(4, 40)) * (rng.uniform(size=(4, 40)) < 0.3)
    A = measurable(PIdentity(theta, 1)).matrix
    assert A.known_full_column_rank
    dense = A.dense()
    expected = np.linalg.pinv(dense.T @ dense, rcond=1e-10, hermitian=True)
    factor = covariance_factor(A, None)
    np.testing.assert_allclose(factor.dense(), expected, rtol=1e-9, atol=1e-12)
    assert factor.base is A.gram().pinv().base  # one Woodbury factor for both
