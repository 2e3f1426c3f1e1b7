"""Coverage of the published intervals over simulated releases.

Each release measures the same strategy again with the release's own exact samplers (the
first through :func:`~dpmm.measure.measurement.measure_strategy`, the others drawing its
record's noise law at once, all from a seeded generator), reconstructs by least squares
and answers the workload; the intervals are those a release
publishes (:func:`~dpmm.reconstruct.intervals.coefficient_rows` and
:class:`~dpmm.reconstruct.intervals.Intervals`, computed once: they depend on no data).
The strategies are ``c`` independent copies of a small one (a Kronecker product with
``Identity(c)``), so one release holds many independent answers and the coverage of 1,000
releases is known to a few tenths of a percent.

Run with ``-s`` to see the table of measured coverages.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from dpmm.linalg import AllRange, Hierarchical, Identity, Kron, Matrix, Prefix, Weighted
from dpmm.measure import measure_strategy, quantize
from dpmm.measure.noise import draw_noise
from dpmm.privacy import ZCDP, PureDP
from dpmm.reconstruct import least_squares
from dpmm.reconstruct.intervals import Intervals, NoiseLaw, coefficient_rows

LEVEL = 0.95
COPIES = 32
#: The statistical tolerance: 6 standard deviations of the mean coverage of the releases,
#: estimated from the spread of their own coverages (independent releases).
SIGMAS = 6.0


@dataclass(frozen=True)
class Setting:
    name: str
    strategy: Matrix
    workload: Matrix
    privacy: PureDP | ZCDP
    #: Whether the noise's lattice forces coverage above the level (small noise on
    #: integer coefficients): then the expected coverage is computed exactly.
    lattice: bool


def _copies(matrix: Matrix) -> Matrix:
    return Kron([Identity(COPIES), matrix])


SETTINGS = [
    # ε = 2 on counts: discrete Laplace of scale 1/2 (P(0) = 0.76).
    Setting("pure ε, scale 1/2", _copies(Identity(8)), _copies(Prefix(8)), PureDP(2), True),
    # ε = 1/20 on a binary tree (column L1 norm 4): scale 80, least-squares coefficients
    # off any small lattice.
    Setting(
        "pure ε, scale 80", _copies(Hierarchical(8)), _copies(AllRange(8)), PureDP("1/20"), False
    ),
    # ρ = 2 on counts: discrete Gaussian σ² = 1/4 (P(0) = 0.79).
    Setting("ρ, σ² = 1/4", _copies(Identity(8)), _copies(Prefix(8)), ZCDP(2), True),
    # ρ = 1/50 on a binary tree: σ² = 100.
    Setting("ρ, σ² = 100", _copies(Hierarchical(8)), _copies(AllRange(8)), ZCDP("1/50"), False),
    # A weighted tree quantized to a fine grid under ε = 1: a discrete Laplace of scale
    # 19,660 in integer units, through the continuous Laplace.
    Setting(
        "pure ε, quantized, t ~ 2e4",
        _copies(Weighted(0.3, Hierarchical(8))),
        _copies(AllRange(8)),
        PureDP(1),
        False,
    ),
    # A weighted tree is quantized to a fine grid: σ² ~ 10⁸ in integer units, the wide
    # discrete Gaussian's normal quantile.
    Setting(
        "ρ, quantized, σ² ~ 1e8",
        _copies(Weighted(0.3, Hierarchical(8))),
        _copies(AllRange(8)),
        ZCDP("1/2"),
        False,
    ),
]  # fmt: skip


def _lattice_coverage(row: np.ndarray, law: NoiseLaw, h: float) -> tuple[float, float]:
    """``P(|e| ≤ h)`` and ``P(|e| ≤ h − 1)`` for integer coefficients, by convolving the
    noise's PMF (enumerated independently of the module under test)."""
    reach = law.reach(1e-15)
    k = np.arange(-reach, reach + 1)
    p = float(law.parameter)
    weights = np.exp(-np.abs(k) / p) if law.laplace else np.exp(-(k**2) / (2 * p))
    pmf, total = weights / weights.sum(), np.ones(1)
    for c in np.rint(row[row != 0]).astype(int):
        spread = np.zeros(2 * reach * abs(c) + 1)
        spread[:: abs(c)] = pmf
        total = np.convolve(total, spread)
    values = np.arange(total.size) - (total.size - 1) // 2
    return float(total[np.abs(values) <= h].sum()), float(total[np.abs(values) <= h - 1].sum())


