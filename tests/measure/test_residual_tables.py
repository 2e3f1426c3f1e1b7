"""Residual measurement from marginal tables: exact cost, integer Helmert answers, noise."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpmm.linalg import Marginals
from dpmm.linalg.residuals import ResidualStrategy, helmert
from dpmm.measure.exact import MeasurementError
from dpmm.measure.residual_tables import (
    count_marginals,
    helmert_norms,
    integer_helmert,
    measure_residuals,
    residual_answers,
    residual_sigma2,
)
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy.marginal_optimal import marginal_optimal

SHAPE = (2, 3, 4)


def _strategy(shape=SHAPE, sizes=(0, 1, 2)) -> ResidualStrategy:
    d = len(shape)
    W = Marginals(shape, {c: 1.0 for k in sizes for c in itertools.combinations(range(d), k)})
    return marginal_optimal(W, ZCDP(1))


def _members(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _integer_rows(shape, mask) -> np.ndarray:
    """Dense integer H_S over S's table (rows: Helmert indices, columns: table cells)."""
    H = np.ones((1, 1), dtype=np.int64)
    for i in _members(mask):
        H = np.kron(H, integer_helmert(np.eye(shape[i], dtype=np.int64), 0))
    return H


def _records(rng: np.random.Generator, shape, count: int) -> np.ndarray:
    return np.stack([rng.integers(0, n, size=count) for n in shape], axis=1)


def _vector(records: np.ndarray, shape) -> np.ndarray:
    return np.bincount(np.ravel_multi_index(records.T, shape), minlength=math.prod(shape))


def test_integer_helmert_is_the_scaled_helmert_matrix() -> None:
    for n in (2, 3, 7):
        H = integer_helmert(np.eye(n, dtype=np.int64), 0)
        assert np.allclose(H / np.sqrt(helmert_norms(n))[:, None], helmert(n))
        assert (np.diag(helmert_norms(n)) == H @ H.T).all()


def test_cost_of_one_record_is_exact_for_every_cell() -> None:
    A = _strategy()
    sigma2, rho = residual_sigma2(A, ZCDP(1))
    # Per set: Σ_r H[r, j]² / c_r = Π (1 − 1/n_i) for every cell j, in Fractions.
    for mask in sigma2:
        H = _integer_rows(SHAPE, mask)
        norms = [Fraction(int(v)) for v in np.diag(H @ H.T)]
        p = Fraction(math.prod(SHAPE[i] - 1 for i in _members(mask)))
        p /= math.prod(SHAPE[i] for i in _members(mask))
        for column in H.T:
            assert sum(Fraction(int(h) ** 2) / c for h, c in zip(column, norms, strict=True)) == p
    # Whole strategy, every cell of the domain: Σ_S Σ_r H_S[r, j_S]² / (2 σ_S² c_r) = rho.
    for cell in itertools.product(*map(range, SHAPE)):
        cost = Fraction(0)
        for mask, s2 in sigma2.items():
            H = _integer_rows(SHAPE, mask)
            members = _members(mask)
            column = np.ravel_multi_index([cell[i] for i in members], [SHAPE[i] for i in members])
            for h, c in zip(H[:, column], np.diag(H @ H.T), strict=True):
                cost += Fraction(int(h) ** 2) / (2 * s2 * int(c))
        assert cost == rho
    assert rho <= 1 and rho > 1 - Fraction(1, 2**18)


def test_sigma2_rounds_up_the_ideal_variance() -> None:
    A = _strategy()
    sigma2, _ = residual_sigma2(A, ZCDP("1/3"))
    total = sum(
        Fraction(w * w)
        * math.prod(SHAPE[i] - 1 for i in _members(m))
        / math.prod(SHAPE[i] for i in _members(m))
        for m, w in A.weights.items()
    )
    for mask, s2 in sigma2.items():
        ideal = total / (2 * Fraction(1, 3) * Fraction(A.weights[mask] ** 2))
        assert ideal <= s2 <= ideal * (1 + Fraction(1, 2**19))


def test_integer_answers_normalize_to_the_residuals() -> None:
    A = _strategy()
    x = _vector(_records(np.random.default_rng(1), SHAPE, 50), SHAPE)
    answers = residual_answers(A, x)
    unit = ResidualStrategy(SHAPE, {mask: 1.0 for mask in A.weights})
    norms = np.concatenate(
        [np.diag(_integer_rows(SHAPE, m) @ _integer_rows(SHAPE, m).T) for m in A.weights]
    )
    assert np.allclose(answers / np.sqrt(norms), unit @ x.astype(float))


