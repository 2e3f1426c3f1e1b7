"""The random workloads of the Low-Rank Mechanism's experiments (seed 002, Section 6).

* ``WDiscrete``: every weight is 1 with probability 0.02 and −1 otherwise.
* ``WRange``: each query counts one interval ``[a, b]`` whose two ends are drawn
  uniformly from the domain (and put in order).
* ``WRelated``: ``W = C A`` with ``s`` base queries ``A`` (``s × n``) and a
  correlation matrix ``C`` (``m × s``), both standard normal; rank ``min(s, m, n)``.

Each generator takes an explicit ``np.random.Generator`` and returns a :class:`Dense`.
"""

from __future__ import annotations

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.linalg import Dense

__all__ = ["DISCRETE_POSITIVE_PROBABILITY", "wdiscrete", "wrange", "wrelated"]

#: Probability of a weight +1 in WDiscrete (the seed's 0.02; the rest are −1).
DISCRETE_POSITIVE_PROBABILITY = 0.02


def _check_size(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ArgumentError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def wdiscrete(m: int, n: int, rng: np.random.Generator) -> Dense:
    """``m`` queries over ``n`` cells with weights 1 (probability 0.02) or −1.

    Example:
        >>> W = wdiscrete(3, 5, np.random.default_rng())
        >>> W.shape, sorted(set(W.array.ravel().tolist()) - {1.0, -1.0})
        ((3, 5), [])
    """
    m, n = _check_size(m, "m"), _check_size(n, "n")
    positive = rng.random((m, n)) < DISCRETE_POSITIVE_PROBABILITY
    return Dense(np.where(positive, 1.0, -1.0))


def wrange(m: int, n: int, rng: np.random.Generator) -> Dense:
    """``m`` interval counts ``x_a + … + x_b`` with ``a, b`` uniform on the domain.

    Example:
        >>> W = wrange(4, 6, np.random.default_rng())
        >>> W.shape, bool(((W.array == 0) | (W.array == 1)).all())
        ((4, 6), True)
    """
    m, n = _check_size(m, "m"), _check_size(n, "n")
    ends = np.sort(rng.integers(0, n, size=(m, 2)), axis=1)
    cells = np.arange(n)
    inside = (cells >= ends[:, :1]) & (cells <= ends[:, 1:])
    return Dense(inside.astype(np.float64))


def wrelated(m: int, n: int, s: int, rng: np.random.Generator) -> Dense:
    """``C A`` with ``C`` (``m × s``) and ``A`` (``s × n``) standard normal: rank ``min(s, m, n)``.

    Example:
        >>> W = wrelated(6, 8, 2, np.random.default_rng())
        >>> W.shape, int(np.linalg.matrix_rank(W.array))
        ((6, 8), 2)
    """
    m, n, s = _check_size(m, "m"), _check_size(n, "n"), _check_size(s, "s")
    base = rng.standard_normal((s, n))
    correlation = rng.standard_normal((m, s))
    return Dense(correlation @ base)
