"""How a sum release truncates: the method, the budget split ``ρ`` and the method's knobs.

:class:`Truncation` is the typed form of a config's truncation section
(:meth:`Truncation.from_config`); :meth:`Truncation.select` spends ``ρ ε`` on a private
threshold and :meth:`Truncation.split` says how much of ``ε`` is left for measuring.

Example:
    >>> spec = Truncation.from_config({"method": "svt", "rho": "0.1"})
    >>> spec.split(Fraction(1, 100))
    (Fraction(1, 1000), Fraction(9, 1000))
    >>> Truncation("none").split(Fraction(1, 100))
    (Fraction(0, 1), Fraction(1, 100))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from fractions import Fraction

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.privacy import Ledger, exact_fraction
from dpmm.sums.noise import Noise
from dpmm.sums.thresholds import (
    RECURSIVE_FLOOR,
    RECURSIVE_SHIFT,
    SVT_GROWTH,
    SVT_RATIO,
    SVT_START,
    recursive_threshold,
    svt_threshold,
)

__all__ = ["METHODS", "Truncation"]

#: ``none`` is seed 003's NoTrunc; ``fixed`` uses a public threshold and spends nothing on it.
METHODS = ("none", "svt", "recursive", "fixed")


@dataclass(frozen=True)
class Truncation:
    """A truncation method and its parameters (seed 003's defaults).

    Attributes:
        method: ``"none"``, ``"svt"``, ``"recursive"`` or ``"fixed"``.
        rho: Share of ε spent on the threshold (``svt`` and ``recursive``).
        ratio, growth, start: SVT's keep ratio ``r``, growth ``c`` and first bound ``s``.
        floor, beta, shift: The recursive mechanism's ``θ``, ``β`` (``2ρε/5`` if ``None``)
            and ``μ``.
        threshold: The public threshold of ``fixed``.
    """

    method: str = "svt"
    rho: Fraction = Fraction(1, 10)
    ratio: Fraction = SVT_RATIO
    growth: Fraction = SVT_GROWTH
    start: int = SVT_START
    floor: int = RECURSIVE_FLOOR
    beta: float | None = None
    shift: float = RECURSIVE_SHIFT
    threshold: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ArgumentError(f"Unknown truncation method {self.method!r} (one of {METHODS}).")
        rho = exact_fraction(self.rho, "rho")
        if not 0 < rho < 1:
            raise ArgumentError(f"The threshold budget share rho must lie in (0, 1), got {rho}.")
        object.__setattr__(self, "rho", rho)
        object.__setattr__(self, "ratio", exact_fraction(self.ratio, "ratio"))
        object.__setattr__(self, "growth", exact_fraction(self.growth, "growth"))
        if self.method == "fixed" and (self.threshold is None or self.threshold < 1):
            raise ArgumentError("A fixed truncation needs a positive integer threshold.")

    @classmethod
    def from_config(cls, section: Mapping[str, object]) -> Truncation:
        """Read a config mapping (keys as the attributes); unknown keys are refused."""
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ArgumentError(f"Unknown truncation key(s) {unknown}; known: {sorted(known)}.")
        return cls(**section)  # type: ignore[arg-type]

    @property
    def private(self) -> bool:
        """Whether the threshold is chosen from the data (and costs ``ρ ε``)."""
        return self.method in ("svt", "recursive")

    def split(self, epsilon: Fraction) -> tuple[Fraction, Fraction]:
        """``(ε₁, ε₂)``: the threshold's share and the measurement's share of ``epsilon``."""
        if not self.private:
            return Fraction(0), epsilon
        return self.rho * epsilon, (1 - self.rho) * epsilon

    def select(
        self,
        counts: np.ndarray,
        bounds: np.ndarray,
        epsilon: Fraction,
        *,
        runs: int | None = None,
        noise: Noise | None = None,
        ledger: Ledger | None = None,
        dataset: str | None = None,
        release_id: str | None = None,
    ) -> int | list[int | None] | None:
        """The threshold(s), spending ``epsilon`` per run for a private method."""
        if not self.private:
            chosen = self.threshold if self.method == "fixed" else None
            return chosen if runs is None else [chosen] * runs
        common = {"runs": runs, "noise": noise, "ledger": ledger}
        common |= {"dataset": dataset, "release_id": release_id}
        if self.method == "svt":
            return svt_threshold(
                counts, bounds, epsilon, ratio=self.ratio, growth=self.growth,
                start=self.start, **common,
            )  # fmt: skip
        return recursive_threshold(
            counts, bounds, epsilon, floor=self.floor, beta=self.beta, shift=self.shift, **common
        )
