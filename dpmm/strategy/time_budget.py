"""The selection's time budget: long searches check it and stop once it is spent.

A selection runs every candidate method; some search for minutes on large domains
(a p-Identity fit per attribute and sweep, the eigen-design's L1 reduction). Inside
:func:`time_budget` the searches' inner loops call :func:`check_time`, which raises
:class:`OutOfTimeError` past the deadline: the candidate is abandoned and recorded
with the reason, and the selection keeps the best strategy it has. Outside a budget
:func:`check_time` never raises.

Example:
    >>> with time_budget(3600):
    ...     check_time()                # well within the hour: returns
    >>> with time_budget(0):
    ...     check_time()
    Traceback (most recent call last):
    ...
    dpmm.strategy.time_budget.OutOfTimeError: stopped: the selection's time budget of 0 s ran out
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from dpmm.errors import DpmmError

__all__ = ["OutOfTimeError", "check_time", "time_budget"]

#: The running budget: (deadline on the monotonic clock, its length in seconds).
_BUDGET: ContextVar[tuple[float, float]] = ContextVar(
    "dpmm_selection_budget", default=(math.inf, math.inf)
)


class OutOfTimeError(DpmmError):
    """The selection's time budget ran out while a candidate was searching."""


@contextmanager
def time_budget(seconds: float, since: float | None = None) -> Iterator[None]:
    """Searches in this block stop ``seconds`` after ``since`` (a :func:`time.monotonic`
    reading; default now), or at an enclosing budget's earlier deadline."""
    start = time.monotonic() if since is None else since
    deadline = min(start + seconds, _BUDGET.get()[0])
    token = _BUDGET.set((deadline, seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def check_time() -> None:
    """Raise :class:`OutOfTimeError` if the running budget is spent; otherwise nothing.

    Raises:
        OutOfTimeError: the deadline of the enclosing :func:`time_budget` has passed.
    """
    deadline, seconds = _BUDGET.get()
    if time.monotonic() > deadline:
        raise OutOfTimeError(f"stopped: the selection's time budget of {seconds:g} s ran out")
