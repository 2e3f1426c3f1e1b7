"""``release.output: integer`` end to end: integer, non-negative, consistent released tables.

Random configs (seeded by each test; the releases' noise stays the OS CSPRNG) are released
on the three paths: the data vector (small random domains and data), marginal tables
without the vector (the 14-attribute Adult domain) and residual blocks. Every table a
release publishes is checked: integer, non-negative, summing to the common total (the
declared one exactly, where declared), and agreeing with every other table on the
attributes they share; where the histogram is written, every answer is exactly its
``W x``. The audit recomputes the integers and fails on a changed one; configs the
integer output cannot serve are refused before anything is spent.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dpmm.audit import audit_release, format_audit
from dpmm.cli import main
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import ConfigError
from dpmm.linalg import Identity
from dpmm.pipeline import run_release
from dpmm.pipeline.ingest_stage import counting_plan
from dpmm.pipeline.release import rerun_post_processing
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.plan import plan
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.release import read_answers, read_histogram
from dpmm.workload.table_form import table_form
from tests.pipeline.conftest import ADULT_DOMAIN, kinds, versions

SEED = 20261127


def _release_config(folder: Path, body: dict[str, Any], data: Path) -> ReleaseConfig:
    """Write ``body`` with data, a funded ledger and an integer release section."""
    folder.mkdir(parents=True, exist_ok=True)
    ledger = folder / "budget.db"
    privacy = body["privacy"]
    with Ledger.init(ledger) as opened:
        opened.grant("d", PureDP(100) if "epsilon" in privacy else ZCDP(100))
    document = {
        **body,
        "data": {"path": str(data)},
        "ledger": {"path": str(ledger), "dataset": "d"},
        "release": {"root": "releases", "output": "integer", **body.get("release", {})},
    }
    path = folder / "release.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(path)


def _random_records(rng: np.random.Generator, sizes: list[int], rows: int) -> np.ndarray:
    """Records concentrated on a few cells (a Dirichlet(0.3) over the domain), so that
    least squares leaves negative cells to clip."""
    shares = rng.dirichlet(np.full(int(np.prod(sizes)), 0.3))
    cells = rng.choice(shares.size, size=rows, p=shares)
    return np.stack(np.unravel_index(cells, sizes), axis=1)


def _write_records(folder: Path, names: list[str], records: np.ndarray) -> Path:
    path = folder / "records.parquet"
    columns = {name: pa.array(records[:, i].astype(np.int64)) for i, name in enumerate(names)}
    pq.write_table(pa.table(columns), path)
    return path


def _released_tables(config: ReleaseConfig, version: Path) -> dict[tuple[int, ...], np.ndarray]:
    """Every marginal table the release publishes (its groups' blocks answered by the
    identity on a table), checked integer and non-negative like every other answer."""
    answers = read_answers(version / "answers.parquet").to_pandas()
    shape = config.domain.shape
    tables: dict[tuple[int, ...], np.ndarray] = {}
    for group in config.workload:
        rows = answers[answers["group"] == group.name].sort_values("query")
        values = rows["estimate"].to_numpy()
        assert values.size == group.matrix.shape[0]
        assert np.array_equal(values, np.round(values)), f"{group.name}: not integers"
        assert values.min() >= 0, f"{group.name}: a negative count"
        for block in table_form(group.matrix, shape) or ():
            if isinstance(block.local, Identity):
                table = values[block.rows].reshape([shape[i] for i in block.attrs])
                if block.attrs in tables:  # the same table in two groups: the same values
                    assert np.array_equal(tables[block.attrs], table)
                tables[block.attrs] = table
    return tables


def _check_consistent(tables: dict[tuple[int, ...], np.ndarray], total: int) -> None:
    """Each table sums to ``total`` and agrees with each other on their shared attributes."""
    for attrs, table in tables.items():
        assert int(table.sum()) == total, attrs
    for (a, first), (b, second) in itertools.combinations(tables.items(), 2):
        shared = tuple(sorted(set(a) & set(b)))
        left = first.sum(axis=tuple(a.index(i) for i in a if i not in shared))
        right = second.sum(axis=tuple(b.index(i) for i in b if i not in shared))
        assert np.array_equal(left, right), (a, b)


def _check_release(config: ReleaseConfig, version: Path, declared: int | None) -> int:
    """Check every released table and answer and the audit; returns the total."""
    tables = _released_tables(config, version)
    histogram = None
    if (version / "histogram.parquet").exists():
        histogram = read_histogram(version / "histogram.parquet")
        assert np.array_equal(histogram, np.round(histogram)) and histogram.min() >= 0
        answers = read_answers(version / "answers.parquet").to_pandas()
        for group in config.workload:
            rows = answers[answers["group"] == group.name].sort_values("query")
            assert np.array_equal(rows["estimate"].to_numpy(), group.matrix @ histogram)
    total = (
        int(histogram.sum()) if histogram is not None else int(next(iter(tables.values())).sum())
    )
    if declared is not None:
        assert total == declared
    _check_consistent(tables, total)
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["reconstruction"]["output"] == "integer"
    if declared is not None:
        assert manifest["invariants"]["total"] == declared
        assert (
            "not protected by the differential-privacy guarantee"
            in (manifest["invariants"]["statement"])
        )
    else:
        assert "invariants" not in manifest
    report = audit_release(version)
    assert report.ok, format_audit(report)
    return total


def _random_workload(rng: np.random.Generator, names: list[str]) -> list[dict[str, Any]]:
    """A few groups of 1- and 2-way tables, the total, a 1-way count and a CDF by another."""
    pairs = [list(p) for p in itertools.combinations(names, 2)]
    chosen = [pairs[i] for i in rng.permutation(len(pairs))[: int(rng.integers(1, 4))]]
    groups: list[dict[str, Any]] = [{"name": "pairs", "kind": "marginals", "sets": chosen}]
    if rng.random() < 0.6:
        groups.append({"name": "one-way", "kind": "marginals", "k": 1})
    if rng.random() < 0.5:
        groups.append({"name": "people", "kind": "total"})
    first, second = (str(n) for n in rng.choice(names, 2, replace=False))
    if rng.random() < 0.5:
        groups.append({"name": "counts", "kind": "identity", "attribute": first})
    if rng.random() < 0.5:
        groups.append({"name": "cdf", "kind": "prefix", "attribute": first, "by": [second]})
    return groups


def _declared(rng: np.random.Generator, true_total: int) -> int | None:
    """None, the true total, or another one (an invariant is a fact the config declares)."""
    return [None, true_total, true_total + int(rng.integers(-50, 50))][int(rng.integers(0, 3))]


def _random_vector_body(
    rng: np.random.Generator, name: str, names: list[str], sizes: list[int]
) -> dict[str, Any]:
    """A random config body over the vector: privacy, workload, strategy and solver."""
    return {
        "name": name,
        "domain": dict(zip(names, sizes, strict=True)),
        "privacy": {"epsilon": 0.5} if rng.random() < 0.5 else {"rho": 0.1},
        "workload": _random_workload(rng, names),
        "strategy": {"method": str(rng.choice(["identity", "marginals", "hierarchical"]))},
        "release": {"reconstruction": str(rng.choice(["least_squares", "nnls", "auto"]))},
    }


@pytest.mark.parametrize(
    "case", [1, *(pytest.param(c, marks=pytest.mark.slow) for c in (0, 2, 3, *range(4, 10)))]
)
def test_random_vector_releases_publish_consistent_integer_tables(tmp_path, case) -> None:
    rng = np.random.default_rng(SEED + case)
    names = [f"a{i}" for i in range(int(rng.integers(2, 5)))]
    sizes = [int(n) for n in rng.integers(2, 7, len(names))]
    rows = int(rng.integers(200, 3000))
    data = _write_records(tmp_path, names, _random_records(rng, sizes, rows))
    declared = _declared(rng, rows)
    body = _random_vector_body(rng, f"vector-{case}", names, sizes)
    if declared is not None:
        body["invariants"] = {"total": declared}
    config = _release_config(tmp_path, body, data)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "vector"
    assert (result.path / "histogram.parquet").exists()
    _check_release(config, result.path, declared)


#: Case 3 draws its attributes among those of at most 16 values: far fewer queries for the
#: exact intervals (the other cases took 75-125 s, mostly those).
@pytest.mark.parametrize("case", [*(pytest.param(c, marks=pytest.mark.slow) for c in range(3)), 3])
def test_random_adult_releases_round_marginal_tables_without_the_vector(
    tmp_path, adult_parquet, adult_domain, case
) -> None:
    rng = np.random.default_rng(SEED + 100 + case)
    names = [n for n, size in adult_domain.items() if case < 3 or size <= 16]
    workload = _random_workload(rng, [str(n) for n in rng.choice(names, 5, replace=False)])
    declared = _declared(rng, 48842)
    body = _adult_marginals_body(f"adult-{case}", workload)
    if declared is not None:
        body["invariants"] = {"total": declared}
    config = _release_config(tmp_path, body, adult_parquet)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "tables"
    assert not (result.path / "histogram.parquet").exists()
    total = _check_release(config, result.path, declared)
    assert abs(total - 48842) < 100 if declared is None else total == declared


def _grid_records(tmp_path: Path, seed: int, sizes: list[int], rows: int) -> tuple[list, Path]:
    """Attribute names ``a, b, …`` for ``sizes`` and a Parquet file of random records."""
    names = list("abcdefgh"[: len(sizes)])
    rng = np.random.default_rng(SEED + seed)
    return names, _write_records(tmp_path, names, _random_records(rng, sizes, rows))


def _two_way(name: str, names: list[str], sizes: list[int], privacy: dict, **more) -> dict:
    """A config body of the two-way tables over ``names``."""
    workload = [{"name": "two-way", "kind": "marginals", "k": 2}, *more.pop("extra", [])]
    domain = dict(zip(names, sizes, strict=True))
    return {"name": name, "domain": domain, "privacy": privacy, "workload": workload, **more}


def test_a_residual_release_rounds_its_least_squares_tables(tmp_path) -> None:
    sizes = [4, 3, 5]
    names, data = _grid_records(tmp_path, 200, sizes, 2000)
    body = _two_way(
        "residual",
        names,
        sizes,
        {"rho": 0.5},
        strategy={"method": "residual"},
        invariants={"total": 2000},
    )
    config = _release_config(tmp_path, body, data)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "tables"
    assert not (result.path / "histogram.parquet").exists()  # the tables are what is rounded
    _check_release(config, result.path, 2000)


@pytest.mark.parametrize("stopped", [False, True], ids=["solved", "solver-stopped"])
def test_a_residual_release_rounds_three_way_tables(tmp_path, monkeypatch, stopped) -> None:
    """Two 3-way tables sharing a 2-way one, and every 2-way table, from residual blocks:
    the 2-way tables inside a 3-way one are its sums, the others rounded with their
    margins; all consistent, on the declared total, recomputed by the audit. Also with
    HiGHS given no iterations on any table (as if every solve reached its limit after the
    spend): each 2-way step is then rounded by the rule that cannot fail, and the release
    is the same in every other respect."""
    from dpmm.reconstruct import integer

    rule = integer.margin_rounding
    calls = []

    def counted(*args: Any) -> np.ndarray:
        calls.append(args[0].shape)
        return rule(*args)

    if stopped:
        monkeypatch.setattr(integer, "TABLE_ITERATIONS", 0)
        monkeypatch.setattr(integer, "margin_rounding", counted)
    sizes = [4, 3, 5, 2]
    names, data = _grid_records(tmp_path, 220 if stopped else 210, sizes, 2000)
    triples = {"name": "three-way", "kind": "marginals", "sets": [["a", "b", "c"], ["b", "c", "d"]]}
    body = _two_way(
        "stopped" if stopped else "residual-three",
        names,
        sizes,
        {"rho": 0.5},
        extra=[triples],
        strategy={"method": "residual"},
        invariants={"total": 2000},
    )
    config = _release_config(tmp_path, body, data)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "tables"
    tables = _released_tables(config, result.path)
    assert {(0, 1, 2), (1, 2, 3), (0, 3)} <= set(tables)
    if stopped:
        assert (12, 5) in calls  # the 3-way table (a, b) × c went to the rule
    _check_release(config, result.path, 2000)


def test_integer_standard_errors_add_each_answers_rounding_shift(tmp_path) -> None:
    sizes = [6, 5]
    names, data = _grid_records(tmp_path, 300, sizes, 1500)
    body = _two_way(
        "errors",
        names,
        sizes,
        {"epsilon": 0.5},
        extra=[{"kind": "total"}],
        strategy={"method": "identity"},
        release={"reconstruction": "least_squares"},
    )
    config = _release_config(tmp_path, body, data)
    integer = run_release(config).path
    real_config = dataclasses.replace(
        config, release=dataclasses.replace(config.release, output="real")
    )
    real = rerun_post_processing(real_config, integer).path  # the same measurement
    first = read_answers(integer / "answers.parquet").to_pandas()
    second = read_answers(real / "answers.parquet").to_pandas()
    shift = np.abs(first["estimate"] - second["estimate"]).to_numpy()
    assert shift.max() > 0  # the noise makes fractions; a zero shift would test nothing
    expected = second["standard_error"].to_numpy() + shift
    assert np.allclose(first["standard_error"].to_numpy(), expected, rtol=1e-12)
    assert not first["exact_standard_error"].any() and second["exact_standard_error"].all()
    # The interval too: the real-valued one widened by the shift still covers at its level.
    widened = second["half_width"].to_numpy() + shift
    assert np.allclose(first["half_width"].to_numpy(), widened, rtol=1e-12)
    assert not first["exact_interval"].any()
    manifest = json.loads((integer / "manifest.json").read_text())
    assert "rounding shift" in manifest["reconstruction"]["standard_errors"]


def test_the_audit_recomputes_the_integers_and_fails_on_a_changed_one(tmp_path) -> None:
    sizes = [3, 4]
    names, data = _grid_records(tmp_path, 400, sizes, 800)
    body = _two_way("audited", names, sizes, {"epsilon": 1})
    version = run_release(_release_config(tmp_path, body, data)).path
    assert audit_release(version).ok
    # The manifest's account of the rounding is checked too.
    path = version / "manifest.json"
    written = path.read_text()
    manifest = json.loads(written)
    manifest["reconstruction"]["rounding"] = "each cell rounded to the nearest integer"
    path.write_text(json.dumps(manifest))
    answers = next(check for check in audit_release(version).checks if check.name == "answers")
    assert not answers.ok and "rounded as 'each cell rounded" in answers.detail
    path.write_text(written)
    table = read_answers(version / "answers.parquet")
    values = table.column("estimate").to_numpy().copy()
    values[int(np.argmax(values))] += 1.0  # one more person in the largest cell
    index = table.schema.get_field_index("estimate")
    pq.write_table(
        table.set_column(index, "estimate", pa.array(values)), version / "answers.parquet"
    )
    report = audit_release(version)
    answers = next(check for check in report.checks if check.name == "answers")
    assert not answers.ok and "estimates of group 'two-way'" in answers.detail


def test_configs_integer_output_cannot_serve_are_refused_before_anything_is_spent(
    tmp_path, adult_parquet
) -> None:
    # Every 3-way table of four attributes: whichever is rounded last shares two 2-way
    # tables with the others, and an integer table with both fixed need not exist; their
    # joint table (183,600 cells) is over the limit to round in their place.
    three_way = {
        "name": "adult-three",
        "domain": {"file": str(ADULT_DOMAIN)},
        "privacy": {"epsilon": 1},
        "workload": [
            {
                "name": "triples",
                "kind": "marginals",
                "k": 3,
                "attributes": ["age", "workclass", "education-num", "occupation"],
            }
        ],
        "strategy": {"method": "marginals"},
    }
    config = _release_config(tmp_path / "three", three_way, adult_parquet)
    shares = (
        r"group 'triples' reads the table of [a-z, -]+, which shares the tables of .* in every "
        r"order .* joint table of age, workclass, education-num, occupation .* has 183,600 "
        r"cells, over 100,000"
    )
    with pytest.raises(ConfigError, match=shares):
        run_release(config)
    assert kinds(config) == [] and versions(config) == []
    with pytest.raises(ConfigError, match=shares):
        from dpmm.pipeline.preflight import preflight

        preflight(config, choose_strategy(config))
    assert main(["plan", str(config.path)]) == 2
    wide = {
        **three_way,
        "name": "adult-wide",
        "workload": [{"kind": "marginal", "attributes": ["age", "fnlwgt", "capital-gain"]}],
    }
    config = _release_config(tmp_path / "wide", wide, adult_parquet)
    with pytest.raises(
        ConfigError, match=r"up to 100,000 cells.*age, fnlwgt, capital-gain \(850,000"
    ):
        run_release(config)
    assert kinds(config) == [] and versions(config) == []


def test_invariants_are_checked_when_the_config_loads(tmp_path) -> None:
    body = "name: t\ndomain: {a: 2}\nprivacy: {epsilon: 1}\nworkload: [{kind: total}]\n"
    path = tmp_path / "t.yaml"
    for extra, message in (
        ("invariants: {total: 10}\n", "invariants: declared totals constrain integer counts"),
        ("release: {output: integer}\ninvariants: {total: -1}\n", "invariants.total: must be"),
        ("release: {output: integer}\ninvariants: {total: 1.5}\n", "invariants.total: must be"),
        ("release: {output: integer}\ninvariants: {people: 3}\n", "invariants.people: unknown"),
        ("release: {output: counts}\n", "release.output: unknown value 'counts'"),
    ):
        path.write_text(body + extra)
        with pytest.raises(ConfigError, match=message):
            load_config(path)
    path.write_text(body + "release: {output: integer}\ninvariants: {total: 10}\n")
    config = load_config(path)
    assert config.release.integer and config.invariants.total == 10
    path.write_text(body)
    assert not load_config(path).release.integer and not load_config(path).invariants


def test_plan_runs_the_integer_rounding_dry(tmp_path, capsys) -> None:
    """``dpmm plan`` rounds a zero measurement the way the release will round its own."""
    from dpmm.pipeline.preflight import preflight

    body = {
        "name": "planned",
        "domain": {"file": str(ADULT_DOMAIN)},
        "privacy": {"epsilon": 1},
        "workload": [{"kind": "marginals", "k": 2, "attributes": ["sex", "race", "age"]}],
        "strategy": {"method": "marginals"},
        "invariants": {"total": 1000},
    }
    config = _release_config(tmp_path, body, tmp_path / "none.parquet")
    checked = preflight(config, choose_strategy(config))
    (group,) = checked.reconstruction.groups
    assert checked.reconstruction.rounding is not None
    blocks = table_form(group.group.matrix, config.domain.shape)
    tables = {block.attrs: group.values[block.rows] for block in blocks}
    assert len(tables) == 3
    assert all(int(t.sum()) == 1000 and t.min() >= 0 for t in tables.values())
    assert pd.Series(group.standard_errors).gt(0).all()
    assert plan(config).to_dict()["rounding"] == checked.reconstruction.rounding
    assert main(["plan", str(config.path)]) == 0
    out = capsys.readouterr().out
    assert "reconstructs by least squares; publishes integer counts: the least-squares" in out


def test_the_rounding_solve_is_chosen_from_the_config_and_domain_alone(tmp_path) -> None:
    from dpmm.pipeline.integer_answers import (
        NNLS_ROUNDING_LIMIT,
        ROUNDING_ITERATIONS,
        rounding_iterations,
    )

    def config(cells: int, reconstruction: str) -> ReleaseConfig:
        body = {
            "name": f"sized-{cells}-{reconstruction}",
            "domain": {"a": 10, "b": cells // 10},
            "privacy": {"rho": 1},
            "workload": [{"kind": "marginals", "k": 1}],
            "release": {"reconstruction": reconstruction},
        }
        return _release_config(tmp_path / body["name"], body, tmp_path / "none.parquet")

    assert rounding_iterations(config(NNLS_ROUNDING_LIMIT, "least_squares")) is None
    assert rounding_iterations(config(NNLS_ROUNDING_LIMIT + 10, "auto")) == ROUNDING_ITERATIONS
    assert rounding_iterations(config(NNLS_ROUNDING_LIMIT + 10, "nnls")) is None


@pytest.mark.parametrize("case", [0, *(pytest.param(c, marks=pytest.mark.slow) for c in (1, 2))])
def test_above_the_nnls_limit_the_integers_come_from_a_capped_solve(
    tmp_path, monkeypatch, case
) -> None:
    """A vector beyond the rounding's NNLS limit (lowered here, so a small domain stands
    for 10⁷ cells) is rounded from NNLS stopped after a fixed number of iterations from
    least squares rounded top-down: still integer, consistent, held to a declared total;
    the plan says so, the manifest agrees, the audit recomputes it."""
    from dpmm.pipeline import integer_answers

    monkeypatch.setattr(integer_answers, "NNLS_ROUNDING_LIMIT", 50)
    rng = np.random.default_rng(SEED + 500 + case)
    names = ["a", "b", "c"]
    sizes = [int(n) for n in rng.integers(4, 20, 3)]  # at least 64 cells, above 50
    rows = int(rng.integers(500, 3000))
    data = _write_records(tmp_path, names, _random_records(rng, sizes, rows))
    declared = _declared(rng, rows)
    body: dict[str, Any] = {
        "name": f"capped-{case}",
        "domain": dict(zip(names, sizes, strict=True)),
        "privacy": {"rho": 0.2},
        "workload": _random_workload(rng, names),
        "strategy": {"method": "hierarchical"},
        "release": {"reconstruction": "least_squares"},
    }
    if declared is not None:
        body["invariants"] = {"total": declared}
    config = _release_config(tmp_path, body, data)
    says = f"stopped after {integer_answers.ROUNDING_ITERATIONS} iterations"
    result = _released_as_planned(config, says)
    _check_release(config, result.path, declared)


def _adult_marginals_body(name: str, workload: list[dict[str, Any]]) -> dict[str, Any]:
    """A config body over the Adult domain at ε = 1, measured as marginal tables."""
    return {
        "name": name,
        "domain": {"file": str(ADULT_DOMAIN)},
        "privacy": {"epsilon": 1},
        "workload": workload,
        "strategy": {"method": "marginals"},
    }


def _released_as_planned(config: ReleaseConfig, says: str, counting: str | None = None) -> Any:
    """Plan, then release ``config``: the plan's rounding says ``says``, the release counts
    as ``counting`` (when given), and its manifest states the plan's rounding."""
    planned = plan(config).to_dict()["rounding"]
    assert says in planned
    result = run_release(config)
    if counting is not None:
        assert counting_plan(config, result.strategy) == counting
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["reconstruction"]["rounding"] == planned
    return result


