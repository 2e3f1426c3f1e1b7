"""Exact noise added to integer answers in batches, from the OS CSPRNG by default.

Example:
    >>> from fractions import Fraction
    >>> import numpy as np
    >>> fields = {"noise": "discrete_gaussian", "scale": None, "sigma2": Fraction(4)}
    >>> add_noise(fields, np.zeros(5, dtype=np.int64), None).dtype
    dtype('int64')
"""

from __future__ import annotations

import numpy as np

from dpmm.measure.exact import MeasurementError
from dpmm.privacy.randomness import RandomSource
from dpmm.privacy.samplers import discrete_gaussian, discrete_laplace

__all__ = ["NOISE_BATCH", "add_noise", "draw_noise"]

#: Noisy answers stay in int64: |A x| < 2**53 and |noise| below this bound.
_NOISE_LIMIT = 2**62
#: Noise is drawn and added this many samples at a time.
NOISE_BATCH = 2**22


def add_noise(
    expected: dict[str, object],
    answers: np.ndarray,
    rng: RandomSource | np.random.Generator | None,
) -> np.ndarray:
    """``answers`` plus noise, drawn and added a batch at a time (in place, int64).

    Batches bound the sampler's temporaries (tens of bytes per sample) to one batch,
    so a measurement of 10⁸–10⁹ answers needs little more memory than the answers.
    """
    for start in range(0, answers.size, NOISE_BATCH):
        stop = min(start + NOISE_BATCH, answers.size)
        answers[start:stop] += _draw(expected, stop - start, rng)
    return answers


def draw_noise(
    noise: object,
    scale: object,
    sigma2: object,
    size: int,
    rng: RandomSource | np.random.Generator | None,
) -> np.ndarray:
    """``size`` exact draws of a record's noise: discrete Laplace of ``scale`` or discrete
    Gaussian of ``sigma2`` (by ``noise``), from ``rng`` (the OS CSPRNG for None)."""
    if noise == "discrete_laplace":
        return discrete_laplace(scale, size, rng=rng)
    return discrete_gaussian(sigma2, size, rng=rng)


def _draw(
    expected: dict[str, object], size: int, rng: RandomSource | np.random.Generator | None
) -> np.ndarray:
    noise = draw_noise(expected["noise"], expected["scale"], expected["sigma2"], size, rng)
    if noise.size and int(np.abs(noise).max()) >= _NOISE_LIMIT:  # pragma: no cover
        raise MeasurementError("a noise value is too large to add exactly in int64")
    return noise
