"""Choosing among candidate strategies by their exact expected error, keeping the record.

Every candidate method is run on the workload, its strategy's exact expected
error computed (``dpmm.error.expected_error``), and the least kept. Methods
that do not apply to the workload (wrong structure, too large for the dense
fallback they need, the wrong noise) are recorded with the reason, so
``dpmm plan`` can show what was tried, what each reached and what it cost.

With a time budget, the candidates after the baseline search only until it is spent
(:mod:`dpmm.strategy.time_budget`): one still searching then is abandoned, and those
not started are recorded as not tried, each with the reason.

Where one candidate is a proven optimum for the workload and the noise (a
:class:`ProvenOptimum`), no other can have a smaller expected error: it is run
first, the baseline after it for reference, and every other candidate is
recorded as not tried, with the reason.

A candidate whose strategies all lie in a class with a known floor on their error (a
:class:`ClassBound`) is skipped, with the reason, when that floor is no lower than the
best error found before it: nothing it could build would be kept.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpmm.error import expected_error
from dpmm.errors import DpmmError
from dpmm.linalg import Matrix
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.time_budget import time_budget

__all__ = ["Candidate", "ClassBound", "ProvenOptimum", "Selection", "select"]

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
class ProvenOptimum:
    """A candidate method whose strategy no other strategy beats on this workload and noise.

    Attributes:
        method: the candidate's name.
        reason: why the others need not be tried; recorded as each one's ``skipped``.
    """

    method: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The chosen candidate and every candidate, in the order they were listed."""

    chosen: Candidate
    candidates: tuple[Candidate, ...]

    @property
    def strategy(self) -> Matrix:
        """The chosen strategy matrix."""
        if self.chosen.strategy is None:  # pragma: no cover - select() never chooses one
            raise DpmmError("The chosen candidate has no strategy")
        return self.chosen.strategy


@dataclass(frozen=True)
class ClassBound:
    """A floor under the error of every strategy some candidates build (computed once per
    selection, when the first of them is reached), and what it is, for the plan."""

    floor: Callable[[Matrix, PrivacyParameter], float | None]
    what: str


def _beaten(
    name: str,
    bounds: Mapping[str, ClassBound],
    floors: dict[int, float | None],
    tried: Iterable[Candidate],
    W: Matrix,
    privacy: PrivacyParameter,
) -> Candidate | None:
    """``name`` skipped, if its class's floor is no lower than the best error so far."""
    bound = bounds.get(name)
    applied = [candidate for candidate in tried if candidate.error is not None]
    if bound is None or not applied:
        return None
    start = time.perf_counter()
    if id(bound) not in floors:
        try:
            floors[id(bound)] = bound.floor(W, privacy)
        except DpmmError:
            floors[id(bound)] = None
    floor, best = floors[id(bound)], _best(applied)
    if floor is None or floor < best.error:
        return None
    reason = (
        f"skipped: none of its strategies can beat {best.method} ({best.error:.6g}): "
        f"{bound.what} is {floor:.6g}"
    )
    return Candidate(name, time.perf_counter() - start, skipped=reason)


#: Called with (candidates done, candidates in total, the candidate being tried or chosen).
Progress = Callable[[int, int, str], None]


def _attempt(
    name: str,
    method: Method,
    W: Matrix,
    privacy: PrivacyParameter,
    budget: float = math.inf,
    since: float | None = None,
) -> Candidate:
    start = time.perf_counter()
    try:
        with time_budget(budget, since):
            strategy = method(W, privacy)
        error = expected_error(W, strategy, privacy)
    except DpmmError as reason:  # the method does not apply to this workload
        return Candidate(name, time.perf_counter() - start, skipped=str(reason))
    if not math.isfinite(error):
        return Candidate(name, time.perf_counter() - start, skipped="its error is not finite")
    return Candidate(name, time.perf_counter() - start, strategy, error)


def _best(candidates: Sequence[Candidate]) -> Candidate:
    """The least error; ties keep the earlier candidate."""
    chosen: Candidate | None = None
    least = math.inf
    for candidate in candidates:
        if candidate.error is not None and (chosen is None or candidate.error < least):
            chosen, least = candidate, candidate.error
    if chosen is None:  # pragma: no cover - callers check that the baseline or optimum applied
        raise DpmmError("No strategy method applies")
    return chosen


