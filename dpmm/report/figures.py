"""The report's figures, drawn with matplotlib's Agg renderer into PNG bytes.

Three figures (:func:`report_figures`):

* ``error-vs-budget``: each group's expected RMSE per query against the whole budget, on
  log axes from a tenth to ten times the report's budget (wider when a target needs it),
  the budget marked; a group with a target has it drawn as a dotted line, with the least
  budget meeting it as a circle on it, and a half-width target its interval's half-width
  as a dashed curve (what that target bounds);
* ``budget-shares``: where the budget goes: the whole budget's split between the
  measurement of the strategy and any private truncation thresholds, and each group's
  share of the expected total squared error next to its share of the queries;
* ``answers`` (releases only): the first answers of each group with the intervals
  published beside them (``half_width`` at ``release.confidence``).

Figures are :class:`matplotlib.figure.Figure` objects on an Agg canvas: no pyplot, no
global state, no display or browser needed. The same PNG bytes go into the HTML page and
into the release flow's Prefect artifacts.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release.catalog import shorten
from dpmm.report.content import ReportContent
from dpmm.targets import Budget, error_factor

__all__ = ["DPI", "ReportFigure", "report_figures"]

#: Resolution of the PNGs (a 8-inch-wide figure is 720 pixels wide).
DPI = 90
#: The budgets of the error curve: this many, log-spaced.
CURVE_POINTS = 61
#: The curve spans the budget divided and multiplied by this (at least).
CURVE_SPAN = 10.0
#: Groups whose answers a release report draws (the first ones).
ANSWER_GROUPS = 12
#: Longest query label under an answer's tick.
TICK_LENGTH = 22
WIDTH = 8.0


@dataclass(frozen=True)
class ReportFigure:
    """One figure of a report, rendered.

    Attributes:
        key: ``error-vs-budget``, ``budget-shares`` or ``answers``.
        title: Its heading.
        caption: What it shows and how to read it.
        png: The PNG bytes.
    """

    key: str
    title: str
    caption: str
    png: bytes

    def data_uri(self) -> str:
        """The PNG as a ``data:`` URL, which a page or an image artifact shows offline."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _figure(height: float, width: float = WIDTH) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _amount(budget: Budget) -> float:
    return float(budget.epsilon if isinstance(budget, PureDP) else budget.rho)


def _symbol(budget: Budget) -> str:
    return "ε" if isinstance(budget, PureDP) else "ρ"


def _like(budget: Budget, amount: float) -> Budget:
    exact = Fraction(f"{amount:.6g}")
    return PureDP(exact) if isinstance(budget, PureDP) else ZCDP(exact)


def _budget_label(budget: Budget) -> str:
    return f"{_symbol(budget)} = {_amount(budget):.4g}"


def _curve_range(content: ReportContent) -> tuple[float, float]:
    """A tenth to ten times the budget, widened to show every least budget of a target."""
    base = _amount(content.budget)
    low, high = base / CURVE_SPAN, base * CURVE_SPAN
    for group in content.groups:
        if group.target is not None and group.target.needed is not None:
            needed = _amount(group.target.needed)
            low, high = min(low, needed / 2), max(high, needed * 2)
    return max(low, base / 10**4), min(high, base * 10**4)


def _mark(axes: Axes, needed: Budget, height: float, color: str, prefix: str = "") -> None:
    """The least budget meeting a target, as a point at ``height`` on the curves."""
    amount = _amount(needed)
    axes.plot(amount, height, "o", color=color, mfc="white", ms=7, mew=1.6)
    axes.annotate(
        f"{prefix}{_symbol(needed)} ≥ {amount:.4g}",
        (amount, height),
        textcoords="offset points",
        xytext=(6, 6),
        fontsize=8,
        color=color,
    )


