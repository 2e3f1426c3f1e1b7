"""Privacy parameters as exact rationals: pure ε-DP (Laplace) and ρ-zCDP (Gaussian).

Budgets are ``fractions.Fraction`` values so that accounting never rounds. A
float given by a user is read as the decimal it prints as (``0.1`` is 1/10),
which is the number the user wrote, not its binary approximation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from numbers import Rational
from typing import Any, ClassVar, NamedTuple, Protocol

from dpmm.errors import PrivacyParameterError, describe_value

__all__ = [
    "KINDS",
    "LEAST",
    "ZCDP",
    "BudgetKind",
    "LeastBudget",
    "PrivacyParameter",
    "PureDP",
    "amount_text",
    "budget_text",
    "exact_fraction",
    "privacy_from_config",
    "release_budget_from_config",
]

#: The range of a privacy parameter. Beyond it no budget means anything, and the noise
#: variance would leave the range of a float (ε² underflows to zero below about 1e-154).
SMALLEST = Fraction(1, 10**100)
LARGEST = Fraction(10**100)


def exact_fraction(value: object, name: str) -> Fraction:
    """``value`` as an exact Fraction in [1e-100, 1e100], or a PrivacyParameterError naming it.

    Example:
        >>> exact_fraction(0.1, "epsilon"), exact_fraction("1/3", "rho")
        (Fraction(1, 10), Fraction(1, 3))
    """
    problem = f"{name} must be a positive finite number, got {describe_value(value)}"
    out_of_range = f"{name} must be between 1e-100 and 1e100, got {describe_value(value)}"
    if isinstance(value, bool):
        raise PrivacyParameterError(problem)
    try:
        if isinstance(value, Rational):
            exact = Fraction(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise PrivacyParameterError(problem)
            exact = Fraction(repr(value))
        elif isinstance(value, Decimal):
            exact = _decimal_fraction(value, problem, out_of_range)
        elif isinstance(value, str):
            text = value.strip()
            exact = (
                Fraction(text)
                if "/" in text
                else _decimal_fraction(Decimal(text), problem, out_of_range)
            )
        else:
            raise PrivacyParameterError(problem)
    except PrivacyParameterError:
        raise
    except (ValueError, ZeroDivisionError, InvalidOperation, OverflowError):
        raise PrivacyParameterError(problem) from None
    if exact <= 0:
        raise PrivacyParameterError(problem)
    if not SMALLEST <= exact <= LARGEST:
        raise PrivacyParameterError(out_of_range)
    return exact


def _decimal_fraction(value: Decimal, problem: str, out_of_range: str) -> Fraction:
    if not value.is_finite():
        raise PrivacyParameterError(problem)
    # Checked before converting: Fraction(Decimal("1e999999999")) builds a billion-digit integer.
    if not value.is_zero() and not -101 <= value.adjusted() <= 100:
        raise PrivacyParameterError(out_of_range if value > 0 else problem)
    return Fraction(value)


class PrivacyParameter(Protocol):
    """What the error formulas need from a privacy guarantee."""

    #: The norm whose column maximum is the strategy's sensitivity (1 or 2).
    norm: int
    #: The noise distribution the guarantee is reached with.
    noise: str

    def noise_variance(self, sensitivity: float) -> float:
        """Variance of the noise added to every strategy answer."""

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready description with the exact value as a fraction string."""


@dataclass(frozen=True, init=False)
class PureDP:
    """Pure ε-differential privacy, reached with Laplace noise of scale ``Δ₁/ε``.

    Example:
        >>> PureDP(1).noise_variance(sensitivity=2.0)
        8.0
    """

    epsilon: Fraction
    norm: ClassVar[int] = 1
    noise: ClassVar[str] = "laplace"

    def __init__(self, epsilon: object) -> None:
        object.__setattr__(self, "epsilon", exact_fraction(epsilon, "epsilon"))

    def noise_variance(self, sensitivity: float) -> float:
        """``2 Δ₁² / ε²``: the variance of Laplace noise with scale ``Δ₁/ε``."""
        return 2.0 * sensitivity**2 / float(self.epsilon) ** 2

    def to_dict(self) -> dict[str, str]:
        """``{"kind": "pure", "epsilon": "1/2"}``: the exact ε as a fraction string."""
        return {"kind": "pure", "epsilon": str(self.epsilon)}


@dataclass(frozen=True, init=False)
class ZCDP:
    """ρ-zero-concentrated differential privacy, reached with Gaussian noise ``σ² = Δ₂²/(2ρ)``.

    Example:
        >>> ZCDP("1/2").noise_variance(sensitivity=1.0)
        1.0
    """

    rho: Fraction
    norm: ClassVar[int] = 2
    noise: ClassVar[str] = "gaussian"

    def __init__(self, rho: object) -> None:
        object.__setattr__(self, "rho", exact_fraction(rho, "rho"))

    def noise_variance(self, sensitivity: float) -> float:
        """``Δ₂² / (2ρ)``."""
        return sensitivity**2 / (2.0 * float(self.rho))

    def to_dict(self) -> dict[str, str]:
        """``{"kind": "zcdp", "rho": "1/2"}``: the exact ρ as a fraction string."""
        return {"kind": "zcdp", "rho": str(self.rho)}


class BudgetKind(NamedTuple):
    """What a budget kind is called: its parameter, symbol and description, and its type."""

    parameter: str
    symbol: str
    description: str
    budget_type: type[PureDP] | type[ZCDP]