def _trying(name: str, tried: Iterable[Candidate], W: Matrix) -> str:
    """What a progress report says: the candidate being tried and the best so far."""
    applied = [candidate for candidate in tried if candidate.error is not None]
    if not applied:
        return name
    best = _best(applied)
    rmse = math.sqrt(best.error / max(W.shape[0], 1))
    return f"{name}, best so far {best.method} (RMSE {rmse:.4g})"


def _log(candidate: Candidate) -> None:
    logger.info(
        "strategy candidate %s: %s in %.2f s",
        candidate.method,
        candidate.skipped or f"expected total squared error {candidate.error:.6g}",
        candidate.seconds,
    )


def select(
    W: Matrix,
    privacy: PrivacyParameter,
    methods: Mapping[str, Method],
    order: Sequence[str],
    *,
    progress: Progress | None = None,
    proven: ProvenOptimum | None = None,
    budget: float = math.inf,
    bounds: Mapping[str, ClassBound] | None = None,
) -> Selection:
    """Run ``methods[name]`` for every name in ``order`` and keep the least expected error.

    The first name is the fallback every other candidate must beat (ties keep the
    earlier); it must apply, so a selection always has a strategy. ``progress`` is
    called with ``(candidates done, total, what)``: the next candidate's name and the
    best so far with its expected RMSE per query, and at the end the chosen one's name.

    With ``proven``, that candidate runs first and, if it applies, only the first name
    runs after it (so the record still shows the baseline's error); every other name is
    recorded as skipped with ``proven.reason``. If it does not apply, every name runs.

    Every candidate but the first searches only until ``budget`` seconds from the start
    of the selection have passed; one still searching then is recorded as stopped, and
    those after it as not tried (the first, and a proven optimum, always run to their end).

    With ``bounds``, a named candidate is skipped when its :class:`ClassBound`'s floor is
    no lower than the least error of those before it.

    Raises:
        DpmmError: the first method does not apply to ``W`` (and no proven optimum
            applies), or ``proven.method`` is not in ``order``.
    """
    if not order:
        raise DpmmError("No strategy method was given to choose from")
    started = time.monotonic()
    tried: dict[str, Candidate] = {}
    run, done, total, reason = list(order), 0, len(order), None
    floors: dict[int, float | None] = {}
    if proven is not None:
        if proven.method not in order:
            raise DpmmError(f"The proven optimum '{proven.method}' is not a candidate")
        if progress is not None:
            progress(0, 1 if order[0] == proven.method else 2, proven.method)
        optimum = tried[proven.method] = _attempt(proven.method, methods[proven.method], W, privacy)
        _log(optimum)
        if optimum.error is not None:  # only the baseline runs after it, for reference
            run = [name for name in order[:1] if name != proven.method]
            done, total, reason = 1, 1 + len(run), proven.reason
        else:
            logger.info(
                "the proven optimum %s does not apply: trying every candidate", proven.method
            )
    for count, name in enumerate(run, start=done):
        if progress is not None:
            progress(count, total, _trying(name, tried.values(), W))
        bounded = math.inf if name == order[0] else budget  # the baseline always runs
        beaten = _beaten(name, bounds or {}, floors, tried.values(), W, privacy)
        if name in tried:
            candidate = tried[name]
        elif beaten is not None:
            candidate = beaten
        elif time.monotonic() < started + bounded:
            candidate = _attempt(name, methods[name], W, privacy, bounded, started)
        else:
            spent = f"not tried: the selection's time budget of {budget:g} s was spent"
            candidate = Candidate(name, 0.0, skipped=spent)
        tried[name] = candidate
        _log(candidate)
        if count == 0 and candidate.error is None:
            raise DpmmError(
                f"The baseline strategy method '{name}' does not apply: {candidate.skipped}"
            )
    candidates = tuple(tried.get(name) or Candidate(name, 0.0, skipped=reason) for name in order)
    # Never worse than the baseline, even by rounding: ties keep the earlier (the baseline).
    chosen = _best(candidates)
    if progress is not None:
        progress(total, total, chosen.method)
    return Selection(chosen, candidates)
