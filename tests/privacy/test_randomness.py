"""The random source: exact uniform integers, fair bits, no seed, no replay across processes."""

from __future__ import annotations

import inspect
import os
import pickle
import threading

import numpy as np
import pytest
from scipy import stats

from dpmm.privacy.randomness import GeneratorSource, SecureRandom, as_random_source

ALPHA = 1e-6


def uniform_pvalue(values: np.ndarray, bound: int) -> float:
    observed = np.bincount(values, minlength=bound)
    return float(stats.chisquare(observed).pvalue)


@pytest.mark.parametrize("bound", [2, 3, 7, 64, 1000, 40320])
def test_uniform_below_is_uniform(bound):
    values = GeneratorSource(np.random.default_rng(bound)).uniform_below(bound, 200_000)
    assert values.dtype == np.int64 and values.min() >= 0 and values.max() < bound
    assert uniform_pvalue(values, bound) > ALPHA


def test_uniform_below_rejects_out_of_range_values_rather_than_folding_them():
    # A bound just above a power of two is where a modulo reduction would be most biased.
    values = GeneratorSource(np.random.default_rng(1)).uniform_below(129, 300_000)
    assert uniform_pvalue(values, 129) > ALPHA


def test_a_biased_sample_fails_the_uniformity_check():
    values = np.random.default_rng(2).integers(0, 256, 300_000) % 129
    assert uniform_pvalue(values, 129) < ALPHA


def test_uniform_below_large_and_trivial_bounds():
    source = GeneratorSource(np.random.default_rng(3))
    big = 2**62 + 12345
    values = source.uniform_below(big, 10_000)
    assert values.min() >= 0 and values.max() < big and values.max() > 2**61
    assert np.array_equal(source.uniform_below(1, 5), np.zeros(5, dtype=np.int64))
    assert source.uniform_below(5, 0).shape == (0,)


def test_uniform_below_with_one_bound_per_element():
    source = GeneratorSource(np.random.default_rng(4))
    bounds = np.repeat(np.array([1, 3, 1000, 2**40 + 3], dtype=np.int64), 50_000)
    values = source.uniform_below(bounds)
    assert np.all((values >= 0) & (values < bounds))
    assert uniform_pvalue(values[bounds == 3], 3) > ALPHA
    assert uniform_pvalue(values[bounds == 1000], 1000) > ALPHA
    assert np.all(values[bounds == 1] == 0)


@pytest.mark.parametrize("bound", [0, -3, 2**63])
def test_bad_bounds_are_rejected(bound):
    with pytest.raises(ValueError, match="bound"):
        SecureRandom().uniform_below(bound, 3)


def test_bits_are_fair():
    bits = GeneratorSource(np.random.default_rng(5)).bits(1_000_001)
    assert bits.dtype == np.bool_ and bits.size == 1_000_001
    assert stats.binomtest(int(bits.sum()), bits.size).pvalue > ALPHA


def test_randbelow_handles_python_integers_of_any_size():
    source = GeneratorSource(np.random.default_rng(6))
    huge = 10**40 + 7
    assert all(0 <= source.randbelow(huge) < huge for _ in range(100))
    values = np.array([source.randbelow(6) for _ in range(60_000)])
    assert uniform_pvalue(values, 6) > ALPHA


def test_the_secure_source_draws_from_the_os_and_has_no_seed():
    assert list(inspect.signature(SecureRandom).parameters) == []
    values = SecureRandom().uniform_below(1000, 100_000)
    assert uniform_pvalue(values, 1000) > ALPHA
    assert not np.array_equal(SecureRandom().bits(256), SecureRandom().bits(256))


def test_a_pickled_secure_source_does_not_carry_buffered_bytes():
    source = SecureRandom()
    source.bits(8)  # fills the buffer
    copy = pickle.loads(pickle.dumps(source))
    assert not np.array_equal(source.bits(4096), copy.bits(4096))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_replay_the_parents_buffer():
    source = SecureRandom()
    source.bits(8)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write_end, source.random_bytes(64))
        os._exit(0)
    os.waitpid(pid, 0)
    child_bytes = os.read(read_end, 64)
    assert child_bytes != source.random_bytes(64)


def test_as_random_source():
    assert isinstance(as_random_source(None), SecureRandom)
    assert isinstance(as_random_source(np.random.default_rng(0)), GeneratorSource)
    with pytest.raises(TypeError, match="rng"):
        as_random_source(np.random.RandomState(0))


def test_threads_sharing_a_source_never_receive_the_same_bytes():
    source = SecureRandom()
    chunks: list[bytes] = []

    def draw() -> None:
        chunks.extend(source.random_bytes(16) for _ in range(5000))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(chunks)) == len(chunks) == 20_000


@pytest.mark.parametrize(
    ("bound", "dtype"),
    [
        (1, np.uint8),
        (3, np.uint8),
        (256, np.uint8),
        (1000, np.uint16),
        (65536, np.uint16),
        (362880, np.uint32),
        (2**32, np.uint32),
    ],
)
def test_small_uniform_below_is_uniform_in_the_narrowest_dtype(bound, dtype):
    values = GeneratorSource(np.random.default_rng(bound)).small_uniform_below(bound, 200_000)
    assert values.dtype == dtype and values.size == 200_000 and int(values.max()) < bound
    if 1 < bound <= 65536:
        assert uniform_pvalue(values.astype(np.int64), bound) > ALPHA


@pytest.mark.parametrize("bound", [0, 2**32 + 1])
def test_small_uniform_below_rejects_bounds_out_of_range(bound):
    with pytest.raises(ValueError, match="bound"):
        SecureRandom().small_uniform_below(bound, 3)
