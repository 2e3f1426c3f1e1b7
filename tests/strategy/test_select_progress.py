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
    assert calls[:-1] == [(i, total, name) for i, name in enumerate(AUTO_CANDIDATES)]
    assert calls[-1] == (total, total, selection.chosen.method)


def test_one_method_reports_start_and_end() -> None:
    calls: list[tuple[int, int, str]] = []
    select_strategy(Prefix(8), "hierarchical", PureDP(1), progress=lambda *a: calls.append(a))
    assert calls == [(0, 1, "hierarchical"), (1, 1, "hierarchical")]
