"""Exact discrete Laplace and discrete Gaussian noise (Canonne, Kamath and Steinke 2020).

The algorithms are those of "The Discrete Gaussian for Differential Privacy" (arXiv
2004.00010, section 5): Bernoulli(exp(-γ)) for a rational γ by von Neumann's alternating
series, the discrete Laplace by a uniform remainder and a geometric quotient, and the discrete
Gaussian by rejection from a discrete Laplace. Every decision compares integers drawn from
the OS CSPRNG (:mod:`dpmm.privacy.randomness`): there are no floats, no ``exp`` and no seed.

The samplers process whole batches: each round draws the Bernoulli trials of every element
still undecided at once and keeps only the undecided ones for the next round.

Parameters are exact rationals read by :func:`~dpmm.privacy.params.exact_fraction`: an int,
a ``Fraction``, a string such as ``"7/3"`` or ``"0.25"``, or a float, which is read as the
decimal it prints as (``0.1`` is 1/10, the number a user wrote).

Example:
    >>> noise = discrete_gaussian("49/9", 5)
    >>> noise.shape, noise.dtype.name
    ((5,), 'int64')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpmm.privacy.params import exact_fraction
from dpmm.privacy.randomness import RandomSource, as_random_source

__all__ = [
    "discrete_gaussian",
    "discrete_laplace",
    "fast_insecure_gaussian",
    "fast_insecure_laplace",
]

Size = int | tuple[int, ...]
Rng = RandomSource | np.random.Generator | None

#: Largest Laplace numerator and Gaussian denominator handled in int64 batches. Beyond them
#: the samplers use Python integers one sample at a time: exact, but ~100x slower.
_INT64_LAPLACE_T = 2**40
_INT64_GAUSSIAN_DENOMINATOR = 2**62
#: |Y·t·q − p| above which the squared offset is formed with Python integers.
_SQUARE_SAFE = 2**31
#: A Bernoulli(exp(-1)) count this large is never reached (probability e^(-2^62)).
_COUNT_CAP = 2**62


def discrete_laplace(scale: object, size: Size, *, rng: Rng = None) -> np.ndarray:
    """Integers with P(k) ∝ exp(−|k| / scale), sampled exactly.

    Args:
        scale: a positive rational (int, Fraction, "7/3"; a float is read as its decimal).
        size: the number of samples, or a shape.
        rng: tests only: a ``numpy.random.Generator`` to make the draw reproducible.
            The default (and the only release setting) is the OS CSPRNG.

    Example:
        >>> discrete_laplace(1000, (2, 3)).shape
        (2, 3)
    """
    exact = exact_fraction(scale, "scale")
    shape, count = _shape(size)
    source = as_random_source(rng)
    numerator, denominator = exact.numerator, exact.denominator
    if numerator <= _INT64_LAPLACE_T and denominator < 2**62:
        flat = _laplace_batch(numerator, denominator, count, source)
    else:
        flat = np.array(
            [_laplace_one(numerator, denominator, source) for _ in range(count)], dtype=object
        )
    return _as_int64(flat, "scale").reshape(shape)


def discrete_gaussian(sigma2: object, size: Size, *, rng: Rng = None) -> np.ndarray:
    """Integers with P(k) ∝ exp(−k² / (2σ²)), sampled exactly.

    Args:
        sigma2: the variance parameter σ², a positive rational.
        size: the number of samples, or a shape.
        rng: tests only, as for :func:`discrete_laplace`.

    Example:
        >>> discrete_gaussian(1, 4).dtype.name
        'int64'
    """
    exact = exact_fraction(sigma2, "sigma2")
    shape, count = _shape(size)
    source = as_random_source(rng)
    p, q = exact.numerator, exact.denominator
    # t = floor(σ) + 1; floor(sqrt(p/q)) = isqrt(floor(p/q)).
    t = math.isqrt(p // q) + 1
    denominator = 2 * p * q * t * t
    if denominator < _INT64_GAUSSIAN_DENOMINATOR and t * t * q < 2**50:
        flat = _gaussian_batch(p, q, t, count, source)
    else:
        flat = np.array([_gaussian_one(p, q, t, source) for _ in range(count)], dtype=object)
    return _as_int64(flat, "sigma2").reshape(shape)


# --- vectorized, int64 -------------------------------------------------------------------


def _bernoulli(numerators: np.ndarray, denominator: int, source: RandomSource) -> np.ndarray:
    """Bernoulli(n/d) per element: a uniform integer below d is below n."""
    return source.uniform_below(denominator, numerators.size) < numerators


def _first_broken_link_table(depth: int) -> np.ndarray:
    """For V uniform on [0, depth!), the first k in 2..depth with V mod k! ≠ 0, or depth + 1.

    Writing V in mixed radix, V = d₂ + 2·d₃ + 3!·d₄ + …, the digits d_k are independent and
    uniform on [0, k); "d_k = 0" is a Bernoulli(1/k) trial, and d₂ … d_k are all zero exactly
    when V is a multiple of k!. One uniform V thus replaces the trials of rounds 2 … depth.
    """
    values = np.arange(math.factorial(depth), dtype=np.int64)
    first = np.full(values.size, depth + 1, dtype=np.int8)
    for k in range(depth, 1, -1):
        first[values % math.factorial(k) != 0] = k
    return first


_TABLE_DEPTH = 9
_FIRST_BROKEN_LINK = _first_broken_link_table(_TABLE_DEPTH)
_FACTORIAL_DEPTH = math.factorial(_TABLE_DEPTH)


def _bernoulli_exp_unit(
    numerators: np.ndarray, denominator: int, source: RandomSource
) -> np.ndarray:
    """Bernoulli(exp(−γ)) per element for γ = n/d in [0, 1] (CKS Algorithm 1, γ ≤ 1).

    Round K draws A ~ Bernoulli(γ/K) for every element still running; an element stops at the
    first A = 0 and returns whether K is odd. For K ≥ 2, Bernoulli(γ/K) is drawn as the product
    of independent Bernoulli(1/K) and Bernoulli(γ) trials, which has probability γ/K and keeps
    the bounds at K and d where d·K could overflow. The Bernoulli(1/K) trials of rounds 2 … 9
    come from one table lookup per element (see :func:`_first_broken_link_table`).
    """
    out = np.ones(numerators.size, dtype=bool)  # stopping at K = 1 returns 1
    running = np.flatnonzero(_bernoulli(numerators, denominator, source))
    current = numerators[running]
    chain_stop = _FIRST_BROKEN_LINK[source.uniform_below(_FACTORIAL_DEPTH, running.size)]
    k = 2
    while running.size:
        if k <= _TABLE_DEPTH:
            success = chain_stop > k
        else:
            success = source.uniform_below(k, running.size) == 0
        passed = np.flatnonzero(success)
        success[passed] = _bernoulli(current[passed], denominator, source)
        if k % 2 == 0:
            out[running[~success]] = False
        running, current, chain_stop = running[success], current[success], chain_stop[success]
        k += 1
    return out


def _bernoulli_exp_minus_one(n: int, source: RandomSource) -> np.ndarray:
    """n draws of Bernoulli(exp(−1)): the γ = 1 case, whose first trial always succeeds.

    The element stops at the first failed Bernoulli(1/K), K ≥ 2, and returns whether K is odd.
    Rounds 2 … 9 come from one table lookup; the few elements (1 in 9!) that pass them all
    continue one round at a time.
    """
    stop = _FIRST_BROKEN_LINK[source.uniform_below(_FACTORIAL_DEPTH, n)]
    out = (stop & 1).astype(bool)
    running = np.flatnonzero(stop > _TABLE_DEPTH)
    k = _TABLE_DEPTH + 1
    while running.size:
        success = source.uniform_below(k, running.size) == 0
        out[running[~success]] = k % 2 == 1
        running = running[success]
        k += 1
    return out


def _bernoulli_exp(
    whole: np.ndarray, remainder: np.ndarray, denominator: int, source: RandomSource
) -> np.ndarray:
    """Bernoulli(exp(−(whole + remainder/d))): the fractional part, then ``whole`` exp(−1)s."""
    result = _bernoulli_exp_unit(remainder, denominator, source)
    alive = np.flatnonzero(result & (whole > 0))
    left = whole[alive]
    while alive.size:
        success = _bernoulli_exp_minus_one(alive.size, source)
        result[alive[~success]] = False
        alive, left = alive[success], left[success] - 1
        more = left > 0
        alive, left = alive[more], left[more]
    return result


def _geometric(n: int, source: RandomSource) -> np.ndarray:
    """Successes of Bernoulli(exp(−1)) before the first failure: P(v) = (1 − 1/e)·e^(−v)."""
    counts = np.zeros(n, dtype=np.int64)
    running = np.arange(n)
    while running.size:
        running = running[_bernoulli_exp_minus_one(running.size, source)]
        counts[running] += 1
    return counts


def _laplace_candidates(t: int, s: int, m: int, source: RandomSource) -> np.ndarray:
    """One pass of CKS Algorithm 2 on m candidates for scale t/s; returns the accepted ones."""
    remainders = source.uniform_below(t, m)
    if t > 1:
        remainders = remainders[
            _bernoulli_exp_unit(remainders, t, source)  # Bernoulli(exp(−U/t))
        ]
    magnitudes = remainders + t * _geometric(remainders.size, source)
    if s > 1:
        magnitudes //= s
    negative = source.bits(magnitudes.size)
    keep = ~(negative & (magnitudes == 0))  # −0 would count zero twice
    return np.where(negative, -magnitudes, magnitudes)[keep]


def _fill(count: int, draw: Callable[[int], np.ndarray], first_rate: float) -> np.ndarray:
    """``count`` accepted samples from a rejection sampler ``draw(m)``, in few batches.

    Batches are oversampled by the observed acceptance rate and surplus samples are dropped by
    position, which leaves the kept ones independent and identically distributed.
    """
    parts: list[np.ndarray] = []
    filled, rate = 0, first_rate
    while filled < count:
        missing = count - filled
        tried = int(missing / rate * 1.05) + 64
        got = draw(tried)[:missing]
        rate = max(got.size / tried, 0.01)
        parts.append(got)
        filled += got.size
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _laplace_batch(t: int, s: int, count: int, source: RandomSource) -> np.ndarray:
    return _fill(count, lambda m: _laplace_candidates(t, s, m, source), 0.6)


def _gaussian_batch(p: int, q: int, t: int, count: int, source: RandomSource) -> np.ndarray:
    """CKS Algorithm 3 for σ² = p/q: Y ~ Laplace(t), kept w.p. exp(−(|Y| − σ²/t)²/(2σ²)).

    With σ² = p/q the exponent is (|Y|·t·q − p)² / (2·p·q·t²), a ratio of integers.
    """
    denominator = 2 * p * q * t * t

    def draw(m: int) -> np.ndarray:
        proposals = _laplace_candidates(t, 1, m, source)
        offsets = np.abs(proposals) * (t * q) - p
        whole = np.empty(offsets.size, dtype=np.int64)
        remainder = np.empty(offsets.size, dtype=np.int64)
        small = np.abs(offsets) < _SQUARE_SAFE
        squares = offsets[small] * offsets[small]
        whole[small], remainder[small] = np.divmod(squares, denominator)
        for i in np.flatnonzero(~small):  # far tail: square with Python integers
            high, low = divmod(int(offsets[i]) ** 2, denominator)
            whole[i], remainder[i] = min(high, _COUNT_CAP), low
        return proposals[_bernoulli_exp(whole, remainder, denominator, source)]

    return _fill(count, draw, 0.5)


# --- one sample at a time, Python integers (parameters too large for int64) ----------------


def _bernoulli_exp_one(gamma: Fraction, source: RandomSource) -> bool:
    for _ in range(math.floor(gamma)):
        if not _bernoulli_exp_unit_one(Fraction(1), source):
            return False
    return _bernoulli_exp_unit_one(gamma - math.floor(gamma), source)


def _bernoulli_exp_unit_one(gamma: Fraction, source: RandomSource) -> bool:
    k = 1
    while source.randbelow(gamma.denominator * k) < gamma.numerator:
        k += 1
    return k % 2 == 1


def _laplace_one(t: int, s: int, source: RandomSource) -> int:
    while True:
        remainder = source.randbelow(t)
        if not _bernoulli_exp_unit_one(Fraction(remainder, t), source):
            continue
        quotient = 0
        while _bernoulli_exp_unit_one(Fraction(1), source):
            quotient += 1
        magnitude = (remainder + t * quotient) // s
        negative = source.randbelow(2) == 1
        if not (negative and magnitude == 0):
            return -magnitude if negative else magnitude


def _gaussian_one(p: int, q: int, t: int, source: RandomSource) -> int:
    sigma2 = Fraction(p, q)
    while True:
        proposal = _laplace_one(t, 1, source)
        if _bernoulli_exp_one((abs(proposal) - sigma2 / t) ** 2 / (2 * sigma2), source):
            return proposal


# --- float samplers for research benchmarks only -----------------------------------------


def fast_insecure_laplace(
    scale: float, size: Size, *, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Continuous Laplace noise from numpy floats: NOT differentially private as implemented.

    Floating-point Laplace noise leaks through its low-order bits (Mironov 2012) and numpy's
    generator is not cryptographic. For benchmarks only; no release path calls it.
    """
    generator = rng if rng is not None else np.random.default_rng()
    return generator.laplace(0.0, scale, size)


def fast_insecure_gaussian(
    sigma2: float, size: Size, *, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Continuous Gaussian noise from numpy floats: NOT private as implemented; benchmarks only."""
    generator = rng if rng is not None else np.random.default_rng()
    return generator.normal(0.0, math.sqrt(sigma2), size)


# --- helpers ------------------------------------------------------------------------------


def _shape(size: object) -> tuple[tuple[int, ...], int]:
    dims = (size,) if not isinstance(size, tuple) else size
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 0:
            raise ValueError(
                f"size must be a non-negative integer or a tuple of them, got {size!r}"
            )
    shape = tuple(int(dim) for dim in dims)
    return shape, math.prod(shape)


def _as_int64(values: np.ndarray, name: str) -> np.ndarray:
    if values.dtype == object and values.size and max(abs(int(v)) for v in values) >= 2**63:
        raise OverflowError(f"a noise value for this {name} does not fit in int64")
    return values.astype(np.int64)
