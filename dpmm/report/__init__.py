"""Plan and release reports: one HTML page with figures, that opens offline.

``dpmm plan CONFIG --report plan.html`` writes a plan's report; every release writes
``report.html`` into its version folder (listed with its sha256 in the manifest, like
every file). The page shows each query group's expected error against the budget with
its accuracy target, where the budget goes, the expected-error table and, for a release,
the error bars of each group's answers. The figures (:mod:`.figures`, drawn with
matplotlib's Agg renderer) are the same PNGs the release flow leaves as Prefect artifacts.

* :mod:`.content` — what a report shows, gathered from a plan or a release;
* :mod:`.figures` — the figures;
* :mod:`.html` — the page.

Importing this package imports matplotlib (about half a second): the CLI and the
release writer import it only when they write a report.
"""

from dpmm.report.content import (
    AnswerSample,
    GroupAccuracy,
    ReportContent,
    plan_content,
    release_content,
)
from dpmm.report.figures import ReportFigure, report_figures
from dpmm.report.html import REPORT_NAME, render_html, write_report

__all__ = [
    "REPORT_NAME",
    "AnswerSample",
    "GroupAccuracy",
    "ReportContent",
    "ReportFigure",
    "plan_content",
    "release_content",
    "render_html",
    "report_figures",
    "write_report",
]
