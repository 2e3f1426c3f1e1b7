"""The five algorithms: noise scale = sensitivity / ε, exact answers, budget, post-processing."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.linalg import Hierarchical
from dpmm.privacy import Ledger, PureDP
from dpmm.strategy import optimize
from dpmm.sums import (
    ALGORITHMS,
    ExactNoise,
    NoiseScaleError,
    TreeChooser,
    Truncation,
    answer_prefix_sums,
    measure_batch,
    prefix_sum_workload,
    verify_noise_scale,
)

WORKLOAD = prefix_sum_workload(width=100, buckets=32, queries=8)
COUNTS = np.random.default_rng(7).integers(0, 30, 32)
CHOOSER = TreeChooser(WORKLOAD, branchings=[2, 4, 8])


def dense_sensitivity(algorithm: str, theta: int | None, strategy) -> int:
    """Max column L1 norm of the matrix each algorithm perturbs, built densely."""
    weights = np.diag(WORKLOAD.truncated_weights(theta)).astype(float)
    W = WORKLOAD.matrix.dense()
    measured = {
        "identity": np.eye(WORKLOAD.size),
        "workload": W @ weights,
        "timm": None if strategy is None else strategy.dense() @ weights,
        "tamm": None if strategy is None else strategy.dense(),
    }[algorithm]
    return round(np.abs(measured).sum(axis=0).max())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("theta", [None, 700])
def test_noise_scale_is_sensitivity_over_epsilon(algorithm: str, theta: int | None) -> None:
    truncation = Truncation("none") if theta is None else Truncation("fixed", threshold=theta)
    result = answer_prefix_sums(
        WORKLOAD, COUNTS, "1/2", algorithm, truncation,
        noise=ExactNoise(np.random.default_rng(0)), chooser=CHOOSER,
    )  # fmt: skip
    verify_noise_scale(result, WORKLOAD)
    if algorithm == "sqm":
        tops = WORKLOAD.bounds[WORKLOAD.ends]
        expected = [min(int(top), theta or int(top)) for top in tops]
        assert list(result.sensitivities) == expected
        assert result.epsilon_measure == Fraction(1, 2) / WORKLOAD.queries
    else:
        assert result.sensitivities == (dense_sensitivity(algorithm, theta, result.strategy),)
        assert result.epsilon_measure == Fraction(1, 2)
    assert all(
        scale == sensitivity / result.epsilon_measure
        for scale, sensitivity in zip(result.scales, result.sensitivities, strict=True)
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_wrong_scale_or_sensitivity_is_rejected(algorithm: str) -> None:
    result = answer_prefix_sums(
        WORKLOAD, COUNTS, 1, algorithm, Truncation("fixed", threshold=700), chooser=CHOOSER
    )
    halved = tuple(scale / 2 for scale in result.scales)
    with pytest.raises(NoiseScaleError, match="scale"):
        verify_noise_scale(dataclasses.replace(result, scales=halved), WORKLOAD)
    smaller = tuple(sensitivity - 1 for sensitivity in result.sensitivities)
    with pytest.raises(NoiseScaleError, match="sensitivities"):
        verify_noise_scale(dataclasses.replace(result, sensitivities=smaller), WORKLOAD)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_negligible_exact_noise_gives_the_truncated_answers(algorithm: str) -> None:
    theta = 900
    result = answer_prefix_sums(
        WORKLOAD, COUNTS, 10**9, algorithm, Truncation("fixed", threshold=theta),
        noise=ExactNoise(np.random.default_rng(2)), chooser=CHOOSER,
    )  # fmt: skip
    truncated = WORKLOAD.answer(COUNTS, WORKLOAD.truncated_weights(theta))
    assert np.allclose(result.values, truncated, atol=1e-6)


def test_exact_path_draws_integer_noise() -> None:
    x = COUNTS
    answers = measure_batch(
        "workload", WORKLOAD, x, 900, Fraction(1), noise=ExactNoise(np.random.default_rng(3))
    )[0]
    noise = answers - WORKLOAD.answer(x, WORKLOAD.truncated_weights(900))
    assert np.array_equal(noise, np.round(noise)) and np.any(noise != 0)


def test_tamm_tree_is_chosen_for_the_truncated_workload() -> None:
    """The chooser's choice equals optimize(W T, "hierarchical") over the same branchings."""
    weights = WORKLOAD.truncated_weights(500)
    errors = CHOOSER.errors(weights)
    for branching, error in errors.items():
        tree = Hierarchical(WORKLOAD.size, branching)
        G = np.linalg.inv(tree.gram().dense())
        WT = WORKLOAD.weighted(weights).dense()
        assert error == pytest.approx(tree.sensitivity(1) ** 2 * np.trace(WT @ G @ WT.T))
    full = TreeChooser(WORKLOAD)
    chosen = full.choose(weights)
    assert (
        chosen.branching
        == optimize(WORKLOAD.weighted(weights), "hierarchical", PureDP(1)).branching
    )


@pytest.mark.parametrize("algorithm", ["sqm", "tamm"])
@pytest.mark.parametrize("method", ["svt", "recursive", "none"])
def test_a_release_spends_exactly_epsilon(tmp_path, algorithm: str, method: str) -> None:
    with Ledger.init(tmp_path / "ledger.sqlite") as ledger:
        ledger.grant("randhie", PureDP(1))
        answer_prefix_sums(
            WORKLOAD, COUNTS, "0.01", algorithm, Truncation(method, rho="0.5", start=150),
            chooser=CHOOSER, ledger=ledger, dataset="randhie", release_id="v1",
        )  # fmt: skip
        balance = ledger.balance("randhie")
        assert balance.spent == Fraction(1, 100)
        assert balance.remaining == Fraction(99, 100)


def test_isotonic_output_is_monotone_and_flagged() -> None:
    result = answer_prefix_sums(
        WORKLOAD, COUNTS, "0.001", "identity", Truncation("fixed", threshold=700), isotonic=True
    )
    assert result.isotonic
    assert np.all(np.diff(result.values) >= -1e-9)


def test_bad_arguments_are_one_sentence_argument_errors() -> None:
    with pytest.raises(ArgumentError, match="Unknown sum algorithm"):
        answer_prefix_sums(WORKLOAD, COUNTS, 1, "hdmm", Truncation("none"))
    with pytest.raises(ArgumentError, match="Unknown truncation key"):
        Truncation.from_config({"method": "svt", "rate": 2})
    with pytest.raises(ArgumentError, match="rho"):
        Truncation("svt", rho="1.5")
    with pytest.raises(ArgumentError, match="fixed truncation"):
        Truncation("fixed")
