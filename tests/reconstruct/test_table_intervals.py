"""Intervals of answers estimated from marginal tables, without the data vector.

The coefficients of a table answer on the measured cells' noise come from the marginal
algebra (:func:`~dpmm.reconstruct.marginal_tables.noise_coefficients`): checked against
the dense rows of ``W (AᵀA)⁺ Aᵀ``, then the published half-widths' coverage over 1,000
simulated releases, each measured with the release's exact samplers and estimated by
:func:`~dpmm.reconstruct.marginal_tables.marginal_tables` as a release does.

Run with ``-s`` to see the table of measured coverages.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import pytest

from dpmm.linalg import Marginal, Marginals
from dpmm.measure import measure_strategy, quantize
from dpmm.measure.noise import draw_noise
from dpmm.measure.tables import strategy_tables
from dpmm.privacy import ZCDP, PureDP
from dpmm.reconstruct import MarginalMeasurement, marginal_tables
from dpmm.reconstruct.intervals import Intervals, Multisets, NoiseLaw, merged_multiset
from dpmm.reconstruct.marginal_tables import noise_coefficients

SHAPE = (4, 5, 6)
LEVEL = 0.95
#: 6 standard deviations of the mean coverage, from the spread of the releases' own
#: coverages (independent releases).
SIGMAS = 6.0


def _dense(attrs: tuple[int, ...]) -> np.ndarray:
    return Marginal(SHAPE, list(attrs)).dense() if attrs else np.ones((1, math.prod(SHAPE)))


@pytest.mark.parametrize("seed", range(4))
def test_table_coefficients_are_the_dense_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    subsets = [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), ()]
    chosen = [subsets[i] for i in rng.choice(len(subsets), size=3, replace=False)]
    measured = [(attrs, float(rng.uniform(0.3, 3))) for attrs in [*chosen, (0, 1, 2)]]
    A = np.vstack([weight * _dense(attrs) for attrs, weight in measured])
    coefficients = np.linalg.pinv(A.T @ A) @ A.T
    for attrs in subsets:
        rows = rng.normal(size=(3, _dense(attrs).shape[0]))
        expected = rows @ _dense(attrs) @ coefficients
        found = list(noise_coefficients(SHAPE, measured, attrs, rows))
        for row, (values, counts) in zip(expected, found, strict=True):
            assert counts.sum() == A.shape[0]
            np.testing.assert_allclose(
                np.sort(np.abs(np.repeat(values, counts))), np.sort(np.abs(row)), atol=1e-12
            )


@dataclass(frozen=True)
class Setting:
    name: str
    weights: dict[tuple[int, ...], float]
    privacy: PureDP | ZCDP


SETTINGS = [
    # Integer weights, ε = 1: a discrete Laplace of scale 6 convolved exactly, the
    # least-squares coefficients off any small lattice.
    Setting("pure ε, scale 6", {(0, 1): 1.0, (1, 2): 2.0, (0, 2): 3.0}, PureDP(1)),
    # Real weights quantized to a fine grid: scale ~1.4e4 in integer units, through the
    # continuous Laplace.
    Setting("pure ε, quantized", {(0, 1): 1.0, (1, 2): 0.7, (0, 2): 1.3, (0,): 0.5}, PureDP(1)),
    # Under ρ: σ² ~ 3e7, the normal quantile plus the lattice's ½‖c‖₁ of the multiset.
    Setting("ρ, quantized", {(0, 1): 1.0, (1, 2): 0.7, (0, 2): 1.3, (0,): 0.5}, ZCDP(1)),
]
#: The tables answered: measured ones, and ones the measurements only imply.
QUERIES = [(0, 1), (0,), (1,), (2,), ()]


def _simulate(setting: Setting, releases: int, seed: int) -> dict[str, float]:
    quantized = quantize(Marginals(SHAPE, setting.weights))
    integer, scale = quantized.integer, quantized.scale
    tables = strategy_tables(integer)
    measured = [(a, w / scale) for a, w in zip(tables, integer.weights.values(), strict=True)]
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, size=math.prod(SHAPE))
    record = measure_strategy(quantized, x, setting.privacy, rng=rng).record
    law = NoiseLaw.of(record)
    # Half-widths as a release publishes them: every cell of a table shares its multiset.
    intervals = Intervals(law, LEVEL)
    widths = {}
    for attrs in QUERIES:
        cells = _dense(attrs).shape[0]
        rows = np.eye(cells)
        multisets = Multisets.collect(
            merged_multiset(values / scale, counts)
            for values, counts in noise_coefficients(SHAPE, measured, attrs, rows)
        )
        assert len(multisets.distinct) == 1
        found, exact = intervals.of(multisets)
        assert exact.all()
        widths[attrs] = found
    truth = {attrs: _dense(attrs) @ x for attrs in QUERIES}
    clean = np.asarray(integer @ x, dtype=np.float64)
    rows = record.values.size
    noise = draw_noise(record.noise, record.scale, record.sigma2, (releases - 1) * rows, rng)
    std = math.sqrt(record.noise_variance()) / scale
    inside = np.empty(releases)
    for release in range(releases):
        values = record.values.astype(np.float64)
        if release:
            values = clean + noise[(release - 1) * rows : release * rows]
        y, start, parts = values / scale, 0, []
        for attrs, weight in measured:
            cells = _dense(attrs).shape[0]
            parts.append(MarginalMeasurement(attrs, y[start : start + cells], std, weight))
            start += cells
        estimates = marginal_tables(SHAPE, parts, QUERIES)
        hits = [
            np.abs(estimates[attrs].values - truth[attrs]) <= widths[attrs] for attrs in QUERIES
        ]
        inside[release] = np.mean(np.concatenate(hits))
    result = {
        "measured": float(inside.mean()),
        "spread": float(inside.std(ddof=1) / math.sqrt(releases)),
    }
    print(
        f"\n{setting.name:20} {law.noise:17} parameter {float(law.parameter):10.4g}  nominal "
        f"{LEVEL:.3f}  measured {result['measured']:.4f} ± {result['spread']:.4f}  over "
        f"{releases} releases"
    )
    return result


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_table_intervals_cover_their_level_over_1000_releases(setting: Setting) -> None:
    result = _simulate(setting, 1000, seed=zlib.crc32(setting.name.encode()))
    tolerance = SIGMAS * result["spread"]
    assert tolerance < 0.015  # the test can tell ±1.5 %
    assert abs(result["measured"] - LEVEL) <= 0.015
    assert result["measured"] >= LEVEL - tolerance
