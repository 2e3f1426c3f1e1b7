"""Measuring a marginal strategy from marginal tables, on domains too large for the vector."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpmm.linalg import Marginal, Marginals
from dpmm.measure import (
    MarginalCounts,
    MeasurementError,
    analyze_strategy,
    marginal_answers,
    measure,
    strategy_tables,
)
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP

SHAPE = (3, 2, 4)


def tables_of(x: np.ndarray, shape: tuple[int, ...], sets: list[tuple[int, ...]]) -> dict:
    return {
        attrs: np.rint(Marginal(shape, attrs) @ x)
        .astype(np.int64)
        .reshape([shape[i] for i in attrs])
        for attrs in sets
    }


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    with Ledger.init(tmp_path / "budget.db") as ledger:
        ledger.grant("people", PureDP(2))
        ledger.grant("census", ZCDP(1))
        yield ledger


def test_answers_from_tables_equal_the_dense_product() -> None:
    rng = np.random.default_rng(0)
    A = Marginals(SHAPE, {(0, 2): 3, (): 1, (1,): 2, (0, 1, 2): 1})
    x = rng.integers(0, 20, size=math.prod(SHAPE))
    counts = MarginalCounts(SHAPE, tables_of(x, SHAPE, strategy_tables(A)))
    exact = analyze_strategy(A)
    assert np.array_equal(marginal_answers(exact, counts), np.rint(A.dense() @ x))
    assert exact.sensitivity_l1 == 7 and exact.sensitivity_l2_squared == 15


def test_a_huge_domain_is_measured_from_its_tables(tmp_path: Path, ledger: Ledger) -> None:
    shape = (10**5, 10**5, 10**5, 2)  # 2·10¹⁵ cells
    A = Marginals(shape, {(0,): 1, (1, 3): 1, (3,): 2})
    rng = np.random.default_rng(1)
    sex = np.array([7, 5])
    first = rng.multinomial(12, np.full(10**5, 1e-5))
    pair = np.zeros((10**5, 2), np.int64)
    pair[3] = sex
    counts = MarginalCounts(shape, {(0,): first, (1, 3): pair, (3,): sex})
    reservation = ledger.reserve("census", ZCDP("1/2"), release_id="big")
    record = measure(
        A,
        counts,
        ZCDP("1/2"),
        store=tmp_path,
        measurement_id="tables",
        ledger=ledger,
        reservation=reservation,
        rng=np.random.default_rng(2),
    )
    assert record.sensitivity == 1 + 1 + 4  # squared L2: 1² + 1² + 2²
    assert record.values.shape == (10**5 + 2 * 10**5 + 2,)
    assert ledger.status(reservation) == "spent"
    assert len(analyze_strategy(A).fingerprint()) == 64


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: {k: v for k, v in t.items() if k != (1,)}, "was not counted"),
        (lambda t: {**t, (1,): t[(1,)][:1]}, "must be integers of shape"),
        (lambda t: {**t, (1,): t[(1,)] + 1}, "disagree on the number of records"),
        (lambda t: {**t, (1,): t[(1,)] * -1}, "is negative"),
        (lambda t: {**t, (1,): t[(1,)].astype(float)}, "must be integers"),
    ],
)
def test_bad_tables_are_refused_and_nothing_is_spent(
    tmp_path: Path, ledger: Ledger, change, message: str
) -> None:
    A = Marginals(SHAPE, {(1,): 1, (0, 2): 1})
    x = np.arange(math.prod(SHAPE))
    counts = MarginalCounts(SHAPE, change(tables_of(x, SHAPE, strategy_tables(A))))
    reservation = ledger.reserve("people", PureDP(1), release_id="bad")
    with pytest.raises(MeasurementError, match=message):
        measure(
            A,
            counts,
            PureDP(1),
            store=tmp_path,
            measurement_id="m",
            ledger=ledger,
            reservation=reservation,
            rng=np.random.default_rng(3),
        )
    assert ledger.status(reservation) == "reserved"
    assert not (tmp_path / "m.measurement").exists()


def test_tables_need_a_marginal_strategy(tmp_path: Path, ledger: Ledger) -> None:
    from dpmm.linalg import Identity

    reservation = ledger.reserve("people", PureDP(1), release_id="id")
    with pytest.raises(MeasurementError, match="need a Marginals strategy"):
        measure(
            Identity(24),
            MarginalCounts(SHAPE, {}),
            PureDP(1),
            store=tmp_path,
            measurement_id="m",
            ledger=ledger,
            reservation=reservation,
        )
    assert ledger.status(reservation) == "reserved"