def test_tables_from_records_equal_the_data_vector() -> None:
    rng = np.random.default_rng(2)
    records = _records(rng, SHAPE, 200)
    x = _vector(records, SHAPE)
    sets = [tuple(_members(m)) for m in _strategy().weights]
    counts = count_marginals([records[:70], records[70:]], SHAPE, sets)
    cube = x.reshape(SHAPE)
    for attrs, table in counts.tables.items():
        others = tuple(i for i in range(len(SHAPE)) if i not in attrs)
        assert (table == cube.sum(axis=others)).all()
    A = _strategy()
    from_tables = measure_residuals(A, counts, ZCDP(1), rng=np.random.default_rng(3))
    from_vector = measure_residuals(A, x, ZCDP(1), rng=np.random.default_rng(3))
    assert (from_tables.values == from_vector.values).all()
    assert from_tables.rho == from_vector.rho <= 1


def test_noise_variance_per_row_matches_monte_carlo() -> None:
    # 190 pairs share each of the 4 row variances of a 3×3 residual: 50 draws give 9,500
    # samples per row variance (the sampler's per-call cost makes repeats the slow axis).
    shape = (3,) * 20
    A = _strategy(shape, sizes=(1, 2))
    counts = count_marginals(
        [_records(np.random.default_rng(4), shape, 30)],
        shape,
        [tuple(_members(m)) for m in A.weights],
    )
    exact = residual_answers(A, counts)
    rng = np.random.default_rng(5)
    draws = [measure_residuals(A, counts, ZCDP(1), rng=rng) for _ in range(50)]
    noise = np.stack([m.values - exact for m in draws])
    measurement = draws[0]
    expected = np.concatenate(
        [
            float(measurement.sigma2[m])
            * np.diag(_integer_rows(shape, m) @ _integer_rows(shape, m).T)
            for m in measurement.sets
        ]
    )
    pairs = [t for t, m in enumerate(measurement.sets) if len(_members(m)) == 2]
    rows = measurement.offsets[pairs][:, None] + np.arange(4)
    ratio = (noise[:, rows] ** 2).mean(axis=(0, 1)) / expected[rows[0]]
    assert np.allclose(ratio, 1, atol=0.06)  # 9,500 samples: sd 1.5%
    assert np.isclose((noise**2).mean() / expected.mean(), 1, atol=0.06)
    assert abs(noise.mean()) < 4 * np.sqrt(expected.mean() / noise.size)


def test_large_variances_are_rounded_up_for_the_sampler() -> None:
    A = _strategy((10, 10, 10), sizes=(3,))
    x = np.zeros(1000, dtype=np.int64)
    measurement = measure_residuals(A, x, ZCDP(Fraction(1, 10**6)), rng=np.random.default_rng(6))
    assert measurement.rounded_rows > 0
    assert measurement.rho <= Fraction(1, 10**6)


def test_refusals() -> None:
    A = _strategy()
    with pytest.raises(MeasurementError, match="zCDP"):
        residual_sigma2(A, PureDP(1))
    counts = MarginalCounts(SHAPE, {(): np.array(3)})
    with pytest.raises(MeasurementError, match="not counted"):
        residual_answers(A, counts)
    bad = MarginalCounts(SHAPE, {(): np.array(3), (0,): np.array([1, 1])})
    with pytest.raises(MeasurementError, match="disagree"):
        residual_answers(ResidualStrategy(SHAPE, {0: 1.0, 1: 1.0}), bad)
    with pytest.raises(MeasurementError, match="outside"):
        count_marginals([np.array([[0, 3, 0]])], SHAPE, [(1,)])


def test_count_marginals_with_gaps_and_mixed_sizes() -> None:
    shape = (2, 3, 4, 5)
    records = _records(np.random.default_rng(9), shape, 300)
    counts = count_marginals([records[:1], records[1:]], shape, [(3, 0), (0, 1), (2,), (1, 3)])
    cube = _vector(records, shape).reshape(shape)
    for attrs in [(0, 1), (0, 3), (2,), (1, 3)]:
        others = tuple(i for i in range(len(shape)) if i not in attrs)
        assert (counts.tables[attrs] == cube.sum(axis=others)).all()
    assert set(counts.tables) == {(0, 1), (0, 3), (2,), (1, 3)}
