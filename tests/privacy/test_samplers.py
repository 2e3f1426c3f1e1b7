"""Exact discrete Laplace and Gaussian samplers: distribution, inputs, and the no-seed rule.

The statistical tests compare samples with pmfs computed here, independently of the
samplers, by a chi-square test on binned counts (tails pooled) and a Kolmogorov–Smirnov
distance bounded with the Dvoretzky–Kiefer–Wolfowitz inequality, which holds for discrete
distributions too. Both use α = 1e-6 and fixed seeds, so a correct sampler passes every run.
"""

from __future__ import annotations

import ast
import inspect
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import dpmm
from dpmm.errors import PrivacyParameterError
from dpmm.privacy import samplers
from dpmm.privacy.randomness import GeneratorSource
from dpmm.privacy.samplers import discrete_gaussian, discrete_laplace

ALPHA = 1e-6
LAPLACE_SCALES = [Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(1000)]
GAUSSIAN_SIGMA2 = [Fraction(1, 4), Fraction(1), Fraction(49, 9), Fraction(10**6)]


def laplace_pmf(scale: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """Support and probabilities of P(k) ∝ exp(−|k|/scale), truncated where the mass is < 1e-30."""
    half_width = math.ceil(70 * float(scale)) + 5
    support = np.arange(-half_width, half_width + 1)
    weights = np.exp(-np.abs(support) / float(scale))
    return support, weights / weights.sum()


def gaussian_pmf(sigma2: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """Support and probabilities of P(k) ∝ exp(−k²/(2σ²)) over ±12σ."""
    half_width = math.ceil(12 * math.sqrt(sigma2)) + 5
    support = np.arange(-half_width, half_width + 1)
    weights = np.exp(-(support.astype(np.float64) ** 2) / (2 * float(sigma2)))
    return support, weights / weights.sum()


def chi_square_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square p-value with consecutive values merged until each bin expects ≥ 20 samples."""
    n = samples.size
    if samples.min() < support[0] or samples.max() > support[-1]:
        return 0.0
    observed_per_value = np.bincount(samples - support[0], minlength=support.size)
    edges, expected_acc = [0], 0.0
    minimum = max(20.0, n / 2000)
    for i, p in enumerate(pmf):
        expected_acc += p * n
        if expected_acc >= minimum:
            edges.append(i + 1)
            expected_acc = 0.0
    edges[-1] = support.size  # the last, thin tail joins the previous bin
    observed = np.add.reduceat(observed_per_value, edges[:-1])
    expected = np.add.reduceat(pmf * n, edges[:-1])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(statistic, df=len(observed) - 1))


def ks_distance(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """sup_k |F_n(k) − F(k)| over the support."""
    counts = np.bincount(np.clip(samples - support[0], 0, support.size - 1), minlength=support.size)
    return float(np.abs(np.cumsum(counts) / samples.size - np.cumsum(pmf)).max())


def dkw_threshold(n: int) -> float:
    """P(KS distance > threshold) ≤ α for any distribution (DKW with Massart's constant)."""
    return math.sqrt(math.log(2 / ALPHA) / (2 * n))


def fits(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> bool:
    return chi_square_pvalue(samples, support, pmf) > ALPHA and ks_distance(
        samples, support, pmf
    ) <= dkw_threshold(samples.size)


CASES = [("laplace", s, discrete_laplace, laplace_pmf) for s in LAPLACE_SCALES] + [
    ("gaussian", s, discrete_gaussian, gaussian_pmf) for s in GAUSSIAN_SIGMA2
]
CASE_IDS = [f"{kind}-{param}" for kind, param, _, _ in CASES]


@pytest.mark.parametrize(("kind", "param", "sampler", "pmf_of"), CASES, ids=CASE_IDS)
def test_samples_follow_the_exact_distribution(kind, param, sampler, pmf_of):
    samples = sampler(param, 200_000, rng=np.random.default_rng(20260 + len(kind)))
    support, pmf = pmf_of(param)
    assert samples.dtype == np.int64
    assert chi_square_pvalue(samples, support, pmf) > ALPHA
    assert ks_distance(samples, support, pmf) <= dkw_threshold(samples.size)


@pytest.mark.parametrize("factor", [Fraction(7, 10), Fraction(13, 10)])
@pytest.mark.parametrize(("kind", "param", "sampler", "pmf_of"), CASES, ids=CASE_IDS)
def test_the_statistical_test_rejects_a_wrong_scale(kind, param, sampler, pmf_of, factor):
    wrong = sampler(param * factor, 200_000, rng=np.random.default_rng(7))
    assert not fits(wrong, *pmf_of(param))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "param", "sampler", "pmf_of"), CASES, ids=CASE_IDS)
def test_many_samples_follow_the_exact_distribution(kind, param, sampler, pmf_of):
    samples = sampler(param, 3_000_000, rng=np.random.default_rng(99))
    assert fits(samples, *pmf_of(param))


def test_the_os_csprng_path_samples_the_right_distributions():
    assert fits(discrete_laplace("7/3", 100_000), *laplace_pmf(Fraction(7, 3)))
    assert fits(discrete_gaussian("49/9", 100_000), *gaussian_pmf(Fraction(49, 9)))


def test_python_integer_path_matches_the_distribution():
    """The one-sample-at-a-time path used for parameters too large for int64 batches."""
    source = GeneratorSource(np.random.default_rng(5))
    laplace = np.array([samplers._laplace_one(7, 3, source) for _ in range(6000)])
    gaussian = np.array([samplers._gaussian_one(49, 9, 3, source) for _ in range(6000)])
    assert fits(laplace, *laplace_pmf(Fraction(7, 3)))
    assert fits(gaussian, *gaussian_pmf(Fraction(49, 9)))


def test_huge_parameters_take_the_python_integer_path():
    scale = Fraction(2**45 + 1, 3)
    values = discrete_laplace(scale, 20, rng=np.random.default_rng(1))
    assert values.dtype == np.int64 and np.abs(values).max() < 80 * scale
    sigma2 = Fraction(10**14)
    values = discrete_gaussian(sigma2, 20, rng=np.random.default_rng(2))
    assert np.abs(values).max() < 10 * 10**7


def test_reproducible_with_a_test_generator_and_shaped():
    first = discrete_gaussian(1, (3, 4), rng=np.random.default_rng(3))
    second = discrete_gaussian(1, (3, 4), rng=np.random.default_rng(3))
    assert first.shape == (3, 4) and np.array_equal(first, second)
    assert discrete_laplace(1, 0).shape == (0,)


def test_parameters_given_as_int_string_float_or_fraction_agree():
    draws = [
        discrete_laplace(value, 50, rng=np.random.default_rng(4))
        for value in (Fraction(1, 4), "1/4", "0.25", 0.25)
    ]
    assert all(np.array_equal(draws[0], other) for other in draws[1:])


@pytest.mark.parametrize("bad", [0, -1, "-2/3", float("nan"), float("inf"), "abc", None, True])
@pytest.mark.parametrize(
    ("sampler", "name"), [(discrete_laplace, "scale"), (discrete_gaussian, "sigma2")]
)
def test_bad_parameters_are_rejected_by_name(sampler, name, bad):
    with pytest.raises(PrivacyParameterError, match=name):
        sampler(bad, 10)


@pytest.mark.parametrize("size", [-1, 2.5, "3", (2, -1), True, None])
def test_bad_sizes_are_rejected(size):
    with pytest.raises(ValueError, match="size"):
        discrete_laplace(1, size)


def test_a_non_generator_rng_is_rejected():
    with pytest.raises(TypeError, match="rng"):
        discrete_laplace(1, 3, rng=42)


def test_no_sampler_takes_a_seed():
    for function in (discrete_laplace, discrete_gaussian):
        parameters = inspect.signature(function).parameters
        assert not any("seed" in name for name in parameters)
        assert parameters["rng"].default is None


def _seeded_generator_calls(tree: ast.AST) -> list[str]:
    """Uses of numpy's generator constructors or global seed outside fast_insecure_* functions."""
    found: list[str] = []

    def visit(node: ast.AST, inside_insecure: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside_insecure = inside_insecure or node.name.startswith("fast_insecure")
        if isinstance(node, ast.Attribute | ast.Name) and not inside_insecure:
            text = ast.unparse(node)
            if text.endswith(("default_rng", "RandomState", "random.seed")):
                found.append(f"line {node.lineno}: {text}")
        for child in ast.iter_child_nodes(node):
            visit(child, inside_insecure)

    visit(tree, False)
    return found


#: The one module allowed a numpy generator outside fast_insecure code: the public,
#: unseeded random restarts of strategy optimizers, which read no data.
RESTART_MODULE = "strategy/restarts.py"
#: And the generator of ``dpmm demo``'s synthetic, public dataset (never used for noise).
DEMO_MODULE = "cli_release.py"


def test_no_numpy_generator_is_created_outside_fast_insecure_code():
    package = Path(dpmm.__file__).parent
    offenders = {
        str(path.relative_to(package)): calls
        for path in sorted(package.rglob("*.py"))
        if (calls := _seeded_generator_calls(ast.parse(path.read_text(), str(path))))
    }
    assert offenders.pop(RESTART_MODULE) == ["line 23: np.random.default_rng"]
    assert [call.split(": ")[1] for call in offenders.pop(DEMO_MODULE)] == ["np.random.default_rng"]
    assert offenders == {}


def test_the_seed_scanner_finds_a_seeded_generator():
    code = "import numpy as np\ndef f():\n    return np.random.default_rng(0)\n"
    assert _seeded_generator_calls(ast.parse(code)) == ["line 3: np.random.default_rng"]
    insecure = "def fast_insecure_x():\n    return np.random.default_rng()\n"
    assert _seeded_generator_calls(ast.parse(insecure)) == []


def test_fast_insecure_samplers_are_floats_of_the_right_scale():
    generator = np.random.default_rng(8)
    laplace = samplers.fast_insecure_laplace(2.0, 100_000, rng=generator)
    gaussian = samplers.fast_insecure_gaussian(4.0, 100_000, rng=generator)
    assert laplace.dtype == np.float64 and abs(laplace.var() - 8.0) < 0.3
    assert abs(gaussian.var() - 4.0) < 0.15


def test_chain_tables_hold_the_exact_break_probabilities():
    """P(first failed Bernoulli(1/k) is at k) = (k − 1)/k!, counted over each table's valid part."""
    for first, last, bits, table in samplers._CHAIN_LEVELS:
        counts = np.bincount(table, minlength=last + 2)
        valid = (1 << bits) - int(counts[0])
        product = math.prod(range(first, last + 1))
        assert valid % product == 0 and valid > (1 << bits) // 2
        reached = Fraction(1)
        for k in range(first, last + 1):
            assert Fraction(int(counts[k]), valid) == reached * Fraction(k - 1, k)
            reached /= k
        assert Fraction(int(counts[last + 1]), valid) == reached


def test_chain_breaks_past_the_tables_follow_the_exact_distribution():
    source = GeneratorSource(np.random.default_rng(11))
    breaks = samplers._chain_breaks_one_by_one(200_000, 10, source)
    support = np.arange(10, 14)
    pmf = np.array([9 / 10, 1 / 10 * 10 / 11, 1 / 110 * 11 / 12, 1 / 1320])
    tail_pooled = np.minimum(breaks.astype(np.int64), 13)
    assert chi_square_pvalue(tail_pooled, support, pmf) > ALPHA


def test_large_secure_requests_are_split_across_threads_and_stay_exact(monkeypatch):
    calls: list[int] = []
    batch = samplers._laplace_batch

    def counting(t, s, count, source):
        calls.append(count)
        return batch(t, s, count, source)

    monkeypatch.setattr(samplers, "_laplace_batch", counting)
    monkeypatch.setattr(samplers.os, "cpu_count", lambda: 2)
    samples = discrete_laplace("7/3", 2 * samplers._PARALLEL_MIN + 1)
    assert sorted(calls) == [samplers._PARALLEL_MIN, samplers._PARALLEL_MIN + 1]
    assert fits(samples, *laplace_pmf(Fraction(7, 3)))
    assert fits(
        discrete_gaussian("49/9", 3 * samplers._PARALLEL_MIN), *gaussian_pmf(Fraction(49, 9))
    )


def test_a_failure_in_a_worker_thread_reaches_the_caller(monkeypatch):
    def failing(count, source):
        if source is not samplers.as_random_source(None):
            raise ArithmeticError("worker")
        return np.zeros(count, dtype=np.int64)

    monkeypatch.setattr(samplers.os, "cpu_count", lambda: 2)
    with pytest.raises(ArithmeticError, match="worker"):
        samplers._in_parallel(4 * samplers._PARALLEL_MIN, failing, samplers.as_random_source(None))


def test_far_offsets_are_squared_with_python_integers():
    offsets = np.array([3, -5, 2**31 + 7, -(2**40)], dtype=np.int64)
    whole, remainder = samplers._far_divmod(offsets, 1000)
    for offset, high, low in zip(offsets.tolist(), whole.tolist(), remainder.tolist(), strict=True):
        expected_high, expected_low = divmod(offset**2, 1000)
        # A whole part past the cap means exp(−whole) is never passed; it is clipped to fit.
        assert (high, low) == (min(expected_high, samplers._COUNT_CAP), expected_low)


@pytest.mark.parametrize("denominator", [2**32 + 1, 3 * 2**32 - 5, 2 * 10**12 + 3])
def test_wide_bernoulli_has_the_exact_probability(denominator):
    source = GeneratorSource(np.random.default_rng(denominator % 1000))
    # Numerators whose high 32-bit parts equal the denominator's, or not, or are zero.
    for numerator in (1, denominator // 3, denominator - 2**31, denominator - 1):
        hits = samplers._bernoulli(np.full(100_000, numerator, dtype=np.int64), denominator, source)
        assert stats.binomtest(int(hits.sum()), hits.size, numerator / denominator).pvalue > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(7, 5), Fraction(5, 2)])
def test_bernoulli_exp_has_probability_exp_minus_gamma(gamma):
    source = GeneratorSource(np.random.default_rng(int(gamma * 100)))
    hits = sum(samplers.bernoulli_exp(gamma, rng=source) for _ in range(20_000))
    assert stats.binomtest(hits, 20_000, math.exp(-gamma)).pvalue > ALPHA
    # The same count is implausible for a neighbouring γ: the test can tell them apart.
    assert stats.binomtest(hits, 20_000, math.exp(-gamma * 1.2)).pvalue < ALPHA


def test_bernoulli_exp_edges_and_bad_input():
    assert samplers.bernoulli_exp(0) is True
    assert samplers.bernoulli_exp(Fraction(10**7)) is False
    with pytest.raises(PrivacyParameterError):
        samplers.bernoulli_exp(-1)
