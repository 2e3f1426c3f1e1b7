"""The Gaussian mechanism and the factorization mechanism ``M(h) = R(Ah + G)`` (seed 001).

A workload ``W`` (k queries over a histogram ``h``) factored as ``W = R A`` is answered by
measuring the strategy ``A`` with Gaussian noise calibrated to its L2 sensitivity
``Δ₂(A)`` (the largest column norm) and mapping the noisy answers through ``R``. The error
``R G`` is Gaussian with covariance ``σ² R Rᵀ``, ``σ² = Δ₂(A)² / (2ρ)`` under ρ-zCDP, so:

* mean squared error per query ``σ² ‖R‖_F² / k`` (:func:`mean_squared_error`);
* worst case over queries ``E max_i |(RG)_i| ≤ max_i ‖r_i‖₂ · σ · √(2 ln 2k)``
  (:func:`worst_case_error`): the seed's ``max_i ‖r_i‖₂ · Δ₂(A) · √log k`` bound with its
  constants, since each ``(RG)_i`` is Gaussian with standard deviation ``σ ‖r_i‖₂`` and the
  expected maximum of k absolute values of centred Gaussians of standard deviation at most
  s is at most ``s √(2 ln 2k)``.

The Gaussian mechanism is the factorization ``R = I, A = W``. The matrix mechanism with
least squares is ``R = W A⁺`` (:func:`strategy_factorization`); its mean squared error is
``dpmm.error.expected_error(W, A, ZCDP(ρ)) / k``.

Both mechanisms here draw exact noise: discrete Gaussian samples on integer answers, whose
zCDP guarantee is exactly ``Δ₂²/(2σ²)`` (Canonne, Kamath, Steinke 2020, Theorem 14; see
:func:`~dpmm.privacy.discrete_gaussian_zcdp`). A real-valued strategy is first put on an
integer grid with :func:`~dpmm.measure.quantize`; the mechanism then answers
``R A_q h + R G`` with ``A_q`` the quantized strategy, which differs from ``A`` by at most
``2⁻¹³`` of its largest entry at the default grid.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Identity, Prefix
    >>> from dpmm.privacy import ZCDP
    >>> f = Factorization(Prefix(4), Identity(4))
    >>> mean_squared_error(f, ZCDP("1/2")), round(worst_case_error(f, ZCDP("1/2")), 3)
    (2.5, 4.079)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpmm.errors import PrivacyParameterError, UnsupportedQueryError, describe_value
from dpmm.linalg import Identity, Matrix, Product
from dpmm.measure import DEFAULT_BITS, analyze_strategy, exact_answers, quantize
from dpmm.privacy import ZCDP, discrete_gaussian, discrete_gaussian_zcdp, gaussian_sigma2
from dpmm.privacy.accounting import Guarantee
from dpmm.privacy.randomness import RandomSource

__all__ = [
    "Factorization",
    "NoisyAnswers",
    "factorization_mechanism",
    "gaussian_mechanism",
    "identity_factorization",
    "mean_squared_error",
    "noise_sigma2",
    "row_norms_squared",
    "strategy_factorization",
    "worst_case_error",
]

Rng = RandomSource | np.random.Generator | None


@dataclass(frozen=True)
class Factorization:
    """A factorization ``W = R A``: reconstruction ``R`` (k×m), strategy ``A`` (m×n)."""

    R: Matrix
    A: Matrix

    def __post_init__(self) -> None:
        for name, value in (("R", self.R), ("A", self.A)):
            if not isinstance(value, Matrix):
                raise UnsupportedQueryError(
                    f"{name} of a factorization must be a dpmm.linalg matrix, "
                    f"got {type(value).__name__}"
                )
        if self.R.shape[1] != self.A.shape[0]:
            raise UnsupportedQueryError(
                f"R has {self.R.shape[1]} columns but the strategy A has {self.A.shape[0]} rows"
            )

    @property
    def queries(self) -> int:
        """k, the number of workload queries (rows of R)."""
        return self.R.shape[0]


@dataclass(frozen=True)
class NoisyAnswers:
    """Noisy workload answers and the noise behind them.

    Attributes:
        values: the k noisy workload answers.
        sigma2: the exact variance parameter of the discrete Gaussian added to each
            integer strategy answer (before any rescaling by the quantization grid).
        scale: the quantization scale D: strategy answers are ``(B h + noise) / D``.
        guarantee: the zCDP guarantee the noise reaches, with the theorem it rests on.
    """

    values: np.ndarray
    sigma2: Fraction
    scale: int
    guarantee: Guarantee


def _zcdp(privacy: object) -> ZCDP:
    if not isinstance(privacy, ZCDP):
        raise PrivacyParameterError(
            "the Gaussian and factorization mechanisms need a ZCDP(rho) budget, got "
            f"{describe_value(privacy)}"
        )
    return privacy


def noise_sigma2(A: Matrix, privacy: ZCDP) -> float:
    """``σ² = Δ₂(A)² / (2ρ)``: the (continuous) Gaussian variance per strategy answer."""
    return _zcdp(privacy).noise_variance(A.sensitivity(2))


def row_norms_squared(R: Matrix) -> np.ndarray:
    """``‖r_i‖₂²`` for every row of R (the column norms of Rᵀ)."""
    return np.asarray(R.T.column_norms(2), dtype=np.float64) ** 2


def strategy_factorization(W: Matrix, A: Matrix) -> Factorization:
    """The matrix mechanism's factorization ``R = W A⁺`` (least squares), ``W = R A``.

    Raises:
        UnsupportedQueryError: the shapes differ (``W`` must lie in A's row space for
            ``R A = W``; :func:`dpmm.error.expected_error` checks that).
    """
    if W.shape[1] != A.shape[1]:
        raise UnsupportedQueryError(
            f"workload {W!r} has {W.shape[1]} columns but strategy {A!r} has {A.shape[1]}"
        )
    return Factorization(Product([W, A.pinv()]), A)


def mean_squared_error(factorization: Factorization, privacy: ZCDP) -> float:
    """Expected squared error per query, ``σ² ‖R‖_F² / k``."""
    sigma2 = noise_sigma2(factorization.A, privacy)
    return sigma2 * float(row_norms_squared(factorization.R).sum()) / factorization.queries


def worst_case_error(factorization: Factorization, privacy: ZCDP) -> float:
    """The bound ``max_i ‖r_i‖₂ · σ · √(2 ln 2k)`` on ``E max_i |(R G)_i|``."""
    sigma = math.sqrt(noise_sigma2(factorization.A, privacy))
    largest_row = math.sqrt(float(row_norms_squared(factorization.R).max()))
    return largest_row * sigma * math.sqrt(2.0 * math.log(2.0 * factorization.queries))


def _histogram(x: object, cells: int) -> np.ndarray:
    array = np.asarray(x)
    if array.shape != (cells,) or not np.issubdtype(array.dtype, np.number):
        raise UnsupportedQueryError(
            f"the histogram must be a numeric vector of {cells} counts, got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array != np.rint(array)):
        raise UnsupportedQueryError("the histogram must hold non-negative integer counts")
    return array.astype(np.int64)


def _measure_integer(
    B: Matrix, x: np.ndarray, privacy: ZCDP, rng: Rng
) -> tuple[np.ndarray, Fraction, Guarantee]:
    exact = analyze_strategy(B)
    answers = exact_answers(exact, x)
    sensitivity = Fraction(exact.sensitivity_l2_squared)
    sigma2 = gaussian_sigma2(sensitivity, privacy)
    noise = discrete_gaussian(sigma2, answers.shape[0], rng=rng)
    guarantee = discrete_gaussian_zcdp(sigma2, sensitivity, dimension=answers.shape[0])
    return answers + noise, sigma2, guarantee


def gaussian_mechanism(W: Matrix, x: object, privacy: ZCDP, *, rng: Rng = None) -> NoisyAnswers:
    """Every query of an integer workload answered with exact discrete Gaussian noise.

    Args:
        W: an integer-valued workload (counting queries), a dpmm.linalg matrix.
        x: the histogram, non-negative integer counts.
        privacy: the ρ-zCDP budget; σ² = Δ₂(W)²/(2ρ).
        rng: tests only, as for :func:`~dpmm.privacy.discrete_gaussian`.

    Raises:
        MeasurementError: ``W`` is not integer-valued (quantize it, or factor it).
    """
    counts = _histogram(x, W.shape[1])
    values, sigma2, guarantee = _measure_integer(W, counts, _zcdp(privacy), rng)
    return NoisyAnswers(values.astype(np.float64), sigma2, 1, guarantee)


def factorization_mechanism(
    factorization: Factorization,
    x: object,
    privacy: ZCDP,
    *,
    bits: int = DEFAULT_BITS,
    rng: Rng = None,
) -> NoisyAnswers:
    """``R (A_q h + G)``: the strategy quantized to a grid, measured exactly, mapped by R.

    Args:
        factorization: ``W = R A``.
        x: the histogram, non-negative integer counts.
        privacy: the ρ-zCDP budget spent on the one measurement of ``A_q``.
        bits: significant bits of the quantization grid (:func:`dpmm.measure.quantize`).
        rng: tests only.
    """
    counts = _histogram(x, factorization.A.shape[1])
    quantized = quantize(factorization.A, bits=bits)
    noisy, sigma2, guarantee = _measure_integer(quantized.integer, counts, _zcdp(privacy), rng)
    strategy_answers = noisy.astype(np.float64) / quantized.scale
    values = np.asarray(factorization.R @ strategy_answers, dtype=np.float64)
    return NoisyAnswers(values, sigma2, quantized.scale, guarantee)


def identity_factorization(W: Matrix) -> Factorization:
    """``R = I, A = W``: the Gaussian mechanism seen as a factorization."""
    return Factorization(Identity(W.shape[0]), W)
