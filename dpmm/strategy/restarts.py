"""The random generator of strategy optimizers' restarts: the one place strategy code draws one.

Strategy selection reads no data: its random starting points are public and
affect only which (exactly evaluated) strategy is found, never the privacy
guarantee. They are still never seeded by default, so no two selections share
a hidden stream; tests and benchmarks pass their own generator for repeatable runs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["restart_generator"]


def restart_generator(rng: np.random.Generator | None) -> np.random.Generator:
    """``rng`` if given, else a fresh unseeded generator for random restarts.

    Example:
        >>> restart_generator(None) is not restart_generator(None)
        True
    """
    return np.random.default_rng() if rng is None else rng
