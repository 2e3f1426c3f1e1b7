"""A progress bar naming a stage on the operator's terminal (stderr), drawn by rich."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["terminal_bar"]

#: ``show(done, total, what)``: steps done of total, and what is being done now.
Show = Callable[[int, int, str], None]


@contextmanager
def terminal_bar(stage: str, unit: str) -> Iterator[Show | None]:
    """``show`` drawing ``  stage ━━━━ done/total unit what  elapsed`` on stderr while the
    block runs, or None when stderr is not a terminal (a log file, a pipe, a test)."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (
        TextColumn(f"  {stage}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(f"{unit} {{task.description}}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task_id = bar.add_task("", total=None)

        def show(done: int, total: int, what: str = "") -> None:
            bar.update(task_id, completed=done, total=total, description=what)

        yield show
