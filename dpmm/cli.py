"""The ``dpmm`` command.

Subcommands:

* ``dpmm plan CONFIG [--json] [--report HTML]`` — the strategy a release config would
  use and its expected error per query group, next to the SVD bound and the Identity
  baseline; ``--report`` also writes the plan's report with figures
  (:mod:`dpmm.report`). Reads no data and spends no budget.
* ``dpmm release CONFIG``, ``dpmm demo``, ``dpmm releases list|show|diff``, ``dpmm audit
  RELEASE_DIR`` — see :mod:`dpmm.cli_release`.
* ``dpmm ledger init PATH`` — create an empty budget ledger (SQLite).
* ``dpmm ledger grant PATH DATASET (--epsilon E | --rho R)`` — add budget to a dataset.
* ``dpmm ledger show PATH [DATASET] [--json]`` — per dataset: kind, granted, reserved,
  spent and remaining, as exact fractions and decimals; ``--json`` adds the history.
* ``dpmm ledger verify PATH [--anchor SEQ:HASH]`` — recompute the ledger's keyed hash
  chain (and check an anchor published earlier): ``ok, N entries``, or exit status 1
  naming the first bad entry.
* ``dpmm ledger anchor PATH`` — the chain's head ``SEQ:HASH``, for an agency to publish.
* ``dpmm ledger cancel PATH RESERVATION`` — give back budget no noise was drawn for and
  no live run holds.
* ``dpmm ledger upgrade PATH`` — key the chain of a ledger an earlier dpmm wrote (schema 1), once.

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
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import TextIO

import yaml

from dpmm import __version__
from dpmm.cli_release import add_release_commands
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import DpmmError
from dpmm.plan import GroupReport, PlanReport, plan
from dpmm.privacy.ledger import Balance, Ledger, LedgerTampered
from dpmm.privacy.ledger_schema import decimal_text
from dpmm.privacy.params import KINDS, ZCDP, PureDP, budget_text
from dpmm.release.catalog import number_text, shorten, text_table
from dpmm.targets import least_budget_text
from dpmm.terminal_progress import terminal_bar

__all__ = ["format_plan", "main"]

#: Exit status for bad input (the same as argparse's usage errors).
EXIT_BAD_INPUT = 2
#: Exit status when the machine runs out of memory (a ledger reservation is cancelled if no
#: noise was drawn; see dpmm.pipeline).
EXIT_OUT_OF_MEMORY = 3
#: Exit status of ``dpmm ledger verify`` when the ledger was changed outside dpmm.
EXIT_TAMPERED = 1
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


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _row(group: GroupReport) -> list[str]:
    return [
        group.name,
        group.kind,
        f"{group.queries:,}",
        number_text(group.rmse),
        number_text(group.svd_bound_rmse),
        number_text(group.identity_rmse),
        _ratio(group.ratio_to_identity),
        f"{group.seconds:.2f}",
    ]


def _privacy(report: PlanReport) -> str:
    # A derived budget is stated whole (private thresholds' shares included), as it is spent.
    spent = report.budget if report.least and report.budget else report.privacy
    budget = spent.to_dict()
    noise = report.privacy.noise.capitalize()
    text = f"{KINDS[budget['kind']].description}, {budget_text(budget)} ({noise} noise)"
    return text + (f", {_derived(report)}" if report.least else "")


def _derived(report: PlanReport) -> str:
    """``the least meeting every target (at most ε = 2)``: where a derived budget came from."""
    cap = report.least.cap if report.least else None
    return "the least meeting every target" + (
        f" (at most {budget_text(cap.to_dict())})" if cap else ""
    )


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
        *_weight_lines(report),
        *_release_lines(report),
        "",
    ]
    rows = [list(COLUMNS), *(_row(group) for group in report.groups), _row(report.total)]
    footer = [
        "",
        "RMSE is per query. SVD-bound RMSE = √(SVD bound / queries): no strategy for that group",
        "gets below it. Ratio to identity = expected RMSE / identity RMSE (below 1 is better).",
    ]
    notes = [f"note: {note}" for note in report.total.notes]
    table = text_table(rows, right=range(2, len(COLUMNS)), underline=True, total_row=True)
    return "\n".join(
        [*header, *table, *footer, *_target_lines(report), *_candidate_lines(report), *notes]
    )


def _weight_lines(report: PlanReport) -> list[str]:
    """The group weights a strategy was selected with for the accuracy targets."""
    weights = report.decision.weights if report.decision else None
    if not weights:
        return []
    listed = ", ".join(f"{name} {weight:.3g}" for name, weight in weights.items())
    return _indented(f"selected for the accuracy targets, with group weights: {listed}")


def _target_lines(report: PlanReport) -> list[str]:
    """Each group's accuracy target at the plan's budget, and the least budget meeting all."""
    targets = report.targets
    if targets is None:
        return []
    rows = [["group", "target", "at this budget", "met", "needs"]]
    for group in targets.groups:
        met = "yes" if group.met else "no"
        rows.append(
            [
                group.name,
                group.target.describe(),
                group.target.figure_text(group.achieved)
                if group.target.reference
                else number_text(group.achieved),
                met,
                least_budget_text(group.needed),
            ]
        )
    met = sum(group.met for group in targets.groups)
    binding = f" (binding: {targets.binding_text()})" if targets.binding else ""
    budget = budget_text((report.budget or report.privacy).to_dict())
    spends = [f"the release spends exactly {budget}, {_derived(report)}"] if report.least else []
    return [
        "",
        f"accuracy targets: {met} of {len(targets.groups)} met at {budget}",
        *text_table(rows, right=(2,), underline=True),
        f"every target is met from {least_budget_text(targets.least)}{binding}, with this strategy"
        if targets.least
        else "no budget whose noise the samplers draw meets every target with this strategy",
        *spends,
    ]


SOLVERS = {
    "least_squares": "least squares",
    "nnls": "NNLS (non-negative least squares; standard errors by a parametric bootstrap)",
    "auto": (
        "least squares, or NNLS where a parametric bootstrap finds it clearly better on "
        "these answers (decided on the noisy measurement)"
    ),
}


def _size(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size / 2**10:,.1f} KiB"


def _release_lines(report: PlanReport) -> list[str]:
    """How the release will run this plan: what it counts, its solver, what it needs."""
    if report.footprint is None:
        return []
    counted = {
        "vector": "the data vector",
        "tables": "marginal tables",
        "chunked": "the data vector, kept on the Dask workers with what is made from it",
        "worker-tables": (
            "marginal tables on the Dask workers, measured there group by group; the "
            "measurement is read into the flow's process to reconstruct"
        ),
    }[report.counting]
    solver = SOLVERS.get(report.reconstruction, report.reconstruction)
    where = " on the workers together" if report.counting == "chunked" else ""
    rounded = f"; publishes integer counts: {report.rounding}" if report.rounding else ""
    return [
        f"release: counts {counted}; reconstructs by {solver}{rounded}",
        f"  needs about {_size(report.footprint.memory)} of memory{where}, writes about "
        f"{_size(report.footprint.disk)}",
    ]


def _candidate_lines(report: PlanReport) -> list[str]:
    """The candidates `auto` tried: the expected RMSE it ranked them by and the time of
    each, or why it was skipped."""
    if len(report.candidates) < 2:
        return []
    queries = report.total.queries
    rows = [["candidate", "selection RMSE", "seconds", "strategy or reason skipped"]]
    for candidate in report.candidates:
        rmse = None if candidate.error is None else (candidate.error / queries) ** 0.5
        chosen = " (chosen)" if candidate.method == report.chosen_method else ""
        described = shorten(candidate.skipped or repr(candidate.strategy), 70)
        rows.append(
            [candidate.method + chosen, number_text(rmse), f"{candidate.seconds:.2f}", described]
        )
    return [
        "",
        f"candidates tried by '{report.method}':",
        *text_table(rows, right=(1, 2), underline=True),
        "",
        "Selection RMSE is what the candidates were ranked by: each strategy as optimized, under",
        "continuous noise. The expected RMSE above is the chosen one as measured (quantized, with",
        "the discrete noise a release draws): the figure its releases state.",
    ]


def _report_path(path: str | None) -> Path | None:
    """The ``--report`` file, checked before planning: its folder must exist.

    Raises:
        DpmmError: one sentence naming the path.
    """
    if path is None:
        return None
    report = Path(path)
    if report.is_dir():
        raise DpmmError(f"--report {path}: is a folder; give the HTML file to write")
    if not report.parent.is_dir():
        raise DpmmError(
            f"--report {path}: cannot write the report there: folder {report.parent} does not exist"
        )
    return report


def _write_plan_report(path: Path, report: PlanReport, config: ReleaseConfig) -> None:
    from dpmm.report import plan_content, write_report  # matplotlib: only when asked for

    try:
        write_report(path, plan_content(report, config))
    except OSError as error:
        raise DpmmError(
            f"--report {path}: cannot write the report ({error.strerror or error})"
        ) from None


def _plan_command(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    report_path = _report_path(args.report)
    with terminal_bar("selecting a strategy", "candidates") as bar:
        report = plan(config, progress=bar)
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        out.write(format_plan(report) + "\n")
    if report_path is not None:
        _write_plan_report(report_path, report, config)
        if not args.json:
            out.write(f"\nreport written to {report_path}\n")
    return 0


def _ledger_init(args: argparse.Namespace, out: TextIO) -> int:
    with Ledger.init(args.ledger) as ledger:
        out.write(f"created an empty budget ledger at {ledger.path}\n")
    return 0


def _ledger_grant(args: argparse.Namespace, out: TextIO) -> int:
    # Parsed before the ledger is opened, so a bad value writes nothing.
    budget = PureDP(args.epsilon) if args.epsilon is not None else ZCDP(args.rho)
    with Ledger.open(args.ledger) as ledger:
        ledger.grant(args.dataset, budget)
        balance = ledger.balance(args.dataset)
    out.write(
        f"granted {_exact(getattr(budget, balance.parameter))} to dataset {args.dataset!r}: "
        f"{KINDS[balance.kind].symbol} granted {_exact(balance.granted)}, "
        f"remaining {_exact(balance.remaining)}\n"
    )
    return 0


def _exact(value: Fraction) -> str:
    decimal = decimal_text(value)
    return str(value) if decimal == str(value) else f"{value} ({decimal})"


def _amount(value: Fraction) -> dict[str, str]:
    return {"fraction": str(value), "decimal": decimal_text(value).removeprefix("≈ ")}


def _ledger_show(args: argparse.Namespace, out: TextIO) -> int:
    with Ledger.open(args.ledger) as ledger:
        datasets = [args.dataset] if args.dataset is not None else ledger.datasets()
        balances = [ledger.balance(dataset) for dataset in datasets]
        active = {dataset: ledger.active_reservations(dataset) for dataset in datasets}
        if args.json:
            history = {dataset: ledger.history(dataset) for dataset in datasets}
            document = {
                "ledger": str(ledger.path),
                "datasets": [
                    {
                        "dataset": balance.dataset,
                        "kind": balance.kind,
                        "parameter": balance.parameter,
                        **{
                            name: _amount(getattr(balance, name))
                            for name in ("granted", "reserved", "spent", "remaining")
                        },
                        "active_reservations": [
                            {
                                "id": reservation.id,
                                "release_id": reservation.release_id,
                                "budget": reservation.budget.to_dict(),
                                "created": reservation.created.isoformat(),
                            }
                            for reservation in active[balance.dataset]
                        ],
                        "history": [entry.to_dict() for entry in history[balance.dataset]],
                    }
                    for balance in balances
                ],
            }
            out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
            return 0
        lines = [f"ledger: {ledger.path}"]
    if not balances:
        lines.append("no datasets yet; add one with 'dpmm ledger grant PATH DATASET --epsilon E'")
    for balance in balances:
        lines.extend(_balance_lines(balance))
        stale = active[balance.dataset]
        if stale:
            lines.append(f"  {_plural(len(stale), 'reservation')} still reserved:")
            lines.extend(
                f"    {r.id}  {budget_text(r.budget.to_dict())}  "
                f"release {r.release_id!r}  since {r.created.isoformat(timespec='seconds')} "
                f"({_age(r.created)} ago)"
                for r in stale
            )
    out.write("\n".join(lines) + "\n")
    return 0


def _age(created: datetime) -> str:
    """How long ago, in the largest whole unit: ``40 s``, ``12 min``, ``5 h``, ``3 d``."""
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _balance_lines(balance: Balance) -> list[str]:
    _, symbol, description, _ = KINDS[balance.kind]
    rows = [
        (name, getattr(balance, name)) for name in ("granted", "reserved", "spent", "remaining")
    ]
    width = max(len(str(value)) for _, value in rows)
    lines = [f"dataset {balance.dataset!r}: {description} budget ({symbol})"]
    for name, value in rows:
        decimal = decimal_text(value)
        decimal = decimal if decimal.startswith("≈") else f"= {decimal}"
        lines.append(f"  {name:<10} {value!s:>{width}}  {decimal}")
    return lines


def _ledger_verify(args: argparse.Namespace, out: TextIO) -> int:
    with Ledger.open(args.ledger) as ledger:
        try:
            count = ledger.verify(args.anchor)
        except LedgerTampered as error:
            print(f"dpmm: error: {_one_line(str(error))}", file=sys.stderr)
            return EXIT_TAMPERED
    anchored = f"; entry {args.anchor[0]} has the anchor's hash" if args.anchor else ""
    out.write(f"ok, {count:,} {'entry' if count == 1 else 'entries'}{anchored}\n")
    return 0


def _anchor(text: str) -> tuple[int, str]:
    """``SEQ:HASH`` as printed by ``dpmm ledger anchor``."""
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or len(digest) != 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not an anchor SEQ:HASH")
    return int(seq), digest.lower()


def _ledger_anchor(args: argparse.Namespace, out: TextIO) -> int:
    with Ledger.open(args.ledger) as ledger:
        ledger.verify()  # never anchor a ledger that was changed outside dpmm
        seq, digest = ledger.anchor()
    out.write(
        f"ledger {ledger.path} verifies up to entry {seq}; publish this anchor, and check the "
        f"ledger against it later with 'dpmm ledger verify PATH --anchor ANCHOR':\n"
        f"{seq}:{digest}\n"
    )
    return 0


def _ledger_cancel(args: argparse.Namespace, out: TextIO) -> int:
    from dpmm.pipeline.run_state import cancel_reservation

    with Ledger.open(args.ledger) as ledger:
        out.write(cancel_reservation(ledger, args.reservation) + "\n")
    return 0


def _ledger_upgrade(args: argparse.Namespace, out: TextIO) -> int:
    count = Ledger.upgrade(args.ledger)
    out.write(f"upgraded ledger {args.ledger}: {count:,} entries verified and re-chained\n")
    return 0


def _ledger_parser(commands: argparse._SubParsersAction) -> None:
    ledger_parser = commands.add_parser(
        "ledger",
        help="create, fund, inspect, verify and anchor a privacy budget ledger",
        description="A privacy budget ledger: an append-only SQLite file, hash-chained under "
        "a key kept beside it (PATH.secret), that records every grant, reservation, spend, "
        "cancellation and published manifest in exact fractions.",
    )
    actions = ledger_parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    path_help = "the ledger file (a path or a sqlite:///PATH URL)"
    init = actions.add_parser("init", help="create an empty ledger (never overwrites a file)")
    init.add_argument("ledger", metavar="PATH", help=path_help)
    init.set_defaults(run=_ledger_init)
    grant = actions.add_parser("grant", help="add budget to a dataset")
    grant.add_argument("ledger", metavar="PATH", help=path_help)
    grant.add_argument("dataset", metavar="DATASET", help="the dataset's name")
    amount = grant.add_mutually_exclusive_group(required=True)
    amount.add_argument("--epsilon", metavar="E", help="pure ε-DP budget, e.g. 1 or 1/3")
    amount.add_argument("--rho", metavar="R", help="ρ-zCDP budget, e.g. 0.5 or 1/8")
    grant.set_defaults(run=_ledger_grant)
    show = actions.add_parser("show", help="budgets per dataset: granted, reserved, spent, left")
    show.add_argument("ledger", metavar="PATH", help=path_help)
    show.add_argument("dataset", metavar="DATASET", nargs="?", help="only this dataset")
    show.add_argument("--json", action="store_true", help="one JSON object, with the history")
    show.set_defaults(run=_ledger_show)
    verify = actions.add_parser("verify", help="recompute the hash chain of every entry")
    verify.add_argument("ledger", metavar="PATH", help=path_help)
    verify.add_argument(
        "--anchor",
        type=_anchor,
        metavar="SEQ:HASH",
        help="an anchor printed earlier by 'dpmm ledger anchor': its entry must be unchanged",
    )
    verify.set_defaults(run=_ledger_verify)
    anchor = actions.add_parser("anchor", help="print the chain's head, to publish")
    anchor.add_argument("ledger", metavar="PATH", help=path_help)
    anchor.set_defaults(run=_ledger_anchor)
    cancel = actions.add_parser(
        "cancel", help="give back a reservation no noise was drawn for and no live run holds"
    )
    cancel.add_argument("ledger", metavar="PATH", help=path_help)
    cancel.add_argument("reservation", metavar="RESERVATION", help="its id (see 'ledger show')")
    cancel.set_defaults(run=_ledger_cancel)
    upgrade = actions.add_parser(
        "upgrade", help="key the chain of a ledger written by an earlier dpmm (schema 1), once"
    )
    upgrade.add_argument("ledger", metavar="PATH", help=path_help)
    upgrade.set_defaults(run=_ledger_upgrade)


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
    plan_parser.add_argument(
        "--report",
        metavar="HTML",
        help="also write the plan's report, with figures, to this HTML file (opens offline)",
    )
    plan_parser.set_defaults(run=_plan_command)
    add_release_commands(commands)
    _ledger_parser(commands)
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
        # The detail of a data error (counts, example values) is for this terminal only.
        detail = getattr(error, "detail", "")
        shown = f" [{detail}]" if detail else ""
        print(f"dpmm: error: {_one_line(str(error))}{shown}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # a full disk, a read-only or missing folder
        if args.verbose:
            raise
        where = f"{error.filename}: " if error.filename else ""
        print(f"dpmm: error: {where}{_one_line(error.strerror or str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError as error:
        if args.verbose:
            raise
        print(f"dpmm: error: out of memory ({_one_line(str(error))})", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(previous_level)


if __name__ == "__main__":
    sys.exit(main())
