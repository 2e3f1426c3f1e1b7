"""The report as one HTML page that opens offline: the figures inline, no outside file.

The page has a header of facts (config, domain, strategy, budget), the expected-error
table (the one ``dpmm plan`` prints, with each group's accuracy target, whether the
budget meets it and the least budget that would), and the figures of
:mod:`dpmm.report.figures` as ``data:`` PNGs with their captions. Its style sheet is
inline and uses the reader's own fonts; nothing is fetched from anywhere.

Example:
    >>> from dpmm.privacy.params import PureDP
    >>> from dpmm.report.content import GroupAccuracy, ReportContent
    >>> content = ReportContent("plan", "ages", PureDP(1), PureDP(1),
    ...                         (GroupAccuracy("cdf", "prefix", 16, 3.2),))
    >>> page = render_html(content, ())
    >>> page.startswith("<!DOCTYPE html>"), "<td>cdf</td>" in page
    (True, True)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape
from pathlib import Path

from dpmm import __version__
from dpmm.privacy.params import budget_text
from dpmm.release.catalog import number_text
from dpmm.report.content import GroupAccuracy, ReportContent
from dpmm.report.figures import ReportFigure, report_figures
from dpmm.targets import least_budget_text

__all__ = ["REPORT_NAME", "render_html", "write_report"]

#: The report's file name in a release's version folder.
REPORT_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 64em;
       padding: 0 1em; color: #1d1d1f; background: #fff; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; font-size: 0.92em; }
th, td { padding: 0.3em 0.7em; border-bottom: 1px solid #e3e3e3; text-align: left; }
th { background: #f4f4f6; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.met { color: #13702f; font-weight: 600; }
td.unmet { color: #b3261e; font-weight: 600; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; max-width: 52em; }
p.note { font-size: 0.9em; color: #444; }
"""


def _cell(text: str, css: str = "") -> str:
    return f'<td class="{css}">{escape(text)}</td>' if css else f"<td>{escape(text)}</td>"


def _columns(content: ReportContent) -> list[str]:
    columns = ["group", "kind", "queries", "expected RMSE"]
    if content.kind == "plan":
        columns += ["SVD-bound RMSE", "identity RMSE"]
    else:
        columns += ["mean std. error"]
    if content.has_targets:
        columns += ["target", "at this budget", "met", "least budget"]
    return columns


def _row(content: ReportContent, group: GroupAccuracy) -> str:
    cells = [
        _cell(group.name),
        _cell(group.kind),
        _cell(f"{group.queries:,}", "n"),
        _cell(number_text(group.rmse), "n"),
    ]
    if content.kind == "plan":
        cells += [_cell(number_text(group.svd_bound_rmse), "n")]
        cells += [_cell(number_text(group.identity_rmse), "n")]
    else:
        cells += [_cell(number_text(group.mean_standard_error), "n")]
    if content.has_targets:
        target = group.target
        if target is None:
            cells += [_cell("")] * 4
        else:
            cells += [
                _cell(target.target.describe()),
                _cell(
                    target.target.figure_text(target.achieved)
                    if target.target.reference
                    else number_text(target.achieved),
                    "n",
                ),
                _cell("yes", "met") if target.met else _cell("no", "unmet"),
                _cell(least_budget_text(target.needed)),
            ]
    return "<tr>" + "".join(cells) + "</tr>"


def _table(content: ReportContent) -> str:
    header = "".join(f"<th>{escape(column)}</th>" for column in _columns(content))
    rows = "\n".join(_row(content, group) for group in content.groups)
    return f'<table class="errors">\n<tr>{header}</tr>\n{rows}\n</table>'


def _targets_note(content: ReportContent) -> str:
    if not content.has_targets:
        return ""
    met = sum(g.target.met for g in content.groups if g.target is not None)
    stated = sum(g.target is not None for g in content.groups)
    if content.least is not None:
        binding = f" (binding: {content.binding})" if content.binding else ""
        least = f"every target is met from {least_budget_text(content.least)}{binding}"
    else:
        least = "no budget whose noise the samplers draw meets every target"
    return (
        f'<p class="note">Accuracy targets: {met} of {stated} met at '
        f"{escape(budget_text(content.budget.to_dict()))}; {escape(least)}, with this "
        "strategy.</p>"
    )


def _facts(content: ReportContent) -> str:
    facts = [
        *content.facts[:1],
        ("budget", budget_text(content.budget.to_dict())),
        *(
            [("measurement", budget_text(content.measurement.to_dict()))]
            if content.measurement != content.budget
            else []
        ),
        *content.facts[1:],
        ("dpmm", __version__),
    ]
    items = "\n".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return f'<dl class="facts">\n{items}\n</dl>'


def _figure(figure: ReportFigure) -> str:
    return (
        f'<figure id="{figure.key}">\n<img src="{figure.data_uri()}" '
        f'alt="{escape(figure.title)}">\n<figcaption>{escape(figure.caption)}</figcaption>\n'
        "</figure>"
    )


def render_html(content: ReportContent, figures: Sequence[ReportFigure]) -> str:
    """The report's page: facts, the expected-error table, and ``figures``."""
    what = "Plan" if content.kind == "plan" else "Release"
    title = f"{what} report: {content.name}"
    intro = (
        "What a release of this config would give, before any data is read or budget "
        "spent: the expected error of every query group at its budget."
        if content.kind == "plan"
        else "What this release published: the expected error of every query group, and "
        "its answers with their standard errors (all of them are in answers.parquet)."
    )
    sections = "\n".join(
        f"<h2>{escape(figure.title)}</h2>\n{_figure(figure)}" for figure in figures
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="dpmm {escape(__version__)}">
<title>{escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{escape(title)}</h1>
<p>{escape(intro)}</p>
{_facts(content)}
<h2>Expected error per query group</h2>
{_table(content)}
<p class="note">RMSE is per query, under the exact discrete noise a release draws.</p>
{_targets_note(content)}
{sections}
</body>
</html>
"""


def write_report(
    path: str | os.PathLike[str],
    content: ReportContent,
    figures: Sequence[ReportFigure] | None = None,
) -> Path:
    """Write the report page to ``path``; returns it.

    Args:
        path: The HTML file to write (its folder must exist).
        content: What the report shows.
        figures: Its figures, already rendered (:func:`~dpmm.report.figures.report_figures`
            by default).

    Raises:
        OSError: The file cannot be written.
    """
    rendered = report_figures(content) if figures is None else figures
    path = Path(path)
    path.write_text(render_html(content, rendered), encoding="utf-8")
    return path
