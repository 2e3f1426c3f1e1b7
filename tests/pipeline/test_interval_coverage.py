"""The exact intervals of the releases that had only bounds: a Kronecker strategy on the
Dask workers (``cluster.arrays: workers``) and integer residual blocks.

Each release runs for real (the workers' one on a LocalCluster); its published
``half_width`` column is then checked over 1,000 simulated releases of the same strategy,
each drawn with the release's exact sampler and noise law and estimated by least squares
(the workers' answers through the dense pseudo-inverse of the small integer strategy,
which their factor-by-factor solve equals; residual blocks through the release's own
per-set solve). The share of answers inside their intervals must be within ±1.5 % of the
level. Run with ``-s`` to see the measured coverages.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.config import ReleaseConfig, load_config
from dpmm.measure.noise import draw_noise
from dpmm.pipeline import ReleaseResult, run_release
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.reconstruct.residual_blocks import BlockEstimate, block_workload_answers
from dpmm.release import read_answers, read_measurements
from tests.pipeline.conftest import write_config

LEVEL = 0.95
RELEASES = 1000
#: 6 standard deviations of the mean coverage, from the spread of the releases' own
#: coverages (independent releases; the answers within one release are correlated).
SIGMAS = 6.0

#: Kron strategies on the workers: a tree under small discrete noise (its coefficients
#: on a lattice, so the half-widths are the exact least ones) under ρ and under ε.
CLUSTER = """name: grid
domain: {{a: 16, b: 8}}
privacy: {privacy}
workload: [{{name: a-by-b, kind: prefix, attribute: a, by: [b]}},
  {{name: b-ranges, kind: all_range, attribute: b}},
  {{name: a, kind: marginal, attributes: [a]}}, {{name: people, kind: total}}]
strategy: {{method: hierarchical}}
cluster: {{arrays: workers}}
"""
#: Residual blocks (ρ only): at ρ = 1 a σ² of 3.4·10¹⁰ in integer units, through the
#: normal quantile plus the lattice's ½‖c‖₁ of each answer's own coefficients; at
#: ρ = 10⁴ a σ² of 3.4·10⁶, each answer's coefficients convolved.
RESIDUAL = """name: residual
domain: {{a: 4, b: 5, c: 6}}
privacy: {{rho: {rho}}}
workload: [{{name: pairs, kind: marginals, k: 2}}, {{name: singles, kind: marginals, k: 1}},
  {{name: a-by-b, kind: prefix, attribute: a, by: [b]}}]
strategy: {{method: residual}}
"""


def _counts(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(5).poisson(4.0, size=shape).astype(np.int64)


def _released(
    folder: Path, body: str, shape: tuple[int, ...]
) -> tuple[ReleaseConfig, ReleaseResult]:
    """A release of ``body`` over the counts of :func:`_counts`, and its config."""
    counts = _counts(shape)
    cells = np.nonzero(counts)
    names = [chr(ord("a") + axis) for axis in range(len(shape))]
    rows = {name: np.repeat(cell, counts[cells]) for name, cell in zip(names, cells, strict=True)}
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table(rows), folder / "data" / "part-0.parquet")
    granted = PureDP(100) if "epsilon" in body else ZCDP(10**5)
    config = write_config(folder, body, data=folder / "data", budget=granted)
    config = load_config(config.path)
    return config, run_release(config)


def _coverage(name: str, errors: np.ndarray, widths: np.ndarray, law: str) -> float:
    """The mean share of answers inside their intervals over the simulated releases
    (``errors``: releases × answers), checked against the level."""
    inside = np.mean(np.abs(errors) <= widths, axis=1)
    measured, spread = float(inside.mean()), float(inside.std(ddof=1) / math.sqrt(len(inside)))
    print(
        f"\n{name:28} {law:40} nominal {LEVEL:.3f}  measured {measured:.4f} ± {spread:.4f}"
        f"  over {len(inside)} releases"
    )
    assert SIGMAS * spread < 0.015  # the test can tell ±1.5 %
    assert abs(measured - LEVEL) <= 0.015
    assert measured >= LEVEL - SIGMAS * spread
    return measured


@pytest.mark.parametrize("privacy", ["{rho: 1/2}", "{epsilon: 1}"])
def test_the_workers_exact_intervals_cover_their_level(tmp_path: Path, privacy: str) -> None:
    config, result = _released(tmp_path, CLUSTER.format(privacy=privacy), (16, 8))
    version = result.path
    assert (version / "answers.parquet").is_dir()  # written by the workers
    record = read_measurements(version / "measurements.parquet")
    published = read_answers(version / "answers.parquet").to_pandas()
    assert published["exact_interval"].all()
    widths = published["half_width"].to_numpy()
    W = np.vstack([group.matrix.dense() for group in config.workload])
    B = result.strategy.quantized.integer.dense()
    rng = np.random.default_rng(7)
    noise = draw_noise(record.noise, record.scale, record.sigma2, B.shape[0] * RELEASES, rng)
    errors = (W @ np.linalg.pinv(B) @ noise.reshape(RELEASES, -1).T).T
    law = f"{record.noise} {float(record.scale or record.sigma2):.4g}"
    _coverage(f"workers, tree, {privacy}", errors, widths, law)


@pytest.mark.parametrize("rho", [1, pytest.param(10**4, marks=pytest.mark.slow)])
def test_residual_blocks_exact_intervals_cover_their_level(tmp_path: Path, rho: int) -> None:
    config, result = _released(tmp_path, RESIDUAL.format(rho=rho), (4, 5, 6))
    version = result.path
    record = read_measurements(version / "measurements.parquet")
    published = read_answers(version / "answers.parquet").to_pandas()
    assert published["exact_interval"].all()
    widths = published["half_width"].to_numpy()
    blocks = result.strategy.quantized.integer
    x = _counts((4, 5, 6)).reshape(-1)
    truth = np.concatenate([group.matrix @ x for group in config.workload])
    clean = np.asarray(blocks @ x, dtype=np.float64)
    rng = np.random.default_rng(11)
    noise = draw_noise(record.noise, record.scale, record.sigma2, clean.size * RELEASES, rng)
    errors = np.empty((RELEASES, truth.size))
    for release, drawn in enumerate(noise.reshape(RELEASES, -1)):
        estimate = BlockEstimate(blocks, clean + drawn, record.noise_variance())
        answers = [block_workload_answers(estimate, g.matrix).values for g in config.workload]
        errors[release] = np.concatenate(answers) - truth
    law = f"{record.noise} {float(record.sigma2):.4g}"
    _coverage(f"residual blocks, ρ = {rho}", errors, widths, law)
