"""The plan is the release's contract, over the example configs and generated ones.

Each case runs ``dpmm plan CONFIG --json``, then ``dpmm release CONFIG``, then ``dpmm audit``
on the version written and ``dpmm ledger show --json``. The version's manifest must state
what the plan said: the selected method, the strategy digest, the quantization scale and
the expected RMSE of every group (relative 1e-9: the plan computes it without data, the
release from the standard errors of its reconstruction), which is never 0. The audit must
pass, and the ledger must hold exactly the budget the plan states (the config's, or the least
meeting its targets) as spent and nothing reserved.
A config the plan refuses must be refused by the release as well, with nothing spent.

The default run calls the release command with the pipeline in process (the stages the
flow runs, without Prefect's engine); the slow sweep runs the command as it is, through the
Prefect flow on a local Dask cluster. Configs are a fixed list; data are synthetic records
drawn from a seeded generator.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from dpmm import cli_release
from dpmm.cli import main
from dpmm.config import load_config
from dpmm.domain import Domain
from dpmm.pipeline import run_release
from dpmm.privacy.params import PureDP
from tests.conftest import EXAMPLES, example_copy
from tests.pipeline.conftest import ADULT_DOMAIN

pytestmark = pytest.mark.filterwarnings("ignore")

#: Relative tolerance between the plan's expected RMSE and the release's.
RMSE_TOLERANCE = 1e-9
#: A plan that takes longer fails the case: the plan is what an operator runs before a
#: release, and the sweep must end (the slowest example that passes plans in about 20 s).
PLAN_SECONDS = 60


@dataclass(frozen=True)
class Case:
    """A config to plan and release.

    Attributes:
        body: YAML with the name, domain, privacy, workload, strategy and release keys; the
            test adds the data and ledger sections.
        rows: Synthetic records written as the input.
        layout: ``file`` (one Parquet file), ``parts`` (a folder of three Parquet files)
            or ``csv`` (one CSV file).
        refused: For a config the plan refuses: a piece of its one-line error.
    """

    body: str
    rows: int = 600
    layout: str = "file"
    refused: str | None = None


def _domain(sizes: dict[str, int]) -> str:
    return "{" + ", ".join(f"{name}: {size}" for name, size in sizes.items()) + "}"


def _numbered(prefix: str, count: int, size: int) -> dict[str, int]:
    return {f"{prefix}{i:02d}": size for i in range(count)}


def _config(
    name: str,
    domain: dict[str, int] | str,
    privacy: str,
    workload: list[str],
    method: str,
    *,
    reconstruction: str = "least_squares",
) -> str:
    """A config's YAML; ``domain`` is a mapping of sizes or a ready ``attributes:`` block.

    The reconstruction is least squares unless told (NNLS, chosen by ``auto`` from the
    noisy estimate, reports the least-squares errors, so the plan's hold for it too).
    """
    domain_text = f" {_domain(domain)}" if isinstance(domain, dict) else f"\n{domain}"
    groups = "".join(f"  - {group}\n" for group in workload)
    return (
        f"name: {name}\ndomain:{domain_text}\nprivacy: {privacy}\n"
        f"workload:\n{groups}strategy: {{method: {method}}}\n"
        f"release: {{reconstruction: {reconstruction}}}\n"
    )


def _case(case_id: str, *args: Any, case: dict | None = None, **kwargs: Any):
    """``pytest.param`` of a generated config named ``case_id``."""
    return pytest.param(Case(_config(case_id, *args, **kwargs), **(case or {})), id=case_id)


EPSILON, RHO = "{epsilon: 1}", "{rho: 1/2}"
LABELS_AND_BINS = (
    "  attributes:\n"
    "    - {name: region, size: 3, labels: [north, south, west]}\n"
    "    - {name: tenure, size: 4}\n"
    "    - {name: income, size: 8, bins: [0, 50, 100, 150, 200, 250, 300, 400, 500]}"
)
#: 60 binary attributes and 40 constant ones: 100 attributes, 2⁶⁰ ≈ 1.15·10¹⁸ cells.
HUNDRED = _numbered("x", 60, 2) | _numbered("z", 40, 1)
TEN_BINARY = "[x00, x01, x02, x03, x04, x05, x06, x07, x08, x09]"

#: Few, fast and different from each other: the default run (in-process release).
FAST = [
    _case(
        "1-attr-100-cells-prefix-hierarchical-rho-csv",
        {"v": 100},
        RHO,
        ["{name: cdf, kind: prefix, attribute: v}", "{name: people, kind: total}"],
        "hierarchical",
        case={"layout": "csv"},
    ),
    _case(  # no Gram over its cells is formed: auto picks a tree from closed-form errors
        "1-attr-65536-prefix-auto-eps",
        {"v": 65536},
        EPSILON,
        ["{name: cdf, kind: prefix, attribute: v}"],
        "auto",
        case={"rows": 5000},
    ),
    _case(  # its ranges are too many to form their multisets: intervals from the errors
        "1-attr-512-all-range-hierarchical-rho",
        {"v": 512},
        RHO,
        ["{name: ranges, kind: all_range, attribute: v}"],
        "hierarchical",
    ),
    _case(
        "2-attrs-kron-ranges-hdmm-kron-eps-parts",
        {"a": 12, "b": 9},
        EPSILON,
        [
            "{name: bands, kind: kron, factors: {a: {ranges: [[0, 3], [2, 11]]}, b: prefix}}",
            "{name: a-total, kind: total, attribute: a}",
        ],
        "hdmm_kron",
        case={"layout": "parts", "rows": 1500},
    ),
    _case(
        "3-attrs-labels-bins-prefix-sum-auto-eps",
        LABELS_AND_BINS,
        EPSILON,
        [
            "{name: sums, kind: prefix_sum, attribute: income, by: [region], "
            "truncation: {threshold: 350}}",
            "{name: tenure-by-region, kind: identity, attribute: tenure, by: [region]}",
        ],
        "auto",
    ),
    _case(
        "4-attrs-marginals-residual-rho",
        {"a": 5, "b": 6, "c": 7, "d": 3},
        RHO,
        [
            "{name: two-way, kind: marginals, k: 2}",
            "{name: a-table, kind: marginal, attributes: [a]}",
        ],
        "residual",
    ),
    _case(
        "12-attrs-1e12-cells-marginals-eps-tables",
        _numbered("x", 12, 10),
        EPSILON,
        [
            "{name: one-way, kind: marginals, k: 1}",
            "{name: cdf-by, kind: prefix, attribute: x03, by: [x04]}",
        ],
        "marginals",
    ),
    _case(
        "18-attrs-1e18-cells-marginal-optimal-rho",
        _numbered("x", 18, 10),
        RHO,
        ["{name: sets, kind: marginals, sets: [[x00, x01], [x05], [x10, x11, x12]]}"],
        "marginal_optimal",
    ),
    _case(
        "refused-identity-on-1e12-cells",
        _numbered("x", 12, 10),
        EPSILON,
        ["{name: one-way, kind: marginals, k: 1}"],
        "identity",
        case={"refused": "strategy.method: 'identity' cannot build a strategy"},
    ),
]

#: The generated part of the slow sweep, released through the Prefect flow.
GENERATED = [
    _case("1-attr-100-cells-identity-eps", {"v": 100}, EPSILON, ["{kind: identity}"], "identity"),
    _case(
        "1-attr-64-ranges-wavelet-eps",
        {"v": 64},
        EPSILON,
        ["{name: bands, kind: ranges, attribute: v, intervals: [[0, 9], [10, 40], [5, 63]]}"],
        "wavelet",
    ),
    _case(
        "1-attr-32-all-range-eigen-eps",
        {"v": 32},
        EPSILON,
        ["{name: ranges, kind: all_range, attribute: v}"],
        "eigen",
    ),
    _case(
        "1-attr-32-all-range-eigen-rho",
        {"v": 32},
        RHO,
        ["{name: ranges, kind: all_range, attribute: v}"],
        "eigen",
    ),
    _case(
        "1-attr-64-all-range-wavelet-rho-1000",
        {"v": 64},
        "{rho: 1000}",
        ["{name: ranges, kind: all_range, attribute: v}"],
        "wavelet",
    ),
    _case(
        "2-attrs-kron-lrm-eps",
        {"a": 8, "b": 4},
        EPSILON,
        ["{name: cdf-by-b, kind: kron, factors: {a: prefix, b: identity}}"],
        "lrm",
    ),
    _case(
        "2-attrs-kron-hdmm-eps",
        {"a": 16, "b": 8},
        EPSILON,
        ["{name: cdf-ranges, kind: kron, factors: {a: prefix, b: all_range}}"],
        "hdmm",
        case={"rows": 2000},
    ),
    _case(
        "2-attrs-marginal-workload-eps",
        {"a": 20, "b": 5},
        EPSILON,
        [
            "{name: ab, kind: marginal, attributes: [a, b]}",
            "{name: a, kind: marginal, attributes: [a]}",
        ],
        "workload",
        case={"rows": 1500},
    ),
    _case(
        "2-attrs-kron-auto-eps-1e6",
        {"a": 20, "b": 5},
        "{epsilon: 1000000}",
        ["{name: ranges-by-b, kind: kron, factors: {a: all_range, b: identity}}"],
        "auto",
        reconstruction="auto",
    ),
    _case(
        "2-attrs-weighted-auto-rho-1e-6",
        {"a": 20, "b": 5},
        "{rho: 1/1000000}",
        [
            "{name: cdf, kind: kron, factors: {a: prefix, b: total}, weight: 2}",
            "{name: people, kind: total, weight: 0.5}",
        ],
        "auto",
    ),
    _case(
        "2-attrs-prefix-hierarchical-eps-1-1000-csv",
        {"a": 50, "b": 3},
        "{epsilon: 1/1000}",
        ["{name: cdf-by-b, kind: prefix, attribute: a, by: [b]}", "{name: people, kind: total}"],
        "hierarchical",
        case={"layout": "csv"},
    ),
    _case(
        "3-attrs-one-d-kinds-hdmm-union-rho-parts",
        {"a": 8, "b": 8, "c": 4},
        RHO,
        [
            "{name: a-cdf-by-c, kind: prefix, attribute: a, by: [c]}",
            "{name: b-ranges, kind: all_range, attribute: b}",
            "{name: b-bands-by-a, kind: ranges, attribute: b, intervals: [[0, 3], [4, 7]], "
            "by: [a]}",
            "{name: c-totals-by-a, kind: total, attribute: c, by: [a]}",
            "{name: people, kind: total, weight: 3}",
        ],
        "hdmm_union",
        case={"layout": "parts", "rows": 3000},
    ),
    _case(
        "3-attrs-weighted-kron-marginal-auto-rho",
        {"a": 16, "b": 4, "c": 3},
        RHO,
        [
            "{name: ranges-by-b, kind: kron, factors: {a: all_range, b: identity}, weight: 2}",
            "{name: bc, kind: marginal, attributes: [b, c], weight: 0.5}",
        ],
        "auto",
        case={"rows": 2000},
    ),
    _case(
        "3-attrs-labels-bins-prefix-sum-hdmm-kron-rho-csv",
        LABELS_AND_BINS,
        RHO,
        ["{name: sums, kind: prefix_sum, attribute: income, by: [tenure]}"],
        "hdmm_kron",
        case={"layout": "csv"},
    ),
    _case(
        "3-attrs-prefix-sum-private-threshold-hierarchical-eps",
        LABELS_AND_BINS,
        EPSILON,
        [
            "{name: sums, kind: prefix_sum, attribute: income, by: [region], "
            "truncation: {method: svt, share: 1/10, ratio: 0.5, start: 100}}",
        ],
        "hierarchical",
        case={"rows": 2000},
    ),
    _case(
        "4-attrs-two-way-marginal-optimal-rho",
        {"a": 5, "b": 6, "c": 7, "d": 3},
        RHO,
        ["{name: two-way, kind: marginals, k: 2}"],
        "marginal_optimal",
    ),
    _case(
        "5-attrs-three-way-hdmm-marginals-eps",
        _numbered("x", 5, 4),
        EPSILON,
        ["{name: three-way, kind: marginals, k: 3}"],
        "hdmm_marginals",
        case={"rows": 5000},
    ),
    _case(
        "6-attrs-1e6-cells-mixed-auto-eps",
        _numbered("x", 6, 10),
        EPSILON,
        [
            "{name: one-way, kind: marginals, k: 1}",
            "{name: cdf-by, kind: prefix, attribute: x00, by: [x01]}",
            "{name: sets, kind: marginals, sets: [[x02, x03], [x04, x05]]}",
        ],
        "auto",
        case={"rows": 3000},
    ),
    _case(
        "6-attrs-1e6-cells-auto-rho",
        _numbered("x", 6, 10),
        RHO,
        [
            "{name: one-way, kind: marginals, k: 1}",
            "{name: cdf-by, kind: prefix, attribute: x00, by: [x01]}",
        ],
        "auto",
        case={"rows": 3000},
    ),
    _case(
        "9-attrs-1e9-cells-two-way-auto-rho",
        _numbered("x", 9, 10),
        RHO,
        ["{name: two-way, kind: marginals, k: 2}"],
        "auto",
    ),
    _case(
        "12-attrs-1e12-cells-all-range-by-auto-eps",
        _numbered("x", 12, 10),
        EPSILON,
        ["{name: ranges-by, kind: all_range, attribute: x00, by: [x01]}"],
        "auto",
    ),
    _case(
        "18-attrs-1e18-cells-sets-hdmm-marginals-eps-parts",
        _numbered("x", 18, 10),
        EPSILON,
        ["{name: sets, kind: marginals, sets: [[x00, x01], [x05], [x10, x11, x12]]}"],
        "hdmm_marginals",
        case={"layout": "parts"},
    ),
    _case(
        "18-attrs-1e18-cells-one-way-auto-rho",
        _numbered("x", 18, 10),
        RHO,
        ["{name: one-way, kind: marginals, k: 1}"],
        "auto",
    ),
    _case(
        "20-attrs-3e9-cells-residual-rho",
        _numbered("x", 20, 3),
        RHO,
        ["{name: one-way, kind: marginals, k: 1}", "{name: people, kind: total}"],
        "residual",
    ),
    _case(
        "40-attrs-1e12-cells-scoped-two-way-auto-rho",
        _numbered("x", 40, 2),
        RHO,
        [
            "{name: two-way, kind: marginals, k: 2, attributes: [x00, x01, x02, x03, x04, x05]}",
            "{name: x10-x11, kind: kron, factors: {x10: identity, x11: identity}}",
        ],
        "auto",
    ),
    _case(
        "60-attrs-1e18-cells-scoped-one-way-marginals-rho",
        _numbered("x", 60, 2),
        RHO,
        [
            "{name: two-way, kind: marginals, k: 2, attributes: [x00, x01, x02, x03]}",
            f"{{name: one-way, kind: marginals, k: 1, attributes: {TEN_BINARY}}}",
        ],
        "marginals",
    ),
    _case(
        "100-attrs-1e18-cells-scoped-auto-eps",
        HUNDRED,
        EPSILON,
        [
            f"{{name: one-way, kind: marginals, k: 1, attributes: {TEN_BINARY}}}",
            "{name: cdf-by, kind: prefix, attribute: x10, by: [x11]}",
        ],
        "auto",
    ),
    _case(
        "100-attrs-1e18-cells-marginal-marginals-eps",
        HUNDRED,
        EPSILON,
        ["{name: pair, kind: marginal, attributes: [x00, x59]}"],
        "marginals",
    ),
    _case(
        "100-attrs-1e18-cells-marginal-auto-rho",
        HUNDRED,
        RHO,
        ["{name: pair, kind: marginal, attributes: [x00, x59]}"],
        "auto",
    ),
    _case(
        "100-attrs-128-cells-marginal-identity-eps",
        _numbered("x", 7, 2) | _numbered("z", 93, 1),
        EPSILON,
        ["{name: pair, kind: marginal, attributes: [x00, x01]}"],
        "identity",
    ),
    _case(
        "refused-one-table-of-1e10-cells",
        _numbered("x", 5, 100),
        EPSILON,
        ["{name: cells, kind: identity}"],
        "marginals",
        case={"refused": "cannot be released here"},
    ),
    _case(
        "2-attrs-all-range-hierarchical-eps-nnls",
        {"a": 64, "b": 2},
        EPSILON,
        [
            "{name: ranges-by-b, kind: all_range, attribute: a, by: [b]}",
            "{name: people, kind: total}",
        ],
        "hierarchical",
        reconstruction="nnls",
    ),
    _case(
        "refused-marginal-optimal-under-eps",
        _numbered("x", 3, 4),
        EPSILON,
        ["{name: two-way, kind: marginals, k: 2}"],
        "marginal_optimal",
        case={"refused": "strategy.method: 'marginal_optimal' cannot build a strategy"},
    ),
    _case(
        "refused-eigen-on-1e9-cells",
        _numbered("x", 9, 10),
        RHO,
        ["{name: one-way, kind: marginals, k: 1}"],
        "eigen",
        case={"refused": "The eigen method handles up to"},
    ),
    _case(
        "refused-hierarchical-on-1e9-cells",
        _numbered("x", 9, 10),
        RHO,
        ["{name: cdf, kind: prefix, attribute: x00}"],
        "hierarchical",
        case={"refused": "strategy.method: 'hierarchical' cannot build a strategy"},
    ),
]

EXAMPLE_CASES = [pytest.param(path, id=path.stem) for path in EXAMPLES]


# --- Input and run sections ---------------------------------------------------------------


def _records(domain: Domain, rows: int, rng: np.random.Generator) -> pa.Table:
    """Records inside ``domain``: labels as text, bin midpoints as numbers, codes otherwise."""
    columns = {}
    for attribute in domain.attrs:
        codes = rng.integers(0, attribute.size, rows)
        if attribute.labels is not None:
            columns[attribute.name] = pa.array(np.asarray(attribute.labels)[codes])
        elif attribute.bins is not None:
            edges = np.asarray(attribute.bins, dtype=np.float64)
            columns[attribute.name] = pa.array((edges[codes] + edges[codes + 1]) / 2)
        else:
            columns[attribute.name] = pa.array(codes)
    return pa.table(columns)


def _write_input(folder: Path, table: pa.Table, layout: str) -> str:
    """Write ``table`` as the case's input; returns ``data.path`` relative to ``folder``."""
    if layout == "csv":
        pcsv.write_csv(table, folder / "records.csv")
        return "records.csv"
    if layout == "parts":
        (folder / "records").mkdir()
        for i, rows in enumerate(np.array_split(np.arange(table.num_rows), 3)):
            pq.write_table(table.take(rows), folder / "records" / f"part-{i}.parquet")
        return "records/"
    pq.write_table(table, folder / "records.parquet")
    return "records.parquet"


def _fund(config_path: Path, capsys: pytest.CaptureFixture) -> Fraction:
    """A new ledger for the config, granting its dataset exactly the config's budget (for
    ``least``, its cap)."""
    config = load_config(config_path)
    privacy = config.privacy
    if isinstance(privacy, PureDP):
        flag, amount = "--epsilon", privacy.epsilon
    else:
        flag, amount = "--rho", privacy.rho
    ledger = str(config.ledger.path)
    assert main(["ledger", "init", ledger]) == 0
    assert main(["ledger", "grant", ledger, config.ledger.dataset, flag, str(amount)]) == 0
    capsys.readouterr()
    return amount


def _add_input(config_path: Path, *, rows: int, layout: str, data: Path | None = None) -> None:
    """Append the data and ledger sections: ``data``, or synthetic records of the domain."""
    if data is None:
        domain = load_config(config_path).domain
        table = _records(domain, rows, np.random.default_rng(20261124))
        data = Path(_write_input(config_path.parent, table, layout))
    with config_path.open("a") as file:
        file.write(f"\ndata: {{path: '{data}'}}\nledger: {{path: budget.db}}\n")


def _generated_config(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True)
    config_path = folder / "release.yaml"
    config_path.write_text(case.body)
    _add_input(config_path, rows=case.rows, layout=case.layout)
    return config_path


def _example_config(path: Path, folder: Path, adult: Path | None) -> Path:
    """The example copied into ``folder`` with an input and a ledger: Adult's own records
    for the Adult domain, synthetic records otherwise."""
    config_path = example_copy(path.name, folder)
    _add_input(config_path, rows=2000, layout="file", data=adult)
    return config_path


# --- Commands and checks --------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Fail the test when the block runs longer than ``seconds`` (main thread only)."""

    def expire(signum: int, frame: Any) -> None:
        pytest.fail(f"dpmm plan took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _plan(config_path: Path, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    with _time_limit(PLAN_SECONDS):
        return _run(["plan", str(config_path), "--json"], capsys)


def _ledger(config_path: Path, capsys: pytest.CaptureFixture) -> dict[str, Any]:
    config = load_config(config_path)
    status, out, _ = _run(
        ["ledger", "show", str(config.ledger.path), config.ledger.dataset, "--json"], capsys
    )
    assert status == 0
    (dataset,) = json.loads(out)["datasets"]
    return dataset


def _spent(dataset: dict[str, Any]) -> str:
    reserved = dataset["reserved"]["fraction"]
    return f"spent {dataset['spent']['fraction']}, reserved {reserved}"


def _versions(config_path: Path) -> list[Path]:
    config = load_config(config_path)
    return sorted((config.release.root / config.name).glob("v*"))


def _the_release_does_what_the_plan_says(config_path: Path, capsys: pytest.CaptureFixture) -> None:
    budget = _fund(config_path, capsys)
    status, out, err = _plan(config_path, capsys)
    assert status == 0, err
    planned = json.loads(out)

    status, out, err = _run(["release", str(config_path)], capsys)
    dataset = _ledger(config_path, capsys)
    assert status == 0, (
        f"the release failed (exit {status}) after the plan accepted the config; ledger: "
        f"{_spent(dataset)}; stderr ends: {err[-600:]}"
    )
    (version,) = _versions(config_path)
    manifest = json.loads((version / "manifest.json").read_text())

    thresholds = manifest.get("thresholds", {}).get("groups", [])
    if any(entry["found"] for entry in thresholds):
        # θ was chosen from the data: the release's workload is truncated at θ, which the
        # plan could not know; it says so and planned the untruncated workload.
        assert any("θ is chosen from the data" in note for note in planned["notes"])
    else:
        strategy = manifest["strategy"]
        assert strategy["selected"] == planned["chosen_method"]
        assert strategy["digest"] == planned["strategy_digest"]
        assert strategy["quantization_scale"] == planned["quantization_scale"]
        released = {group["name"]: group["expected_rmse"] for group in manifest["error"]["groups"]}
        promised = {group["name"]: group["rmse"] for group in planned["groups"]}
        assert released == pytest.approx(promised, rel=RMSE_TOLERANCE)
        # Every answer carries noise: an expected RMSE of 0 understates the error.
        assert all(rmse > 0 for rmse in released.values()), released

    status, out, _ = _run(["audit", str(version)], capsys)
    assert status == 0, out
    assert "passed" in out
    # The budget the plan said the release spends: the config's, or the least meeting its
    # targets (`least`, at most the cap the ledger was funded with).
    spends = planned["budget"]["epsilon" if planned["budget"]["kind"] == "pure" else "rho"]
    assert Fraction(spends) <= budget
    assert dataset["spent"]["fraction"] == spends
    assert dataset["reserved"]["fraction"] == "0"
    assert dataset["active_reservations"] == []


def _the_release_refuses_what_the_plan_refuses(
    config_path: Path, message: str, capsys: pytest.CaptureFixture
) -> None:
    _fund(config_path, capsys)
    status, out, err = _plan(config_path, capsys)
    assert (status, out) == (2, "")
    assert err.startswith("dpmm: error: ") and err.count("\n") == 1
    assert message in err
    status, _, err = _run(["release", str(config_path)], capsys)
    assert status == 2, err[-600:]
    assert _versions(config_path) == []
    dataset = _ledger(config_path, capsys)
    assert (dataset["spent"]["fraction"], dataset["reserved"]["fraction"]) == ("0", "0")


def _check(config_path: Path, case: Case, capsys: pytest.CaptureFixture) -> None:
    if case.refused is None:
        _the_release_does_what_the_plan_says(config_path, capsys)
    else:
        _the_release_refuses_what_the_plan_refuses(config_path, case.refused, capsys)


# --- Tests ------------------------------------------------------------------------------------


def _release_in_process(config_path: Path, from_measurements: str | None) -> Path:
    """What the release flow runs, called directly (no Prefect engine, no Dask cluster)."""
    assert from_measurements is None
    return run_release(load_config(config_path)).path


@pytest.mark.parametrize("case", FAST)
def test_the_release_is_the_plan(case: Case, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli_release, "_run_flow", _release_in_process)
    _check(_generated_config(case, tmp_path / "case"), case, capsys)


@pytest.mark.slow
@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("case", GENERATED)
def test_the_release_through_the_flow_is_the_plan(case: Case, tmp_path: Path, capsys) -> None:
    _check(_generated_config(case, tmp_path / "case"), case, capsys)


@pytest.mark.slow
@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("path", EXAMPLE_CASES)
def test_every_example_releases_what_its_plan_says(
    path: Path, tmp_path: Path, capsys, request
) -> None:
    reads_adult = load_config(path).raw["domain"].get("file") == ADULT_DOMAIN.name
    adult = request.getfixturevalue("adult_parquet") if reads_adult else None
    _check(_example_config(path, tmp_path, adult), Case(body=""), capsys)
