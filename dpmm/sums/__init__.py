"""Sum queries on a numeric attribute with truncation (seed 003).

* :mod:`~dpmm.sums.buckets` — vector form, prefix-sum workload ``W·D``, truncation ``T``,
  person-level totals.
* :mod:`~dpmm.sums.thresholds` — private thresholds: ``svt_threshold``,
  ``recursive_threshold`` (exact discrete Laplace, charged to a ledger).
* :mod:`~dpmm.sums.truncation` — :class:`Truncation`, a config's truncation section.
* :mod:`~dpmm.sums.mechanisms` — Identity, Workload, TiMM, TaMM for a given threshold.
* :mod:`~dpmm.sums.algorithms` — :func:`answer_prefix_sums` (SQM and the batch algorithms,
  each with SVT, Recursive or no truncation, optional isotonic regression).
* :mod:`~dpmm.sums.strategies` — the hierarchical strategies of TiMM and TaMM.
* :mod:`~dpmm.sums.error` — the seed's bias² + variance formulas.
* :mod:`~dpmm.sums.noise` — exact (default) or benchmark-only noise; ledger charging.
"""

from dpmm.sums.algorithms import ALGORITHMS, answer_prefix_sums, single_query_mode, with_isotonic
from dpmm.sums.buckets import PrefixSumWorkload, person_totals, prefix_sum_workload, vectorize
from dpmm.sums.error import ErrorBreakdown, expected_error, laplace_variance, truncation_bias
from dpmm.sums.mechanisms import (
    BATCH_ALGORITHMS,
    NoiseScaleError,
    SumAnswers,
    measure_batch,
    verify_noise_scale,
)
from dpmm.sums.noise import ExactNoise, FastInsecureNoise, Noise
from dpmm.sums.strategies import TreeChooser, tree_strategy
from dpmm.sums.thresholds import recursive_grid_statistic, recursive_threshold, svt_threshold
from dpmm.sums.truncation import Truncation

__all__ = [
    "ALGORITHMS",
    "BATCH_ALGORITHMS",
    "ErrorBreakdown",
    "ExactNoise",
    "FastInsecureNoise",
    "Noise",
    "NoiseScaleError",
    "PrefixSumWorkload",
    "SumAnswers",
    "TreeChooser",
    "Truncation",
    "answer_prefix_sums",
    "expected_error",
    "laplace_variance",
    "measure_batch",
    "person_totals",
    "prefix_sum_workload",
    "recursive_grid_statistic",
    "recursive_threshold",
    "single_query_mode",
    "svt_threshold",
    "tree_strategy",
    "truncation_bias",
    "vectorize",
    "verify_noise_scale",
    "with_isotonic",
]
