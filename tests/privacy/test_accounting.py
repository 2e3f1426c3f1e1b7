import math
from decimal import Context, Decimal, localcontext
from fractions import Fraction

import pytest
from scipy import optimize

from dpmm.errors import PrivacyParameterError
from dpmm.privacy import ZCDP, PureDP
from dpmm.privacy.accounting import (
    ApproxDP,
    Guarantee,
    compose,
    discrete_gaussian_zcdp,
    exact_delta,
    gaussian_sigma2,
    laplace_scale,
    pure_to_approx,
    pure_to_zcdp,
    zcdp_to_approx,
)

# -- an independent evaluation of [CKS20, Corollary 13] in the original α form -------------

CONTEXT = Context(prec=80)


def _classic(rho, delta):
    """The classic ``ε = ρ + 2·sqrt(ρ·log(1/δ))`` [BS16, Proposition 1.3], in 80-digit decimal."""
    rho, delta = _dec(rho), _dec(delta)
    with localcontext(CONTEXT):
        return rho + 2 * CONTEXT.sqrt(rho * -CONTEXT.ln(delta))


def _dec(value):
    value = Fraction(value)
    return CONTEXT.divide(Decimal(value.numerator), Decimal(value.denominator))


def _log_bracket(alpha, rho, epsilon):
    """log[exp((α−1)(αρ−ε)) / (α−1) · (1−1/α)^α], in 80-digit decimal."""
    one = Decimal(1)
    with localcontext(CONTEXT):
        return (
            (alpha - one) * (alpha * rho - epsilon)
            - CONTEXT.ln(alpha - one)
            + alpha * CONTEXT.ln(one - one / alpha)
        )


def _log_cks_delta(rho, epsilon):
    """log of the infimum over α: the bracket is convex in α with derivative
    (2α−1)ρ − ε + log(1−1/α), increasing from −∞; bisect that derivative in decimal."""
    rho, epsilon = _dec(rho), _dec(epsilon)
    one = Decimal(1)
    with localcontext(CONTEXT):

        def slope(alpha):
            return (2 * alpha - 1) * rho - epsilon + CONTEXT.ln(one - one / alpha)

        low, high = one + Decimal("1e-60"), Decimal(2)
        while slope(high) < 0:
            high *= 2
        for _ in range(400):
            middle = (low + high) / 2
            if slope(middle) < 0:
                low = middle
            else:
                high = middle
        return min(_log_bracket(low, rho, epsilon), _log_bracket(high, rho, epsilon))


def _scipy_epsilon(rho, delta):
    """The least ε with the Corollary 13 δ at most ``delta``, found with scipy alone."""

    def log_delta(epsilon):
        def bracket(log_beta):
            alpha = 1.0 + math.exp(log_beta)
            return (
                (alpha - 1) * (alpha * rho - epsilon)
                - math.log(alpha - 1)
                + alpha * math.log1p(-1 / alpha)
            )

        return optimize.minimize_scalar(
            bracket, bounds=(-30, 30), method="bounded", options={"xatol": 1e-12}
        ).fun

    return optimize.brentq(
        lambda epsilon: log_delta(epsilon) - math.log(delta), 1e-9, 1e4, xtol=1e-14
    )


# -- ApproxDP and exact_delta --------------------------------------------------------------


def test_approx_dp_is_exact_and_frozen():
    budget = ApproxDP(0.1, "1e-6")
    assert budget.epsilon == Fraction(1, 10)
    assert budget.delta == Fraction(1, 10**6)
    assert budget.to_dict() == {"kind": "approx", "epsilon": "1/10", "delta": "1/1000000"}
    assert ApproxDP(1, 0).delta == 0
    with pytest.raises(AttributeError):
        budget.epsilon = Fraction(1)