def _margin_entry(
    rng: np.random.Generator, folder: Path, name: str, counts: np.ndarray, labels=None
) -> dict[str, Any]:
    """A declared margin, inline or in a CSV file (rows shuffled), at random."""
    if rng.random() < 0.5:
        return {"attribute": name, "counts": [int(c) for c in counts]}
    values = labels if labels is not None else [str(v) for v in range(counts.size)]
    order = rng.permutation(counts.size)
    frame = pd.DataFrame({name: [values[i] for i in order], "people": counts[order]})
    path = folder / f"{name}-margin.csv"
    frame.to_csv(path, index=False)
    return {"attribute": name, "file": path.name, "column": "people"}


def _check_margins(config: ReleaseConfig, version: Path) -> None:
    """Every declared margin holds exactly: in the histogram, and in every released table
    that holds its attribute."""
    tables = _released_tables(config, version)
    histogram = (
        read_histogram(version / "histogram.parquet").reshape(config.domain.shape)
        if (version / "histogram.parquet").exists()
        else None
    )
    assert config.invariants.margins
    checked = 0
    for margin in config.invariants.margins:
        index = config.domain.index(margin.attribute)
        counts = np.array(margin.counts)
        if histogram is not None:
            others = tuple(a for a in range(len(config.domain.shape)) if a != index)
            assert np.array_equal(histogram.sum(axis=others), counts)
            checked += 1
        for attrs, table in tables.items():
            if index in attrs:
                others = tuple(p for p, a in enumerate(attrs) if a != index)
                assert np.array_equal(table.sum(axis=others), counts), (margin.attribute, attrs)
                checked += 1
    assert checked  # a declared margin no table holds would test nothing
    manifest = json.loads((version / "manifest.json").read_text())
    listed = manifest["invariants"]["margins"]
    assert [m["attribute"] for m in listed] == [m.attribute for m in config.invariants.margins]
    assert [m["counts"] for m in listed] == [list(m.counts) for m in config.invariants.margins]
    assert "held exactly" in manifest["reconstruction"]["rounding"]


