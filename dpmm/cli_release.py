"""The release commands of ``dpmm``: release, runs, demo, releases (list, show, diff), audit.

* ``dpmm release CONFIG [--from-measurements RELEASE_DIR]`` — the release flow, end to end.
* ``dpmm runs list CONFIG`` / ``close CONFIG RUN`` — a release's runs; close one that
  cannot resume (its unspent budget is cancelled, its spent budget stays spent).
* ``dpmm demo [--folder DIR] [--rows N]`` — generate a census-like dataset, fund a demo
  ledger and run a release of it on a local Dask cluster with Prefect's engine.
* ``dpmm releases list ROOT`` / ``show RELEASE_DIR`` / ``diff A B``.
* ``dpmm audit RELEASE_DIR [--ledger PATH] [--scheduler ADDRESS]`` — exit status 1 when any
  check fails; a version made on the Dask workers is recomputed on the cluster its config
  describes, or on the scheduler named.

The release flow is imported only when a command runs it, so ``dpmm plan`` and the
ledger commands never load Prefect.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TextIO

import numpy as np

from dpmm.audit import audit_release, format_audit
from dpmm.config import load_config
from dpmm.errors import DpmmError
from dpmm.privacy.ledger import Ledger
from dpmm.release import (
    diff_releases,
    format_diff,
    format_listing,
    format_release,
    list_releases,
    show_release,
)
from dpmm.release.catalog import budget_text, text_table
from dpmm.terminal_progress import terminal_bar

__all__ = ["add_release_commands", "error_summary"]

#: Exit status of ``dpmm audit`` when a check fails.
EXIT_AUDIT_FAILED = 1
DEMO_FOLDER = "dpmm-demo"
DEMO_ROWS = 2_000_000
#: The demo ledger holds this many releases' worth of budget.
DEMO_RELEASES = 10


def error_summary(release_dir: Path) -> str:
    """What ``dpmm releases show`` prints of the version: its spend, strategy, solver, any
    private threshold θ, and its expected error per query group (a table)."""
    return format_release(show_release(release_dir)) + "\n"


def _not_a_failure_report(record: logging.LogRecord) -> bool:
    """False for a record of an engine reporting a failure (a task's or a flow's failed
    state, a worker's failed compute, with its traceback) and for any record carrying a
    dpmm error or an OS error (a full disk, a read-only folder): the command reports the
    failure itself, as one sentence (or as a traceback, for a bug)."""
    engine = record.name.startswith(("distributed", "prefect"))
    if engine and record.levelno >= logging.ERROR:
        return False
    return not (record.exc_info and isinstance(record.exc_info[1], DpmmError | OSError))


def _quiet_engines() -> None:
    """Keep Dask's and Prefect's chatter off a terminal run while the flow's and its tasks'
    log still reaches the Prefect API (the UI shows the stages, strategy, errors and
    folder); a refused release (bad config, data or budget) prints its one sentence, not
    the engines' reports and tracebacks of it (``-v`` shows them)."""
    for name in ("distributed", "prefect"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("prefect.flow_runs", "prefect.task_runs"):  # their API handler takes INFO
        logging.getLogger(name).setLevel(logging.INFO)
    verbose = logging.getLogger("dpmm").isEnabledFor(logging.INFO)
    for name in ("distributed", "prefect", "prefect.flow_runs", "prefect.task_runs", ""):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not verbose:
                handler.setLevel(logging.WARNING)
                handler.addFilter(_not_a_failure_report)


def _run_flow(config_path: Path, from_measurements: str | None) -> Path:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # A release sends nothing off the machine: no usage data from Prefect's client or the
    # local server (an operator may still opt in by setting these).
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.prefect_api import prefect_api_url
    from flows.release import release_flow  # Prefect is loaded only here

    _quiet_engines()  # after Prefect configured logging at import
    with temporary_settings({PREFECT_API_URL: prefect_api_url()}):
        return Path(release_flow(str(config_path), from_measurements))


def _release(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)  # bad configs fail here, before Prefect starts
    path = _run_flow(config.path, args.from_measurements)
    out.write(f"release written to {path}\n\n{error_summary(path)}")
    return 0


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from dpmm.demo import census_config_text, write_census_dataset

    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data"
    if not data.exists():
        out.write(f"generating {args.rows:,} census-like records in {data}\n")
        # Synthetic, public records from fresh entropy (no seed); noise never uses this
        # generator: measurements draw from the OS CSPRNG.
        rng = np.random.default_rng()
        write_census_dataset(data, rows=args.rows, rng=rng)
    config_path = folder / "census.yaml"
    if not config_path.exists():
        config_path.write_text(census_config_text())
    config = load_config(config_path)
    if not config.ledger.path.exists():
        with Ledger.init(config.ledger.path) as ledger:
            for _ in range(DEMO_RELEASES):
                ledger.grant(config.ledger.dataset, config.privacy)
        budget = budget_text(config.privacy.to_dict())
        out.write(f"demo ledger {config.ledger.path}: {DEMO_RELEASES} × {budget}\n")
    out.write("running the release flow on a local Dask cluster (Prefect engine)\n")
    path = _run_flow(config_path, None)
    with Ledger.open(config.ledger.path) as ledger:
        remaining = ledger.remaining(config.ledger.dataset)
    out.write(
        f"\nrelease written to {path}\n"
        f"budget of dataset {config.ledger.dataset!r} left: {remaining} "
        f"(see: dpmm ledger show {config.ledger.path})\n\n{error_summary(path)}\n"
        f"audit it:  dpmm audit {path}\n"
    )
    return 0


def _list(args: argparse.Namespace, out: TextIO) -> int:
    out.write(format_listing(list_releases(args.root)) + "\n")
    return 0


def _show(args: argparse.Namespace, out: TextIO) -> int:
    out.write(format_release(show_release(args.release)) + "\n")
    return 0


def _diff(args: argparse.Namespace, out: TextIO) -> int:
    out.write(format_diff(diff_releases(args.a, args.b)))
    return 0


def _audit(args: argparse.Namespace, out: TextIO) -> int:
    _quiet_engines()  # Dask's chatter stays off the terminal, as in a release
    with terminal_bar("audit", "checks") as bar:
        report = audit_release(
            args.release, ledger=args.ledger, scheduler=args.scheduler, progress=bar
        )
    text = format_audit(report)
    out.write(text if text.endswith("\n") else text + "\n")
    return 0 if report.ok else EXIT_AUDIT_FAILED


def _runs_list(args: argparse.Namespace, out: TextIO) -> int:
    from dpmm.pipeline.release import open_ledger
    from dpmm.pipeline.run_state import list_runs

    config = load_config(args.config)
    with open_ledger(config) as ledger:
        runs = list_runs(config, ledger)
    if not runs:
        out.write(f"release {config.name!r} has no runs\n")
        return 0
    rows = [("run", "state", "reservation", "measurement", "created")]
    rows += [
        (
            run.release_id,
            f"{run.state} (running)" if run.busy else run.state,
            run.reservation,
            "persisted" if run.measured else "-",
            run.created,
        )
        for run in runs
    ]
    out.writelines(line + "\n" for line in text_table(rows))
    return 0


def _runs_close(args: argparse.Namespace, out: TextIO) -> int:
    from dpmm.pipeline.release import open_ledger
    from dpmm.pipeline.run_state import close_run

    config = load_config(args.config)
    with open_ledger(config) as ledger:
        out.write(close_run(config, ledger, args.run_id) + "\n")
    return 0


def add_release_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``release``, ``runs``, ``demo``, ``releases`` and ``audit`` to the ``dpmm`` parser."""
    release = commands.add_parser(
        "release",
        help="run a release: ingest, measure (spends budget), reconstruct, write a version",
        description="Run the release flow of a config: reserve its budget in the ledger, "
        "count the data, measure the strategy with exact noise, reconstruct, and write the "
        "next immutable version under release.root.",
    )
    release.add_argument("config", metavar="CONFIG", help="a release config (YAML)")
    release.add_argument(
        "--from-measurements",
        metavar="RELEASE_DIR",
        help="post-process this version's measurement again: no data read, no budget spent",
    )
    release.set_defaults(run=_release)
    runs = commands.add_parser(
        "runs",
        help="list a release's runs; close one that cannot resume",
        description="A release's runs (open, released, abandoned, closed) and the "
        "reservations made for it that no run holds. Closing a run cancels the budget no "
        "noise was drawn for; budget already spent stays spent and recorded.",
    )
    run_actions = runs.add_subparsers(dest="action", metavar="ACTION", required=True)
    run_list = run_actions.add_parser("list", help="every run of the config's release")
    run_list.add_argument("config", metavar="CONFIG", help="a release config (YAML)")
    run_list.set_defaults(run=_runs_list)
    close = run_actions.add_parser("close", help="close an open run or an orphaned reservation")
    close.add_argument("config", metavar="CONFIG", help="a release config (YAML)")
    close.add_argument("run_id", metavar="RUN", help="its release id or reservation id")
    close.set_defaults(run=_runs_close)
    demo = commands.add_parser(
        "demo",
        help="generate a census-like dataset and run a full release of it",
        description="Generate a synthetic census-like partitioned Parquet dataset, fund a "
        "demo ledger, run the release flow on a local Dask cluster with Prefect's engine, "
        "and print where the release is and its error per query group.",
    )
    demo.add_argument(
        "--folder", default=DEMO_FOLDER, help="where to put it (default: %(default)s)"
    )
    demo.add_argument("--rows", type=int, default=DEMO_ROWS, help="records (default: %(default)s)")
    demo.set_defaults(run=_demo)
    releases = commands.add_parser("releases", help="list, show and compare release versions")
    actions = releases.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every version under a release root")
    listing.add_argument("root", metavar="ROOT", help="the release root (release.root)")
    listing.set_defaults(run=_list)
    show = actions.add_parser("show", help="one version: budget, strategy, error per group")
    show.add_argument("release", metavar="RELEASE_DIR")
    show.set_defaults(run=_show)
    diff = actions.add_parser("diff", help="what changed between two versions")
    diff.add_argument("a", metavar="RELEASE_DIR_A")
    diff.add_argument("b", metavar="RELEASE_DIR_B")
    diff.set_defaults(run=_diff)
    audit = commands.add_parser(
        "audit",
        help="verify a release: file hashes, sensitivity, noise scale, ledger chain",
        description="Re-derive the sensitivity and noise scale from the stored strategy, "
        "recompute every answer from the measurement, check every file's hash and the "
        "ledger's hash chain; exit status 1 on any mismatch. A version made on the Dask "
        "workers (cluster.arrays: workers) is recomputed on a cluster: the one its config "
        "describes, or the scheduler given.",
    )
    audit.add_argument("release", metavar="RELEASE_DIR")
    audit.add_argument("--ledger", help="the ledger (default: the one the manifest names)")
    audit.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a Dask scheduler (tcp://host:8786) to recompute a version made on the workers "
        "on (default: the cluster of the version's config)",
    )
    audit.set_defaults(run=_audit)
