"""Vector form, prefix-sum workload and truncation, against dense and brute-force versions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmm.errors import ArgumentError
from dpmm.sums import PrefixSumWorkload, person_totals, prefix_sum_workload, vectorize


def dense_workload(workload: PrefixSumWorkload) -> np.ndarray:
    W = np.zeros((workload.queries, workload.size))
    for q, end in enumerate(workload.ends):
        W[q, : end + 1] = 1
    return W


@pytest.mark.parametrize(("buckets", "queries"), [(12, 12), (12, 4), (12, 1)])
def test_workload_operations_match_dense(buckets: int, queries: int) -> None:
    rng = np.random.default_rng(buckets * queries)
    workload = prefix_sum_workload(width=7, buckets=buckets, queries=queries)
    W = dense_workload(workload)
    x = rng.integers(0, 20, buckets)
    weights = workload.truncated_weights(30)
    assert np.array_equal(workload.matrix.dense(), W)
    assert np.array_equal(workload.true_answers(x), W @ (7 * np.arange(1, buckets + 1) * x))
    assert np.allclose(workload.answer(x, weights), W @ (weights * x))
    assert np.allclose(workload.weighted(weights).dense(), W * weights)
    assert workload.sensitivity(weights) == np.abs(W * weights).sum(axis=0).max()
    assert np.array_equal(workload.queries_per_bucket(), W.sum(axis=0))


def test_truncated_weights_cap_at_theta() -> None:
    workload = prefix_sum_workload(width=10, buckets=5, queries=5)
    assert workload.truncated_weights(25).tolist() == [10, 20, 25, 25, 25]
    assert workload.truncated_weights(None).tolist() == [10, 20, 30, 40, 50]
    with pytest.raises(ArgumentError):
        workload.truncated_weights(0)


def test_seed_workloads_have_the_seed_shapes() -> None:
    q2 = prefix_sum_workload(width=800, buckets=1000, queries=100)
    assert q2.bounds[q2.ends][:3].tolist() == [8000, 16000, 24000]
    assert q2.bounds[-1] == 800_000
    with pytest.raises(ArgumentError):
        prefix_sum_workload(width=800, buckets=1000, queries=300)


def test_vectorize_uses_half_open_buckets() -> None:
    bounds = np.array([10, 20, 30])
    x = vectorize(np.array([0.0, 10.0, 10.5, 20.0, 29.9, 30.0]), bounds)
    assert x.tolist() == [2, 2, 2]
    with pytest.raises(ArgumentError, match="above the last bucket"):
        vectorize(np.array([30.5]), bounds)
    with pytest.raises(ArgumentError):
        vectorize(np.array([-1.0]), bounds)


def test_person_totals_match_pandas_groupby() -> None:
    rng = np.random.default_rng(3)
    persons = rng.integers(0, 50, 400)
    values = rng.uniform(0, 1000, 400)
    expected = pd.Series(values).groupby(persons).sum().to_numpy()
    assert np.allclose(person_totals(values, persons), expected)
    with pytest.raises(ArgumentError):
        person_totals(values[:3], persons)


def test_one_person_moves_one_count_and_each_truncated_sum_by_at_most_theta() -> None:
    rng = np.random.default_rng(5)
    workload = prefix_sum_workload(width=1000, buckets=40, queries=8)
    persons = rng.integers(0, 30, 120)
    values = rng.uniform(0, 1000, 120)
    theta = 1500
    before = vectorize(person_totals(values, persons), workload.bounds)
    # Remove every row of one person: they leave exactly one bucket.
    keep = persons != persons[0]
    after = vectorize(person_totals(values[keep], persons[keep]), workload.bounds)
    assert np.abs(before - after).sum() == 1
    weights = workload.truncated_weights(theta)
    change = workload.answer(before, weights) - workload.answer(after, weights)
    assert np.all(np.abs(change) <= theta)