@pytest.mark.parametrize(
    "case", [0, 2, *(pytest.param(c, marks=pytest.mark.slow) for c in (1, 3, 4, 5))]
)
def test_declared_margins_hold_exactly_on_the_vector(tmp_path, case) -> None:
    rng = np.random.default_rng(SEED + 600 + case)
    names = [f"a{i}" for i in range(int(rng.integers(2, 4)))]
    sizes = [int(n) for n in rng.integers(2, 7, len(names))]
    rows = int(rng.integers(200, 2000))
    records = _random_records(rng, sizes, rows)
    data = _write_records(tmp_path, names, records)
    attribute = int(rng.integers(0, len(names)))
    # The published counts: the truth, or the truth moved (a fact the config declares).
    counts = np.bincount(records[:, attribute], minlength=sizes[attribute])
    if rng.random() < 0.5:
        counts[int(rng.integers(0, counts.size))] += int(rng.integers(1, 40))
    body = _random_vector_body(rng, f"margin-vector-{case}", names, sizes)
    body["invariants"] = {"margins": [_margin_entry(rng, tmp_path, names[attribute], counts)]}
    if rng.random() < 0.5:
        body["invariants"]["total"] = int(counts.sum())
    config = _release_config(tmp_path, body, data)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "vector"
    _check_release(config, result.path, int(counts.sum()))
    _check_margins(config, result.path)