@pytest.mark.parametrize(
    ("epsilon", "delta", "named"),
    [
        (0, "1e-6", "epsilon"),
        (-1, "1e-6", "epsilon"),
        (float("nan"), "1e-6", "epsilon"),
        (1, 1, "delta"),
        (1, 1.5, "delta"),
        (1, -1e-6, "delta"),
        (1, float("inf"), "delta"),
        (1, True, "delta"),
        (1, "abc", "delta"),
    ],
)
def test_approx_dp_refuses_bad_parameters_naming_them(epsilon, delta, named):
    with pytest.raises(PrivacyParameterError, match=named):
        ApproxDP(epsilon, delta)


def test_exact_delta_reads_the_number_written():
    assert exact_delta(1e-6) == Fraction(1, 10**6)
    assert exact_delta(0) == 0
    assert exact_delta(Fraction(1, 3)) == Fraction(1, 3)


# -- composition ---------------------------------------------------------------------------


def test_pure_composition_is_exact():
    third = PureDP("1/3")
    assert compose([third, third, third]) == PureDP(1)
    assert compose([third, third, third]).epsilon == 1  # not 0.9999999999999999


def test_zcdp_composition_is_exact():
    assert compose([ZCDP(0.1), ZCDP(0.2)]) == ZCDP("0.3")


def test_approx_composition_adds_both_parameters():
    total = compose([ApproxDP("1/3", "1e-7"), ApproxDP("2/3", "2e-7")])
    assert total == ApproxDP(1, "3e-7")


def test_composition_of_one_budget_is_that_budget():
    assert compose([ZCDP("1/2")]) == ZCDP("1/2")


@pytest.mark.parametrize(
    "budgets",
    [
        [PureDP(1), ZCDP(1)],
        [ZCDP(1), ApproxDP(1, 0)],
        [PureDP(1), ApproxDP(1, 0)],
    ],
)
def test_composition_refuses_mixed_kinds(budgets):
    with pytest.raises(PrivacyParameterError, match="convert explicitly"):
        compose(budgets)


@pytest.mark.parametrize("budgets", [[], PureDP(1), [1.0], None])
def test_composition_refuses_what_is_not_a_list_of_budgets(budgets):
    with pytest.raises(PrivacyParameterError, match="compose"):
        compose(budgets)


def test_composition_refuses_a_total_delta_of_one():
    with pytest.raises(PrivacyParameterError, match="delta"):
        compose([ApproxDP(1, "1/2"), ApproxDP(1, "1/2")])


# -- conversions ---------------------------------------------------------------------------


def test_pure_to_zcdp_is_exact():
    assert pure_to_zcdp(PureDP(1)) == ZCDP("1/2")
    assert pure_to_zcdp(PureDP("1/3")).rho == Fraction(1, 18)


def test_pure_to_approx_has_zero_delta():
    assert pure_to_approx(PureDP("2/7")) == ApproxDP("2/7", 0)


@pytest.mark.parametrize(
    "convert", [pure_to_zcdp, pure_to_approx, lambda p: zcdp_to_approx(p, 1e-6)]
)
def test_conversions_refuse_the_wrong_kind(convert):
    with pytest.raises(PrivacyParameterError, match="must be a"):
        convert(ApproxDP(1, 0))


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        ("1/2", "1e-6"),
        ("1/2", "1e-10"),
        ("1/2", "1e-100"),
        ("1/1000", "1e-6"),
        (1, "1e-9"),
        (10, "1e-6"),
        (100, "0.5"),
        ("1e-8", "1e-12"),
    ],
)
def test_zcdp_to_approx_is_verified_tighter_and_near_optimal(rho, delta):
    budget = zcdp_to_approx(ZCDP(rho), delta)
    target = Fraction(delta)
    assert budget.delta == target
    assert budget.epsilon.denominator & (budget.epsilon.denominator - 1) == 0  # dyadic
    log_target = CONTEXT.ln(_dec(target))
    # The recorded ε reaches the requested δ, checked in 80-digit decimal.
    assert _log_cks_delta(rho, budget.epsilon) <= log_target
    # It is tighter than the classic bound ...
    assert _dec(budget.epsilon) < _classic(rho, delta)
    # ... and within 1e-6 (relative) of the least ε: a slightly smaller ε does not suffice.
    assert _log_cks_delta(rho, budget.epsilon * (1 - Fraction(1, 10**6))) > log_target


