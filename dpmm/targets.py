"""Accuracy targets: what each workload group must reach, and the least budget reaching all.

A workload group may state a ``target``:

* ``{rmse: R}``: its expected root mean squared error per query at most ``R``;
* ``{half_width: H, confidence: C}``: every query's ``C``-level interval within ``±H``: the
  half-width a release publishes at that level (``answers.parquet``'s ``half_width`` when
  ``release.confidence`` is ``C``; :mod:`dpmm.pipeline.interval_stage`), or, where none is
  given, the normal approximation (``z_C`` standard errors: 1.96 at ``C = 0.95``).

Either may be relative to a public reference (``relative_to``): one published number, or a
public file with one value per query of the group (:mod:`dpmm.workload.reference` reads it).
``R`` and ``H`` are then fractions of each query's reference: query ``q`` needs
``h_q ≤ H · |ref_q|`` (or ``se_q ≤ R · |ref_q|``, its RMSE being its standard error), so
the figure is the largest ``h_q / |ref_q|`` and the query reaching it binds.

Every standard error of a release scales with the standard deviation of its noise, whose
exact variance follows from the strategy and the budget alone. So the plan's dry run at
the config's budget gives each group's figure at any budget, and :func:`check_targets`
says which targets that budget meets and the least budget that meets each one and all of
them, naming the target that binds: judged by the exact discrete noise the release would
draw, on four significant digits of ε, or under ρ as ``Δ₂²/(2m)`` for a whole σ² = m
(the sampler draws a whole σ² exactly and rounds most other values up). It keeps the
plan's strategy: a budget does not change which strategy is best under pure ε; under ρ
the budget moves only the discrete noise. A published half-width is not quite
proportional to the noise's standard deviation (a lattice's terms, a discrete law's
shape): the budget is found with the half-width's ratio to it taken as fixed, that ratio
re-measured at the budget found until it stays, and the budget stated meets the target
by the published computation itself.

Example:
    >>> target = parse_target({"half_width": 10, "confidence": 0.95}, "workload[0].target")
    >>> target.describe(), round(target.figure(np.array([2.0, 4.0])), 3)
    ('±10 at 95 %', 7.84)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from scipy.special import ndtri

from dpmm.errors import ConfigError, DpmmError, describe_value
from dpmm.privacy.params import LARGEST, ZCDP, PureDP

__all__ = [
    "GroupTarget",
    "Reference",
    "Target",
    "TargetReport",
    "budget_noise",
    "check_targets",
    "error_factor",
    "least_budget_text",
    "parse_target",
]

TARGET_KEYS = {
    "rmse": ("rmse", "relative_to"),
    "half_width": ("half_width", "confidence", "relative_to"),
}
#: The keys of a reference file (``relative_to: {file: ..., column: ...}``), and the
#: column read when none is named.
REFERENCE_KEYS = ("file", "column")
REFERENCE_COLUMN = "value"
#: Significant digits of the least budget the plan states.
DIGITS = 4
#: Under ρ, the four-digit budget is stated unless an exact σ² costs less by this share.
PRECISION = 1e-3


@dataclass(frozen=True, eq=False)
class Reference:
    """What a relative target is relative to: public input, never the data.

    Attributes:
        source: Its config form: ``{"value": N}`` for one published number, or
            ``{"file": PATH, "column": NAME}`` (``PATH`` as the config gives it) with the
            ``sha256`` of the file's bytes once it is read.
        magnitudes: ``|ref_q|`` per query of the group, in row order (one value for a
            number; None for a file not read yet).
    """

    source: Mapping[str, Any]
    magnitudes: np.ndarray | None = None

    def of(self, standard_errors: np.ndarray) -> np.ndarray:
        """The standard errors over their queries' references."""
        if self.magnitudes is None:
            raise DpmmError(
                f"the reference file {self.source['file']} was not read (load the config "
                "with dpmm.config.load_config)"
            )
        return standard_errors / self.magnitudes

    def describe(self) -> str:
        """``48,842`` or the file's name."""
        if "value" in self.source:
            return f"{self.source['value']:,.6g}"
        return Path(str(self.source["file"])).name

    def to_dict(self) -> float | dict[str, Any]:
        """The config form: the number, or ``{file, column[, sha256]}``."""
        return self.source["value"] if "value" in self.source else dict(self.source)


