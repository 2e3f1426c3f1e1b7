"""Uniform random integers from the operating system's CSPRNG, for the exact noise samplers.

Every random decision of a sampler is "is this uniform integer below that one", so all a
sampler needs is :meth:`RandomSource.uniform_below` (exact, by rejection on random bits) and
:meth:`RandomSource.bits`. :class:`SecureRandom` reads its bytes from ``os.urandom`` in large
blocks; it has no seed and cannot be given one. Tests make a sampler reproducible by passing a
``numpy.random.Generator``, which :func:`as_random_source` wraps in :class:`GeneratorSource`;
that wrapper is not a cryptographic generator and no release path creates one.

Example:
    >>> values = SecureRandom().uniform_below(10, 1000)
    >>> bool(values.min() >= 0 and values.max() < 10), values.dtype.name
    (True, 'int64')
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

__all__ = ["GeneratorSource", "RandomSource", "SecureRandom", "as_random_source"]

#: Bytes read from the OS per refill: one system call serves many small requests.
_BLOCK_BYTES = 1 << 20
_WORD_BITS = 64
_MAX_BOUND = 2**63 - 1


class RandomSource:
    """Uniform bits and integers derived from a stream of uniform random bytes.

    Subclasses provide :meth:`_fresh_bytes`; everything else is shared, so the
    deterministic test source exercises exactly the code the secure source runs.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _fresh_bytes(self, count: int) -> bytes:
        raise NotImplementedError

    def random_bytes(self, count: int) -> bytes:
        """``count`` uniform random bytes."""
        if os.getpid() != self._pid:
            # A forked child must never replay the parent's buffered bytes (nor wait on a lock
            # another thread of the parent held at the fork).
            self._buffer, self._offset, self._pid = b"", 0, os.getpid()
            self._lock = threading.Lock()
        if count >= _BLOCK_BYTES:
            return self._fresh_bytes(count)
        # Two threads must never be handed the same slice of the buffer.
        with self._lock:
            if self._offset + count > len(self._buffer):
                self._buffer, self._offset = self._fresh_bytes(_BLOCK_BYTES), 0
            start, self._offset = self._offset, self._offset + count
            return self._buffer[start : self._offset]

    def bits(self, n: int) -> np.ndarray:
        """``n`` independent fair bits as a boolean array."""
        raw = np.frombuffer(self.random_bytes((n + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw, count=n).view(np.bool_)

    def _chunks(self, n: int, width: int) -> np.ndarray:
        """``n`` uniform integers of ``width`` bits (1 ≤ width ≤ 63), packed 64 // width a word."""
        per_word = _WORD_BITS // width
        words = np.frombuffer(self.random_bytes(8 * (-(-n // per_word))), dtype=np.uint64)
        mask = np.uint64((1 << width) - 1)
        if per_word == 1:
            return words & mask
        shifts = np.arange(0, per_word * width, width, dtype=np.uint64)
        return ((words[:, None] >> shifts) & mask).reshape(-1)[:n]

    def uniform_below(self, bound: int | np.ndarray, size: int | None = None) -> np.ndarray:
        """Independent integers uniform on ``[0, bound)``, exactly, as an int64 array.

        ``bound`` is a positive integer below 2**63, or an int64 array of them (one bound per
        output, ``size`` then defaults to its length). Each value is a masked block of random
        bits, redrawn while it is not below its bound, so every value in range is equally likely.
        """
        if np.ndim(bound) == 0:
            return self._uniform_below_scalar(int(bound), _count(size))
        bounds = np.asarray(bound, dtype=np.int64).reshape(-1)
        if size is not None and _count(size) != bounds.size:
            raise ValueError(f"size {size} does not match the {bounds.size} bounds given")
        if bounds.size and bounds.min() <= 0:
            raise ValueError("every bound of uniform_below must be positive")
        out = np.empty(bounds.size, dtype=np.int64)
        pending = np.arange(bounds.size)
        while pending.size:
            wanted = bounds[pending]
            # frexp never under-counts the bits of an int64 (rounding only goes up to a power
            # of two), so the masks below cover the whole range; the comparison is exact.
            _, exponent = np.frexp((wanted - 1).astype(np.float64))
            width = int(exponent.max())
            if width == 0:
                out[pending] = 0
                break
            masks = (np.uint64(1) << exponent.astype(np.uint64)) - np.uint64(1)
            draws = (self._chunks(pending.size, width) & masks).astype(np.int64)
            ok = draws < wanted
            out[pending[ok]] = draws[ok]
            pending = pending[~ok]
        return out

    def small_uniform_below(self, bound: int, n: int) -> np.ndarray:
        """``n`` integers uniform on ``[0, bound)`` for ``bound`` ≤ 2**32, in the narrowest dtype.

        Values come as uint8, uint16 or uint32, so a small bound costs one to four random bytes
        a value instead of eight, and callers skip a conversion pass. Draws are masked to the
        bound's bit width and rejected while not below it, exactly as :meth:`uniform_below`.
        """
        if not 0 < bound <= 2**32:
            raise ValueError(f"bound of small_uniform_below must be in [1, 2**32], got {bound}")
        width = (bound - 1).bit_length()
        dtype = np.uint8 if width <= 8 else np.uint16 if width <= 16 else np.uint32
        if width == 0 or n == 0:
            return np.zeros(n, dtype=dtype)
        itemsize = np.dtype(dtype).itemsize
        mask = dtype((1 << width) - 1)
        parts, filled = [], 0
        while filled < n:
            missing = n - filled
            wanted = missing + missing * ((1 << width) - bound) // bound + 16
            if bound == 1 << width:  # a power of two: every masked draw is in range
                wanted = missing
            draws = np.frombuffer(self.random_bytes(itemsize * wanted), dtype=dtype)
            if width < 8 * itemsize:
                draws = draws & mask
            good = draws if bound == 1 << width else np.compress(draws < bound, draws)[:missing]
            parts.append(good)
            filled += good.size
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _uniform_below_scalar(self, bound: int, n: int) -> np.ndarray:
        if not 0 < bound <= _MAX_BOUND:
            raise ValueError(f"bound of uniform_below must be in [1, 2**63), got {bound}")
        width = (bound - 1).bit_length()
        if width == 0 or n == 0:
            return np.zeros(n, dtype=np.int64)
        if bound == 1 << width:  # a power of two: every draw is in range
            return self._chunks(n, width).view(np.int64)
        parts, filled = [], 0
        while filled < n:
            missing = n - filled
            # Oversample by the expected rejection rate so one round nearly always suffices.
            draws = self._chunks(missing + missing * ((1 << width) - bound) // bound + 16, width)
            good = np.compress(draws < bound, draws)[:missing]
            parts.append(good)
            filled += good.size
        # Values are below 2**63, so the unsigned words reinterpret as int64 unchanged.
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).view(np.int64)

    def randbelow(self, bound: int) -> int:
        """One integer uniform on ``[0, bound)`` for a Python int of any size."""
        if bound <= 0:
            raise ValueError(f"bound of randbelow must be positive, got {bound}")
        width = (bound - 1).bit_length()
        while True:
            value = int.from_bytes(self.random_bytes((width + 7) // 8), "little")
            value &= (1 << width) - 1
            if value < bound:
                return value


class SecureRandom(RandomSource):
    """Random bytes from ``os.urandom`` (the kernel CSPRNG), read in 1 MiB blocks.

    There is no seed. The buffer is dropped after a fork and is not pickled, so two
    processes never draw the same bytes; a lock keeps threads from sharing bytes.
    """

    def _fresh_bytes(self, count: int) -> bytes:
        return os.urandom(count)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        RandomSource.__init__(self)


class GeneratorSource(RandomSource):
    """Bytes from a ``numpy.random.Generator``: reproducible, NOT secure; for tests only."""

    def __init__(self, generator: np.random.Generator) -> None:
        super().__init__()
        self._generator = generator

    def _fresh_bytes(self, count: int) -> bytes:
        return self._generator.bytes(count)


_DEFAULT_SOURCE = SecureRandom()


def as_random_source(rng: RandomSource | np.random.Generator | None) -> RandomSource:
    """The OS CSPRNG for ``None``; a test's ``Generator`` wrapped; a source as it is."""
    if rng is None:
        return _DEFAULT_SOURCE
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return GeneratorSource(rng)
    raise TypeError(f"rng must be None or a numpy.random.Generator, got {type(rng).__name__}")


def _count(size: int | None) -> int:
    count = 1 if size is None else size
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
        raise ValueError(f"size must be a non-negative integer, got {size!r}")
    return int(count)
