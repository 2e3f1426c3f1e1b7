"""Private multiplicative weights: exact budget split, ledger spend, accuracy, bad inputs."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpmm.baselines import pmw, pmw_budget
from dpmm.errors import ArgumentError, PrivacyParameterError, UnsupportedQueryError
from dpmm.linalg import Dense, Marginals
from dpmm.privacy import ZCDP, Ledger, PureDP, compose, pure_to_zcdp
from dpmm.privacy.ledger import BudgetExceeded
from dpmm.privacy.randomness import as_random_source


def _two_way(d: int) -> Marginals:
    return Marginals((2,) * d, {pair: 1.0 for pair in itertools.combinations(range(d), 2)})


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    with Ledger.init(tmp_path / "budget.db") as opened:
        yield opened


@pytest.mark.parametrize(
    ("privacy", "rounds", "count_share"),
    [
        (ZCDP("1/2"), 7, None),
        (ZCDP("0.013"), 3, Fraction(1, 10)),
        (PureDP(1), 9, None),
        (PureDP("0.3"), 4, "1/5"),
    ],
)
def test_split_composes_exactly(privacy: object, rounds: int, count_share: object) -> None:
    split = pmw_budget(privacy, rounds, select_share="1/3", count_share=count_share)
    assert compose(split.parts()) == privacy
    assert len(split.parts()) == 2 * rounds + (count_share is not None)
    if isinstance(privacy, ZCDP):
        # The selection's ε converts to exactly the recorded ρ, within its share.
        assert pure_to_zcdp(PureDP(split.select_epsilon)) == split.select
        per_round = (privacy.rho - (split.count.rho if split.count else 0)) / rounds
        assert split.select.rho <= per_round / 3
        assert split.select.rho > per_round / 3 * (1 - Fraction(1, 2**30))
    else:
        assert split.select.epsilon == split.select_epsilon


@pytest.mark.parametrize(("privacy", "total"), [(ZCDP(1), 200), (PureDP(2), None)])
def test_spend_is_exactly_the_configured_budget(
    ledger: Ledger, privacy: ZCDP | PureDP, total: int | None
) -> None:
    granted = ZCDP(3) if isinstance(privacy, ZCDP) else PureDP(5)
    ledger.grant("adult", granted)
    rng = np.random.default_rng(1)
    W = _two_way(4)
    x = np.bincount(rng.integers(0, 16, 200), minlength=16)
    before = ledger.balance("adult")
    result = pmw(
        W, x, privacy, rounds=5, ledger=ledger, dataset="adult", release_id="pmw-1",
        total=total, rng=as_random_source(rng),
    )  # fmt: skip
    after = ledger.balance("adult")
    amount = privacy.rho if isinstance(privacy, ZCDP) else privacy.epsilon
    assert after.spent - before.spent == amount
    assert after.reserved == before.reserved == 0
    assert after.remaining == before.remaining - amount
    assert ledger.status(result.reservation_id) == "spent"
    assert result.x.min() >= 0
    assert result.x.sum() == pytest.approx(result.total)
    assert len(result.selected) == len(result.measurements) == 5


def test_pmw_learns_a_skewed_dataset(ledger: Ledger) -> None:
    ledger.grant("synthetic", ZCDP(100))
    rng = np.random.default_rng(2)
    W = _two_way(5)
    cells = rng.choice(32, size=4, replace=False)
    x = np.zeros(32, dtype=np.int64)
    x[cells] = [400, 300, 200, 100]
    result = pmw(
        W, x, ZCDP(50), rounds=25, ledger=ledger, dataset="synthetic", release_id="pmw",
        total=1000, rng=as_random_source(rng),
    )  # fmt: skip
    uniform_error = np.abs(W @ np.full(32, 1000 / 32) - W @ x).max()
    assert np.abs(result.answers - W @ x).max() < 0.35 * uniform_error


def test_failure_before_noise_cancels_the_reservation(ledger: Ledger) -> None:
    ledger.grant("adult", ZCDP(1))
    with pytest.raises(UnsupportedQueryError, match="histogram"):
        pmw(
            _two_way(3), np.array([1.5] * 8), ZCDP("1/2"), rounds=2, ledger=ledger,
            dataset="adult", release_id="bad", total=10,
        )  # fmt: skip
    balance = ledger.balance("adult")
    assert balance.reserved == balance.spent == 0
    assert balance.remaining == 1


def test_bad_inputs_raise_dpmm_errors(ledger: Ledger) -> None:
    ledger.grant("adult", ZCDP(1))
    x = np.ones(4, dtype=np.int64)
    with pytest.raises(UnsupportedQueryError, match="counting queries"):
        pmw(
            Dense([[0.5, 1, 0, 0]]), x, ZCDP("1/2"), rounds=1, ledger=ledger,
            dataset="adult", release_id="r",
        )  # fmt: skip
    with pytest.raises(BudgetExceeded):
        pmw(_two_way(2), x, ZCDP(2), rounds=1, ledger=ledger, dataset="adult", release_id="r")
    with pytest.raises(ArgumentError, match="rounds"):
        pmw_budget(ZCDP(1), 0)
    with pytest.raises(ArgumentError, match="select_share"):
        pmw_budget(ZCDP(1), 2, select_share=1)
    with pytest.raises(PrivacyParameterError):
        pmw_budget("eps=1", 2)  # type: ignore[arg-type]
    assert ledger.balance("adult").remaining == 1
