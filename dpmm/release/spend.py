"""What a release version spent of its dataset's budget, read from its manifest.

A version that drew noise spent its whole budget: the measurement's (manifest
``privacy.budget``) plus, when the config chose truncation thresholds from the data, each
threshold's share (``thresholds.groups[].budget``); together they are the config's budget.
A version that only post-processes an earlier measurement (manifest ``ledger.reused_from``,
``dpmm release --from-measurements``) drew no noise and spent nothing.

Example:
    >>> manifest = {
    ...     "privacy": {"budget": {"kind": "pure", "epsilon": "9/10"}},
    ...     "ledger": {"dataset": "income", "reused_from": None},
    ...     "thresholds": {"groups": [
    ...         {"group": "sums", "budget": {"kind": "pure", "epsilon": "1/10"}}]},
    ... }
    >>> spend = spend_of(manifest)
    >>> spend.text(), spend.detail()
    ('ε = 1', 'threshold of sums ε = 1/10, measurement ε = 9/10')
    >>> spend_of({**manifest, "ledger": {"dataset": "income", "reused_from": "v1"}}).text()
    'ε = 0'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from dpmm.privacy.params import KINDS, amount_text

__all__ = ["Spend", "spend_of"]


@dataclass(frozen=True)
class Spend:
    """The budget one release version spent, exactly.

    Attributes:
        dataset: The ledger dataset charged.
        kind: ``pure`` (ε) or ``zcdp`` (ρ).
        amount: All the version spent: zero for a post-processing version.
        parts: What the amount paid for, in order: ``("threshold of <group>", share)``
            for each private truncation threshold, then ``("measurement", budget)``.
        reused_from: The version whose measurement a post-processing version reuses.
    """

    dataset: str
    kind: str
    amount: Fraction
    parts: tuple[tuple[str, Fraction], ...] = ()
    reused_from: str | None = None

    def text(self) -> str:
        """``"ε = 1"``: the amount with its symbol."""
        return amount_text(self.kind, self.amount)

    def detail(self) -> str:
        """What the amount paid for, or where a post-processing version's measurement is."""
        if self.reused_from is not None:
            return f"post-processing of the measurement of {self.reused_from}: no noise drawn"
        symbol = KINDS[self.kind].symbol
        return ", ".join(f"{what} {symbol} = {amount}" for what, amount in self.parts)


def _amount(budget: object, kind: str) -> Fraction | None:
    if not isinstance(budget, Mapping) or budget.get("kind") != kind:
        return None
    try:
        return Fraction(str(budget[KINDS[kind].parameter]))
    except (KeyError, ValueError, ZeroDivisionError):
        return None


def spend_of(manifest: Mapping[str, object]) -> Spend | None:
    """What the version with this manifest spent; None when the manifest does not say
    (no readable ``privacy.budget``)."""
    privacy = manifest.get("privacy")
    budget = privacy.get("budget") if isinstance(privacy, Mapping) else None
    kind = budget.get("kind") if isinstance(budget, Mapping) else None
    measurement = _amount(budget, kind) if kind in KINDS else None
    if measurement is None:
        return None
    ledger = manifest.get("ledger")
    ledger = ledger if isinstance(ledger, Mapping) else {}
    dataset = str(ledger.get("dataset", "?"))
    if ledger.get("reused_from") is not None:
        return Spend(dataset, kind, Fraction(0), reused_from=str(ledger["reused_from"]))
    thresholds = manifest.get("thresholds")
    groups = thresholds.get("groups", []) if isinstance(thresholds, Mapping) else []
    parts = [(f"threshold of {g.get('group')}", _amount(g.get("budget"), kind)) for g in groups]
    if any(amount is None for _, amount in parts):
        return None
    parts.append(("measurement", measurement))
    return Spend(dataset, kind, sum(amount for _, amount in parts), tuple(parts))
