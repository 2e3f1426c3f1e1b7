"""Consistent tables from per-table Kronecker blocks: unbiased, consistent, exact variances."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import AllRange, Dense, Identity, Kron, Ones, Prefix, VStack, Weighted
from dpmm.linalg.table_krons import TableKrons
from dpmm.reconstruct.table_krons import (
    answer_error,
    answer_variances,
    attribute_grams,
    block_errors,
    coefficients,
    consistent_tables,
    optimal_coefficients,
    pair_errors,
    workload_answers,
)

SHAPE = (3, 2, 4)


def _identity_total(n: int) -> VStack:
    return VStack([Identity(n), Weighted(0.7, Ones(1, n))])


def _strategy() -> TableKrons:
    rng = np.random.default_rng(3)
    return TableKrons(
        SHAPE,
        [
            ((0,), (Prefix(3),), 0.4),
            ((2, 0), (_identity_total(4), Dense(rng.random((5, 3)) + np.eye(5, 3))), 0.3),
            ((1, 2), (Identity(2), Prefix(4)), 0.5),
            ((1,), (AllRange(2),), 0.2),
        ],
    )


def _workload() -> VStack:
    return VStack(
        [
            Kron([Prefix(3), Ones(1, 2), Ones(1, 4)]),
            Weighted(2.0, Kron([Identity(3), Ones(1, 2), AllRange(4)])),
            Kron([Ones(1, 3), Identity(2), Prefix(4)]),
            Kron([Ones(1, 3), Ones(1, 2), Ones(1, 4)]),
        ]
    )


def _split(A: TableKrons, y: np.ndarray) -> list[np.ndarray]:
    return [y[start:stop] for _, start, stop in A._spans()]


def test_noise_free_answers_are_the_true_ones_and_tables_agree() -> None:
    A, W = _strategy(), _workload()
    x = np.random.default_rng(0).integers(0, 20, size=int(np.prod(SHAPE))).astype(float)
    tables = consistent_tables(A, _split(A, A.dense() @ x))
    np.testing.assert_allclose(workload_answers(W, tables), W.dense() @ x, atol=1e-9)
    noise = np.random.default_rng(1).normal(size=A.shape[0])
    noisy = consistent_tables(A, _split(A, A.dense() @ x + noise))
    # Consistency: every two tables agree on the marginal of the attributes they share.
    for a, b in itertools.combinations(noisy, 2):
        common = [i for i in a if i in b]
        left = noisy[a].sum(axis=tuple(p for p, i in enumerate(a) if i not in common))
        right = noisy[b].sum(axis=tuple(p for p, i in enumerate(b) if i not in common))
        np.testing.assert_allclose(left, right, atol=1e-9)


def test_variances_and_error_equal_those_of_the_estimator_written_out() -> None:
    A, W = _strategy(), _workload()
    # The estimator is linear: its matrix, one unit answer vector at a time.
    columns = [
        workload_answers(W, consistent_tables(A, _split(A, unit))) for unit in np.eye(A.shape[0])
    ]
    estimator = np.stack(columns, axis=1)
    covariance = estimator @ estimator.T
    np.testing.assert_allclose(answer_variances(W, A), np.diag(covariance), rtol=1e-9)
    assert answer_error(W, A) == pytest.approx(np.trace(covariance), rel=1e-9)


def test_a_product_no_table_holds_is_refused() -> None:
    A = TableKrons(SHAPE, [((0,), (Identity(3),), 1.0), ((1,), (Identity(2),), 1.0)])
    with pytest.raises(UnsupportedQueryError, match=r"attributes \[0, 1\]"):
        answer_error(Kron([Identity(3), Identity(2), Ones(1, 4)]), A)


@pytest.mark.parametrize("optimal", [False, True])
def test_any_coefficients_give_the_stated_error(optimal: bool) -> None:
    A, W = _strategy(), _workload()
    if optimal:
        A = A.with_coefficients(optimal_coefficients(W, A))
    units = np.eye(A.shape[0])
    estimator = np.stack(
        [workload_answers(W, consistent_tables(A, _split(A, unit))) for unit in units], axis=1
    )
    assert answer_error(W, A) == pytest.approx(np.sum(estimator**2), rel=1e-9)


def test_the_optimal_coefficients_are_least_in_error() -> None:
    A, W = _strategy(), _workload()
    best = A.with_coefficients(optimal_coefficients(W, A))
    assert answer_error(W, best) <= answer_error(W, A)  # A: inverse-variance weights
    rng = np.random.default_rng(2)
    holders: dict[tuple, list[int]] = {}
    for b, block in enumerate(best.coefficients):
        for subset in block:
            holders.setdefault(subset, []).append(b)
    for _ in range(30):  # any feasible step (each shared coordinate's sum kept at 1)
        moved = [dict(block) for block in best.coefficients]
        for subset, blocks in holders.items():
            if len(blocks) > 1:
                step = rng.normal(size=len(blocks)) * 0.05
                for b, delta in zip(blocks, step - step.mean(), strict=True):
                    moved[b][subset] += delta
        assert answer_error(W, best) <= answer_error(W, A.with_coefficients(moved)) * (1 + 1e-12)


def test_measured_coverage_of_the_standard_errors() -> None:
    """Gaussian noise, 2,000 draws: the answers' variances are the stated ones, and ±1.96
    standard errors cover 95 % of them (a simulation, so a seeded generator)."""
    A, W = _strategy(), _workload()
    rng = np.random.default_rng(11)
    x = rng.integers(0, 20, size=int(np.prod(SHAPE))).astype(float)
    truth, clean = W.dense() @ x, A.dense() @ x
    draws = np.stack(
        [
            workload_answers(
                W, consistent_tables(A, _split(A, clean + rng.normal(size=clean.size)))
            )
            - truth
            for _ in range(2000)
        ]
    )
    stated = answer_variances(W, A)
    np.testing.assert_allclose(draws.var(axis=0), stated, rtol=0.15)
    assert np.all(np.abs(draws.mean(axis=0)) <= 4 * np.sqrt(stated / len(draws)))  # unbiased
    coverage = (np.abs(draws) <= 1.959964 * np.sqrt(stated)).mean()
    assert 0.94 <= coverage <= 0.96


@pytest.mark.parametrize("optimal", [False, True])
def test_each_attribute_gram_gives_its_blocks_share_and_its_slope(optimal: bool) -> None:
    """``trace(G_i K_{b,i})`` is block b's share of W's error, and the share moves with
    ``K_{b,i}`` by ``G_i`` alone: another factor there changes it by ``trace(G_i ΔK)``."""
    A, W = _strategy(), _workload()
    if optimal:
        A = A.with_coefficients(optimal_coefficients(W, A))
    shares = block_errors(pair_errors(W, A), A.coefficients or coefficients(A))
    rng = np.random.default_rng(11)
    for b, table in enumerate(A.tables):
        grams = attribute_grams(W, A, b)
        assert set(grams) == set(table.attributes)
        for pos, i in enumerate(table.attributes):
            G = grams[i]
            assert np.allclose(G, G.T)
            assert np.sum(G * table.gram_pinvs[pos]) == pytest.approx(shares[b], rel=1e-10)
            n = SHAPE[i]
            other = Dense(rng.random((n + 2, n)) + np.eye(n + 2, n))
            factors = list(table.factors)
            factors[pos] = other
            entries = [(t.attributes, t.factors, t.weight) for t in A.tables]
            entries[b] = (table.attributes, tuple(factors), table.weight)
            changed = TableKrons(SHAPE, entries, A.coefficients or coefficients(A))
            moved = block_errors(pair_errors(W, changed), coefficients(changed))[b]
            K = np.linalg.inv(other.gram().dense())
            assert moved == pytest.approx(np.sum(G * K), rel=1e-10)
