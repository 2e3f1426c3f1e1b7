"""The selection's time budget: searches stop when it is spent, and the record says so."""

import time

import numpy as np
import pytest

from dpmm.error import expected_error
from dpmm.linalg import AllRange, Hierarchical, Identity, Kron
from dpmm.privacy import PureDP
from dpmm.strategy import select_strategy
from dpmm.strategy.selection import select
from dpmm.strategy.time_budget import OutOfTimeError, check_time, time_budget


def _identity(W, privacy):
    return Identity(W.shape[1])


def _slow_search(W, privacy):
    """A search that would run for a minute, checking the budget as the real ones do."""
    for _ in range(600):
        check_time()
        time.sleep(0.1)
    return Hierarchical(W.shape[1], 2)


def _tree(W, privacy):
    return Hierarchical(W.shape[1], 4)


def test_outside_a_budget_searches_never_stop():
    check_time()


def test_a_budget_stops_searches_past_its_deadline_and_an_inner_one_cannot_extend_it():
    with time_budget(0.05):
        check_time()
        time.sleep(0.1)
        with time_budget(3600), pytest.raises(OutOfTimeError, match="budget of 3600 s"):
            check_time()
    check_time()  # the budget ended with its block


def test_a_candidate_still_searching_is_stopped_and_later_ones_are_not_tried():
    W = AllRange(32)
    methods = {"identity": _identity, "slow": _slow_search, "tree": _tree}
    start = time.perf_counter()
    selection = select(W, PureDP(1), methods, ["identity", "slow", "tree"], budget=0.3)
    assert time.perf_counter() - start < 5
    by_name = {c.method: c for c in selection.candidates}
    assert by_name["slow"].skipped == "stopped: the selection's time budget of 0.3 s ran out"
    assert 0.3 <= by_name["slow"].seconds < 3
    assert by_name["tree"].skipped == "not tried: the selection's time budget of 0.3 s was spent"
    assert selection.chosen.method == "identity"


def test_the_baseline_runs_whatever_the_budget():
    W = AllRange(16)
    methods = {"slow": lambda W, p: (time.sleep(0.2), Identity(16))[1], "tree": _tree}
    selection = select(W, PureDP(1), methods, ["slow", "tree"], budget=0.01)
    assert selection.chosen.method == "slow"
    assert selection.candidates[1].skipped.startswith("not tried")


def test_auto_with_a_tiny_budget_keeps_what_finished_and_names_what_did_not():
    # HDMM's p-Identity fits on AllRange(32) ⊗ AllRange(32) take far longer than 10 ms.
    W, privacy = Kron([AllRange(32), AllRange(32)]), PureDP(1)
    selection = select_strategy(W, "auto", privacy, budget=0.01)
    reasons = {c.method: c.skipped for c in selection.candidates}
    assert "budget of 0.01 s" in (reasons["hdmm_kron"] or "")
    assert reasons["identity"] is None
    assert selection.chosen.error == pytest.approx(expected_error(W, selection.strategy, privacy))
    unbounded = select_strategy(W, "auto", privacy)
    assert unbounded.chosen.method == "hdmm_kron"
    assert np.isfinite(unbounded.chosen.error) and unbounded.chosen.error < selection.chosen.error