@pytest.mark.parametrize(("rho", "delta"), [(0.5, 1e-6), (1.0, 1e-9), (0.01, 1e-5)])
def test_zcdp_to_approx_agrees_with_an_independent_scipy_evaluation(rho, delta):
    independent = _scipy_epsilon(rho, delta)
    budget = zcdp_to_approx(ZCDP(rho), delta)
    assert float(budget.epsilon) == pytest.approx(independent, rel=1e-6)
    assert float(budget.epsilon) >= independent * (1 - 1e-9)


def test_zcdp_to_approx_known_value():
    # ρ = 1/2, δ = 1e-6: Corollary 13 gives ε ≈ 5.2215, the classic bound ε ≈ 5.7565.
    budget = zcdp_to_approx(ZCDP("1/2"), "1e-6")
    assert float(budget.epsilon) == pytest.approx(5.2215344445, abs=1e-9)
    assert float(_classic("1/2", "1e-6")) == pytest.approx(5.7565, abs=1e-4)


def test_zcdp_to_approx_handles_extreme_rho():
    tiny = zcdp_to_approx(ZCDP("1e-60"), "1e-80")
    assert _log_cks_delta("1e-60", tiny.epsilon) <= CONTEXT.ln(Decimal("1e-80"))
    assert _dec(tiny.epsilon) < _classic("1e-60", "1e-80")
    huge = zcdp_to_approx(ZCDP("1e60"), "1e-6")
    assert Fraction(10**60) < huge.epsilon < Fraction(10**60) * (1 + Fraction(1, 10**9))


def test_a_tiny_rho_reaches_a_large_delta_at_the_smallest_epsilon():
    # ρ-zCDP bounds total variation: with ρ = 1e-40, δ = 1e-6 holds for any ε > 0.
    budget = zcdp_to_approx(ZCDP("1e-40"), "1e-6")
    assert budget.epsilon == Fraction(1, 10**100)
    assert _log_cks_delta("1e-40", budget.epsilon) <= CONTEXT.ln(Decimal("1e-6"))


@pytest.mark.parametrize("delta", [0, 1, 2, -0.1, "x", None])
def test_zcdp_to_approx_refuses_a_bad_delta(delta):
    with pytest.raises(PrivacyParameterError, match="delta"):
        zcdp_to_approx(ZCDP(1), delta)


# -- calibration ---------------------------------------------------------------------------


def test_laplace_scale_is_exact():
    assert laplace_scale(Fraction(1), PureDP("1/3")) == 3
    assert laplace_scale(2, PureDP("0.1")) == 20


def test_gaussian_sigma2_is_exact():
    assert gaussian_sigma2(Fraction(2), ZCDP("1/3")) == 3
    assert gaussian_sigma2(1, ZCDP("0.1")) == 5


def test_float_sensitivity_is_rounded_up():
    scale = laplace_scale(0.1, PureDP(1))
    assert scale > Fraction(0.1) > Fraction(1, 10)  # the float above 0.1's binary value
    assert scale - Fraction(0.1) < Fraction(1, 10**16)
    assert gaussian_sigma2(3.0, ZCDP("1/2")) > 3


@pytest.mark.parametrize("sensitivity", [0, -1, float("nan"), float("inf"), "1", True, None])
def test_calibration_refuses_a_bad_sensitivity(sensitivity):
    with pytest.raises(PrivacyParameterError, match="sensitivity"):
        laplace_scale(sensitivity, PureDP(1))
    with pytest.raises(PrivacyParameterError, match="sensitivity"):
        gaussian_sigma2(sensitivity, ZCDP(1))


def test_calibration_refuses_the_wrong_privacy_kind():
    with pytest.raises(PrivacyParameterError, match="PureDP"):
        laplace_scale(1, ZCDP(1))
    with pytest.raises(PrivacyParameterError, match="ZCDP"):
        gaussian_sigma2(1, PureDP(1))


# -- the discrete Gaussian -----------------------------------------------------------------


