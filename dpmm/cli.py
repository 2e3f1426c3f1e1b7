"""The ``dpmm`` command.

Subcommands:

* ``dpmm plan CONFIG [--json]`` — the strategy a release config would use and
  its expected error per query group, next to the SVD bound and the Identity
  baseline. Reads no data and spends no budget.

Bad input (a config error, an unknown key, a bad budget) prints one line
``dpmm: error: <message>`` on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

import yaml

from dpmm import __version__
from dpmm.config import load_config
from dpmm.errors import DpmmError
from dpmm.plan import GroupReport, PlanReport, plan

__all__ = ["format_plan", "main"]

#: Exit status for bad input (the same as argparse's usage errors).
EXIT_BAD_INPUT = 2
#: Longest strategy description the table prints (the JSON has it whole).
STRATEGY_WIDTH = 300
COLUMNS = (
    "group",
    "kind",
    "queries",
    "expected RMSE",
    "SVD-bound RMSE",
    "identity RMSE",
    "ratio to identity",
    "seconds",
)


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-2):
        return f"{value:.3e}"
    return f"{value:,.2f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _row(group: GroupReport) -> list[str]:
    return [
        group.name,
        group.kind,
        f"{group.queries:,}",
        _number(group.rmse),
        _number(group.svd_bound_rmse),
        _number(group.identity_rmse),
        _ratio(group.ratio_to_identity),
        f"{group.seconds:.2f}",
    ]


def _table(rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell: text left-aligned, numbers right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column < 2 or index == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0 or index == len(rows) - 2:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def _privacy(report: PlanReport) -> str:
    description = report.privacy.to_dict()
    if description["kind"] == "pure":
        return f"pure ε-DP, ε = {description['epsilon']} (Laplace noise)"
    return f"ρ-zCDP, ρ = {description['rho']} (Gaussian noise)"


def _cells(size: int) -> str:
    return _plural(size, "cell") + (f" (≈ {size:.2e})" if size >= 10**9 else "")


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _indented(text: str) -> list[str]:
    return textwrap.wrap(
        text, width=96, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )


def format_plan(report: PlanReport) -> str:
    """The plan as a text table: a header, one row per query group, and a total row."""
    domain = report.domain
    attributes = ", ".join(f"{a} {n}" for a, n in zip(domain.attributes, domain.shape, strict=True))
    strategy = report.strategy_repr
    if len(strategy) > STRATEGY_WIDTH:
        cut = strategy.rfind(" ", 0, STRATEGY_WIDTH)
        cut = cut if cut > 0 else STRATEGY_WIDTH
        strategy = f"{strategy[:cut]} … ({len(strategy):,} characters in all; see --json)"
    source = (
        f" ({report.config_path}, sha256 {report.config_sha256[:12]})"
        if report.config_sha256
        else ""
    )
    header = [
        f"plan: {report.name}{source}",
        f"domain: {_plural(len(domain), 'attribute')}, {_cells(domain.size)}",
        *_indented(attributes),
        f"privacy: {_privacy(report)}",
        f"strategy: method '{report.method}', selected in {report.strategy_seconds:.2f} s",
        *_indented(strategy),
        "",
    ]
    rows = [list(COLUMNS), *(_row(group) for group in report.groups), _row(report.total)]
    footer = [
        "",
        "RMSE is per query. SVD-bound RMSE = √(SVD bound / queries): no strategy for that group",
        "gets below it. Ratio to identity = expected RMSE / identity RMSE (below 1 is better).",
    ]
    notes = [f"note: {note}" for note in report.total.notes]
    return "\n".join([*header, *_table(rows), *footer, *notes])


def _plan_command(args: argparse.Namespace, out: TextIO) -> int:
    report = plan(load_config(args.config))
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        out.write(format_plan(report) + "\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpmm",
        description="Differentially private releases of linear queries with the matrix mechanism.",
    )
    parser.add_argument("--version", action="version", version=f"dpmm {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress on stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plan_parser = commands.add_parser(
        "plan",
        help="show the strategy and expected error of a release config (no data, no budget)",
        description="Pick the strategy for a release config and report its expected error per "
        "query group, next to the SVD bound and the Identity baseline. Reads no data and "
        "spends no budget.",
    )
    plan_parser.add_argument("config", metavar="CONFIG", help="a release config (YAML)")
    plan_parser.add_argument("--json", action="store_true", help="print one JSON object")
    plan_parser.set_defaults(run=_plan_command)
    return parser


class _LogFormatter(logging.Formatter):
    """``dpmm: <message>`` for progress, ``dpmm: warning: <message>`` for warnings."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"dpmm: {level}{_one_line(record.getMessage())}"


def _one_line(message: str) -> str:
    return " ".join(message.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpmm`` command; returns the exit status.

    Args:
        argv: The arguments after the program name (``sys.argv[1:]`` when ``None``).

    Example:
        >>> main(["--version"])  # doctest: +ELLIPSIS
        dpmm ...
        0
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormatter())
    package_logger = logging.getLogger("dpmm")
    package_logger.addHandler(handler)
    previous_level = package_logger.level
    package_logger.setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.run(args, sys.stdout)
    except (DpmmError, yaml.YAMLError) as error:
        print(f"dpmm: error: {_one_line(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(previous_level)


if __name__ == "__main__":
    sys.exit(main())