def _moved(rng: np.random.Generator, counts: np.ndarray, extra: int) -> np.ndarray:
    """Published counts: the true ones with ``extra`` more records in one value and a few
    moved between two others (a fact the config declares need not be the data's)."""
    moved = counts.copy()
    moved[int(rng.integers(0, moved.size))] += extra
    source, target = (int(i) for i in rng.integers(0, moved.size, 2))
    units = int(rng.integers(0, moved[source] + 1))
    moved[source] -= units
    moved[target] += units
    return moved


@pytest.mark.parametrize(
    "case", [0, *(pytest.param(c, marks=pytest.mark.slow) for c in range(1, 6))]
)
def test_two_or_three_declared_margins_hold_exactly_on_the_vector(tmp_path, case) -> None:
    """Random vector releases with 2 (even cases) or 3 (odd) declared margins, true or
    moved: the vector and every released table integer, non-negative, consistent, and
    every margin held exactly; the plan states the joint table's rounding and the
    manifest agrees; the audit recomputes the integers."""
    rng = np.random.default_rng(SEED + 650 + case)
    declared = 2 + case % 2
    names = [f"a{i}" for i in range(int(rng.integers(declared, 5)))]
    sizes = [int(n) for n in rng.integers(2, 7, len(names))]
    rows = int(rng.integers(200, 2000))
    records = _random_records(rng, sizes, rows)
    data = _write_records(tmp_path, names, records)
    extra = int(rng.integers(0, 40)) if rng.random() < 0.5 else 0
    chosen = [int(i) for i in rng.choice(len(names), declared, replace=False)]
    entries = []
    for index in chosen:
        counts = _moved(rng, np.bincount(records[:, index], minlength=sizes[index]), extra)
        entries.append(_margin_entry(rng, tmp_path, names[index], counts))
    body = _random_vector_body(rng, f"margins-vector-{case}", names, sizes)
    body["invariants"] = {"margins": entries}
    config = _release_config(tmp_path, body, data)
    result = _released_as_planned(config, "the declared attributes' joint table", "vector")
    _check_release(config, result.path, rows + extra)
    _check_margins(config, result.path)


