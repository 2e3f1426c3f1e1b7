"""Choosing among candidate strategies by their exact expected error, keeping the record.

Every candidate method is run on the workload, its strategy's exact expected
error computed (``dpmm.error.expected_error``), and the least kept. Methods
that do not apply to the workload (wrong structure, too large for the dense
fallback they need, the wrong noise) are recorded with the reason, so
``dpmm plan`` can show what was tried, what each reached and what it cost.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpmm.error import expected_error
from dpmm.errors import DpmmError
from dpmm.linalg import Matrix
from dpmm.privacy import PrivacyParameter

__all__ = ["Candidate", "Selection", "select"]

logger = logging.getLogger("dpmm.strategy")

Method = Callable[[Matrix, PrivacyParameter], Matrix]


@dataclass(frozen=True)
class Candidate:
    """One method's attempt: its strategy and exact expected error, or why it did not apply."""

    method: str
    seconds: float
    strategy: Matrix | None = None
    error: float | None = None
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the strategy as its repr)."""
        return {
            "method": self.method,
            "strategy": None if self.strategy is None else repr(self.strategy),
            "total_squared_error": self.error,
            "seconds": self.seconds,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class Selection:
    """The chosen candidate and every candidate tried, in the order tried."""

    chosen: Candidate
    candidates: tuple[Candidate, ...]

    @property
    def strategy(self) -> Matrix:
        """The chosen strategy matrix."""
        if self.chosen.strategy is None:  # pragma: no cover - select() never chooses one
            raise DpmmError("The chosen candidate has no strategy")
        return self.chosen.strategy


#: Called with (candidates done, candidates in total, the candidate being tried or chosen).
Progress = Callable[[int, int, str], None]


def _attempt(name: str, method: Method, W: Matrix, privacy: PrivacyParameter) -> Candidate:
    start = time.perf_counter()
    try:
        strategy = method(W, privacy)
        error = expected_error(W, strategy, privacy)
    except DpmmError as reason:  # the method does not apply to this workload
        return Candidate(name, time.perf_counter() - start, skipped=str(reason))
    if not math.isfinite(error):
        return Candidate(name, time.perf_counter() - start, skipped="its error is not finite")
    return Candidate(name, time.perf_counter() - start, strategy, error)


def select(
    W: Matrix,
    privacy: PrivacyParameter,
    methods: Mapping[str, Method],
    order: Sequence[str],
    *,
    progress: Progress | None = None,
) -> Selection:
    """Run ``methods[name]`` for every name in ``order`` and keep the least expected error.

    The first name is the fallback every other candidate must beat (ties keep the
    earlier); it must apply, so a selection always has a strategy. ``progress`` is
    called with ``(candidates done, total, next candidate's name)``.

    Raises:
        DpmmError: the first method does not apply to ``W``.
    """
    candidates = []
    chosen: Candidate | None = None
    for done, name in enumerate(order):
        if progress is not None:
            progress(done, len(order), name)
        candidate = _attempt(name, methods[name], W, privacy)
        candidates.append(candidate)
        logger.info(
            "strategy candidate %s: %s in %.2f s",
            name,
            candidate.skipped or f"expected total squared error {candidate.error:.6g}",
            candidate.seconds,
        )
        if candidate.error is None:
            if chosen is None:
                raise DpmmError(
                    f"The baseline strategy method '{name}' does not apply: {candidate.skipped}"
                )
            continue
        if chosen is None or candidate.error < chosen.error:  # type: ignore[operator]
            chosen = candidate
    if chosen is None:
        raise DpmmError("No strategy method was given to choose from")
    if progress is not None:
        progress(len(order), len(order), chosen.method)
    return Selection(chosen, tuple(candidates))
