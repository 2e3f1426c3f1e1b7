"""Privacy accounting: composition, conversions between notions, and noise calibration.

Every value that is recorded as spent is an exact ``Fraction``. Where a bound is only
available as a real number (the tight zCDP → (ε, δ) conversion), it is located in floating
point, rounded *up* to a rational, and the rounded value is checked again in 50-digit (or
finer) decimal arithmetic before it is returned, so that rounding only ever adds recorded
spend.

References:
    * [BS16] Bun, Steinke. "Concentrated Differential Privacy: Simplifications, Extensions,
      and Lower Bounds", TCC 2016 (arXiv 1605.02065).
    * [CKS20] Canonne, Kamath, Steinke. "The Discrete Gaussian for Differential Privacy",
      NeurIPS 2020 (arXiv 2004.00010).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from numbers import Rational
from typing import TypeVar

from dpmm.errors import PrivacyParameterError, describe_value
from dpmm.privacy.params import ZCDP, PureDP, exact_fraction
from dpmm.privacy.samplers import sampler_sigma2

__all__ = [
    "ApproxDP",
    "Guarantee",
    "compose",
    "discrete_gaussian_zcdp",
    "exact_delta",
    "gaussian_sigma2",
    "laplace_scale",
    "pure_to_approx",
    "pure_to_zcdp",
    "zcdp_to_approx",
]

#: Significant bits kept when a real-valued ε is rounded up to a dyadic rational.
_SIGNIFICANT_BITS = 48
#: The rounded ε always has a denominator of at least 2**_MIN_DENOMINATOR_BITS.
_MIN_DENOMINATOR_BITS = 40
#: Digits of the decimal arithmetic that verifies a converted ε (more when α is extreme).
_VERIFY_DIGITS = 60

_DISCRETE_GAUSSIAN_THEOREM = (
    "Canonne, Kamath, Steinke 2020 (arXiv 2004.00010), Theorem 14: multivariate discrete "
    "Gaussian satisfies (1/2)·sum_j Δ_j²/σ_j²-zCDP"
)


def exact_delta(value: object, name: str = "delta") -> Fraction:
    """``value`` as an exact Fraction in [0, 1), or a PrivacyParameterError naming it.

    Floats are read as the decimal they print as, as for ε and ρ. Zero is allowed; a
    positive δ below 1e-100 is refused like any other parameter out of range.

    Example:
        >>> exact_delta(1e-6), exact_delta(0)
        (Fraction(1, 1000000), Fraction(0, 1))
    """
    if (
        not isinstance(value, bool)
        and isinstance(value, int | float | Decimal | Rational)
        and value == 0
    ):
        return Fraction(0)
    problem = f"{name} must be a number at least 0 and less than 1, got {describe_value(value)}"
    try:
        exact = exact_fraction(value, name)
    except PrivacyParameterError as error:
        if "between" in str(error):  # positive but below 1e-100 (or huge)
            raise
        raise PrivacyParameterError(problem) from None
    if exact >= 1:
        raise PrivacyParameterError(problem)
    return exact


@dataclass(frozen=True, init=False)
class ApproxDP:
    """Approximate (ε, δ)-differential privacy, with ε > 0 and 0 ≤ δ < 1 exact.

    Example:
        >>> ApproxDP("1/2", 1e-6).to_dict()
        {'kind': 'approx', 'epsilon': '1/2', 'delta': '1/1000000'}
    """

    epsilon: Fraction
    delta: Fraction

    def __init__(self, epsilon: object, delta: object) -> None:
        object.__setattr__(self, "epsilon", exact_fraction(epsilon, "epsilon"))
        object.__setattr__(self, "delta", exact_delta(delta, "delta"))

    def to_dict(self) -> dict[str, str]:
        """``{"kind": "approx", "epsilon": "1/2", "delta": "1/1000000"}``: exact fractions."""
        return {"kind": "approx", "epsilon": str(self.epsilon), "delta": str(self.delta)}


Budget = TypeVar("Budget", PureDP, ZCDP, ApproxDP)


def compose(budgets: Sequence[Budget]) -> Budget:
    """The exact sum of budgets of one kind: ε's add, ρ's add, (ε, δ)'s add term by term.

    Pure DP and (ε, δ) use basic sequential composition; zCDP composes additively [BS16,
    Lemma 2.3]. Mixing kinds is refused: convert explicitly first (``pure_to_zcdp``,
    ``pure_to_approx``, ``zcdp_to_approx``), because the conversion is a choice.

    Example:
        >>> compose([PureDP("1/3")] * 3)
        PureDP(epsilon=Fraction(1, 1))
    """
    if isinstance(budgets, PureDP | ZCDP | ApproxDP) or not isinstance(budgets, Sequence):
        raise PrivacyParameterError(
            f"compose needs a list of budgets, got {describe_value(budgets)}"
        )
    if not budgets:
        raise PrivacyParameterError("compose needs at least one budget, got an empty list")
    kind = type(budgets[0])
    if kind not in (PureDP, ZCDP, ApproxDP):
        raise PrivacyParameterError(
            f"compose accepts PureDP, ZCDP or ApproxDP budgets, got {describe_value(budgets[0])}"
        )
    others = sorted({type(budget).__name__ for budget in budgets if type(budget) is not kind})
    if others:
        raise PrivacyParameterError(
            f"cannot compose {kind.__name__} with {', '.join(others)}: convert explicitly first"
        )
    if kind is PureDP:
        return PureDP(sum((budget.epsilon for budget in budgets), Fraction(0)))
    if kind is ZCDP:
        return ZCDP(sum((budget.rho for budget in budgets), Fraction(0)))
    delta = sum((budget.delta for budget in budgets), Fraction(0))
    if delta >= 1:
        raise PrivacyParameterError(f"the composed delta is {delta}, which is not less than 1")
    return ApproxDP(sum((budget.epsilon for budget in budgets), Fraction(0)), delta)


def pure_to_zcdp(privacy: PureDP) -> ZCDP:
    """ε-DP implies (ε²/2)-zCDP [BS16, Proposition 1.4]; exact.

    Example:
        >>> pure_to_zcdp(PureDP(1))
        ZCDP(rho=Fraction(1, 2))
    """
    _require(privacy, PureDP, "privacy")
    return ZCDP(privacy.epsilon**2 / 2)


def pure_to_approx(privacy: PureDP) -> ApproxDP:
    """ε-DP is (ε, 0)-DP, by definition.

    Example:
        >>> pure_to_approx(PureDP("1/2")).to_dict()
        {'kind': 'approx', 'epsilon': '1/2', 'delta': '0'}
    """
    _require(privacy, PureDP, "privacy")
    return ApproxDP(privacy.epsilon, 0)


def zcdp_to_approx(privacy: ZCDP, delta: object) -> ApproxDP:
    """The least ε (rounded up) such that ρ-zCDP implies (ε, δ)-DP, by [CKS20, Corollary 13].

    Corollary 13 states that ρ-zCDP implies (ε, δ)-DP for
    ``δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1−1/α)^α``. With ``β = α − 1`` and
    ``t = ε − ρ`` the logarithm of the bracket is
    ``β(βρ − t) + β·log β − (1+β)·log(1+β)``, convex in β with derivative
    ``2βρ − t − log(1 + 1/β)``, and decreasing in t. The optimal β is found by bisection on
    the derivative and the least t by bisection on ``log δ``, both in floating point. The
    resulting ε is rounded up to a dyadic rational with at least 48 significant bits (and a
    denominator of at least 2⁴⁰), then the bound at that ε and a fixed α is evaluated again
    in decimal arithmetic of at least 60 digits; the ε is returned only if that δ is at most
    the requested one (any single α gives a valid bound, since δ is an infimum).

    Args:
        privacy: the ρ-zCDP guarantee.
        delta: the target δ, with 0 < δ < 1.

    Returns:
        ``ApproxDP(ε, δ)`` with δ exactly the requested value.

    Example:
        Tighter than the classic ``ρ + 2·sqrt(ρ·log(1/δ))`` [BS16, Proposition 1.3]:

        >>> approx = zcdp_to_approx(ZCDP("1/2"), "1e-6")
        >>> 4.9 < float(approx.epsilon) < 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
        True
    """
    _require(privacy, ZCDP, "privacy")
    target = _positive_delta(delta)
    rho = float(privacy.rho)
    log_target = math.log(target.numerator) - math.log(target.denominator)

    def log_delta(excess: float) -> float:
        return _log_delta_float(_best_beta(rho, excess), rho, excess)

    smallest = Fraction(1, 10**100)
    if log_delta(float(smallest - privacy.rho)) <= log_target:
        # ρ-zCDP also bounds the total variation distance, so a tiny ρ reaches this δ at
        # any ε > 0; record the smallest ε a budget can hold, once verified.
        excess = smallest - privacy.rho
        if _verified_log_delta_below(_best_beta(rho, float(excess)), privacy.rho, excess, target):
            return ApproxDP(smallest, target)
    low, high = -rho, 2.0 * math.sqrt(rho * -log_target)  # the classic bound lies above
    for _ in range(400):
        middle = 0.5 * (low + high)
        if not low < middle < high:
            break
        if log_delta(middle) <= log_target:
            high = middle
        else:
            low = middle
    step = max(abs(high), rho, 1e-300) * 1e-12
    for _ in range(60):
        epsilon = _round_up(privacy.rho + Fraction(high + step))
        excess = epsilon - privacy.rho
        beta = _best_beta(rho, float(excess))
        if _verified_log_delta_below(beta, privacy.rho, excess, target):
            return ApproxDP(epsilon, target)
        step *= 4
    raise PrivacyParameterError(
        f"could not verify an epsilon for rho={privacy.rho} and delta={target}"
    )


def laplace_scale(sensitivity_l1: object, privacy: PureDP) -> Fraction:
    """The Laplace scale ``Δ₁/ε`` reaching ε-DP for L1 sensitivity Δ₁; exact.

    A float sensitivity is taken to be a rounded real number: it is replaced by the next
    float above it, read exactly, so the scale can only grow.

    Example:
        >>> laplace_scale(Fraction(2), PureDP("1/2"))
        Fraction(4, 1)
    """
    _require(privacy, PureDP, "privacy")
    return _sensitivity(sensitivity_l1, "sensitivity_l1") / privacy.epsilon


def gaussian_sigma2(sensitivity_l2_squared: object, privacy: ZCDP) -> Fraction:
    """The Gaussian variance ``Δ₂²/(2ρ)`` reaching ρ-zCDP [BS16, Proposition 1.6]; exact.

    A float squared sensitivity is replaced by the next float above it, read exactly. Above
    σ ≈ 2¹⁵ the variance is rounded up (by a relative amount below 1/σ) to one the exact
    sampler draws in int64 (:func:`~dpmm.privacy.samplers.sampler_sigma2`): more noise,
    never less, and the discrete Gaussian's guarantee is computed for the rounded value.

    Example:
        >>> gaussian_sigma2(Fraction(3), ZCDP("1/2"))
        Fraction(3, 1)
    """
    _require(privacy, ZCDP, "privacy")
    exact = _sensitivity(sensitivity_l2_squared, "sensitivity_l2_squared") / (2 * privacy.rho)
    return sampler_sigma2(exact)


@dataclass(frozen=True)
class Guarantee:
    """A privacy guarantee together with the published result it rests on.

    ``correction`` is the amount added to the continuous-Gaussian value by the theorem
    (zero for [CKS20, Theorem 14], which is stated without one); it is recorded so that a
    manifest shows it.
    """

    privacy: ZCDP
    theorem: str
    correction: Fraction = Fraction(0)

    def to_dict(self) -> dict[str, object]:
        """``{"privacy": {...}, "theorem": "...", "correction": "0"}``."""
        return {
            "privacy": self.privacy.to_dict(),
            "theorem": self.theorem,
            "correction": str(self.correction),
        }


def discrete_gaussian_zcdp(
    sigma2: object, sensitivity_l2_squared: object, dimension: int
) -> Guarantee:
    """The zCDP guarantee of adding independent discrete Gaussians ``N_Z(0, σ²)`` to Z^d.

    [CKS20, Theorem 14] (multivariate discrete Gaussian satisfies concentrated DP): for
    ``σ_1, …, σ_d > 0`` and an integer-valued query ``q: X^n → Z^d`` with
    ``sum_j (q_j(x) − q_j(x'))² / σ_j² ≤ ε²`` on neighbours, ``M(x) = q(x) + Y`` with
    independent ``Y_j ~ N_Z(0, σ_j²)`` satisfies ``ε²/2``-zCDP. With one σ² and squared L2
    sensitivity Δ², that is ``ρ = Δ²/(2σ²)``, for every σ > 0 and every dimension: the
    theorem carries no correction term and no condition on σ. (It rests on the discrete
    Gaussian being σ²-subgaussian, ``E[exp(tY)] ≤ exp(t²σ²/2)`` for all real t, which is
    why the multivariate bound equals the continuous one.) The query must be integer-valued
    (a quantized strategy), and σ² must be the exact rational the sampler uses.

    Args:
        sigma2: the variance parameter σ² of every coordinate, an exact positive rational.
        sensitivity_l2_squared: Δ², the squared L2 sensitivity of the integer query.
        dimension: the number d of coordinates (at least 1).

    Example:
        >>> discrete_gaussian_zcdp(Fraction(4), Fraction(2), dimension=10).privacy
        ZCDP(rho=Fraction(1, 4))
    """
    variance = _exact_rational(sigma2, "sigma2")
    sensitivity = _exact_rational(sensitivity_l2_squared, "sensitivity_l2_squared")
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise PrivacyParameterError(
            f"dimension must be a positive integer, got {describe_value(dimension)}"
        )
    correction = Fraction(0)
    return Guarantee(
        privacy=ZCDP(sensitivity / (2 * variance) + correction),
        theorem=_DISCRETE_GAUSSIAN_THEOREM,
        correction=correction,
    )


# -- helpers -------------------------------------------------------------------------------


def _require(value: object, kind: type, name: str) -> None:
    if not isinstance(value, kind):
        raise PrivacyParameterError(
            f"{name} must be a {kind.__name__}, got {describe_value(value)}"
        )


def _positive_delta(value: object) -> Fraction:
    delta = exact_delta(value, "delta")
    if delta == 0:
        raise PrivacyParameterError("delta must be positive to convert zCDP to (epsilon, delta)")
    return delta


def _exact_rational(value: object, name: str) -> Fraction:
    """An exact positive rational; floats are refused because the sampler needs the value."""
    if isinstance(value, bool) or not isinstance(value, Rational):
        raise PrivacyParameterError(
            f"{name} must be an exact rational (int or Fraction), got {describe_value(value)}"
        )
    return exact_fraction(value, name)


def _sensitivity(value: object, name: str) -> Fraction:
    """An exact positive sensitivity; a float is rounded up to the next float, read exactly."""
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        return Fraction(math.nextafter(value, math.inf))
    if isinstance(value, bool) or not isinstance(value, Rational) or value <= 0:
        raise PrivacyParameterError(
            f"{name} must be a positive finite number, got {describe_value(value)}"
        )
    return Fraction(value)


def _round_up(value: Fraction) -> Fraction:
    """The least dyadic rational ≥ value with 48 significant bits and denominator ≥ 2⁴⁰."""
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    bits = max(_MIN_DENOMINATOR_BITS, _SIGNIFICANT_BITS - exponent)
    scale = 1 << bits
    return Fraction(-((-value.numerator * scale) // value.denominator), scale)


def _bisect(increasing: Callable[[float], float], low: float, high: float) -> float:
    """The root of an increasing function on [low, high], to the last bit."""
    for _ in range(2000):
        middle = 0.5 * (low + high)
        if not low < middle < high:
            break
        if increasing(middle) < 0:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def _best_beta(rho: float, excess: float) -> float:
    """The β = α − 1 minimizing the Corollary 13 bound for ε = ρ + excess (float)."""

    def slope(log_beta: float) -> float:
        beta = math.exp(log_beta)
        return 2.0 * beta * rho - excess - math.log1p(1.0 / beta)

    return math.exp(_bisect(slope, -700.0, 700.0))


def _log_delta_float(beta: float, rho: float, excess: float) -> float:
    """log of the Corollary 13 bracket at α = 1 + β, for ε = ρ + excess (float)."""
    if beta > 1.0:
        entropy = -beta * math.log1p(1.0 / beta) - math.log1p(beta)
    else:
        entropy = beta * math.log(beta) - (1.0 + beta) * math.log1p(beta)
    return beta * (beta * rho - excess) + entropy


def _to_decimal(value: Fraction, context: Context) -> Decimal:
    return context.divide(Decimal(value.numerator), Decimal(value.denominator))


def _verified_log_delta_below(
    beta: float, rho: Fraction, excess: Fraction, target: Fraction
) -> bool:
    """Whether the Corollary 13 bracket at α = 1 + β is at most ``target``, in decimal.

    β is a float, hence an exact dyadic rational; the precision grows with |log₁₀ β| so that
    ``1 + β`` keeps all of β's digits.
    """
    if not 0.0 < beta < math.inf:
        return False
    exact_beta = Decimal(beta)
    context = Context(prec=_VERIFY_DIGITS + abs(exact_beta.adjusted()))
    one_plus_beta = context.add(Decimal(1), exact_beta)
    log_beta = context.ln(exact_beta)
    log_one_plus_beta = context.ln(one_plus_beta)
    quadratic = context.multiply(
        exact_beta,
        context.subtract(
            context.multiply(exact_beta, _to_decimal(rho, context)), _to_decimal(excess, context)
        ),
    )
    entropy = context.subtract(
        context.multiply(exact_beta, log_beta), context.multiply(one_plus_beta, log_one_plus_beta)
    )
    log_delta = context.add(quadratic, entropy)
    log_target = context.subtract(
        context.ln(Decimal(target.numerator)), context.ln(Decimal(target.denominator))
    )
    # Every operation above is correctly rounded at ≥ 60 digits; 1e-40 of the largest
    # magnitude involved is a margin far above their accumulated error.
    magnitude = max(abs(quadratic), abs(entropy), abs(log_target), Decimal(1))
    margin = context.multiply(magnitude, Decimal("1e-40"))
    return context.add(log_delta, margin) <= log_target