#: The budget kinds, by the ``kind`` of their ``to_dict()`` form.
KINDS = {
    "pure": BudgetKind("epsilon", "ε", "pure ε-DP", PureDP),
    "zcdp": BudgetKind("rho", "ρ", "ρ-zCDP", ZCDP),
}


def amount_text(kind: str, amount: object) -> str:
    """``"ε = 1/2"`` or ``"ρ = 1/8"``: an amount of a budget kind, as given.

    Example:
        >>> amount_text("pure", Fraction(1, 2))
        'ε = 1/2'
    """
    return f"{KINDS[kind].symbol} = {amount}"


def budget_text(budget: object) -> str:
    """``"ε = 1/2"`` or ``"ρ = 1/8"`` for a budget's ``to_dict()`` form; ``"?"`` otherwise.

    Example:
        >>> budget_text({"kind": "zcdp", "rho": "1/8"})
        'ρ = 1/8'
    """
    if isinstance(budget, dict) and budget.get("kind") in KINDS:
        return amount_text(budget["kind"], budget.get(KINDS[budget["kind"]].parameter))
    return "?"


def privacy_from_config(section: object, where: str = "privacy") -> PureDP | ZCDP:
    """Read ``{kind: pure, epsilon: 1}`` or ``{kind: zcdp, rho: 0.5}`` (kind inferred if omitted).

    Reads a config's ``privacy`` section and a budget's ``to_dict()`` form alike; ``where``
    names the section in the error messages.

    Example:
        >>> privacy_from_config({"epsilon": "1/2"})
        PureDP(epsilon=Fraction(1, 2))
    """
    if not isinstance(section, Mapping):
        raise PrivacyParameterError(f"{where} must be a mapping such as {{epsilon: 1}}")
    section = dict[str, Any](section)
    kind = section.pop("kind", None)
    if kind is None:
        kinds = [name for name, known in KINDS.items() if known.parameter in section]
        if len(kinds) != 1:
            raise PrivacyParameterError(f"{where} needs exactly one of 'epsilon' or 'rho'")
        kind = kinds[0]
    if not isinstance(kind, str) or kind not in KINDS:
        raise PrivacyParameterError(
            f"{where}.kind: unknown privacy kind {kind!r} (expected one of: pure, zcdp)"
        )
    key, _, _, make = KINDS[kind]
    if key not in section:
        raise PrivacyParameterError(f"{where}.{key} is required for kind '{kind}'")
    value = section.pop(key)
    if section:
        raise PrivacyParameterError(f"{where}.{sorted(section)[0]}: unknown key")
    try:
        return make(value)
    except PrivacyParameterError as error:
        raise PrivacyParameterError(f"{where}.{error}") from None


#: The value of ``epsilon`` or ``rho`` asking for the least budget meeting the targets.
LEAST = "least"


@dataclass(frozen=True)
class LeastBudget:
    """A release budget derived from its accuracy targets: ``{epsilon: least, at_most: 2}``.

    The plan derives it (the least budget meeting every target with the strategy it chose,
    :mod:`dpmm.targets`) and the release spends exactly that. Until then the config is
    planned at :attr:`planning`: the cap, or 1.

    Attributes:
        kind: ``pure`` or ``zcdp``.
        cap: The most the release may spend (None: no cap).
    """

    kind: str
    cap: PureDP | ZCDP | None = None

    @property
    def planning(self) -> PureDP | ZCDP:
        """The budget the strategy is selected and the targets first checked at."""
        return self.cap if self.cap is not None else KINDS[self.kind].budget_type(1)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "pure", "epsilon": "least", "at_most": "2"}`` (``at_most`` null
        without a cap)."""
        parameter = KINDS[self.kind].parameter
        cap = None if self.cap is None else str(getattr(self.cap, parameter))
        return {"kind": self.kind, parameter: LEAST, "at_most": cap}


def release_budget_from_config(
    section: object, where: str = "privacy"
) -> PureDP | ZCDP | LeastBudget:
    """A release config's ``privacy`` section: a budget (:func:`privacy_from_config`), or
    ``{epsilon: least}`` / ``{rho: least}`` with an optional ``at_most`` cap.

    Example:
        >>> release_budget_from_config({"epsilon": "least", "at_most": 2})
        LeastBudget(kind='pure', cap=PureDP(epsilon=Fraction(2, 1)))
    """
    if not isinstance(section, Mapping):
        return privacy_from_config(section, where)
    least = [kind for kind, known in KINDS.items() if section.get(known.parameter) == LEAST]
    if not least:
        if "at_most" in section:
            raise PrivacyParameterError(
                f"{where}.at_most: caps a budget derived from the targets; give "
                f"{{epsilon: {LEAST}, at_most: ...}} or drop it"
            )
        return privacy_from_config(section, where)
    kind = least[0]
    parameter = KINDS[kind].parameter
    rest = {key: value for key, value in section.items() if key not in (parameter, "at_most")}
    if rest.get("kind", kind) != kind:
        raise PrivacyParameterError(f"{where}.kind: '{rest['kind']}' does not take {parameter}")
    rest.pop("kind", None)
    if rest:
        raise PrivacyParameterError(f"{where}.{sorted(rest)[0]}: unknown key")
    if "at_most" not in section:
        return LeastBudget(kind)
    try:
        cap = KINDS[kind].budget_type(section["at_most"])
    except PrivacyParameterError as error:
        problem = str(error).removeprefix(f"{parameter} ")
        raise PrivacyParameterError(f"{where}.at_most {problem}") from None
    return LeastBudget(kind, cap)