def _orderable_sets(rng: np.random.Generator, names: list[str]) -> list[list[list[str]]]:
    """Two workload groups' tables over ``names``: some of three attributes (at least one)
    and of two, that :func:`~dpmm.reconstruct.integer.rounding_steps` can order."""
    from dpmm.reconstruct.integer import rounding_steps

    while True:
        sets = [
            sorted(int(i) for i in rng.choice(len(names), size, replace=False))
            for size in [3, *rng.integers(2, 4, int(rng.integers(1, 4)))]
        ]
        if rounding_steps([tuple(s) for s in sets])[1] is None:
            split = int(rng.integers(1, len(sets) + 1))
            named = [[names[i] for i in s] for s in sets]
            return [named[:split], named[split:]]


@pytest.mark.parametrize("case", [0, *(pytest.param(c, marks=pytest.mark.slow) for c in (1, 2))])
def test_three_way_tables_round_without_the_vector(
    tmp_path, adult_parquet, adult_domain, case
) -> None:
    """Random Adult workloads of 3-way and 2-way tables on marginal tables (no vector),
    with declared margins in some: every released table integer, non-negative and
    consistent with every other, margins held; the plan states the chained rounding and
    the manifest agrees; the audit recomputes the integers."""
    rng = np.random.default_rng(SEED + 900 + case)
    small = [name for name, size in adult_domain.items() if size <= 16]
    names = [str(n) for n in rng.choice(small, 5, replace=False)]
    first, second = _orderable_sets(rng, names)
    workload: list[dict[str, Any]] = [{"name": "first", "kind": "marginals", "sets": first}]
    if second:
        workload.append({"name": "second", "kind": "marginals", "sets": second})
    workload.append({"name": "one-way", "kind": "marginals", "k": 1, "attributes": names})
    body = _adult_marginals_body(f"adult-three-{case}", workload)
    records = pd.read_parquet(adult_parquet)
    if case:  # declared margins of one or two of the attributes
        margins = [
            _margin_entry(
                rng, tmp_path, name, np.bincount(records[name], minlength=adult_domain[name])
            )
            for name in names[:case]
        ]
        body["invariants"] = {"margins": margins}
    config = _release_config(tmp_path, body, adult_parquet)
    result = _released_as_planned(config, "one attribute at a time", "tables")
    tables = _released_tables(config, result.path)
    assert any(len(attrs) == 3 for attrs in tables)
    _check_release(config, result.path, len(records) if case else None)
    if case:
        _check_margins(config, result.path)


