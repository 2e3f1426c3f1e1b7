import numpy as np
import pytest

from dpmm.error import expected_error, svd_bound
from dpmm.linalg import AllRange, Identity, Kron, Ones, Prefix, VStack, Weighted
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import kron_template as kron_template_module
from dpmm.strategy import optimize
from dpmm.strategy.kron_template import hdmm_factors, kron_template, select_kron_template
from dpmm.strategy.product import best_kron_strategy

UNION = VStack(
    [
        Kron([Ones(1, 6), Prefix(12)]),
        Weighted(2.0, Kron([Identity(6), Ones(1, 12)])),
        Kron([Identity(6), AllRange(12)]),
    ]
)
PRIVACY = [PureDP(1), ZCDP("1/2")]


@pytest.mark.parametrize("privacy", PRIVACY)
def test_reported_error_is_the_exact_expected_error(privacy):
    A, error = kron_template(UNION, privacy.norm)
    constant = privacy.noise_variance(1.0)
    assert expected_error(UNION, A, privacy) == pytest.approx(constant * error, rel=1e-9)


@pytest.mark.parametrize("privacy", PRIVACY)
def test_beats_every_fixed_hdmm_factor_choice_and_the_hierarchical_kron(privacy):
    A = select_kron_template(UNION, privacy)
    fitted = expected_error(UNION, A, privacy)
    _, fixed = best_kron_strategy(UNION, hdmm_factors, privacy.norm)
    assert fitted <= privacy.noise_variance(1.0) * fixed * (1 + 1e-9)
    hierarchical = optimize(UNION, "hierarchical", privacy)
    assert fitted < expected_error(UNION, hierarchical, privacy)


def test_a_total_factor_is_chosen_only_where_every_query_totals_the_attribute():
    totals_first = Kron([Ones(1, 5), Prefix(8)])
    A, _ = best_kron_strategy(totals_first, hdmm_factors, 1)
    assert isinstance(A.factors[0], Ones)  # sensitivity 1, answers the total exactly
    mixed = VStack([totals_first, Kron([Identity(5), Prefix(8)])])
    A, _ = best_kron_strategy(mixed, hdmm_factors, 1)
    assert not isinstance(A.factors[0], Ones)  # a total cannot answer the identity rows
    assert np.isfinite(expected_error(mixed, A, PureDP(1)))


def test_no_admissible_candidate_without_an_optimizer_is_an_error():
    with pytest.raises(ValueError, match="No candidate"):
        best_kron_strategy(Kron([Identity(4), Prefix(3)]), lambda n: [Ones(1, n)], 1)


def test_one_attribute_is_opt_0_and_beats_identity():
    W = AllRange(48)
    A = select_kron_template(W, PureDP(1))
    assert expected_error(W, A, PureDP(1)) < 0.9 * expected_error(W, Identity(48), PureDP(1))


@pytest.mark.parametrize(
    ("W", "norm", "runs"),
    [
        (Kron([Prefix(6), AllRange(5)]), 1, kron_template_module.SWEEP_STARTS),
        (Kron([Prefix(6), AllRange(5)]), 2, 1),  # certified optima: nothing random
        (AllRange(8), 1, 1),  # OPT_0 restarts inside the fit
    ],
)
def test_laplace_sweeps_keep_the_best_of_several_runs(monkeypatch, W, norm, runs):
    errors = iter([5.0, 3.0, 4.0])
    calls = []

    def fake_sweeps(workload, candidates, norm, optimizer=None):
        calls.append(workload)
        error = next(errors)
        return Identity(workload.shape[1]), error

    monkeypatch.setattr(kron_template_module, "best_kron_strategy", fake_sweeps)
    _, error = kron_template(W, norm)
    assert len(calls) == runs
    assert error == min([5.0, 3.0, 4.0][:runs])


def test_each_attribute_gram_is_fitted_once_per_run():
    # A single product: every sweep sees each attribute's Gram up to scale, and the two
    # equal attributes share theirs, so one fit serves the whole run.
    fitted = []

    def counting(gram, norm):
        fitted.append(gram.shape[0])
        return kron_template_module.fit_factor(gram, norm)

    W = Kron([AllRange(16), AllRange(16), Prefix(8)])
    A, error = best_kron_strategy(W, hdmm_factors, 1, optimizer=counting)
    assert sorted(fitted) == [8, 16]
    assert expected_error(W, A, PureDP(1)) == pytest.approx(
        PureDP(1).noise_variance(1.0) * error, rel=1e-9
    )


def test_under_rho_an_attribute_of_identities_and_totals_gets_its_optimal_factor():
    # Attribute 0 is read whole by one product and totalled by two: its weighted Gram is
    # aI + bJ, whose optimum [a^¼ I; β 1ᵀ] meets the attribute's SVD bound. The fixed
    # choices (Identity, Total, Identity+Total) reach it only for one ratio b / a.
    W = VStack(
        [
            Kron([Identity(40), Prefix(6)]),
            Weighted(3.0, Kron([Ones(1, 40), AllRange(6)])),
            Weighted(2.0, Kron([Ones(1, 40), Identity(6)])),
        ]
    )
    privacy = ZCDP("1/2")
    A, error = kron_template(W, 2)
    first = A.factors[0]
    assert isinstance(first, VStack) and [type(b.base) for b in first.blocks] == [Identity, Ones]
    assert expected_error(W, A, privacy) == pytest.approx(
        privacy.noise_variance(1.0) * error, rel=1e-9
    )
    _, fixed_error = best_kron_strategy(W, hdmm_factors, 2)  # the fixed choices only
    assert error < 0.95 * fixed_error
    # The attribute's own problem is solved exactly: with an identity on the other
    # attribute in both products, the Kron meets the workload's SVD bound.
    two = VStack(
        [Kron([Identity(40), Identity(6)]), Weighted(5.0, Kron([Ones(1, 40), Identity(6)]))]
    )
    B, _ = kron_template(two, 2)
    assert expected_error(two, B, privacy) == pytest.approx(svd_bound(two, privacy), rel=1e-6)