@dataclass(frozen=True)
class Target:
    """A workload group's accuracy target.

    Attributes:
        kind: ``rmse`` or ``half_width``.
        value: The largest RMSE per query, or half-width of any query's interval (a fraction
            of each query's reference, for a relative target).
        confidence: The intervals' level (``half_width`` only).
        reference: What the target is relative to (None: an absolute target).
    """

    kind: str
    value: float
    confidence: float | None = None
    reference: Reference | None = field(default=None, compare=False)

    def _scaled(
        self, standard_errors: np.ndarray, half_widths: np.ndarray | None = None
    ) -> np.ndarray:
        """Each query's figure: its standard error, or its half-width (the one published,
        else ``z_C`` standard errors), over its reference."""
        errors = standard_errors
        if self.kind == "half_width":
            errors = (
                half_widths
                if half_widths is not None
                else float(ndtri((1 + self.confidence) / 2)) * standard_errors
            )
        return errors if self.reference is None else self.reference.of(errors)

    def figure(self, standard_errors: np.ndarray, half_widths: np.ndarray | None = None) -> float:
        """What the target bounds, for answers with these standard errors (and, for a
        ``half_width`` target, these published half-widths at its confidence)."""
        if not standard_errors.size:
            return 0.0
        if self.kind == "rmse" and self.reference is None:
            return float(np.sqrt(np.mean(np.square(standard_errors))))
        return float(np.max(self._scaled(standard_errors, half_widths)))

    def binding_query(
        self, standard_errors: np.ndarray, half_widths: np.ndarray | None = None
    ) -> int | None:
        """The index of the query whose figure is the group's (None for an absolute RMSE,
        which is a mean over the group's queries)."""
        if not standard_errors.size or (self.kind == "rmse" and self.reference is None):
            return None
        return int(np.argmax(self._scaled(standard_errors, half_widths)))

    def describe(self) -> str:
        """``RMSE ≤ 50``, ``±10 at 95 %`` or ``±5 % of counties.csv at 95 %``."""
        if self.reference is not None:
            share = f"{100 * self.value:,.6g} % of {self.reference.describe()}"
            if self.kind == "rmse":
                return f"RMSE ≤ {share}"
            return f"±{share} at {100 * self.confidence:g} %"
        if self.kind == "rmse":
            return f"RMSE ≤ {self.value:,.6g}"
        return f"±{self.value:,.6g} at {100 * self.confidence:g} %"

    def figure_text(self, figure: float) -> str:
        """A figure as the target states it: a number, or a percentage of the reference."""
        if self.reference is not None:
            return f"{100 * figure:.4g} %"
        return f"{figure:,.4g}"

    def to_dict(self) -> dict[str, Any]:
        """The config form: ``{rmse: R}`` or ``{half_width: H, confidence: C}``, with
        ``relative_to`` for a relative target."""
        found: dict[str, Any] = (
            {"rmse": self.value}
            if self.kind == "rmse"
            else {"half_width": self.value, "confidence": self.confidence}
        )
        if self.reference is not None:
            found["relative_to"] = self.reference.to_dict()
        return found


