"""Strategy selection reports its progress candidate by candidate."""

from __future__ import annotations

from dpmm.linalg import Identity, Kron, Prefix
from dpmm.privacy.params import PureDP
from dpmm.strategy import AUTO_CANDIDATES, select_strategy


def test_auto_reports_every_candidate_then_the_choice() -> None:
    calls: list[tuple[int, int, str]] = []
    selection = select_strategy(
        Kron([Prefix(8), Identity(2)]), "auto", PureDP(1), progress=lambda *a: calls.append(a)
    )
    total = len(AUTO_CANDIDATES)
    assert [(done, of) for done, of, _ in calls] == [(i, total) for i in range(total + 1)]
    # Each report names the candidate being tried, then the best so far with its RMSE.
    assert calls[0][2] == AUTO_CANDIDATES[0]
    identity = selection.candidates[0]
    rmse = (identity.error / 16) ** 0.5
    assert calls[1][2] == f"{AUTO_CANDIDATES[1]}, best so far identity (RMSE {rmse:.4g})"
    for (_, _, what), name in zip(calls[2:-1], AUTO_CANDIDATES[2:], strict=True):
        assert what.startswith(f"{name}, best so far ")
    assert calls[-1] == (total, total, selection.chosen.method)


def test_one_method_reports_start_and_end() -> None:
    calls: list[tuple[int, int, str]] = []
    select_strategy(Prefix(8), "hierarchical", PureDP(1), progress=lambda *a: calls.append(a))
    assert calls == [(0, 1, "hierarchical"), (1, 1, "hierarchical")]