def error_curve(content: ReportContent) -> ReportFigure | None:
    """Each group's expected RMSE against the budget, with the targets (None: the report
    has no noise model, or no group has an error to draw)."""
    drawn = [g for g in content.groups if g.rmse is not None and g.rmse > 0]
    if content.noise_variance is None or not drawn:
        return None
    low, high = _curve_range(content)
    grid = np.geomspace(low, high, CURVE_POINTS)
    factors = np.array(
        [
            error_factor(content.noise_variance, content.budget, _like(content.budget, x))
            or math.nan
            for x in grid
        ]
    )
    figure = _figure(4.8, width=WIDTH + 1.6)
    axes = figure.add_subplot()
    for index, group in enumerate(content.groups):
        if group.rmse is None or group.rmse <= 0:
            continue
        color = f"C{index % 10}"
        axes.plot(grid, group.rmse * factors, color=color, lw=1.8, label=f"{group.name}: RMSE")
        target = group.target
        if target is None:
            continue
        described = target.target.describe()
        if target.target.reference is not None:
            # A fraction of each query's reference: not on the RMSE's axis. Marked where the
            # group's RMSE curve is when the target is just met (errors all move together).
            if target.needed is not None and target.achieved > 0:
                met_at = group.rmse * target.target.value / target.achieved
                _mark(axes, target.needed, met_at, color, f"{described}: ")
            continue
        if target.target.kind == "half_width":
            axes.plot(
                grid,
                target.achieved * factors,
                color=color,
                lw=1.2,
                ls="--",
                label=f"{group.name}: largest half-width at {100 * target.target.confidence:g} %",
            )
        axes.axhline(
            target.target.value, color=color, lw=1.2, ls=":", label=f"{group.name}: {described}"
        )
        if target.needed is not None:
            _mark(axes, target.needed, target.target.value, color)
    base = _amount(content.budget)
    axes.axvline(base, color="0.35", lw=1, ls="-.")
    axes.annotate(
        f"this budget, {_budget_label(content.budget)}",
        (base, 1),
        xycoords=("data", "axes fraction"),
        xytext=(4, -12),
        textcoords="offset points",
        fontsize=8,
        color="0.25",
    )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_xlabel(f"whole budget {_symbol(content.budget)}")
    axes.set_ylabel("expected error per query")
    axes.grid(True, which="both", alpha=0.25)
    # Beside the plot, where no curve or target line runs under it.
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    figure.suptitle(f"{content.name}: expected error against budget", fontsize=11)
    caption = (
        "Each group's expected root mean squared error per query (solid) at budgets from "
        f"{_symbol(content.budget)} = {low:.3g} to {high:.3g}, with the strategy of this "
        f"{content.kind} and the exact discrete noise a release draws; the dash-dotted line "
        "is this budget."
    )
    if content.has_targets:
        caption += (
            " A target is a dotted line in its group's colour; the circle on it is the least "
            "budget meeting it. A half-width target bounds every query's interval, so its "
            "group's largest half-width is drawn dashed."
        )
    return ReportFigure("error-vs-budget", "Error against budget", caption, _png(figure))


def _shares(values: list[float]) -> list[float]:
    total = math.fsum(values)
    return [100 * value / total if total > 0 else 0.0 for value in values]


