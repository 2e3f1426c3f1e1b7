"""Where the Laplace noise of the sum algorithms comes from, and how their budget is charged.

Every query the sum algorithms perturb is integer-valued (counts, or sums of integer bucket
weights truncated at an integer threshold), so integer discrete Laplace noise of the same
scale gives pure ε-DP exactly. :class:`ExactNoise` (the default) draws it with
:func:`dpmm.privacy.discrete_laplace` from the OS CSPRNG. :class:`FastInsecureNoise` draws
float Laplace noise from a numpy generator: NOT differentially private as implemented
(floating-point noise leaks through its low bits), for benchmarks of many trials only.

:func:`charge` is the ledger protocol of one noisy step: reserve the share before the data
are read, mark it spent once noise has been drawn (even if a later step fails), cancel it if
the step fails before any noise was drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.privacy import Ledger, PureDP, discrete_laplace
from dpmm.privacy.samplers import fast_insecure_laplace

__all__ = ["Charge", "ExactNoise", "FastInsecureNoise", "Noise", "charge"]


class Noise(Protocol):
    """A source of Laplace noise for integer-valued queries."""

    exact: bool

    def laplace(self, scale: Fraction, size: int | tuple[int, ...]) -> np.ndarray:
        """Noise with ``P(k) ∝ exp(−|k| / scale)`` (integers when ``exact``)."""


@dataclass(frozen=True)
class ExactNoise:
    """Exact integer discrete Laplace from the OS CSPRNG (``rng`` only for tests)."""

    rng: np.random.Generator | None = None
    exact: bool = True

    def laplace(self, scale: Fraction, size: int | tuple[int, ...]) -> np.ndarray:
        return discrete_laplace(scale, size, rng=self.rng)


@dataclass(frozen=True)
class FastInsecureNoise:
    """Continuous float Laplace from ``rng``: benchmarks only, never a release.

    Its variance ``2·scale²`` is the one seed 003's error formulas assume.
    """

    rng: np.random.Generator
    exact: bool = False

    def laplace(self, scale: Fraction, size: int | tuple[int, ...]) -> np.ndarray:
        return fast_insecure_laplace(float(scale), size, rng=self.rng)


class Charge:
    """One reserved budget share; :meth:`drawing` is called right before noise is drawn."""

    def __init__(self) -> None:
        self.drawn = False

    def drawing(self) -> None:
        """Record that noise is being drawn: from now on the share can only be spent."""
        self.drawn = True


@contextmanager
def charge(
    ledger: Ledger | None, dataset: str | None, release_id: str | None, epsilon: Fraction
) -> Iterator[Charge]:
    """Reserve ``PureDP(epsilon)`` for the block; spend it if noise was drawn, else cancel.

    Without a ledger nothing is recorded (library use on public or test data).

    Raises:
        ArgumentError: a ledger is given without a dataset and a release id.
        BudgetExceeded: the ledger has less than ``epsilon`` left (nothing is read).
    """
    state = Charge()
    if ledger is None:
        yield state
        return
    if not dataset or not release_id:
        raise ArgumentError("Charging a ledger needs both a dataset name and a release id.")
    reservation = ledger.reserve(dataset, PureDP(epsilon), release_id)
    try:
        yield state
    except BaseException:
        if state.drawn:
            ledger.mark_spent(reservation)
        else:
            ledger.cancel(reservation)
        raise
    ledger.mark_spent(reservation)
