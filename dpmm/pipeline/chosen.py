"""The strategy a release measures: as selected, quantized to its integer grid.

Every stage takes it: the plan and the release select it (:mod:`.strategy_stage`), the
input is counted for it, its measurement is reconstructed and written with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpmm.measure.quantize import QuantizedStrategy
from dpmm.privacy.params import ZCDP, PureDP

__all__ = ["ChosenStrategy"]


@dataclass(frozen=True, eq=False)
class ChosenStrategy:
    """The selected strategy on its integer grid.

    Attributes:
        quantized: ``quantized.integer`` is measured and ``quantized.matrix`` reconstructs.
        method: The config's method (``auto``, ``hdmm``, ...).
        selected: The candidate that was chosen (the method itself unless ``auto``).
        seconds: Selection time (0 for a cached or resumed strategy).
        source: ``selected``, ``plan``, ``run`` or ``release``.
        description: The strategy as selected, before its quantization (the candidate's
            repr, ``PIdentity(n=256, p=16, norm=1) ⊗ …``): recorded when it is selected and
            kept with it wherever it is stored, so the plan, every release and every
            re-run of it describe it alike (a quantized matrix read back from its file is
            often just ``Dense(272×256) ⊗ …``).
    """

    quantized: QuantizedStrategy
    method: str
    selected: str
    seconds: float
    source: str
    description: str
    #: With accuracy targets: the weight of each targeted group's queries in the selection.
    weights: dict[str, float] | None = None
    #: With ``privacy: {epsilon: least}``: the budget the plan derived from the targets for
    #: this strategy, which the release spends (:mod:`.budget_stage`).
    budget: PureDP | ZCDP | None = None