def budget_shares(content: ReportContent) -> ReportFigure:
    """The budget's split, and each group's share of the expected squared error and of the
    queries."""
    groups = content.groups
    thresholds = content.thresholds
    rows = len(groups)
    figure = _figure(1.6 + 0.42 * rows + (1.3 if thresholds else 0))
    if thresholds:
        top, bottom = figure.subplots(2, 1, height_ratios=[1.2, max(rows, 1) * 0.6 + 0.6])
        parts = [("measurement of the strategy", content.measurement), *thresholds]
        left = 0.0
        whole = _amount(content.budget)
        for index, (label, budget) in enumerate(parts):
            share = 100 * _amount(budget) / whole
            top.barh(0, share, left=left, color=f"C{index % 10}", edgecolor="white")
            name = label if index == 0 else f"θ of {label}"
            top.text(
                left + share / 2,
                0,
                f"{name}\n{_budget_label(budget)}",
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
            left += share
        top.set_xlim(0, 100)
        top.set_yticks([])
        top.set_xlabel(f"% of the whole budget, {_budget_label(content.budget)}", fontsize=8)
        top.set_title("the budget's split", fontsize=9, loc="left")
    else:
        bottom = figure.add_subplot()
    errors = _shares([g.squared_error or 0.0 for g in groups])
    queries = _shares([float(g.queries) for g in groups])
    y = np.arange(rows)
    weights = content.weights or {}
    labels = [
        g.name + (f"\n(weight {weights[g.name]:.3g})" if g.name in weights else "") for g in groups
    ]
    bottom.barh(y - 0.2, errors, height=0.4, color="C3", label="share of expected squared error")
    bottom.barh(y + 0.2, queries, height=0.4, color="0.65", label="share of queries")
    for row, (error, query) in enumerate(zip(errors, queries, strict=True)):
        bottom.text(error + 1, row - 0.2, f"{error:.1f} %", va="center", fontsize=7)
        bottom.text(query + 1, row + 0.2, f"{query:.1f} %", va="center", fontsize=7)
    bottom.set_yticks(y, labels, fontsize=8)
    bottom.invert_yaxis()
    bottom.set_xlim(0, 112)
    bottom.set_xlabel("%", fontsize=8)
    bottom.legend(fontsize=7, loc="lower right")
    bottom.set_title("where the noise lands, per group", fontsize=9, loc="left")
    figure.suptitle(f"{content.name}: where the budget goes", fontsize=11)
    spent = (
        "The whole budget buys one measurement of the strategy, which every group's answers "
        "are reconstructed from."
        if not thresholds
        else "The private truncation thresholds θ take their shares of the whole budget "
        "first; the rest buys one measurement of the strategy, which every group's answers "
        "are reconstructed from."
    )
    caption = (
        f"{spent} The red bars are each group's share of the expected total squared error "
        "of all answers, the grey ones its share of the queries: a group whose red bar is "
        "longer gets noisier answers than the average query."
    )
    if weights:
        caption += " The strategy was selected with the targeted groups' queries weighted as shown."
    return ReportFigure("budget-shares", "Where the budget goes", caption, _png(figure))


def _tick(label: str, limit: int = TICK_LENGTH) -> str:
    """A query's label short enough for a tick: attribute names cut to four letters when
    the whole label is too long (``educ=3,mari=2`` for education-num=3,marital-status=2).

    Example:
        >>> _tick("education-num=3,marital-status=2")
        'educ=3,mari=2'
    """
    if len(label) <= limit:
        return label
    parts = [part.partition("=") for part in label.split(",")]
    short = ",".join(f"{name[:4]}{eq}{value}" for name, eq, value in parts)
    return shorten(short, limit)


def answers_figure(content: ReportContent) -> ReportFigure | None:
    """The first answers of each group with their 95 % intervals (None: no answers)."""
    samples = [s for s in content.answers if s.estimates.size][:ANSWER_GROUPS]
    if not samples:
        return None
    figure = _figure(2.9 * len(samples) + 0.4)
    axes_list = figure.subplots(len(samples), 1, squeeze=False)[:, 0]
    for axes, sample in zip(axes_list, samples, strict=True):
        x = np.arange(sample.estimates.size)
        axes.axhline(0, color="0.75", lw=0.8)
        axes.errorbar(
            x,
            sample.estimates,
            yerr=sample.half_widths,
            fmt="o",
            ms=3,
            lw=1,
            capsize=2,
            color="C0",
        )
        shown = f"first {sample.estimates.size:,} of {sample.queries:,} answers"
        if sample.estimates.size == sample.queries:
            shown = f"all {sample.queries:,} answers"
        level = f"{sample.confidence:.4g}"
        axes.set_title(f"{sample.group}: {shown}, {level} intervals", fontsize=9, loc="left")
        axes.set_xticks(x, [_tick(label) for label in sample.labels], rotation=90)
        axes.tick_params(axis="x", labelsize=6)
        axes.tick_params(axis="y", labelsize=7)
        axes.set_xlim(-0.8, max(sample.estimates.size - 0.2, 0.8))
        axes.grid(True, axis="y", alpha=0.25)
    level = f"{100 * samples[0].confidence:.4g} %"
    figure.suptitle(f"{content.name}: published answers with their {level} intervals", fontsize=11)
    left = len(content.answers) - len(samples)
    caption = (
        "Each group's first answers (in the order of answers.parquet, which has them all) "
        f"with the {level} intervals published beside them (estimate ± half_width: from the "
        "exact distribution of the noise drawn, or a bound that still covers; the manifest's "
        "intervals section says which). The answers are the release's published estimates."
    )
    if left:
        caption += f" {left} more groups are in answers.parquet."
    return ReportFigure("answers", "Answers with their error bars", caption, _png(figure))


def report_figures(content: ReportContent) -> tuple[ReportFigure, ...]:
    """Every figure of the report, in page order."""
    figures = [error_curve(content), budget_shares(content), answers_figure(content)]
    return tuple(figure for figure in figures if figure is not None)
