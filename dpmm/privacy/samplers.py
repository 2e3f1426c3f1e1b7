"""Exact discrete Laplace and discrete Gaussian noise (Canonne, Kamath and Steinke 2020).

The algorithms are those of "The Discrete Gaussian for Differential Privacy" (arXiv
2004.00010, section 5): Bernoulli(exp(-γ)) for a rational γ by von Neumann's alternating
series, the discrete Laplace by a uniform remainder and a geometric quotient, and the discrete
Gaussian by rejection from a discrete Laplace. Every decision compares integers drawn from
the OS CSPRNG (:mod:`dpmm.privacy.randomness`): there are no floats, no ``exp`` and no seed.

The samplers process whole batches: each round draws the Bernoulli trials of every element
still undecided at once and keeps only the undecided ones for the next round. Survivors are
selected with ``np.compress`` / ``take``, several times faster than boolean indexing on
unpredictable masks; uniforms for small bounds come in uint8/uint16 to save random bytes,
which the OS delivers at only a few hundred MB/s. Large requests from the OS CSPRNG are
split across threads.

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
import os
import threading
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpmm.privacy.params import exact_fraction
from dpmm.privacy.randomness import RandomSource, SecureRandom, as_random_source

__all__ = [
    "bernoulli_exp",
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
#: Requests of at least this many samples from the OS CSPRNG are split across threads, each
#: with its own source: os.urandom and numpy's large-array kernels release the GIL.
_PARALLEL_MIN = 1 << 16
_MAX_THREADS = 4
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
        flat = _in_parallel(
            count, lambda n, src: _laplace_batch(numerator, denominator, n, src), source
        )
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
    batch = _gaussian_parameters(p, q)
    if batch is not None:
        flat = _in_parallel(count, lambda n, src: _gaussian_batch(*batch, n, src), source)
    else:
        t = math.isqrt(p // q) + 1
        flat = np.array([_gaussian_one(p, q, t, source) for _ in range(count)], dtype=object)
    return _as_int64(flat, "sigma2").reshape(shape)


def bernoulli_exp(gamma: object, *, rng: Rng = None) -> bool:
    """One exact draw of Bernoulli(exp(−γ)) for a rational γ ≥ 0.

    The building block of exact selection mechanisms (an exponential mechanism by
    rejection accepts a uniformly drawn candidate with probability ``exp(−γ)``).

    Args:
        gamma: a non-negative rational (int, Fraction, "7/3"; a float is read as its decimal).
        rng: tests only, as for :func:`discrete_laplace`.

    Example:
        >>> bernoulli_exp(0), bernoulli_exp(10**6)
        (True, False)
    """
    if not isinstance(gamma, bool) and gamma in (0, "0"):
        return True
    exact = exact_fraction(gamma, "gamma")
    if exact > 4 * 10**6:  # exp(−γ) below 10^(−10^6): never accepted in any real run.
        return False
    return _bernoulli_exp_one(exact, as_random_source(rng))


# --- threads --------------------------------------------------------------------------------

_worker_sources: list[SecureRandom] = []
_worker_sources_lock = threading.Lock()


def _worker_source(i: int) -> SecureRandom:
    """The i-th extra thread's own CSPRNG source, kept so its byte buffer is reused."""
    with _worker_sources_lock:
        while len(_worker_sources) <= i:
            _worker_sources.append(SecureRandom())
        return _worker_sources[i]


