"""Seed 003's batch algorithms for a fixed truncation: Identity, Workload, TiMM, TaMM.

Each takes the vector form ``x``, the truncated weights ``t`` (``T = diag(t)``; ``t = u``
is NoTrunc) and the measurement budget ``ε₂``, adds Laplace noise of scale
``sensitivity / ε₂`` and returns :class:`SumAnswers` recording both numbers:

* Identity (Algorithm 5): ``W T (x + b/ε₂)``; sensitivity 1.
* Workload (Algorithm 6): ``W T x + ‖W T‖₁ b/ε₂``.
* TiMM (Algorithm 7): ``A`` chosen for ``W``, measure ``A T x`` with ``Δ(A T)``, least
  squares for ``T x``, answer ``W (T x)^``.
* TaMM (Algorithm 8): ``A`` chosen for ``W T``, measure ``A x`` with ``Δ(A)``, least
  squares for ``x``, answer ``W T x̂``.

All measured queries are integer-valued (``t`` and ``A`` are integer), so the default
:class:`~dpmm.sums.noise.ExactNoise` is exact discrete Laplace. :func:`verify_noise_scale`
recomputes a result's sensitivity from its algorithm's definition and rejects any result
whose recorded sensitivity or scale differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg import Matrix
from dpmm.privacy import Ledger, PureDP
from dpmm.reconstruct import least_squares
from dpmm.sums.buckets import PrefixSumWorkload
from dpmm.sums.noise import ExactNoise, Noise, charge
from dpmm.sums.strategies import TreeChooser, tree_strategy

__all__ = [
    "BATCH_ALGORITHMS",
    "NoiseScaleError",
    "SumAnswers",
    "measure_batch",
    "verify_noise_scale",
]

BATCH_ALGORITHMS = ("identity", "workload", "timm", "tamm")


class NoiseScaleError(DpmmError):
    """A result's noise scale is not its algorithm's sensitivity divided by its ε."""


@dataclass(frozen=True, eq=False)
class SumAnswers:
    """Noisy prefix sums and the facts of the noise that produced them.

    Attributes:
        algorithm: ``identity``, ``workload``, ``timm``, ``tamm`` or ``sqm``.
        truncation: The truncation method (``none``, ``svt``, ``recursive``, ``fixed``).
        values: One noisy answer per query.
        thresholds: The threshold each query used (one shared value for batch algorithms);
            ``None`` means no truncation.
        sensitivities: The L1 sensitivity of each noisy measurement group (one for a batch
            algorithm, one per query for SQM).
        scales: The Laplace scale of each group.
        epsilon_threshold: The budget spent choosing the threshold(s), in total.
        epsilon_measure: The budget of each group's noise (``scale = sensitivity / ε``).
        strategy: The measured strategy (TiMM, TaMM), else ``None``.
        isotonic: Whether isotonic regression post-processed ``values``.
    """

    algorithm: str
    truncation: str
    values: np.ndarray
    thresholds: tuple[int | None, ...]
    sensitivities: tuple[Fraction, ...]
    scales: tuple[Fraction, ...]
    epsilon_threshold: Fraction
    epsilon_measure: Fraction
    strategy: Matrix | None = None
    isotonic: bool = False


def measure_batch(
    algorithm: str,
    workload: PrefixSumWorkload,
    counts: np.ndarray,
    theta: int | None,
    epsilon: Fraction,
    *,
    noise: Noise | None = None,
    chooser: TreeChooser | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
    release_id: str | None = None,
) -> tuple[np.ndarray, Fraction, Fraction, Matrix | None]:
    """Run one batch algorithm with threshold ``theta``: ``(answers, sensitivity, scale, A)``.

    Args:
        algorithm: One of :data:`BATCH_ALGORITHMS`.
        workload: The prefix-sum workload (bucket weights and query ends).
        counts: People per bucket.
        theta: The (already released or public) threshold; ``None`` for NoTrunc.
        epsilon: ``ε₂``, the measurement's budget.
        noise: Exact discrete Laplace by default.
        chooser: Precomputed tree choices for TiMM/TaMM; else ``optimize`` is called.
        ledger, dataset, release_id: Where to charge ``ε₂`` (optional).
    """
    if algorithm not in BATCH_ALGORITHMS:
        raise DpmmError(f"Unknown batch algorithm {algorithm!r} (one of {BATCH_ALGORITHMS}).")
    noise = noise or ExactNoise()
    weights = workload.truncated_weights(theta)
    strategy = _strategy(algorithm, workload, weights, epsilon, chooser)
    sensitivity = Fraction(batch_sensitivity(algorithm, workload, weights, strategy))
    scale = sensitivity / epsilon
    with charge(ledger, dataset, release_id, epsilon) as step:
        x = np.asarray(counts, dtype=np.int64)
        if algorithm == "identity":
            step.drawing()
            answers = workload.answer(x + noise.laplace(scale, x.size), weights)
        elif algorithm == "workload":
            exact = workload.answer(x, weights)
            step.drawing()
            answers = exact + noise.laplace(scale, exact.size)
        else:
            measured = weights * x if algorithm == "timm" else x
            exact = strategy @ measured.astype(np.float64)
            step.drawing()
            noisy = exact + noise.laplace(scale, exact.size)
            estimate = least_squares(strategy, noisy).x
            # TiMM estimated T x (answer W of it); TaMM estimated x (answer W T of it).
            answers = workload.answer(estimate, weights if algorithm == "tamm" else 1)
    return np.asarray(answers, dtype=np.float64), sensitivity, scale, strategy


def batch_sensitivity(
    algorithm: str, workload: PrefixSumWorkload, weights: np.ndarray, strategy: Matrix | None
) -> int:
    """The L1 sensitivity of what ``algorithm`` measures, from its definition."""
    if algorithm == "identity":
        return 1
    if algorithm == "workload":
        return workload.sensitivity(weights)
    if strategy is None:
        raise DpmmError(f"{algorithm} needs a strategy to have a sensitivity.")
    norms = strategy.column_norms(1)
    # Column j of A T is t_j times column j of A.
    return round(float(np.max(norms * weights))) if algorithm == "timm" else int(norms.max())


def verify_noise_scale(answers: SumAnswers, workload: PrefixSumWorkload) -> None:
    """Recompute each group's sensitivity and check ``scale == sensitivity / ε`` exactly.

    Raises:
        NoiseScaleError: a recorded sensitivity or scale differs from the recomputed one.
    """
    expected = expected_sensitivities(answers, workload)
    if tuple(expected) != answers.sensitivities:
        raise NoiseScaleError(
            f"{answers.algorithm} recorded sensitivities that differ from its definition's."
        )
    for sensitivity, scale in zip(expected, answers.scales, strict=True):
        if scale != sensitivity / answers.epsilon_measure:
            raise NoiseScaleError(
                f"{answers.algorithm} used Laplace scale {scale}, not sensitivity {sensitivity} "
                f"/ ε {answers.epsilon_measure}."
            )


def expected_sensitivities(answers: SumAnswers, workload: PrefixSumWorkload) -> list[Fraction]:
    """The sensitivity of each noisy group, recomputed from the algorithm's definition."""
    if answers.algorithm == "sqm":
        return sqm_sensitivities(workload, answers.thresholds)
    weights = workload.truncated_weights(answers.thresholds[0])
    return [Fraction(batch_sensitivity(answers.algorithm, workload, weights, answers.strategy))]


def sqm_sensitivities(
    workload: PrefixSumWorkload, thresholds: Sequence[int | None]
) -> list[Fraction]:
    """SQM's sensitivity of each query: its last bucket's weight ``u_q``, capped at ``θ_q``."""
    tops = workload.bounds[workload.ends]
    return [
        Fraction(int(top) if theta is None else min(int(top), theta))
        for top, theta in zip(tops, thresholds, strict=True)
    ]


def _strategy(
    algorithm: str,
    workload: PrefixSumWorkload,
    weights: np.ndarray,
    epsilon: Fraction,
    chooser: TreeChooser | None,
) -> Matrix | None:
    """TiMM's tree for ``W``, TaMM's for ``W T`` (public: depends on θ, not on the data)."""
    if algorithm not in ("timm", "tamm"):
        return None
    target = np.ones(workload.size) if algorithm == "timm" else weights
    if chooser is not None:
        return chooser.choose(target)
    return tree_strategy(workload, target, PureDP(epsilon))
