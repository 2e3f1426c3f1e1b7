"""Seed 003's bias² + variance formulas against Monte-Carlo runs of the algorithms."""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest

from dpmm.sums import (
    ExactNoise,
    FastInsecureNoise,
    TreeChooser,
    Truncation,
    answer_prefix_sums,
    expected_error,
    laplace_variance,
    prefix_sum_workload,
    truncation_bias,
)

WORKLOAD = prefix_sum_workload(width=50, buckets=16, queries=8)
COUNTS = np.random.default_rng(11).integers(0, 12, 16)
CHOOSER = TreeChooser(WORKLOAD, branchings=[2, 4])
EPSILON = Fraction(1, 2)
RUNS = 1000


def monte_carlo(algorithm: str, truncation: Truncation, noise) -> tuple[float, object]:
    truth = WORKLOAD.true_answers(COUNTS)
    total, strategy = 0.0, None
    for _ in range(RUNS):
        result = answer_prefix_sums(
            WORKLOAD, COUNTS, EPSILON, algorithm, truncation, noise=noise, chooser=CHOOSER
        )
        total += float(np.sum((result.values - truth) ** 2))
        strategy = result.strategy
    return total / RUNS, strategy


SLOW = pytest.mark.slow  # ~5 s each: 1000 least-squares reconstructions


@pytest.mark.parametrize(
    "algorithm",
    [
        "sqm",
        "identity",
        "workload",
        pytest.param("timm", marks=SLOW),
        pytest.param("tamm", marks=SLOW),
    ],
)
@pytest.mark.parametrize("theta", [None, 300])
def test_formula_matches_monte_carlo(algorithm: str, theta: int | None) -> None:
    truncation = Truncation("none") if theta is None else Truncation("fixed", threshold=theta)
    noise = FastInsecureNoise(np.random.default_rng(zlib.crc32(f"{algorithm}{theta}".encode())))
    observed, strategy = monte_carlo(algorithm, truncation, noise)
    budget = EPSILON / WORKLOAD.queries if algorithm == "sqm" else EPSILON
    predicted = expected_error(algorithm, WORKLOAD, COUNTS, theta, budget, strategy=strategy)
    # Seeded, so deterministic; the estimate's relative s.d. is ~4 % at 1000 runs, and a
    # wrong formula (a factor 2 in a variance, a missing bias) is far outside 12 %.
    assert observed == pytest.approx(predicted.total, rel=0.12)


def test_discrete_variance_matches_the_exact_sampler() -> None:
    """Identity's exact noise ``W T b`` (b discrete Laplace, scale 1/ε) in one batch of draws."""
    draws = ExactNoise(np.random.default_rng(5)).laplace(1 / EPSILON, (20_000, WORKLOAD.size))
    observed = float(np.mean(np.sum(WORKLOAD.answer(draws, WORKLOAD.bounds) ** 2, axis=1)))
    predicted = expected_error("identity", WORKLOAD, COUNTS, None, EPSILON, discrete=True)
    continuous = expected_error("identity", WORKLOAD, COUNTS, None, EPSILON)
    assert observed == pytest.approx(predicted.variance, rel=0.04)
    assert predicted.variance < continuous.variance * 0.99  # scale 2: 7.84 vs 8 per draw
    assert laplace_variance(Fraction(2), discrete=True) < laplace_variance(Fraction(2))


def test_bias_is_what_truncation_removes() -> None:
    bias = truncation_bias(WORKLOAD, COUNTS, 300)
    over = np.maximum(WORKLOAD.bounds - 300, 0) * COUNTS
    assert np.array_equal(bias, np.cumsum(over)[WORKLOAD.ends])
    assert not truncation_bias(WORKLOAD, COUNTS, None).any()
    per_query = truncation_bias(WORKLOAD, COUNTS, [300] * WORKLOAD.queries)
    assert np.array_equal(per_query, bias)


@pytest.mark.parametrize("algorithm", ["timm", "tamm"])
@pytest.mark.parametrize("theta", [None, 300])
def test_matrix_mechanism_variance_matches_dense_pseudo_inverse(algorithm: str, theta) -> None:
    """Fast check of the trace formulas: Var = v(scale) · ‖W T_ans A⁺‖_F², A⁺ dense."""
    truncation = Truncation("none") if theta is None else Truncation("fixed", threshold=theta)
    result = answer_prefix_sums(WORKLOAD, COUNTS, EPSILON, algorithm, truncation, chooser=CHOOSER)
    weights = WORKLOAD.truncated_weights(theta).astype(float)
    answered = WORKLOAD.matrix.dense() * (weights if algorithm == "tamm" else 1.0)
    spread = answered @ np.linalg.pinv(result.strategy.dense())
    dense = laplace_variance(result.scales[0]) * float(np.sum(spread**2))
    predicted = expected_error(
        algorithm, WORKLOAD, COUNTS, theta, EPSILON, strategy=result.strategy
    )
    assert predicted.variance == pytest.approx(dense, rel=1e-9)
