"""``auto`` against each of HDMM's templates on the Kron-union family, one row per workload.

For every workload of :mod:`kron_unions`, under pure ε = 1 (Laplace) and under
ρ = 1/2 zCDP (Gaussian), one table row shows the workload (attributes, cells,
products, queries), ``dpmm.strategy.select_strategy(W, "auto", privacy)``'s
chosen method, exact total squared error and wall time, then for each template
as dpmm implements it — ``hdmm_kron`` (OPT_⊗/OPT_0), ``hdmm_marginals`` (OPT_M),
``hdmm_union`` (OPT_+) and, under ρ, ``residual`` — the best exact error
(``dpmm.error.expected_error``) of ``repeat`` runs of
``dpmm.strategy.METHODS[name](W, privacy)`` and their median wall time, and
the ratio of auto's error to the best template's (goal ≤ 1.00, up to rounding:
1 + 1e-9), with that template's own run-to-run spread (its worst run over its best):
where auto chose a stochastic template, its one run is compared with the best of that
template's other runs, and the summary names the rows over 1 that lie within the spread.
A run that
raises a :class:`dpmm.errors.DpmmError` makes the template "n/a" with a short
reason (the full reasons are listed under the table).

Auto runs in a fresh process, then the templates in another: one run of every
template, then the second of each, and so on, each run on a freshly built
workload (nothing cached from an earlier run) and every result sent back as
soon as it is known. Each process is killed after ``timeout`` seconds; what had
not reported prints "timeout" (a template with some runs done shows them, as
"k/3 runs"), so a row takes at most twice ``timeout``.

Usage:
    python benchmarks/strategies.py --family [--seed S] [--workloads N] [--repeat R]
        [--timeout SECONDS]
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import secrets
import statistics
import time
from dataclasses import dataclass, field
from fractions import Fraction

from kron_unions import KronUnion, draw_family

from dpmm.privacy import ZCDP, PrivacyParameter, PureDP

#: The two noise conventions of the table.
PRIVACIES: dict[str, PrivacyParameter] = {"ε=1": PureDP(1), "ρ=1/2": ZCDP(Fraction(1, 2))}

#: Relative slack of the goal auto / best template ≤ 1: where auto keeps the same strategy
#: as a template, or an equally good one, the two errors differ only by rounding (~1e-15).
TIE = 1e-9

#: Templates per privacy (``residual`` needs Gaussian noise).
TEMPLATES = ("hdmm_kron", "hdmm_marginals", "hdmm_union")
GAUSSIAN_TEMPLATES = (*TEMPLATES, "residual")


def templates_for(privacy: PrivacyParameter) -> tuple[str, ...]:
    """The templates run under ``privacy``."""
    return GAUSSIAN_TEMPLATES if privacy.norm == 2 else TEMPLATES


def short_reason(error: Exception) -> str:
    """A few words for why a template does not apply (the message names the workload)."""
    message = str(error)
    if "not a union of marginals" in message:
        return "not marginals"
    if "dense Gram" in message:
        return "needs a dense Gram"
    if "dimensions" in message and "densely" in message:
        return "subspace too large"
    return type(error).__name__


def _run_methods(
    workload: KronUnion,
    privacy: PrivacyParameter,
    names: tuple[str, ...],
    repeat: int,
    out: mp.Queue,
) -> None:
    """Child process: ``repeat`` rounds of one run per method, each result sent when known.

    Every run is inside :func:`dpmm.blas_threads.blas_limit`, as ``dpmm plan`` selects.

    Every run builds the workload afresh, so no run reuses what an earlier one cached on it.
    A method whose first run raises a DpmmError is not run again.
    """
    from dpmm.blas_threads import blas_limit
    from dpmm.error import expected_error
    from dpmm.errors import DpmmError
    from dpmm.strategy import METHODS, select_strategy

    failed: set[str] = set()
    for _ in range(repeat):
        for name in names:
            if name in failed:
                continue
            W = workload.build()
            start = time.perf_counter()
            try:
                with blas_limit():
                    if name == "auto":
                        chosen = select_strategy(W, "auto", privacy).chosen
                        method, error = chosen.method, chosen.error
                    else:
                        strategy = METHODS[name](W, privacy)
                        method, error = name, expected_error(W, strategy, privacy)
            except DpmmError as reason:
                failed.add(name)
                out.put((name, None, f"{short_reason(reason)}\t{reason}", 0.0))
                continue
            out.put((name, method, error, time.perf_counter() - start))
    out.put(("done", None, None, 0.0))


@dataclass
class Cell:
    """One method's outcome in a row: its errors and times so far, or why it has none."""

    errors: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    method: str = ""  # the method that ran (auto's chosen one)
    reason: str = ""  # n/a: short reason, tab, full message

    @property
    def best(self) -> float | None:
        return min(self.errors) if self.errors else None

    @property
    def spread(self) -> float | None:
        """The worst of the runs over the best (the method's own run-to-run spread)."""
        return max(self.errors) / min(self.errors) if len(self.errors) > 1 else None

    def text(self, repeat: int) -> str:
        if self.reason:
            return f"n/a: {self.reason.split(chr(9))[0]}"
        if not self.errors:
            return "timeout"
        runs = "" if len(self.errors) == repeat else f", {len(self.errors)}/{repeat} runs"
        return f"{self.best:.4g} ({statistics.median(self.seconds):.1f} s{runs})"