def _positive(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{path}: must be a positive number, got {describe_value(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{path}: must be a positive finite number, got {describe_value(value)}")
    return float(value)


def parse_target(value: object, path: str) -> Target:
    """A group's ``target`` section (a reference file is named here, read by
    :func:`dpmm.workload.reference.read_reference`).

    Raises:
        ConfigError: one sentence naming the bad key.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{path}: must be a mapping like {{rmse: 50}} or {{half_width: 10, "
            f"confidence: 0.95}}, got {describe_value(value)}"
        )
    kinds = [kind for kind in TARGET_KEYS if kind in value]
    if len(kinds) != 1:
        raise ConfigError(f"{path}: needs exactly one of 'rmse' or 'half_width'")
    kind = kinds[0]
    for key in value:
        if key not in TARGET_KEYS[kind]:
            allowed = ", ".join(TARGET_KEYS[kind])
            raise ConfigError(f"{path}.{key}: unknown key for a {kind} target (allowed: {allowed})")
    target = _positive(value[kind], f"{path}.{kind}")
    reference = None
    if "relative_to" in value:
        reference = _reference(value["relative_to"], f"{path}.relative_to")
    if kind == "rmse":
        return Target("rmse", target, reference=reference)
    if "confidence" not in value:
        raise ConfigError(f"{path}.confidence: is required with half_width (e.g. 0.95)")
    confidence = value["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise ConfigError(f"{path}.confidence: must be a number between 0 and 1")
    if not 0 < confidence < 1:
        raise ConfigError(f"{path}.confidence: must be between 0 and 1, got {confidence!r}")
    return Target("half_width", target, float(confidence), reference)


def _reference(value: object, path: str) -> Reference:
    """``relative_to``: a published number, or a file named (and read later)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value == 0:
            raise ConfigError(
                f"{path}: a reference must be a finite number other than 0, got {value!r}"
            )
        return Reference({"value": value}, np.array([abs(float(value))]))
    if not isinstance(value, Mapping) or not isinstance(value.get("file"), str):
        raise ConfigError(
            f"{path}: must be a published number or {{file: PATH, column: NAME}}, got "
            f"{describe_value(value)}"
        )
    for key in value:
        if key not in REFERENCE_KEYS:
            raise ConfigError(f"{path}.{key}: unknown key (allowed: {', '.join(REFERENCE_KEYS)})")
    column = value.get("column", REFERENCE_COLUMN)
    if not isinstance(column, str) or not column:
        raise ConfigError(f"{path}.column: must be a column name, got {describe_value(column)}")
    return Reference({"file": value["file"], "column": column})


Budget = PureDP | ZCDP
Noise = TypeVar("Noise")


@dataclass(frozen=True)
class GroupTarget:
    """One group's target at the plan's budget.

    Attributes:
        name: The workload group.
        target: Its target.
        achieved: The target's figure at the plan's budget.
        needed: The least budget meeting it (None: none the samplers can draw).
        query: The label of the query whose figure is the group's (None for an absolute
            RMSE target, a mean over the group): public, made from the config alone.
    """

    name: str
    target: Target
    achieved: float
    needed: Budget | None
    query: str | None = None

    @property
    def met(self) -> bool:
        """Whether the plan's budget meets the target."""
        return self.achieved <= self.target.value

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "group": self.name,
            "target": self.target.to_dict(),
            "achieved": self.achieved,
            "met": self.met,
            "needed_budget": self.needed.to_dict() if self.needed else None,
            "binding_query": self.query,
        }


@dataclass(frozen=True)
class TargetReport:
    """Every target at the plan's budget, and the least budget meeting them all.

    Attributes:
        groups: One entry per group with a target, in workload order.
        least: The least budget meeting every target (None: out of the samplers' reach).
        binding: The group whose target sets ``least``.
    """

    groups: tuple[GroupTarget, ...]
    least: Budget | None
    binding: str | None

    @property
    def binding_query(self) -> str | None:
        """The label of the query that binds in the binding group (None: see GroupTarget)."""
        found = [group.query for group in self.groups if group.name == self.binding]
        return found[0] if found else None

    def binding_text(self) -> str:
        """``'pairs'`` or ``'counties', query 'county=7'``: what binds, for a sentence."""
        query = self.binding_query
        return f"'{self.binding}'" + (f", query '{query}'" if query is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "least_budget": self.least.to_dict() if self.least else None,
            "binding_group": self.binding,
            "binding_query": self.binding_query,
            "groups": [group.to_dict() for group in self.groups],
        }


def least_budget_text(budget: Budget | None) -> str:
    """``ε ≥ 2.829``: a least budget, with its exact fraction when the digits are not it.

    Example:
        >>> least_budget_text(PureDP("2829/1000")), least_budget_text(ZCDP("1/3"))
        ('ε ≥ 2.829', 'ρ ≥ 0.3333 (exactly 1/3)')
    """
    if budget is None:
        return "out of reach"
    symbol, amount = ("ε", budget.epsilon) if isinstance(budget, PureDP) else ("ρ", budget.rho)
    text = f"{float(amount):.4g}"
    return f"{symbol} ≥ {text}" + ("" if Fraction(text) == amount else f" (exactly {amount})")


def budget_noise(
    noise_variance: Callable[[Budget], Noise], privacy: Budget, measurement: Budget
) -> Callable[[Budget], Noise]:
    """The variance of one noise draw (or anything else about the noise) as a function of
    the whole budget, from its function of the measurement's budget.

    Private truncation thresholds (pure ε only) take their shares of the whole budget
    first, so the measurement keeps ``measurement.epsilon / privacy.epsilon`` of any budget.

    Example:
        >>> variance = budget_noise(lambda b: 2 / float(b.epsilon) ** 2, PureDP(1), PureDP("3/4"))
        >>> round(variance(PureDP(2)), 4)   # the measurement keeps ε = 3/2 of ε = 2
        0.8889
    """
    if not isinstance(privacy, PureDP) or measurement == privacy:
        return noise_variance
    kept = measurement.epsilon / privacy.epsilon

    def variance(budget: Budget) -> Noise:
        return noise_variance(PureDP(budget.epsilon * kept))

    return variance


def error_factor(
    noise_variance: Callable[[Budget], float], privacy: Budget, budget: Budget
) -> float | None:
    """What every standard error stated at ``privacy`` is multiplied by at ``budget``:
    ``√(v(budget) / v(privacy))`` (None: the samplers cannot draw that budget's noise).

    Example:
        >>> variance = lambda b: 2 / float(b.epsilon) ** 2  # Laplace, Δ₁ = 1
        >>> error_factor(variance, PureDP(1), PureDP(4))
        0.25
    """
    try:
        return math.sqrt(noise_variance(budget) / noise_variance(privacy))
    except DpmmError:  # noise the samplers cannot draw, or too little to state
        return None


def check_targets(
    targets: Sequence[tuple[str, Target, np.ndarray]],
    privacy: Budget,
    noise_variance: Callable[[Budget], float],
    *,
    gaussian_constant: Fraction | None = None,
    label: Callable[[str, int], str] | None = None,
    half_widths: HalfWidths | None = None,
) -> TargetReport:
    """The targets met at ``privacy`` and the least budget meeting each and all.

    Args:
        targets: ``(group name, target, its answers' standard errors at privacy)``.
        privacy: The budget the standard errors are for.
        noise_variance: The exact variance of one noise draw at a budget (the strategy's).
        gaussian_constant: Under ρ, ``Δ₂²/2`` of the measured integer strategy: ``σ² = c/ρ``.
            The sampler draws a σ² of few digits exactly but rounds most others up (by up
            to ``1/σ``), so where that matters (a small σ²) the least ρ is ``c/σ²`` for such
            a σ², an exact rational; otherwise it has four significant digits.
        label: ``label(group name, query index)``: the query's label, to name the query
            that binds in each group (None: queries are not named).
        half_widths: ``half_widths(group name, confidence, budget)``: the half-widths a
            release at ``budget`` publishes for the group's answers at that level, which
            ``half_width`` targets are judged by (None, or None returned: ``z_C`` standard
            errors).

    Example:
        >>> from dpmm.privacy import PureDP
        >>> variance = lambda budget: 2 / float(budget.epsilon) ** 2  # Laplace, Δ₁ = 1
        >>> errors = np.full(4, 2 ** 0.5)  # σ at ε = 1
        >>> report = check_targets([("counts", Target("rmse", 0.5), errors)], PureDP(1), variance)
        >>> report.groups[0].met, report.least, report.binding
        (False, PureDP(epsilon=Fraction(2829, 1000)), 'counts')
    """
    base = noise_variance(privacy)
    groups = []
    for name, target, errors in targets:
        errors = np.asarray(errors, dtype=np.float64)
        published = None
        if half_widths is not None and target.kind == "half_width":
            published = _published(half_widths, name, target, errors)
        widths = published(privacy) if published is not None else None
        achieved = target.figure(errors, widths)
        worst = target.binding_query(errors, widths)
        query = label(name, worst) if label is not None and worst is not None else None

        solve = _solver(privacy, target.value, noise_variance, gaussian_constant)
        needed = solve(base, achieved)
        if published is not None and needed is not None and widths is not None:
            figure_at = _figure_at(target, errors, published)
            needed = _settled(needed, solve, figure_at, target.value, noise_variance)
        groups.append(GroupTarget(name, target, achieved, needed, query))
    reachable = [group for group in groups if group.needed is not None]
    if len(reachable) < len(groups) or not groups:
        return TargetReport(tuple(groups), None, None)
    binding = max(reachable, key=lambda group: _amount(group.needed))
    return TargetReport(tuple(groups), binding.needed, binding.name)


#: Rounds of re-measuring a published half-width's ratio to the noise's deviation at the
#: budget found (it settles in one or two: the ratio barely moves with the budget).
SETTLE_ROUNDS = 6

#: ``half_widths(group name, confidence, budget)``: a group's published half-widths.
HalfWidths = Callable[[str, float, "Budget"], np.ndarray | None]


def _published(
    half_widths: HalfWidths, name: str, target: Target, errors: np.ndarray
) -> Callable[[Budget], np.ndarray | None] | None:
    """The group's published half-widths at its target's confidence, by budget (None when
    none are known: then the target is judged by ``z_C`` standard errors)."""
    known: dict[tuple[type, Fraction], np.ndarray | None] = {}

    def at(budget: Budget) -> np.ndarray | None:
        key = (type(budget), _amount(budget))
        if key not in known:
            known[key] = half_widths(name, float(target.confidence), budget)
        return known[key]

    return at


def _solver(
    privacy: Budget,
    value: float,
    noise_variance: Callable[[Budget], float],
    gaussian_constant: Fraction | None,
) -> Callable[[float, float], Budget | None]:
    """``solve(variance, figure)``: the least budget whose noise variance is at most the one
    taking ``figure`` (at ``variance``) to ``value``, the figure proportional to the noise's
    deviation; None: no budget the samplers can draw."""

    def solve(variance: float, figure: float) -> Budget | None:
        allowed = variance * (value / figure) ** 2 if figure > 0 else math.inf
        needed = _least_budget(privacy, allowed, noise_variance)
        if isinstance(privacy, ZCDP) and gaussian_constant is not None:
            exact = _least_rho(gaussian_constant, allowed, noise_variance)
            # Four digits, unless a σ² the sampler draws exactly costs clearly less.
            if needed is None or (exact is not None and exact.rho * (1 + PRECISION) < needed.rho):
                needed = exact
        return needed

    return solve


def _figure_at(
    target: Target, errors: np.ndarray, published: Callable[[Budget], np.ndarray | None]
) -> Callable[[Budget], float]:
    """The target's figure by the half-widths published at a budget."""
    return lambda budget: target.figure(errors, published(budget))


def _settled(
    needed: Budget,
    solve: Callable[[float, float], Budget | None],
    figure_at: Callable[[Budget], float],
    value: float,
    noise_variance: Callable[[Budget], float],
) -> Budget | None:
    """The least budget whose published figure meets ``value``: ``needed`` (found with the
    figure's ratio to the noise's deviation at the config's budget) solved again with the
    ratio at the budget found, until it stays, then checked by the published figure (a
    budget meeting its own solve has ``figure ≤ value``); on a lattice the figure moves in
    steps, so the last digit is then lowered while the figure still meets ``value``."""
    tried: dict[Budget, float] = {}
    for _ in range(SETTLE_ROUNDS):
        tried[needed] = figure_at(needed)
        following = solve(noise_variance(needed), tried[needed])
        if following is None:
            return None
        if following == needed:
            return _lowered(needed, figure_at, value)
        needed = following
    meeting = [budget for budget, figure in tried.items() if figure <= value]
    if meeting:
        return _lowered(min(meeting, key=_amount), figure_at, value)
    for _ in range(SETTLE_ROUNDS):  # none met: step up by the shortfall until one does
        figure = figure_at(needed)
        if figure <= value:
            return _lowered(needed, figure_at, value)
        following = solve(noise_variance(needed), figure * (1 + 1e-6))
        if following is None:
            return None
        needed = following
    return None


def _lowered(needed: Budget, figure_at: Callable[[Budget], float], value: float) -> Budget:
    """The least budget of :data:`DIGITS` digits at most ``needed`` whose published figure
    still meets ``value`` (the figure falls as the budget grows, in steps on a lattice):
    units of the last digit taken off by doubling while it meets, then bisected. A budget
    that is not of four digits (an exact ρ) is kept."""
    amount = _amount(needed)
    unit = _unit(float(amount))
    if amount % unit:
        return needed

    def meets(units: int) -> bool:
        lower = amount - units * unit
        if lower <= 0:
            return False
        try:
            return figure_at(_budget(needed, lower)) <= value
        except DpmmError:  # noise the samplers cannot draw
            return False

    kept, step = 0, 1  # meets(kept); find a step that does not
    while meets(step):
        kept, step = step, 2 * step
    while step - kept > 1:
        middle = (kept + step) // 2
        kept, step = (middle, step) if meets(middle) else (kept, middle)
    return _budget(needed, amount - kept * unit)


def _amount(budget: Budget) -> Fraction:
    return budget.epsilon if isinstance(budget, PureDP) else budget.rho


def _budget(like: Budget, amount: Fraction) -> Budget:
    return PureDP(amount) if isinstance(like, PureDP) else ZCDP(amount)


def _unit(value: float) -> Fraction:
    """One unit in the last of :data:`DIGITS` significant digits of ``value``."""
    return Fraction(10) ** (math.floor(math.log10(value)) - DIGITS + 1)


def _meets(budget: Budget, allowed: float, noise_variance: Callable[[Budget], float]) -> bool:
    try:
        return noise_variance(budget) <= allowed
    except DpmmError:  # noise the samplers cannot draw, or too little to state
        return False


def _least_budget(
    like: Budget, allowed: float, noise_variance: Callable[[Budget], float]
) -> Budget | None:
    """The least budget of :data:`DIGITS` digits whose noise variance is at most ``allowed``
    (the variance falls as the budget grows)."""

    def meets(amount: Fraction) -> bool:
        return _meets(_budget(like, amount), allowed, noise_variance)

    low, high = Fraction(1, 10**12), Fraction(1)
    while not meets(high):  # doubling: too large a budget has noise the samplers refuse
        low, high = high, high * 2
        if high > LARGEST:
            return None
    for _ in range(200):  # bisection in log space, to well below the digits kept
        if high / low < 1 + 10.0 ** -(DIGITS + 2):
            break
        middle = Fraction(math.sqrt(low * high))
        low, high = (low, middle) if meets(middle) else (middle, high)
    unit = _unit(float(high))
    amount = math.ceil(high / unit) * unit
    while not meets(amount):  # the exact check decides the last digit
        amount += unit
    while amount - unit > 0 and meets(amount - unit):
        amount -= unit
    return _budget(like, amount)


def _least_rho(
    constant: Fraction, allowed: float, noise_variance: Callable[[Budget], float]
) -> Budget | None:
    """The least ``ρ = constant / σ²`` whose noise variance is at most ``allowed``: the
    largest whole σ², refined to ``1/Q`` with ``Q`` a power of ten, so that σ² has at least
    :data:`DIGITS` digits (the sampler draws these exactly, and the variance grows with σ²)."""

    def meets(sigma2: Fraction) -> bool:
        return _meets(ZCDP(constant / sigma2), allowed, noise_variance)

    if not meets(Fraction(1)):  # a target tighter than σ² = 1 gives: on four digits instead
        return _least_budget(ZCDP(1), allowed, noise_variance)
    whole = _largest(lambda m: meets(Fraction(m)), 1)
    if whole is None:
        return ZCDP(constant / 2**62)
    steps = 10 ** max(0, math.ceil(math.log10(10**DIGITS / whole)))
    finest = _largest(lambda m: meets(Fraction(m, steps)), whole * steps, (whole + 1) * steps)
    return ZCDP(constant * steps / finest)


def _largest(meets: Callable[[int], bool], low: int, high: int | None = None) -> int | None:
    """The largest ``m ≥ low`` with ``meets(m)``, given ``meets(low)`` and a monotone
    ``meets`` that fails at ``high`` (found by doubling when None; None past 2⁶²)."""
    if high is None:
        high = 2 * low
        while meets(high):
            low, high = high, 2 * high
            if high > 2**62:
                return None
    while high - low > 1:  # meets(low), not meets(high)
        middle = (low + high) // 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return low
