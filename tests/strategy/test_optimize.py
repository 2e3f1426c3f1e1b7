from itertools import combinations, product

import numpy as np
import pytest

from dpmm.error import expected_error, identity_error
from dpmm.errors import ArgumentError, DpmmError
from dpmm.linalg import (
    AllRange,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    VStack,
    Weighted,
)
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import METHODS, optimize
from dpmm.strategy.product import kron_terms

WORKLOADS = {
    "allrange": AllRange(32),
    "prefix": Prefix(40),
    "range2d": Kron([AllRange(12), AllRange(9)]),
    "prefix-by-id": Kron([Prefix(16), Identity(6)]),
    "union": VStack(
        [Kron([Prefix(8), Ones(1, 5)]), Weighted(2.0, Kron([Identity(8), AllRange(5)]))]
    ),
    "marginals": Marginals((4, 3, 5), {s: 1.0 for s in combinations(range(3), 2)}),
}
PRIVACY = [PureDP(1), ZCDP("1/2")]
#: Methods that build a strategy for any union of Kron products.
APPLY_TO_EVERY_WORKLOAD = {"identity", "hierarchical", "wavelet", "hdmm", "hdmm_kron", "auto"}


#: Workloads on which the LRM's alternating solver takes many seconds.
SLOW_LRM = {"range2d", "prefix-by-id", "marginals"}


@pytest.mark.parametrize(
    ("name", "method"),
    [
        pytest.param(
            name,
            method,
            id=f"{method}-{name}",
            marks=[pytest.mark.slow] if method == "lrm" and name in SLOW_LRM else [],
        )
        for method in METHODS
        for name in WORKLOADS
    ],
)
def test_every_method_returns_a_strategy_that_answers_the_workload(name, method):
    W = WORKLOADS[name]
    if method not in APPLY_TO_EVERY_WORKLOAD:
        try:
            A = optimize(W, method, PureDP(1))
        except DpmmError as refusal:  # a structured method refuses with one sentence
            assert str(refusal).strip() and "\n" not in str(refusal)
            return
    else:
        A = optimize(W, method, PureDP(1))
    assert isinstance(A, Matrix)
    assert A.shape[1] == W.shape[1]
    assert np.isfinite(expected_error(W, A, PureDP(1)))


def test_identity_strategy_is_a_kron_of_identities_per_attribute():
    A = optimize(WORKLOADS["range2d"], "identity", PureDP(1))
    assert isinstance(A, Kron)
    assert [type(f) for f in A.factors] == [Identity, Identity]
    assert [f.shape for f in A.factors] == [(12, 12), (9, 9)]


@pytest.mark.parametrize("privacy", PRIVACY)
def test_hierarchical_picks_the_best_branching_in_one_dimension(privacy):
    W = AllRange(48)
    chosen = optimize(W, "hierarchical", privacy)
    errors = {b: expected_error(W, Hierarchical(48, b), privacy) for b in range(2, 17)}
    assert isinstance(chosen, Hierarchical)
    assert expected_error(W, chosen, privacy) == pytest.approx(min(errors.values()), rel=1e-12)


@pytest.mark.parametrize("privacy", PRIVACY)
def test_hierarchical_on_a_single_product_is_the_brute_force_optimum(privacy):
    W = Kron([AllRange(7), Prefix(6)])
    chosen = optimize(W, "hierarchical", privacy)
    brute = min(
        expected_error(W, Kron([Hierarchical(7, a), Hierarchical(6, b)]), privacy)
        for a, b in product(range(2, 8), range(2, 7))
    )
    assert expected_error(W, chosen, privacy) == pytest.approx(brute, rel=1e-9)


def test_hierarchical_on_a_union_is_no_worse_than_any_uniform_branching():
    W = WORKLOADS["union"]
    chosen_error = expected_error(W, optimize(W, "hierarchical", PureDP(1)), PureDP(1))
    for b in range(2, 6):
        uniform = Kron([Hierarchical(8, b), Hierarchical(5, min(b, 5))])
        assert chosen_error <= expected_error(W, uniform, PureDP(1)) * (1 + 1e-12)


def test_wavelet_is_haar_per_attribute():
    A = optimize(WORKLOADS["range2d"], "wavelet", PureDP(1))
    assert [repr(f) for f in A.factors] == ["Haar(12)", "Haar(9)"]


def test_seed_strategies_have_the_published_shape():
    # Seed 000's H and Y for n = 4.
    np.testing.assert_array_equal(
        Hierarchical(4, 2).dense(),
        [
            [1, 1, 1, 1],
            [1, 1, 0, 0],
            [0, 0, 1, 1],
            [1, 0, 0, 0],
            [0, 1, 0, 0],
            [0, 0, 1, 0],
            [0, 0, 0, 1],
        ],
    )
    np.testing.assert_array_equal(
        Haar(4).dense(), [[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 0, 0], [0, 0, 1, -1]]
    )


@pytest.mark.parametrize("name", WORKLOADS)
@pytest.mark.parametrize("privacy", PRIVACY)
def test_auto_is_at_least_the_best_simple_method_and_never_worse_than_identity(name, privacy):
    W = WORKLOADS[name]
    auto_error = expected_error(W, optimize(W, "auto", privacy), privacy)
    others = [
        expected_error(W, optimize(W, method, privacy), privacy)
        for method in ("identity", "hierarchical", "wavelet", "workload", "marginals")
    ]
    assert auto_error <= min(others) * (1 + 1e-12)
    assert auto_error <= identity_error(W, privacy) * (1 + 1e-12)


def test_workload_strategy_measures_the_workload():
    W = WORKLOADS["marginals"]
    assert optimize(W, "workload", ZCDP(1)) is W


def test_unknown_method_is_an_argument_error():
    with pytest.raises(ArgumentError, match="Unknown strategy method 'best'"):
        optimize(AllRange(4), "best", PureDP(1))


def test_kron_terms_flattens_unions_and_weights():
    terms = kron_terms(WORKLOADS["union"])
    assert [term.weight for term in terms] == [1.0, 2.0]
    assert [len(term.factors) for term in terms] == [2, 2]
    single = kron_terms(AllRange(5))
    assert len(single) == 1 and single[0].factors[0].shape == (15, 5)


def test_large_product_domains_stay_factor_wise():
    W = Kron([AllRange(256)] * 3)
    A = optimize(W, "hierarchical", PureDP(1))
    assert isinstance(A, Kron) and A.shape[1] == 256**3
    assert expected_error(W, A, PureDP(1)) < identity_error(W, PureDP(1))


def test_marginals_method_measures_the_tables_each_product_reads():
    W = VStack(
        [
            Kron([Prefix(4), Ones(1, 3), Identity(2)]),
            Kron([Ones(1, 4), Ones(1, 3), Ones(1, 2)]),
            Kron([Identity(4), AllRange(3), Ones(1, 2)]),
        ]
    )
    A = optimize(W, "marginals", ZCDP(1))
    assert isinstance(A, Marginals)
    assert A.weights == {0b101: 1.0, 0b000: 1.0, 0b011: 1.0}
    # Every product is answerable from its table, so the error is finite and matches dense.
    Wd, Ad = W.dense(), A.dense()
    dense = np.trace(Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T) * ZCDP(1).noise_variance(np.sqrt(3.0))
    assert expected_error(W, A, ZCDP(1)) == pytest.approx(dense, rel=1e-9)
