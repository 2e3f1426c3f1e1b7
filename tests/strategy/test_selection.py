from itertools import combinations

import pytest

from dpmm.error import expected_error, svd_bound
from dpmm.errors import DpmmError, UnsupportedQueryError
from dpmm.linalg import (
    AllRange,
    Hierarchical,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Ones,
    Prefix,
    VStack,
    Weighted,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import (
    AUTO_CANDIDATES,
    CLASS_BOUNDS,
    METHODS,
    PROVEN_MARGINAL_OPTIMUM,
    PROVEN_ONE_ATTRIBUTE_OPTIMUM,
    optimize,
    select_strategy,
)
from dpmm.strategy.marginal_optimal import marginal_strategies_bound
from dpmm.strategy.product import best_kron_strategy
from dpmm.strategy.selection import ProvenOptimum, select


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


# -- the proven optimum: marginal workloads under Gaussian noise ---------------------------

SHAPE = (3, 4, 2, 3)


def _pairs(weights=None) -> Marginals:
    pairs = list(combinations(range(len(SHAPE)), 2))
    return Marginals(SHAPE, {p: (weights or {}).get(p, 1.0) for p in pairs})


def _kron_pairs() -> VStack:
    """The same union as a plain stack of Kron products (not the Marginals class)."""
    blocks = []
    for pair in combinations(range(len(SHAPE)), 2):
        factors = [Identity(n) if i in pair else Ones(1, n) for i, n in enumerate(SHAPE)]
        blocks.append(Weighted(1.0, Kron(factors)))
    return VStack(blocks)


@pytest.mark.parametrize(
    "W",
    [_pairs(), _pairs({(0, 1): 3.0, (2, 3): 0.5}), _kron_pairs()],
    ids=["pairs", "weighted-pairs", "kron-stack"],
)
def test_auto_under_zcdp_takes_the_proven_marginal_optimum(W):
    privacy = ZCDP(1)
    selection = select_strategy(W, "auto", privacy)
    assert [c.method for c in selection.candidates] == list(AUTO_CANDIDATES)
    assert selection.chosen.method == "marginal_optimal"
    records = {c.method: c for c in selection.candidates}
    assert records["identity"].error == pytest.approx(
        expected_error(W, METHODS["identity"](W, privacy), privacy)
    )
    assert selection.chosen.error == pytest.approx(
        expected_error(W, METHODS["marginal_optimal"](W, privacy), privacy)
    )
    assert selection.chosen.error <= records["identity"].error
    skipped = [c for c in selection.candidates if c.method not in ("identity", "marginal_optimal")]
    assert skipped and all(c.skipped == PROVEN_MARGINAL_OPTIMUM for c in skipped)
    assert all(c.error is None and c.strategy is None for c in skipped)
    # The theorem, checked: no candidate that was not tried beats the chosen strategy.
    for candidate in skipped:
        try:
            A = METHODS[candidate.method](W, privacy)
            error = expected_error(W, A, privacy)
        except DpmmError:
            continue  # it does not apply to this workload
        assert error >= selection.chosen.error * (1 - 1e-9), candidate.method


@pytest.mark.slow
def test_auto_under_pure_dp_still_tries_every_candidate_on_marginals():
    W = _pairs()
    selection = select_strategy(W, "auto", PureDP(1))
    assert not any(c.skipped == PROVEN_MARGINAL_OPTIMUM for c in selection.candidates)
    tried = {c.method for c in selection.candidates if c.error is not None}
    assert {"identity", "hdmm_marginals", "workload", "marginals"} <= tried
    assert selection.chosen.error == min(c.error for c in selection.candidates if c.error)


def test_auto_under_zcdp_tries_every_candidate_beyond_marginals():
    W = Kron([Prefix(8), Identity(6)])
    selection = select_strategy(W, "auto", ZCDP(1))
    assert not any(c.skipped == PROVEN_MARGINAL_OPTIMUM for c in selection.candidates)
    assert sum(c.error is not None for c in selection.candidates) > 2


def test_auto_reports_progress_for_the_two_methods_it_runs():
    calls = []
    selection = select_strategy(_pairs(), "auto", ZCDP(1), progress=lambda *a: calls.append(a))
    assert calls[0] == (0, 2, "marginal_optimal")
    assert calls[1][:2] == (1, 2) and calls[1][2].startswith(
        "identity, best so far marginal_optimal"
    )
    assert calls[2] == (2, 2, selection.chosen.method)


def _counting(method, calls, name):
    def counted(W, privacy):
        calls.append(name)
        return method(W, privacy)

    return counted


def test_a_proven_optimum_that_does_not_apply_falls_back_to_every_candidate():
    calls = []
    methods = {
        "identity": _counting(_identity, calls, "identity"),
        "refuses": _counting(_refuses, calls, "refuses"),
        "tree": _counting(_tree, calls, "tree"),
    }
    proven = ProvenOptimum("refuses", "not tried: proven")
    selection = select(
        AllRange(64), PureDP(1), methods, ["identity", "refuses", "tree"], proven=proven
    )
    assert sorted(calls) == ["identity", "refuses", "tree"]  # the refusal is not re-run
    assert [c.method for c in selection.candidates] == ["identity", "refuses", "tree"]
    assert selection.candidates[1].skipped == "this method needs a union"
    assert not any(c.skipped == "not tried: proven" for c in selection.candidates)


def test_a_proven_optimum_records_the_rest_and_never_loses_to_the_baseline():
    calls = []
    methods = {
        "identity": _counting(_identity, calls, "identity"),
        "same": _counting(_identity, calls, "same"),  # ties with the baseline
        "tree": _counting(_tree, calls, "tree"),
    }
    proven = ProvenOptimum("same", "not tried: proven")
    selection = select(
        AllRange(16), PureDP(1), methods, ["identity", "tree", "same"], proven=proven
    )
    assert calls == ["same", "identity"]
    assert [c.method for c in selection.candidates] == ["identity", "tree", "same"]
    assert selection.candidates[1].skipped == "not tried: proven"
    assert selection.candidates[1].seconds == 0.0
    assert selection.chosen.method == "identity"  # a tie keeps the baseline


def test_a_proven_optimum_must_be_a_candidate():
    proven = ProvenOptimum("elsewhere", "not tried")
    with pytest.raises(DpmmError, match="'elsewhere' is not a candidate"):
        select(AllRange(8), PureDP(1), {"identity": _identity}, ["identity"], proven=proven)


@pytest.mark.parametrize(
    "W",
    [_pairs(), Marginals((5,), {(0,): 2.0}), Marginal((3, 4), [1]), _pairs({(0, 2): 0.0})],
    ids=["pairs", "one-attribute", "one-marginal", "zero-weight"],
)
def test_identity_on_marginals_is_the_per_attribute_identity(W):
    fast = METHODS["identity"](W, ZCDP(1))
    general = best_kron_strategy(W, lambda n: [Identity(n)], 2)[0]
    assert repr(fast) == repr(general)
    assert expected_error(W, fast, ZCDP(1)) == pytest.approx(
        expected_error(W, general, ZCDP(1)), rel=1e-12
    )


def test_auto_under_zcdp_on_one_attribute_takes_the_certified_optimum():
    W, privacy = VStack([Prefix(64), AllRange(64)]), ZCDP(1)
    selection = select_strategy(W, "auto", privacy)
    assert selection.chosen.method == "hdmm_kron"
    reasons = {c.method: c.skipped for c in selection.candidates}
    assert reasons["identity"] is None
    assert reasons["residual"] == PROVEN_ONE_ATTRIBUTE_OPTIMUM
    # No other candidate is more than the certified gap (0.1 %) better (the eigen-design
    # needs commuting Grams, which a prefix and the ranges do not have).
    for method in ("hierarchical", "wavelet", "hdmm_marginals", "residual"):
        other = expected_error(W, optimize(W, method, privacy), privacy)
        assert selection.chosen.error <= other * 1.001


def test_a_singular_one_attribute_gram_is_not_a_certified_optimum():
    W = Kron([Ones(1, 8)])  # one query: the Gram has rank 1
    selection = select_strategy(VStack([W, Weighted(2.0, W)]), "auto", ZCDP(1))
    assert all(c.skipped != PROVEN_ONE_ATTRIBUTE_OPTIMUM for c in selection.candidates)


@pytest.mark.parametrize(
    "W",
    [
        AllRange(256),
        Prefix(512),
        Kron([Prefix(16), Identity(8)]),
        VStack([Kron([AllRange(12), Ones(1, 5)]), Kron([Identity(12), Prefix(5)])]),
    ],
    ids=repr,
)
@pytest.mark.parametrize("privacy", [PureDP(1), ZCDP(1)], ids=["laplace", "gaussian"])
def test_the_marginal_algebra_floor_is_below_every_marginal_strategy(W, privacy) -> None:
    floor = marginal_strategies_bound(W, privacy)
    assert floor is not None and floor >= svd_bound(W, privacy) * (1 - 1e-9)
    for name in ("marginals", "hdmm_marginals"):
        assert expected_error(W, METHODS[name](W, privacy), privacy) >= floor * (1 - 1e-9)


def test_marginal_candidates_are_skipped_where_their_floor_is_beaten() -> None:
    """On prefix queries a hierarchy beats every marginal strategy's floor: auto skips
    them (their methods would raise), with the reason, and keeps the same choice."""
    W, privacy = Prefix(1024), PureDP(1)

    def never(W, privacy):
        raise AssertionError("a candidate whose floor was beaten ran")

    methods = {**METHODS, "marginals": never, "hdmm_marginals": never}
    order = ("identity", "hierarchical", "marginals", "hdmm_marginals")
    selection = select(W, privacy, methods, order, bounds=CLASS_BOUNDS)
    skipped = {c.method: c.skipped for c in selection.candidates}
    assert skipped["marginals"].startswith("skipped: none of its strategies can beat hierarchical")
    assert "marginal algebra" in skipped["hdmm_marginals"]
    assert selection.chosen.method == "hierarchical"
    # Where no earlier candidate beats the floor, the candidates run.
    union = VStack([Kron([Identity(6), Ones(1, 5)]), Kron([Ones(1, 6), Identity(5)])])
    ran = select(union, privacy, METHODS, ("identity", "marginals"), bounds=CLASS_BOUNDS)
    assert ran.candidates[1].error is not None