def _discrete_gaussian_renyi(shift, sigma2, alpha):
    """D_α(N_Z(shift, σ²) ‖ N_Z(0, σ²)) computed by summing the mass functions directly."""
    width = shift + int(60 * math.sqrt(sigma2)) + 60

    def log_sum_exp(values):
        top = max(values)
        return top + math.log(math.fsum(math.exp(value - top) for value in values))

    support = range(-width, width + 1)
    log_normalizer = log_sum_exp([-(y**2) / (2 * sigma2) for y in support])
    log_moment = log_sum_exp(
        [
            -alpha * (y - shift) ** 2 / (2 * sigma2) - (1 - alpha) * y**2 / (2 * sigma2)
            for y in support
        ]
    )
    return (log_moment - log_normalizer) / (alpha - 1)


@pytest.mark.parametrize("sigma2", [Fraction(1, 10), Fraction(1, 4), Fraction(1), Fraction(9)])
@pytest.mark.parametrize("shift", [1, 3])
@pytest.mark.parametrize("alpha", [1.01, 1.5, 2.0, 3.7, 20.0])
def test_discrete_gaussian_guarantee_holds_coordinate_by_coordinate(sigma2, shift, alpha):
    # Theorem 14 adds no correction: the per-coordinate Rényi divergence at an integer
    # shift never exceeds α·shift²/(2σ²), even for σ well below 1 (and equals it at
    # integer α). Coordinates are independent, so divergences add over the dimension.
    rho = discrete_gaussian_zcdp(sigma2, Fraction(shift**2), dimension=1).privacy.rho
    divergence = _discrete_gaussian_renyi(shift, float(sigma2), alpha)
    assert divergence <= alpha * float(rho) * (1 + 1e-9)


def test_discrete_gaussian_guarantee_is_exact_and_names_its_theorem():
    guarantee = discrete_gaussian_zcdp(Fraction(5, 2), Fraction(3), dimension=1000)
    assert isinstance(guarantee, Guarantee)
    assert guarantee.privacy == ZCDP(Fraction(3, 5))
    assert guarantee.correction == 0
    assert guarantee.privacy.rho >= Fraction(3) / (2 * Fraction(5, 2))
    assert "Theorem 14" in guarantee.theorem and "2004.00010" in guarantee.theorem
    assert guarantee.to_dict()["privacy"] == {"kind": "zcdp", "rho": "3/5"}
    assert guarantee.to_dict()["correction"] == "0"


def test_discrete_gaussian_guarantee_does_not_depend_on_dimension():
    one = discrete_gaussian_zcdp(Fraction(1), Fraction(2), dimension=1)
    many = discrete_gaussian_zcdp(Fraction(1), Fraction(2), dimension=10**9)
    assert one.privacy == many.privacy == ZCDP(1)


def test_discrete_gaussian_matches_the_continuous_calibration():
    privacy = ZCDP("1/8")
    sigma2 = gaussian_sigma2(Fraction(4), privacy)
    assert discrete_gaussian_zcdp(sigma2, Fraction(4), dimension=7).privacy == privacy


@pytest.mark.parametrize(
    ("sigma2", "sensitivity", "dimension", "named"),
    [
        (1.0, Fraction(1), 1, "sigma2"),
        (Fraction(0), Fraction(1), 1, "sigma2"),
        (Fraction(-1), Fraction(1), 1, "sigma2"),
        (Fraction(1), 0.5, 1, "sensitivity_l2_squared"),
        (Fraction(1), Fraction(0), 1, "sensitivity_l2_squared"),
        (Fraction(1), Fraction(1), 0, "dimension"),
        (Fraction(1), Fraction(1), True, "dimension"),
        (Fraction(1), Fraction(1), 2.0, "dimension"),
    ],
)
def test_discrete_gaussian_refuses_bad_inputs(sigma2, sensitivity, dimension, named):
    with pytest.raises(PrivacyParameterError, match=named):
        discrete_gaussian_zcdp(sigma2, sensitivity, dimension)