def _unorderable_sets(
    rng: np.random.Generator, names: list[str], sizes: list[int]
) -> list[list[list[str]]]:
    """Two workload groups' 3-way and 2-way tables over ``names`` that no order rounds one
    at a time but whose joint tables :func:`~dpmm.reconstruct.rounding_order.rounding_plan`
    can round in their place."""
    from dpmm.reconstruct.rounding_order import rounding_plan, rounding_steps

    while True:
        sets = [
            sorted(int(i) for i in rng.choice(len(names), size, replace=False))
            for size in [3, 3, 3, *rng.integers(2, 4, int(rng.integers(0, 3)))]
        ]
        family = [tuple(s) for s in sets]
        if (
            len(set(family)) == len(family)
            and rounding_steps(family)[1] is not None
            and (rounding_plan(family, sizes, 10**5).stuck is None)
        ):
            split = int(rng.integers(1, len(sets)))
            named = [[names[i] for i in s] for s in sets]
            return [named[:split], named[split:]]


@pytest.mark.parametrize("case", [0, *(pytest.param(c, marks=pytest.mark.slow) for c in (1, 2, 3))])
def test_families_no_order_rounds_release_through_their_joint_table(
    tmp_path, adult_parquet, adult_domain, case
) -> None:
    """Random Adult families of 3-way tables no order rounds (refused before: whichever is
    rounded last shares two 2-way tables with the others), with 2-way tables and declared
    margins in some: the plan states the joint table's rounding and the manifest agrees;
    every released table integer, non-negative and consistent with every other, margins
    held; the audit recomputes the integers."""
    rng = np.random.default_rng(SEED + 950 + case)
    small = [name for name, size in adult_domain.items() if size <= 9]
    names = [str(n) for n in rng.choice(small, int(rng.integers(4, 6)), replace=False)]
    first, second = _unorderable_sets(rng, names, [adult_domain[n] for n in names])
    workload: list[dict[str, Any]] = [
        {"name": "first", "kind": "marginals", "sets": first},
        {"name": "second", "kind": "marginals", "sets": second},
    ]
    body = _adult_marginals_body(f"adult-joint-{case}", workload)
    records = pd.read_parquet(adult_parquet)
    if case % 2:
        name = names[0]
        counts = np.bincount(records[name], minlength=adult_domain[name])
        body["invariants"] = {"margins": [_margin_entry(rng, tmp_path, name, counts)]}
    config = _release_config(tmp_path, body, adult_parquet)
    result = _released_as_planned(config, "joint table", "tables")
    tables = _released_tables(config, result.path)
    assert sum(len(attrs) == 3 for attrs in tables) >= 3
    _check_release(config, result.path, len(records) if case % 2 else None)
    if case % 2:
        _check_margins(config, result.path)