def _collect(
    workload: KronUnion,
    privacy: PrivacyParameter,
    names: tuple[str, ...],
    repeat: int,
    timeout: float,
) -> dict[str, Cell]:
    """Run ``names`` in one fresh process; what has not reported after ``timeout`` s is lost."""
    context = mp.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=_run_methods, args=(workload, privacy, names, repeat, out))
    deadline = time.monotonic() + timeout
    process.start()
    cells = {name: Cell() for name in names}
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            name, method, result, seconds = out.get(timeout=min(1.0, remaining))
        except queue.Empty:
            if not process.is_alive() and out.empty():
                break  # the child died without a word (out of memory, a crash)
            continue
        if name == "done":
            break
        cell = cells[name]
        if isinstance(result, str):
            cell.reason = result
        else:
            cell.method = method
            cell.errors.append(result)
            cell.seconds.append(seconds)
    if process.is_alive():
        process.terminate()
    process.join()
    return cells


def measure_row(
    workload: KronUnion, privacy: PrivacyParameter, repeat: int, timeout: float
) -> dict[str, Cell]:
    """Auto's cell (one run) and every template's (``repeat`` runs) for one workload.

    Auto and the templates run in two fresh processes, one after the other, each given
    ``timeout`` seconds: a slow auto does not cost the templates their results.
    """
    cells = _collect(workload, privacy, ("auto",), 1, timeout)
    return cells | _collect(workload, privacy, templates_for(privacy), repeat, timeout)


@dataclass(frozen=True)
class Row:
    """One printed row: the workload, the privacy's label and every method's cell."""

    workload: KronUnion
    privacy: str
    cells: dict[str, Cell]

    @property
    def within_spread(self) -> bool:
        """Auto is over the best template, but by no more than that template's runs differ
        among themselves: auto ran the same stochastic method, and another run was luckier."""
        ratio, best = self.ratio
        spread = self.cells[best].spread if best else None
        return (
            ratio is not None
            and ratio > 1 + TIE
            and self.cells["auto"].method == best
            and spread is not None
            and ratio <= spread
        )

    @property
    def ratio(self) -> tuple[float | None, str]:
        """Auto's error over the best template's, and that template's name."""
        auto = self.cells["auto"].best
        best = [
            (cell.best, name)
            for name, cell in self.cells.items()
            if name != "auto" and cell.best is not None
        ]
        if auto is None or not best:
            return None, ""
        error, name = min(best)
        return auto / error, name

    def text(self, repeat: int) -> str:
        """The row as a Markdown table row."""
        workload = self.workload
        cells = [
            self.cells[name].text(1 if name == "auto" else repeat) if name in self.cells else "—"
            for name in COLUMNS
        ]
        ratio, best = self.ratio
        spread = self.cells[best].spread if best else None
        spread_text = "" if spread is None else f"; its runs span {spread:.4f}"
        return (
            f"| w{workload.index} | {self.privacy} | {len(workload.sizes)} "
            f"| {workload.cells:.3g} | {len(workload.products)} | {workload.queries:.3g} "
            f"| {self.cells['auto'].method or '—'} | {' | '.join(cells)} "
            f"| {'n/a' if ratio is None else f'{ratio:.6f} ({best}{spread_text})'} |"
        )


