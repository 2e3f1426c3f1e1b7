import pytest

from dpmm.error import expected_error
from dpmm.errors import DpmmError, UnsupportedQueryError
from dpmm.linalg import AllRange, Hierarchical, Identity, Kron, Prefix
from dpmm.privacy import PureDP
from dpmm.strategy import AUTO_CANDIDATES, METHODS, select_strategy
from dpmm.strategy.selection import select


def _identity(W, privacy):
    return Identity(W.shape[1])


def _refuses(W, privacy):
    raise UnsupportedQueryError("this method needs a union")


def _tree(W, privacy):
    return Hierarchical(W.shape[1], 4)


def test_select_keeps_the_least_error_and_records_every_candidate():
    W = AllRange(64)
    methods = {"identity": _identity, "refuses": _refuses, "tree": _tree}
    selection = select(W, PureDP(1), methods, ["identity", "refuses", "tree"])
    errors = {c.method: c.error for c in selection.candidates}
    assert errors["refuses"] is None
    assert selection.candidates[1].skipped == "this method needs a union"
    best = min(("identity", "tree"), key=lambda m: errors[m])
    assert selection.chosen.method == best
    assert selection.chosen.error == pytest.approx(expected_error(W, selection.strategy, PureDP(1)))
    assert all(c.seconds >= 0 for c in selection.candidates)


def test_select_needs_its_baseline_to_apply():
    with pytest.raises(DpmmError, match="baseline strategy method 'refuses'"):
        select(AllRange(8), PureDP(1), {"refuses": _refuses}, ["refuses"])


@pytest.mark.parametrize("W", [AllRange(40), Kron([Prefix(8), Identity(6)])])
def test_auto_is_never_worse_than_identity_and_lists_its_candidates(W):
    selection = select_strategy(W, "auto", PureDP(1))
    assert [c.method for c in selection.candidates] == list(AUTO_CANDIDATES)
    identity = expected_error(W, METHODS["identity"](W, PureDP(1)), PureDP(1))
    assert selection.chosen.error <= identity
    tried = [c.error for c in selection.candidates if c.error is not None]
    assert selection.chosen.error == min(tried)


def test_a_named_method_is_one_candidate():
    selection = select_strategy(AllRange(16), "hierarchical", PureDP(1))
    assert [c.method for c in selection.candidates] == ["hierarchical"]
