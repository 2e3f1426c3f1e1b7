"""OPT_+ beyond the dense stack is released end to end from per-product marginal tables.

On a domain too large for the stacked strategy's Gram, ``hdmm_union`` measures each
product's Kronecker block on the marginal table of the attributes it reads
(:class:`~dpmm.linalg.table_krons.TableKrons`). The release counts only those tables,
estimates them block by block, makes them consistent, publishes the plan's expected error
and answers within their standard errors of the truth, and passes the audit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpmm.audit import audit_release
from dpmm.config import ReleaseConfig, load_config
from dpmm.linalg.serialize import load_matrix
from dpmm.linalg.table_krons import TableKrons
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.plan import plan
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release.tables import read_answers
from tests.pipeline.conftest import write_config

#: 18,000 cells: beyond the 16,384 whose stacked Gram OPT_+ inverts densely.
SHAPE = (30, 4, 25, 6)
NAMES = ("a", "b", "c", "d")
RECORDS = 20_000
WORKLOAD = (
    "workload:\n"
    "  - {name: cdf-a-by-b, kind: kron, factors: {a: prefix, b: identity}}\n"
    "  - {name: ranges-c-by-d, kind: kron, factors: {c: all_range, d: identity}}\n"
    "  - {name: a-by-c, kind: kron, factors: {a: identity, c: prefix}}\n"
    "strategy: {method: hdmm_union}\n"
)
PRIVACY = {"epsilon": ("epsilon: 1", PureDP(3)), "rho": ("rho: 1/2", ZCDP("3/2"))}


# Under rho in the default suite; under epsilon (its Laplace bounds) with the slow tests.
@pytest.fixture(params=[pytest.param("epsilon", marks=pytest.mark.slow), "rho"])
def case(request, tmp_path: Path) -> tuple[ReleaseConfig, np.ndarray]:
    """A config (budget for three releases) and the true count vector."""
    rng = np.random.default_rng(5)
    base = rng.integers(0, 4, size=RECORDS)
    rows = np.stack(
        [np.minimum(base * (n // 4) + rng.integers(0, n // 2, RECORDS), n - 1) for n in SHAPE],
        axis=1,
    )
    (tmp_path / "data").mkdir()
    pq.write_table(
        pa.table({name: rows[:, i] for i, name in enumerate(NAMES)}),
        tmp_path / "data" / "part-0.parquet",
    )
    truth = np.bincount(np.ravel_multi_index(rows.T, SHAPE), minlength=int(np.prod(SHAPE)))
    domain = ", ".join(f"{name}: {n}" for name, n in zip(NAMES, SHAPE, strict=True))
    privacy, budget = PRIVACY[request.param]
    text = f"name: union-{request.param}\ndomain: {{{domain}}}\nprivacy: {{{privacy}}}\n{WORKLOAD}"
    return write_config(tmp_path, text, data=tmp_path / "data", budget=budget), truth


def test_opt_plus_is_released_from_per_product_tables_as_planned(case) -> None:
    config, truth = case
    report = plan(config)
    assert report.chosen_method == "hdmm_union"
    assert isinstance(report.decision.quantized.integer, TableKrons)
    assert counting_plan(config, report.decision) == "tables"  # never the data vector

    result = run_release(config)
    manifest = result.manifest
    assert manifest["strategy"]["selected"] == "hdmm_union"
    assert manifest["strategy"]["digest"] == report.strategy_digest
    released = {g["name"]: g["expected_rmse"] for g in manifest["error"]["groups"]}
    assert released == pytest.approx({g.name: g.rmse for g in report.groups}, rel=1e-9)
    assert isinstance(load_matrix(result.path / "strategy.npz"), TableKrons)

    answers = read_answers(result.path / "answers.parquet")
    estimates = answers.column("estimate").to_numpy()
    errors = answers.column("standard_error").to_numpy()
    exact = np.concatenate([group.matrix @ truth for group in config.workload])
    assert estimates.shape == exact.shape and np.all(errors > 0)
    # Within 10 s.e. always (a Laplace tail beyond it: e^(-10√2) per answer); the answers of
    # a group share their tables' noise, so their coverage varies from draw to draw.
    assert np.all(np.abs(estimates - exact) <= 10 * errors), "answers off by 10 s.e."
    # The published standard errors are the release's: their RMS is the plan's RMSE.
    planned = np.sqrt(sum(g.rmse**2 * g.queries for g in report.groups) / errors.size)
    assert np.sqrt(np.mean(errors**2)) == pytest.approx(planned, rel=0.05)
    covered = np.abs(estimates - exact) <= answers.column("half_width").to_numpy()
    assert covered.mean() >= 0.8
    audit = audit_release(result.path)
    assert audit.ok, audit.failed


@pytest.mark.slow
def test_integer_output_rounds_the_consistent_tables(tmp_path: Path) -> None:
    """``release.output: integer``: every answer an integer, the tables consistent and
    non-negative, and the audit recomputes them."""
    rng = np.random.default_rng(8)
    rows = np.stack([rng.integers(0, n, RECORDS) for n in SHAPE], axis=1)
    (tmp_path / "data").mkdir()
    pq.write_table(
        pa.table({name: rows[:, i] for i, name in enumerate(NAMES)}),
        tmp_path / "data" / "part-0.parquet",
    )
    domain = ", ".join(f"{name}: {n}" for name, n in zip(NAMES, SHAPE, strict=True))
    text = f"name: union-integer\ndomain: {{{domain}}}\nprivacy: {{rho: 1/2}}\n{WORKLOAD}"
    config = write_config(tmp_path, text, data=tmp_path / "data", budget=ZCDP(1))
    yaml = config.path.read_text().replace("reconstruction: least_squares", "output: integer")
    config.path.write_text(yaml)
    config = load_config(config.path)
    result = run_release(config)
    answers = read_answers(result.path / "answers.parquet")
    estimates = answers.column("estimate").to_numpy()
    assert np.array_equal(estimates, np.round(estimates)) and np.all(estimates >= 0)
    truth = np.bincount(np.ravel_multi_index(rows.T, SHAPE), minlength=int(np.prod(SHAPE)))
    exact = np.concatenate([group.matrix @ truth for group in config.workload])
    errors = answers.column("standard_error").to_numpy()
    assert np.sqrt(np.mean((estimates - exact) ** 2)) < 3 * np.sqrt(np.mean(errors**2))
    audit = audit_release(result.path)
    assert audit.ok, audit.failed
