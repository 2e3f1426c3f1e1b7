"""A measurement ready for reconstruction: the matrix measured, its noisy answers, their noise.

:func:`measure` works on an integer strategy and returns the :class:`MeasurementRecord` it
persists: integer answers of ``B x`` and the noise of one draw, in integer units. What a
solver needs is the strategy in its own units: ``A_q = B / D`` (the quantized strategy), the
answers divided by ``D`` and the noise standard deviation divided by ``D``.
:class:`Measurement` pairs a quantized strategy with its record and gives exactly these, so
no caller rescales by hand. It is not a second record: nothing in it is stored but the
record.

:func:`measure_strategy` is the research entry point (``dpmm.measure_strategy``): it takes a
plain matrix, quantizes it to the finest exactly measurable grid (:func:`measurable`) and
measures it in memory, with exact discrete noise from the OS CSPRNG; no store, no ledger.
The caller accounts for the budget.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Hierarchical, Weighted
    >>> from dpmm.privacy import ZCDP
    >>> from dpmm.reconstruct import least_squares
    >>> y = measure_strategy(Weighted(0.3, Hierarchical(4)), np.array([3, 0, 5, 1]), ZCDP(1))
    >>> y.quantized.scale, float(y.strategy.dense()[0, 0])  # A_q = 4915/16384 · tree
    (16384, 0.29998779296875)
    >>> y.answers.shape, round(y.noise_std, 4)  # σ = 0.3 · √3 / √(2ρ), in A_q's units
    ((7,), 0.3674)
    >>> least_squares(y.strategy, y.answers, noise_std=y.noise_std).x.shape
    (4,)
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpmm.linalg import Matrix
from dpmm.measure.exact import MeasurementError, MeasurementMismatch
from dpmm.measure.mechanism import draw_noise, measure
from dpmm.measure.quantize import QuantizedStrategy, measurable
from dpmm.measure.record import MeasurementRecord, int64_view
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.privacy.randomness import RandomSource

__all__ = ["Measurement", "measure_strategy"]


@dataclass(frozen=True, eq=False)
class Measurement:
    """A quantized strategy and the record of its measurement, in the strategy's units.

    Attributes:
        quantized: The strategy that was measured: ``quantized.integer`` on its grid.
        record: The measurement of ``quantized.integer`` (drawn in memory or loaded).

    Raises:
        MeasurementMismatch: The record was not taken on this strategy's grid and shape.
    """

    quantized: QuantizedStrategy
    record: MeasurementRecord

    def __post_init__(self) -> None:
        if not isinstance(self.quantized, QuantizedStrategy):
            raise MeasurementError(
                f"a measurement needs a QuantizedStrategy, got {type(self.quantized).__name__}"
            )
        if not isinstance(self.record, MeasurementRecord):
            raise MeasurementError(
                f"a measurement needs a MeasurementRecord, got {type(self.record).__name__}"
            )
        shape = tuple(int(n) for n in self.quantized.integer.shape)
        if self.record.quantization_scale != self.quantized.scale or self.record.shape != shape:
            raise MeasurementMismatch(
                f"record {self.record.measurement_id!r} measured a {self.record.shape} "
                f"strategy on the grid 1/{self.record.quantization_scale}, not this "
                f"{shape} one on 1/{self.quantized.scale}"
            )

    @property
    def strategy(self) -> Matrix:
        """``A_q``: the matrix the answers estimate ``A_q x`` of; reconstruct with it."""
        return self.quantized.matrix

    @cached_property
    def answers(self) -> np.ndarray:
        """The noisy answers of ``A_q x`` (float64, read-only): the values divided by the
        quantization scale."""
        answers = self.record.values.astype(np.float64) / self.quantized.scale
        answers.setflags(write=False)
        return answers

    @property
    def noise_std(self) -> float:
        """The exact standard deviation of the noise on each of :attr:`answers`."""
        return math.sqrt(self.record.noise_variance()) / self.quantized.scale

    def simulate(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Answers of a simulated measurement of ``x`` in the units of :attr:`answers`:
        ``A_q x`` plus a fresh draw of this measurement's noise (same exact sampler, same
        parameter) from ``rng``. Post-processing: for a parametric bootstrap, never a release.
        """
        record = self.record
        noise = draw_noise(record.noise, record.scale, record.sigma2, record.values.size, rng)
        return np.asarray(self.strategy @ x, dtype=np.float64) + noise / self.quantized.scale

    def bootstrap_rng(self) -> np.random.Generator:
        """The generator a parametric bootstrap of this measurement draws from: seeded by
        the SHA-256 of its published values, so that anyone re-deriving the release's
        post-processing (the audit) draws the same. Its draws need no secrecy: they
        simulate public noise around a released estimate."""
        digest = hashlib.sha256(int64_view(self.record.values)).digest()
        return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


def measure_strategy(
    A: Matrix | QuantizedStrategy,
    x: np.ndarray | MarginalCounts,
    privacy: PureDP | ZCDP,
    *,
    rng: RandomSource | np.random.Generator | None = None,
) -> Measurement:
    """Measure ``A`` on ``x`` in memory with exact noise calibrated to ``privacy``.

    Nothing is written and no ledger is charged: the caller accounts for ``privacy``.

    Args:
        A: The strategy: any dpmm matrix, quantized here to the finest grid whose integer
            form is exactly measurable (an integer matrix is kept as it is), or a
            :class:`~dpmm.measure.quantize.QuantizedStrategy` measured on its own grid.
        x: The data vector (non-negative integer counts, one per column of ``A``), or for a
            :class:`~dpmm.linalg.Marginals` strategy its marginal tables.
        privacy: ``PureDP`` (discrete Laplace noise) or ``ZCDP`` (discrete Gaussian noise).
        rng: Tests only: a ``numpy.random.Generator``. The default is the OS CSPRNG.

    Returns:
        The measurement; reconstruct with ``solver(m.strategy, m.answers,
        noise_std=m.noise_std)``.

    Raises:
        MeasurementError: ``A`` cannot be quantized to an exactly measurable strategy, or
            ``x`` or ``privacy`` is invalid (see :func:`~dpmm.measure.measure`).
    """
    quantized = A if isinstance(A, QuantizedStrategy) else measurable(A)
    return Measurement(quantized, measure(quantized, x, privacy, rng=rng))