@pytest.mark.parametrize("case", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_declared_margins_replace_their_tables_without_the_vector(
    tmp_path, adult_parquet, adult_domain, case
) -> None:
    rng = np.random.default_rng(SEED + 700 + case)
    names = [str(n) for n in rng.choice(list(adult_domain), 4, replace=False)]
    records = pd.read_parquet(adult_parquet)
    declared = names[: int(rng.integers(1, 3))]
    margins = []
    for name in declared:
        counts = np.bincount(records[name].to_numpy(), minlength=adult_domain[name])
        margins.append(_margin_entry(rng, tmp_path, name, counts))
    body: dict[str, Any] = {
        "name": f"margin-adult-{case}",
        "domain": {"file": str(ADULT_DOMAIN)},
        "privacy": {"epsilon": 1},
        "workload": [{"name": "pairs", "kind": "marginals", "k": 2, "attributes": names}],
        "strategy": {"method": "marginals"},
        "invariants": {"margins": margins},
    }
    config = _release_config(tmp_path, body, adult_parquet)
    result = run_release(config)
    assert counting_plan(config, result.strategy) == "tables"
    _check_release(config, result.path, len(records))
    _check_margins(config, result.path)


def test_bad_declared_margins_are_refused_before_the_ledger_is_touched(
    tmp_path, capsys, monkeypatch
) -> None:
    sizes = [3, 4]
    names, data = _grid_records(tmp_path, 800, sizes, 500)
    body = _two_way("margins", names, sizes, {"epsilon": 1})
    config = _release_config(tmp_path, body, data)  # a good config: the ledger, the data
    document = yaml.safe_load(config.path.read_text())
    margin_file = tmp_path / "b.csv"
    cases = [
        ("b,count\n0,100\n1,100\n2,100\n3,200\n", {}, None),  # sums to 500: fine
        ("b,count\n0,100\n1,100\n2,100\n", {}, "has no row for value '3' of 'b'"),
        ("b,count\n0,100\n1,100\n2,100\n2,200\n", {}, r"row 4: repeats the value '2'"),
        ("b,count\n0,100\n1,100\n2,1.5\n3,200\n", {}, r"column 'count', row 3: must be a whole"),
        ("b,count\n0,100\n1,-1\n2,201\n3,200\n", {}, r"row 2: must be a whole number"),
        ("b,count\n0,100\n1,100\n7,100\n3,200\n", {}, r"row 3: '7' is not a value of 'b'"),
        ("b,people\n0,100\n", {}, r"has no column 'count' \(it has: b, people\)"),
        ("b,count\n0,100\n1,100\n2,100\n3,200\n", {"total": 501}, "invariants.total is 501"),
    ]
    for text, extra, message in cases:
        margin_file.write_text(text)
        document["invariants"] = {"margins": [{"attribute": "b", "file": "b.csv"}], **extra}
        config.path.write_text(yaml.safe_dump(document, sort_keys=False))
        if message is None:
            assert load_config(config.path).invariants.known_total == 500
            continue
        with pytest.raises(ConfigError, match=f"invariants.margins\\[0\\]: .*{message}"):
            load_config(config.path)
        assert main(["release", str(config.path)]) == 2
        assert f"'{margin_file}'" in capsys.readouterr().err
    inline = {"margins": [{"attribute": "a", "counts": [100, 200, 200]}, {"attribute": "b"}]}
    for invariants, message in (
        ({"margins": [{"attribute": "a", "counts": [100, 200]}]}, r"margins\[0\].counts: must"),
        ({"margins": [{"attribute": "c", "counts": [1]}]}, "unknown attribute 'c'"),
        (inline, r"margins\[1\]: give either counts"),
        (
            {
                "margins": [
                    {"attribute": "a", "counts": [1, 2, 3]},
                    {"attribute": "b", "counts": [1, 1, 1, 1]},
                ]
            },
            "add up to 4, and those of 'a' to 6",
        ),
    ):
        document["invariants"] = invariants
        config.path.write_text(yaml.safe_dump(document, sort_keys=False))
        with pytest.raises(ConfigError, match=message):
            load_config(config.path)
    # Declared margins on the vector whose joint table is over the limit (lowered here, so
    # 3 × 4 cells stand for 10⁵): refused by the plan, before anything is spent.
    from dpmm.pipeline import integer_answers

    monkeypatch.setattr(integer_answers, "TABLE_CELL_LIMIT", 11)
    document["invariants"] = {
        "margins": [
            {"attribute": "a", "counts": [100, 200, 200]},
            {"attribute": "b", "counts": [100, 100, 100, 200]},
        ]
    }
    config.path.write_text(yaml.safe_dump(document, sort_keys=False))
    joint = r"invariants\.margins: .* joint table, of up to 11 cells, and that of a, b has 12"
    with pytest.raises(ConfigError, match=joint):
        run_release(load_config(config.path))
    assert main(["plan", str(config.path)]) == 2
    assert kinds(config) == [] and versions(config) == []


def _margin_file_release(tmp_path: Path) -> ReleaseConfig:
    """A 2-way release holding the declared one-way table of ``b`` read from ``b.csv``."""
    sizes = [3, 4]
    names, data = _grid_records(tmp_path, 801, sizes, 500)
    body = _two_way("margins", names, sizes, {"epsilon": 1})
    (tmp_path / "b.csv").write_text("b,count\n0,100\n1,100\n2,100\n3,200\n")
    body["invariants"] = {"margins": [{"attribute": "b", "file": "b.csv"}]}
    return _release_config(tmp_path, body, data)


def test_a_margin_file_changed_since_the_plan_is_refused(tmp_path) -> None:
    config = _margin_file_release(tmp_path)
    plan(config)
    # The same total, other counts: the config file itself is unchanged.
    (tmp_path / "b.csv").write_text("b,count\n0,101\n1,99\n2,100\n3,200\n")
    with pytest.raises(ConfigError, match="a file of its declared margins changed since"):
        run_release(load_config(config.path))
    assert kinds(config) == [] and versions(config) == []


@pytest.mark.slow
def test_a_margin_file_changed_since_the_plan_is_refused_before_anything_is_spent(
    tmp_path, capsys
) -> None:
    config = _margin_file_release(tmp_path)
    assert main(["plan", str(config.path)]) == 0
    # The same total, other counts: the config file itself is unchanged.
    (tmp_path / "b.csv").write_text("b,count\n0,101\n1,99\n2,100\n3,200\n")
    assert main(["release", str(config.path)]) == 2
    assert "a file of its declared margins changed since" in capsys.readouterr().err
    assert kinds(config) == [] and versions(config) == []