def _in_parallel(
    count: int, batch: Callable[[int, RandomSource], np.ndarray], source: RandomSource
) -> np.ndarray:
    """``batch(count, source)``, split over CPU cores for a large request from the OS CSPRNG.

    The parts are independent batches of i.i.d. samples, so their concatenation is one. A test
    generator is never split: its draws stay reproducible.
    """
    threads = min(_MAX_THREADS, os.cpu_count() or 1, count // _PARALLEL_MIN)
    if threads < 2 or not isinstance(source, SecureRandom):
        return batch(count, source)
    sizes = [count // threads + (i < count % threads) for i in range(threads)]
    results: list[np.ndarray | None] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int, part_source: RandomSource) -> None:
        try:
            results[i] = batch(sizes[i], part_source)
        except BaseException as error:  # re-raised in the calling thread
            errors.append(error)

    workers = [
        threading.Thread(target=run, args=(i, _worker_source(i - 1))) for i in range(1, threads)
    ]
    for worker in workers:
        worker.start()
    run(0, source)
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return np.concatenate(results)


# --- vectorized, int64 -------------------------------------------------------------------


def _uniform(bound: int, n: int, source: RandomSource) -> np.ndarray:
    """n uniform integers below ``bound``, in the narrowest dtype when the bound is small."""
    if bound <= 2**32:
        return source.small_uniform_below(bound, n)
    return source.uniform_below(bound, n)


def _bernoulli(numerators: np.ndarray, denominator: int, source: RandomSource) -> np.ndarray:
    """Bernoulli(n/d) per element: a uniform integer below d is below n."""
    if denominator > 2**32:
        return _bernoulli_wide(numerators, denominator, source)
    return _uniform(denominator, numerators.size, source) < numerators


_LOW_BITS = 32


def _bernoulli_wide(numerators: np.ndarray, denominator: int, source: RandomSource) -> np.ndarray:
    """Bernoulli(n/d) for d > 2**32, reading the low 32 bits of the uniform only when needed.

    V uniform on [0, 2**w) (w the bit width of d − 1) is drawn as high·2**32 + low with the
    two parts independent; V is rejected when V ≥ d, and the answer is V < n. Comparing the
    high parts with those of n and d settles both tests unless high equals n's or reaches d's,
    which for a wide d is rare, so most elements cost the high part's two or four bytes instead
    of eight. The comparisons are exact, so the outcome is that of the full draw. ``numerators``
    are int64.
    """
    high_d = denominator >> _LOW_BITS
    high = source.small_uniform_below(
        1 << ((denominator - 1).bit_length() - _LOW_BITS), numerators.size
    )
    high = high.astype(np.int64)
    high_n = numerators >> _LOW_BITS
    result = high < high_n
    undecided = np.flatnonzero((high >= high_d) | (high == high_n))
    if not undecided.size:
        return result
    high_u, numerators_u = high.take(undecided), numerators.take(undecided)
    low = source.small_uniform_below(1 << _LOW_BITS, undecided.size).astype(np.int64)
    value = (high_u << _LOW_BITS) | low  # the full V, below 2**62
    result[undecided] = value < numerators_u
    rejected = np.flatnonzero(value >= denominator)  # out of range: a fresh draw
    if rejected.size:
        result[undecided.take(rejected)] = _bernoulli_wide(
            numerators_u.take(rejected), denominator, source
        )
    return result


def _chain_table(first: int, last: int, bits: int) -> np.ndarray:
    """Lookup from a uniform ``bits``-bit integer to where a chain of Bernoulli(1/k) breaks.

    With P = first·(first+1)·…·last, an index v below the largest multiple of P that fits in
    ``bits`` bits gives w = v mod P uniform on [0, P). Writing w in mixed radix,
    w = d_first + first·(d_first+1 + (first+1)·(…)), the digits d_k are independent and uniform
    on [0, k), so "d_k = 0" is a Bernoulli(1/k) trial, and d_first … d_k are all zero exactly
    when w is a multiple of first·…·k. The entry is the first k in first … last with d_k ≠ 0,
    or last + 1 when every trial succeeded. Indices past the last multiple of P hold 0: the
    value must be drawn again (rejection, so w stays exactly uniform).
    """
    product = math.prod(range(first, last + 1))
    usable = (1 << bits) // product * product
    w = np.arange(usable, dtype=np.int64) % product
    table = np.zeros(1 << bits, dtype=np.int16)
    table[:usable] = last + 1
    radix = 1
    for k in range(first, last + 1):
        radix *= k
        undecided = table[:usable] == last + 1
        table[:usable][undecided & (w % radix != 0)] = k
    return table


#: Two levels of table: one random byte settles trials 2 … 5 (all pass with probability
#: 1/120); for the chains still unbroken, two bytes settle trials 6 … 9.
_CHAIN_LEVELS = (
    (2, 5, 8, _chain_table(2, 5, 8)),
    (6, 9, 16, _chain_table(6, 9, 16)),
)
#: int16 holds every break point; reaching 2**15 has probability below 1 / (2**15)!.
_CHAIN_LIMIT = 2**15 - 1


def _chain_breaks(n: int, source: RandomSource, level: int = 0) -> np.ndarray:
    """For n independent chains of Bernoulli(1/k) trials, k = 2, 3, …: the first k that fails.

    P(break at k) = (k − 1)/k!. Each level of :data:`_CHAIN_LEVELS` settles a run of trials
    from one table lookup; only the rare chains that survive a whole level go on to the next,
    and past the tables one Bernoulli(1/k) is drawn per round.
    """
    if level == len(_CHAIN_LEVELS):
        return _chain_breaks_one_by_one(n, _CHAIN_LEVELS[-1][1] + 1, source)
    _, last, bits, table = _CHAIN_LEVELS[level]
    breaks = table.take(source.small_uniform_below(1 << bits, n))
    redraw = np.flatnonzero(breaks == 0)
    while redraw.size:
        breaks[redraw] = table.take(source.small_uniform_below(1 << bits, redraw.size))
        redraw = redraw[breaks[redraw] == 0]
    unbroken = np.flatnonzero(breaks == last + 1)
    if unbroken.size:
        breaks[unbroken] = _chain_breaks(unbroken.size, source, level + 1)
    return breaks


def _chain_breaks_one_by_one(n: int, k: int, source: RandomSource) -> np.ndarray:
    """Chains known to pass every trial before k, continued one Bernoulli(1/k) per round."""
    breaks = np.empty(n, dtype=np.int16)
    running = np.arange(n)
    while running.size:
        if k >= _CHAIN_LIMIT:
            raise RuntimeError("a Bernoulli(1/k) chain outgrew int16")  # never in practice
        success = source.small_uniform_below(k, running.size) == 0
        breaks[np.compress(~success, running)] = k
        running = np.compress(success, running)
        k += 1
    return breaks


def _bernoulli_exp_unit(
    numerators: np.ndarray, denominator: int, source: RandomSource
) -> np.ndarray:
    """Bernoulli(exp(−γ)) per element for γ = n/d in [0, 1] (CKS Algorithm 1, γ ≤ 1).

    Round K draws A ~ Bernoulli(γ/K) for every element still running; an element stops at the
    first A = 0 and returns whether K is odd. For K ≥ 2, Bernoulli(γ/K) is drawn as the product
    of independent Bernoulli(1/K) and Bernoulli(γ) trials, which has probability γ/K and keeps
    the bounds at K and d where d·K could overflow. All the Bernoulli(1/K) trials of an element
    come at once from :func:`_chain_breaks`: the first K whose trial fails.
    """
    out = np.ones(numerators.size, dtype=bool)  # stopping at K = 1 returns 1
    running = np.flatnonzero(_bernoulli(numerators, denominator, source))
    current = numerators[running]
    chain_break = _chain_breaks(running.size, source)
    k = 2
    while running.size:
        success = chain_break > k
        passed = np.flatnonzero(success)
        success[passed] = _bernoulli(current.take(passed), denominator, source)
        if k % 2 == 0:
            out[np.compress(~success, running)] = False
        kept = np.flatnonzero(success)
        running, current, chain_break = (
            running.take(kept),
            current.take(kept),
            chain_break.take(kept),
        )
        k += 1
    return out


def _bernoulli_exp_minus_one(n: int, source: RandomSource) -> np.ndarray:
    """n draws of Bernoulli(exp(−1)): the γ = 1 case, whose Bernoulli(γ) trials always succeed.

    The element stops at the first failed Bernoulli(1/K), K ≥ 2, and returns whether K is odd.
    """
    return (_chain_breaks(n, source) & 1).astype(bool)


def _bernoulli_exp(
    whole: np.ndarray, remainder: np.ndarray, denominator: int, source: RandomSource
) -> np.ndarray:
    """Bernoulli(exp(−(whole + remainder/d))): the fractional part, then ``whole`` exp(−1)s."""
    result = _bernoulli_exp_unit(remainder, denominator, source)
    alive = np.flatnonzero(result & (whole > 0))
    left = whole[alive]
    while alive.size:
        success = _bernoulli_exp_minus_one(alive.size, source)
        result[np.compress(~success, alive)] = False
        kept = np.flatnonzero(success & (left > 1))  # still alive, exp(−1)s still to pass
        alive, left = alive.take(kept), left.take(kept) - 1
    return result


def _geometric(n: int, source: RandomSource) -> np.ndarray:
    """Successes of Bernoulli(exp(−1)) before the first failure: P(v) = (1 − 1/e)·e^(−v)."""
    first = _bernoulli_exp_minus_one(n, source)
    counts = first.astype(np.int64)
    running = np.flatnonzero(first)
    while running.size:
        running = np.compress(_bernoulli_exp_minus_one(running.size, source), running)
        counts[running] += 1
    return counts


def _laplace_magnitudes(t: int, s: int, m: int, source: RandomSource) -> np.ndarray:
    """|Y| for the accepted ones of m tries of CKS Algorithm 2 (scale t/s), before the sign."""
    remainders = _uniform(t, m, source)
    if t > 1:
        remainders = np.compress(_bernoulli_exp_unit(remainders, t, source), remainders)
    magnitudes = _geometric(remainders.size, source)
    magnitudes *= t
    magnitudes += remainders
    if s > 1:
        magnitudes //= s
    return magnitudes


def _with_random_signs(magnitudes: np.ndarray, source: RandomSource) -> np.ndarray:
    """±magnitude with a fair sign, rejecting −0, which would count zero twice."""
    negative = source.bits(magnitudes.size)
    keep = np.greater_equal(magnitudes, negative)  # drops exactly magnitude 0 with a minus
    signs = 1 - 2 * negative.view(np.int8)  # arithmetic: a masked negation is branchy and slow
    return np.compress(keep, magnitudes * signs)


def _laplace_candidates(t: int, s: int, m: int, source: RandomSource) -> np.ndarray:
    """One pass of CKS Algorithm 2 on m candidates for scale t/s; returns the accepted ones."""
    return _with_random_signs(_laplace_magnitudes(t, s, m, source), source)


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


def _gaussian_parameters(p: int, q: int) -> tuple[int, int, int, int] | None:
    """``(t, a, b, denominator)`` for the int64 batch sampler of σ² = p/q, or None.

    CKS Algorithm 3 is exact for any Laplace scale t > 0 (t = ⌊σ⌋ + 1 is the most
    efficient). Its acceptance exponent (|Y| − σ²/t)²/(2σ²) = (|Y|·tq − p)²/(2pqt²) is
    reduced by g = gcd(tq, p) to (|Y|·a − b)²/denominator with a = tq/g, b = p/g and
    denominator = 2pqt²/g², an integer. When σ² is a multiple of t (see
    :func:`sampler_sigma2`) the denominator is just 2σ², so σ up to 2³⁰ stays in int64.
    """
    base = math.isqrt(p // q)  # ⌊σ⌋
    for t in (base + 1, base):
        if t < 1:
            continue
        g = math.gcd(t * q, p)
        a, b = t * q // g, p // g
        denominator = 2 * p * q * t * t // (g * g)
        # |Y| stays below ~60·t, so |Y|·a and b must leave room in int64.
        if denominator < _INT64_GAUSSIAN_DENOMINATOR and a * t < 2**50 and b < 2**56:
            return t, a, b, denominator
    return None


def sampler_sigma2(sigma2: Fraction) -> Fraction:
    """σ² itself if the batch sampler takes it, else the least multiple of t = ⌊√⌈σ²⌉⌋ + 1
    at or above ⌈σ²⌉: more noise by a relative amount below 1/σ, sampled in int64.

    Example:
        >>> sampler_sigma2(Fraction(14)), sampler_sigma2(Fraction(4_500_000_000_000_001))
        (Fraction(14, 1), Fraction(4500000023479560, 1))
    """
    if _gaussian_parameters(sigma2.numerator, sigma2.denominator) is not None:
        return sigma2
    whole = math.ceil(sigma2)
    t = math.isqrt(whole) + 1
    return Fraction(t * -(-whole // t))


def _gaussian_batch(
    t: int, a: int, b: int, denominator: int, count: int, source: RandomSource
) -> np.ndarray:
    """CKS Algorithm 3: Y ~ Laplace(t), kept w.p. exp(−(|Y|·a − b)²/denominator)."""

    def draw(m: int) -> np.ndarray:
        # The Gaussian acceptance depends on |Y| only, and the sign's −0 rejection is an
        # independent second test, so the two may run in either order: testing magnitudes
        # first leaves fewer elements to sign.
        magnitudes = _laplace_magnitudes(t, 1, m, source)
        offsets = magnitudes * a - b
        if offsets.size and max(-int(offsets.min()), int(offsets.max())) < _SQUARE_SAFE:
            whole, remainder = np.divmod(offsets * offsets, denominator)
        else:
            whole, remainder = _far_divmod(offsets, denominator)
        kept = np.compress(_bernoulli_exp(whole, remainder, denominator, source), magnitudes)
        return _with_random_signs(kept, source)

    return _fill(count, draw, 0.5)


def _far_divmod(offsets: np.ndarray, denominator: int) -> tuple[np.ndarray, np.ndarray]:
    """divmod(offset², denominator) when some squares could overflow int64."""
    whole = np.empty(offsets.size, dtype=np.int64)
    remainder = np.empty(offsets.size, dtype=np.int64)
    small = np.abs(offsets) < _SQUARE_SAFE
    squares = offsets[small] * offsets[small]
    whole[small], remainder[small] = np.divmod(squares, denominator)
    far = np.flatnonzero(~small)
    if far.size:  # the tail: squared with Python integers, in numpy's object loops
        squared = offsets.take(far).astype(object) ** 2
        whole[far] = np.minimum(squared // denominator, _COUNT_CAP)
        remainder[far] = squared % denominator
    return whole, remainder


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
