"""Client randomization, quantization certificate, server estimates and WNNLS."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpmm.local import (
    LdpViolationError,
    aggregate,
    build_workload,
    estimate_workload,
    hadamard,
    optimize_strategy,
    per_user_variance,
    quantize_strategy,
    randomize,
    randomize_users,
    randomized_response,
    reconstruction,
    workload_nnls,
)
from dpmm.local.protocol import exp_lower_bound
from dpmm.privacy.randomness import as_random_source


def test_exp_lower_bound_is_below_and_close() -> None:
    for eps in (0.01, 0.5, 1.0, 4.0, 10.0):
        bound = exp_lower_bound(eps)
        assert bound <= Fraction(math.exp(eps)) * (1 + Fraction(1, 10**15))
        assert float(bound) == pytest.approx(math.exp(eps), rel=1e-14)


def test_quantized_optimized_strategy_is_certified_exactly() -> None:
    eps = 1.0
    result = optimize_strategy(
        np.eye(6), eps, iterations=20, rng=np.random.default_rng(0), baselines=False
    )
    strategy = quantize_strategy(result.Q, eps)
    counts = strategy.counts
    assert (counts.sum(axis=0) == 1 << strategy.bits).all()
    bound = exp_lower_bound(eps)
    for row in counts:
        assert Fraction(int(row.max()), int(row.min())) <= bound
    assert np.abs(strategy.Q - result.Q).max() < 1e-9


def test_protocol_runs_the_strategy_the_optimizer_chose() -> None:
    """At ε = 4 on Histogram the chosen strategy is randomized response: the client samples
    it, certified, and the server's estimate has the variance the comparison promised."""
    eps, n = 4.0, 8
    W = build_workload("Histogram", n)
    result = optimize_strategy(W, eps, rng=np.random.default_rng(11))
    assert result.mechanism == "randomized response"
    strategy = quantize_strategy(result.Q, eps)
    assert np.abs(strategy.Q - randomized_response(n, eps)).max() < 1e-12
    assert per_user_variance(W, strategy.Q).max() == pytest.approx(result.worst_case, rel=1e-9)
    source = as_random_source(np.random.default_rng(12))
    types = np.repeat(np.arange(n), 500)
    counts = aggregate(randomize_users(types, strategy, source), strategy.outputs)
    estimate = estimate_workload(W, strategy, counts)
    # Unbiased, and no cell's variance exceeds the total, at most N · max_u z_u.
    assert np.abs(estimate - 500).max() < 6 * math.sqrt(types.size * result.worst_case)


def test_quantization_refuses_a_non_private_strategy() -> None:
    with pytest.raises(LdpViolationError):
        quantize_strategy(randomized_response(4, 2.0), 1.0)


def test_randomize_single_user_distribution() -> None:
    strategy = quantize_strategy(randomized_response(3, 1.0), 1.0)
    source = as_random_source(np.random.default_rng(1))  # wrap once: one byte stream
    reports = [randomize(2, strategy, source) for _ in range(6000)]
    frequencies = np.bincount(reports, minlength=3) / 6000
    assert np.allclose(frequencies, strategy.Q[:, 2], atol=0.03)
    assert randomize(0, strategy) in (0, 1, 2)  # the OS CSPRNG path
    with pytest.raises(LdpViolationError):
        randomize(3, strategy)


def test_simulated_variance_matches_formula() -> None:
    """Randomize real users many times; the empirical variance of V·y matches z."""
    rng = as_random_source(np.random.default_rng(2))
    W = build_workload("Prefix", 8)
    strategy = quantize_strategy(hadamard(8, 1.0), 1.0)
    x = np.array([5, 0, 3, 0, 0, 9, 1, 2])
    users = np.repeat(np.arange(8), x)
    V = reconstruction(W, strategy.Q)
    trials = 3000
    estimates = np.empty((trials, W.shape[0]))
    for t in range(trials):
        counts = aggregate(randomize_users(users, strategy, rng), strategy.outputs)
        estimates[t] = V @ counts
    assert np.allclose(estimate_workload(W, strategy, counts), estimates[-1])
    predicted = float(x @ per_user_variance(W, strategy.Q))
    empirical = float(((estimates - W @ x) ** 2).sum(axis=1).mean())
    # The total of squared errors has relative standard error well under 5 % at 3000 trials.
    assert empirical == pytest.approx(predicted, rel=0.08)
    assert np.allclose(estimates.mean(axis=0), W @ x, atol=0.6)


def test_wnnls_never_increases_objective_and_is_nonnegative() -> None:
    rng = as_random_source(np.random.default_rng(3))
    W = build_workload("AllRange", 8)
    strategy = quantize_strategy(randomized_response(8, 0.5), 0.5)
    x = np.array([0, 0, 4, 0, 1, 0, 0, 2])
    users = np.repeat(np.arange(8), x)
    for _ in range(5):
        counts = aggregate(randomize_users(users, strategy, rng), strategy.outputs)
        answers = estimate_workload(W, strategy, counts)
        result = workload_nnls(W, answers)
        history = np.array(result.history)
        assert (result.x >= 0).all()
        assert (np.diff(history) <= 1e-9 * max(1.0, history[0])).all()
        assert result.objective <= history[0] + 1e-9
        # Closer to the truth than the unbiased answers (projection onto a convex set).
        assert np.linalg.norm(result.answers - W @ x) <= np.linalg.norm(answers - W @ x) + 1e-9