def _simulate(setting: Setting, releases: int, seed: int) -> dict[str, float]:
    quantized = quantize(setting.strategy)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, size=setting.strategy.shape[1])
    truth = setting.workload @ x
    # The first release through the measurement entry point; the others draw the same
    # record's noise with the same exact sampler, all at once (a release's noise is one
    # draw of this law per measured row).
    first = measure_strategy(quantized, x, setting.privacy, rng=rng)
    record = first.record
    rows = record.values.size
    noise = draw_noise(record.noise, record.scale, record.sigma2, (releases - 1) * rows, rng)
    law = NoiseLaw.of(record)
    intervals = Intervals(law, LEVEL)
    (start, coefficients), *rest = coefficient_rows(
        setting.workload, quantized.matrix, quantized.scale
    )
    assert start == 0 and not rest
    widths, exact = intervals.from_rows(coefficients)
    assert exact.all()
    inside = np.empty(releases)
    clean = np.asarray(quantized.integer @ x, dtype=np.float64)
    for release in range(releases):
        if release == 0:
            answers = record.values.astype(np.float64)  # B x + its draw, integer units
        else:
            answers = clean + noise[(release - 1) * rows : release * rows]
        estimate = least_squares(
            quantized.matrix, answers / quantized.scale, noise_std=first.noise_std
        )
        released = setting.workload @ np.asarray(estimate.x)
        inside[release] = np.mean(np.abs(released - truth) <= widths)
    result = {
        "measured": float(inside.mean()),
        "spread": float(inside.std(ddof=1) / math.sqrt(releases)),
        "answers": float(inside.size * widths.size),
    }
    if setting.lattice:
        coverages = [
            _lattice_coverage(row, law, h) for row, h in zip(coefficients, widths, strict=True)
        ]
        result["expected"] = float(np.mean([at for at, _ in coverages]))
        result["below"] = max(below for _, below in coverages)
    print(
        f"\n{setting.name:26} {law.noise:17} nominal {LEVEL:.3f}  measured "
        f"{result['measured']:.4f} ± {result['spread']:.4f}  over {releases} releases"
        + (f"  (exact expected {result['expected']:.4f})" if setting.lattice else "")
    )
    return result


def _check(setting: Setting, result: dict[str, float]) -> None:
    tolerance = SIGMAS * result["spread"]
    if setting.lattice:
        # The lattice forces coverage above the level; each half-width is the least on
        # it (one step less covers less than the level), and the releases cover what the
        # exact distribution says.
        assert result["expected"] >= LEVEL
        assert result["below"] < LEVEL
        assert abs(result["measured"] - result["expected"]) <= tolerance
    else:
        assert tolerance < 0.015  # the test can tell ±1.5 %
        assert abs(result["measured"] - LEVEL) <= 0.015
        assert result["measured"] >= LEVEL - tolerance


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_intervals_cover_their_level_over_1000_releases(setting):
    _check(setting, _simulate(setting, 1000, seed=zlib.crc32(setting.name.encode())))


@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_intervals_cover_their_level_over_20000_releases(setting):
    _check(setting, _simulate(setting, 20000, seed=zlib.crc32(setting.name.encode()) + 1))


def test_the_oracle_matches_a_single_draw():
    law = NoiseLaw("discrete_laplace", Fraction(1, 2))
    q = math.exp(-2)
    at, below = _lattice_coverage(np.array([1.0]), law, 1.0)
    assert at == pytest.approx(1 - 2 * q**2 / (1 + q)) and below == pytest.approx((1 - q) / (1 + q))