COLUMNS = ("auto", *GAUSSIAN_TEMPLATES)


def print_family_table(seed: int | None, count: int, repeat: int, timeout: float) -> None:
    """Draw the family, measure every row, print the table, the n/a reasons and a summary.

    Without ``seed`` a fresh one is drawn from the OS (and printed, to rerun the family).
    """
    seed = secrets.randbits(32) if seed is None else seed
    family = draw_family(seed, count)
    print(
        f"Kron-union family: seed {seed}, {count} workloads, {repeat} runs per template, "
        f"timeout {timeout:g} s for auto and {timeout:g} s for the templates per row"
    )
    for workload in family:
        print(f"  {workload.describe()}")
    header = (
        "| workload | privacy | attributes | cells | products | queries | auto method | "
        + " | ".join(f"{name} TSE (s)" for name in COLUMNS)
        + " | auto / best template |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    rows = []
    for workload in family:
        for label, privacy in PRIVACIES.items():
            row = Row(workload, label, measure_row(workload, privacy, repeat, timeout))
            rows.append(row)
            print(row.text(repeat), flush=True)
    _print_reasons(rows)
    _print_summary(rows)


def _print_reasons(rows: list[Row]) -> None:
    reasons: dict[tuple[str, str], str] = {}
    for row in rows:
        for name, cell in row.cells.items():
            if cell.reason:
                short, message = cell.reason.split("\t", 1)
                reasons.setdefault((name, short), message)
    if reasons:
        print("\nn/a reasons (one example message each):")
    for (name, short), message in sorted(reasons.items()):
        # The message quotes the workload in its middle; its end says what is wrong.
        cut = message if len(message) <= 200 else f"{message[:60]} … {message[-130:]}"
        print(f"  {name}, {short}: {cut}")


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s" if values else "none"


def _seconds(rows: list[Row], name: str) -> list[float]:
    return [s for row in rows if name in row.cells for s in row.cells[name].seconds]


def _print_summary(rows: list[Row]) -> None:
    rated = [row for row in rows if row.ratio[0] is not None]
    met = [row for row in rated if (row.ratio[0] or 0.0) <= 1 + TIE]
    missed = {row.workload.index for row in rated if (row.ratio[0] or 0.0) > 1 + TIE}
    rated_workloads = {row.workload.index for row in rated}
    worst = max(rated, key=lambda row: row.ratio[0] or 0.0, default=None)
    worst_text = (
        "none"
        if worst is None
        else f"{worst.ratio[0]:.6f} (w{worst.workload.index} {worst.privacy} vs {worst.ratio[1]})"
    )
    templates = ", ".join(f"{name} {_median(_seconds(rows, name))}" for name in GAUSSIAN_TEMPLATES)
    within = [f"w{row.workload.index} {row.privacy}" for row in rated if row.within_spread]
    within_text = (
        f"; over 1 but within the chosen template's own run spread: {', '.join(within)}"
        if within
        else ""
    )
    print(
        f"\nSummary: auto / best template ≤ 1.00 in {len(met)} of {len(rated)} rows with a "
        f"template result ({len(rated_workloads) - len(missed)} of {len(rated_workloads)} "
        f"workloads in all their rows; {len(rows)} rows in all){within_text}; "
        f"worst ratio {worst_text}; "
        f"median auto {_median(_seconds(rows, 'auto'))}; median template run: {templates}"
    )
