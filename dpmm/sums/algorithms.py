"""Answer a prefix-sum workload with one of seed 003's five algorithms and a truncation.

:func:`answer_prefix_sums` is the entry point: it spends ``ρ ε`` on the threshold (unless
the truncation is ``none`` or ``fixed``), ``(1 − ρ) ε`` on the measurement, and optionally
post-processes with isotonic regression (prefix sums never decrease).

* ``sqm`` (Single Query Mode, Algorithms 1–3): every query gets ``ε/p``; its own threshold
  with ``ρ ε/p`` and the Laplace mechanism with scale ``min(θ_q, u_q)/((1 − ρ) ε/p)``, where
  ``u_q`` is the weight of the last bucket the query reads.
* ``identity``, ``workload``, ``timm``, ``tamm`` (Algorithms 5–9): one threshold shared by
  the whole batch (:mod:`dpmm.sums.mechanisms`).

Example:
    >>> from dpmm.sums.buckets import prefix_sum_workload
    >>> workload = prefix_sum_workload(width=10, buckets=8, queries=4)
    >>> x = np.array([5, 9, 4, 2, 0, 1, 0, 0])
    >>> result = answer_prefix_sums(workload, x, "1", "identity", Truncation("fixed", threshold=40))
    >>> result.thresholds, result.sensitivities, result.scales
    ((40,), (Fraction(1, 1),), (Fraction(1, 1),))
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.privacy import Ledger, exact_fraction
from dpmm.reconstruct import isotonic as isotonic_regression
from dpmm.sums.buckets import PrefixSumWorkload
from dpmm.sums.mechanisms import BATCH_ALGORITHMS, SumAnswers, measure_batch, sqm_sensitivities
from dpmm.sums.noise import ExactNoise, Noise, charge
from dpmm.sums.strategies import TreeChooser
from dpmm.sums.truncation import Truncation

__all__ = ["ALGORITHMS", "answer_prefix_sums", "single_query_mode"]

ALGORITHMS = ("sqm", *BATCH_ALGORITHMS)


def answer_prefix_sums(
    workload: PrefixSumWorkload,
    counts: np.ndarray,
    epsilon: object,
    algorithm: str,
    truncation: Truncation,
    *,
    isotonic: bool = False,
    noise: Noise | None = None,
    chooser: TreeChooser | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
    release_id: str | None = None,
) -> SumAnswers:
    """Noisy answers to ``W D x`` under ``PureDP(epsilon)`` in total.

    Args:
        workload: Bucket weights and prefix-query ends.
        counts: People per bucket (one person, one record: see
            :func:`~dpmm.sums.buckets.person_totals`).
        epsilon: The whole budget (threshold plus measurement), an exact rational.
        algorithm: One of :data:`ALGORITHMS`.
        truncation: How to truncate (``Truncation("none")`` is NoTrunc).
        isotonic: Post-process with isotonic regression.
        noise: Exact discrete Laplace by default.
        chooser: Precomputed tree choices for TiMM/TaMM on this workload.
        ledger, dataset, release_id: Where to charge both shares (optional).

    Raises:
        ArgumentError: an unknown algorithm.
    """
    if algorithm not in ALGORITHMS:
        raise ArgumentError(f"Unknown sum algorithm {algorithm!r} (one of {ALGORITHMS}).")
    total = exact_fraction(epsilon, "epsilon")
    noise = noise or ExactNoise()
    charging = {"ledger": ledger, "dataset": dataset, "release_id": release_id}
    if algorithm == "sqm":
        result = single_query_mode(workload, counts, total, truncation, noise=noise, **charging)
    else:
        first, second = truncation.split(total)
        theta = truncation.select(counts, workload.bounds, first, noise=noise, **charging)
        values, sensitivity, scale, strategy = measure_batch(
            algorithm, workload, counts, theta, second, noise=noise, chooser=chooser, **charging
        )
        result = SumAnswers(
            algorithm, truncation.method, values, (theta,), (sensitivity,), (scale,),
            first, second, strategy,
        )  # fmt: skip
    return with_isotonic(result) if isotonic else result


def with_isotonic(result: SumAnswers) -> SumAnswers:
    """The same release with its answers projected onto non-decreasing sequences."""
    fitted = isotonic_regression(np.asarray(result.values, dtype=np.float64))
    return dataclasses.replace(result, values=np.asarray(fitted), isotonic=True)


def single_query_mode(
    workload: PrefixSumWorkload,
    counts: np.ndarray,
    epsilon: Fraction,
    truncation: Truncation,
    *,
    noise: Noise | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
    release_id: str | None = None,
) -> SumAnswers:
    """SQM: each query answered alone with ``ε/p``, with its own threshold (Algorithms 1–3)."""
    noise = noise or ExactNoise()
    charging = {"ledger": ledger, "dataset": dataset, "release_id": release_id}
    per_query = epsilon / workload.queries
    first, second = truncation.split(per_query)
    thresholds = truncation.select(
        counts, workload.bounds, first, runs=workload.queries, noise=noise, **charging
    )
    sensitivities = sqm_sensitivities(workload, thresholds)
    scales = [sensitivity / second for sensitivity in sensitivities]
    x = np.asarray(counts, dtype=np.int64)
    with charge(ledger, dataset, release_id, second * workload.queries) as step:
        by_threshold = {
            theta: workload.answer(x, workload.truncated_weights(theta))
            for theta in set(thresholds)
        }
        exact = np.array(
            [by_threshold[theta][query] for query, theta in enumerate(thresholds)],
            dtype=np.float64,
        )
        step.drawing()
        values = exact + _noise_per_query(noise, scales)
    return SumAnswers(
        "sqm", truncation.method, values, tuple(thresholds), tuple(sensitivities),
        tuple(scales), first * workload.queries, second,
    )  # fmt: skip


def _noise_per_query(noise: Noise, scales: list[Fraction]) -> np.ndarray:
    """One Laplace draw per query, batched by distinct scale (SQM has a few)."""
    values = np.zeros(len(scales), dtype=np.float64)
    order: dict[Fraction, list[int]] = {}
    for query, scale in enumerate(scales):
        order.setdefault(scale, []).append(query)
    for scale, queries in order.items():
        values[queries] = noise.laplace(scale, len(queries))
    return values
