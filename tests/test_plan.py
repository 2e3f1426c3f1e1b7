"""The plan stage: every figure against the error functions, and against numpy on small domains."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import dpmm.plan
import dpmm.strategy
from dpmm.cli import format_plan
from dpmm.config import load_config
from dpmm.error import expected_error, identity_error, svd_bound
from dpmm.errors import ConfigError, TooLargeError
from dpmm.linalg import Identity
from dpmm.linalg.serialize import matrix_digest
from dpmm.measure.mechanism import planned_noise_variance
from dpmm.measure.quantize import QuantizedStrategy
from dpmm.pipeline.strategy_stage import choose_strategy
from dpmm.plan import PlanReport, plan
from dpmm.privacy import PureDP
from dpmm.strategy import AUTO_CANDIDATES
from dpmm.workload import stack

from .conftest import assert_plan_keys

DOMAIN = {"sex": 2, "race": 3, "age": 8}
WORKLOAD = [
    {"name": "age-cdf-by-sex", "kind": "prefix", "attribute": "age", "by": ["sex"]},
    {"name": "pairs", "kind": "marginals", "k": 2},
    {"name": "people", "kind": "total"},
    {"name": "age-bands", "kind": "ranges", "attribute": "age", "intervals": [[0, 2], [3, 7]]},
]
PRIVACY = {"pure": {"epsilon": "1/2"}, "zcdp": {"rho": 2}}
METHODS = ("identity", "hierarchical", "wavelet", "workload", "auto")


def write_config(folder: Path, method: str = "auto", privacy: str = "pure", **changes) -> Path:
    document = {
        "name": "small",
        "domain": DOMAIN,
        "privacy": PRIVACY[privacy],
        "workload": WORKLOAD,
        "strategy": {"method": method},
        **changes,
    }
    path = folder / f"small-{method}-{privacy}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def dense_error(W: np.ndarray, A: np.ndarray, privacy) -> float:
    """``v · trace(W (AᵀA)⁺ Wᵀ)`` straight from the definitions (DESIGN.md §4)."""
    sensitivity = np.abs(A).sum(axis=0).max() if privacy.norm == 1 else np.sqrt((A**2).sum(0)).max()
    trace = np.trace(W @ np.linalg.pinv(A.T @ A) @ W.T)
    return privacy.noise_variance(float(sensitivity)) * trace


def _noise(report: PlanReport) -> float:
    """The exact noise variance per answer of the planned strategy, as its record states."""
    return planned_noise_variance(report.decision.quantized, report.privacy)


def _unit(privacy) -> float:
    """The exact noise variance of one count of the Identity strategy."""
    return planned_noise_variance(QuantizedStrategy(Identity(1), 1), privacy)


@pytest.mark.parametrize("privacy", PRIVACY)
@pytest.mark.parametrize("method", METHODS)
def test_group_figures_equal_the_error_functions(tmp_path: Path, method: str, privacy: str) -> None:
    config = load_config(write_config(tmp_path, method, privacy))
    report = plan(config)
    W = stack(config.workload)
    assert report.strategy.shape[1] == W.shape[1]
    assert report.chosen_method in {c.method for c in report.candidates}
    assert [g.name for g in report.groups] == [g["name"] for g in WORKLOAD]
    for group, figures in zip(config.workload, report.groups, strict=True):
        matrix = group.matrix
        expected = expected_error(matrix, report.strategy, config.privacy, variance=_noise(report))
        assert figures.kind == group.kind
        assert figures.queries == matrix.shape[0]
        assert figures.total_squared_error == pytest.approx(expected, rel=1e-9)
        assert figures.svd_bound == pytest.approx(svd_bound(matrix, config.privacy), rel=1e-9)
        assert figures.identity_error == pytest.approx(
            identity_error(matrix, config.privacy, variance=_unit(config.privacy))
        )
        assert figures.rmse == pytest.approx(math.sqrt(expected / matrix.shape[0]))
        assert figures.identity_rmse == pytest.approx(
            math.sqrt(figures.identity_error / figures.queries)
        )
        assert figures.svd_bound_rmse == pytest.approx(
            math.sqrt(figures.svd_bound / figures.queries)
        )
        # no strategy beats the SVD bound of the group it answers
        assert figures.total_squared_error >= figures.svd_bound * (1 - 1e-9)
        assert figures.seconds >= 0


@pytest.mark.parametrize("privacy", PRIVACY)
@pytest.mark.parametrize("method", ["hierarchical", "auto"])
def test_totals_are_sums_and_match_the_whole_workload(
    tmp_path: Path, method: str, privacy: str
) -> None:
    config = load_config(write_config(tmp_path, method, privacy))
    report = plan(config)
    W = stack(config.workload)
    total = report.total
    assert total.queries == W.shape[0] == sum(g.queries for g in report.groups)
    assert total.total_squared_error == pytest.approx(
        sum(g.total_squared_error for g in report.groups), rel=1e-12
    )
    assert total.identity_error == pytest.approx(sum(g.identity_error for g in report.groups))
    # the sum over groups is the whole workload's error, computed in one piece
    whole = expected_error(W, report.strategy, config.privacy, variance=_noise(report))
    assert total.total_squared_error == pytest.approx(whole, rel=1e-9)
    unit = _unit(config.privacy)
    assert total.identity_error == pytest.approx(identity_error(W, config.privacy, variance=unit))
    assert total.svd_bound == pytest.approx(svd_bound(W, config.privacy), rel=1e-9)
    assert total.rmse == pytest.approx(math.sqrt(whole / W.shape[0]))
    assert total.ratio_to_identity == pytest.approx(total.rmse / total.identity_rmse)


@pytest.mark.parametrize("privacy", PRIVACY)
def test_figures_match_numpy_on_dense_matrices(tmp_path: Path, privacy: str) -> None:
    config = load_config(write_config(tmp_path, "hierarchical", privacy))
    report = plan(config)
    A = report.strategy.dense()
    for group, figures in zip(config.workload, report.groups, strict=True):
        W = group.matrix.dense()
        # The plan states the exact discrete noise; the dense error, the continuous one.
        discrete = _noise(report) / config.privacy.noise_variance(
            report.strategy.sensitivity(config.privacy.norm)
        )
        assert figures.total_squared_error == pytest.approx(
            discrete * dense_error(W, A, config.privacy), rel=1e-8
        )
        ratio = _unit(config.privacy) / config.privacy.noise_variance(1.0)
        identity = ratio * dense_error(W, np.eye(W.shape[1]), config.privacy)
        assert figures.identity_error == pytest.approx(identity, rel=1e-10)
        singular = np.linalg.svd(W, compute_uv=False)
        bound = config.privacy.noise_variance(1.0) * singular.sum() ** 2 / W.shape[1]
        assert figures.svd_bound == pytest.approx(bound, rel=1e-8)


def test_identity_method_reproduces_the_identity_baseline(tmp_path: Path) -> None:
    report = plan(load_config(write_config(tmp_path, "identity")))
    for figures in (*report.groups, report.total):
        assert figures.total_squared_error == pytest.approx(figures.identity_error)
        assert figures.ratio_to_identity == pytest.approx(1.0)


def test_auto_is_never_worse_than_identity(tmp_path: Path) -> None:
    report = plan(load_config(write_config(tmp_path, "auto")))
    assert report.total.total_squared_error <= report.total.identity_error * (1 + 1e-9)


def test_to_dict_is_json_with_the_required_keys(tmp_path: Path) -> None:
    path = write_config(tmp_path, "auto", "zcdp")
    config = load_config(path)
    report = plan(config)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert_plan_keys(data)
    assert data["strategy"] == report.decision.description == report.strategy_repr
    assert data["method"] == "auto"
    assert data["privacy"] == {"kind": "zcdp", "rho": "2"}
    assert data["config_sha256"] == config.sha256
    assert data["config"] == str(path)
    assert data["domain_size"] == 48
    assert data["queries"] == report.total.queries
    assert data["total_squared_error"] == report.total.total_squared_error
    assert data["seconds"] >= data["strategy_seconds"] >= 0
    assert len(data["groups"]) == len(WORKLOAD)
    for entry, figures in zip(data["groups"], report.groups, strict=True):
        assert entry["name"] == figures.name
        assert entry["rmse"] == figures.rmse


def test_domain_size_beyond_int64_stays_exact(tmp_path: Path) -> None:
    domain = {f"flag{i}": 2 for i in range(64)}
    path = write_config(tmp_path, "auto", workload=[{"kind": "marginals", "k": 1}], domain=domain)
    data = plan(load_config(path)).to_dict()
    text = json.dumps(data)
    assert data["domain_size"] == 2**64
    assert json.loads(text)["domain_size"] == 2**64
    assert '"domain_size": 18446744073709551616' in text


def test_a_figure_too_large_to_compute_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(W, privacy, **options):
        raise TooLargeError(f"Refusing the singular values of {W!r}")

    monkeypatch.setattr(dpmm.plan, "svd_bound", refuse)
    report = plan(load_config(write_config(tmp_path, "hierarchical")))
    assert all(g.svd_bound is None and g.svd_bound_rmse is None for g in report.groups)
    assert report.total.svd_bound is None
    assert all(g.total_squared_error is not None for g in report.groups)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["svd_bound"] is None
    assert data["groups"][0]["svd_bound"] is None
    assert any("SVD bound" in note for note in data["notes"])


def test_a_costly_whole_workload_bound_is_the_sum_of_the_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dpmm.plan, "DENSE_BOUND_CELLS", 4)  # every dense Gram is too wide
    report = plan(load_config(write_config(tmp_path, "hierarchical")))
    groups = [g.svd_bound for g in report.groups]
    assert all(bound is not None for bound in groups)
    assert report.total.svd_bound == pytest.approx(math.fsum(groups))
    assert any(note.startswith("SVD bound of the total: the sum") for note in report.total.notes)


def test_a_missing_group_figure_leaves_the_total_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = dpmm.plan.identity_error

    def refuse_marginals(W, privacy, **options):
        if W.shape[0] == 2 * 3 + 2 * 8 + 3 * 8:  # the 'pairs' group
            raise TooLargeError("too large")
        return real(W, privacy, **options)

    monkeypatch.setattr(dpmm.plan, "identity_error", refuse_marginals)
    report = plan(load_config(write_config(tmp_path, "hierarchical")))
    pairs = report.groups[1]
    assert pairs.identity_error is None and pairs.identity_rmse is None
    assert pairs.ratio_to_identity is None
    assert report.groups[0].identity_error is not None
    assert report.total.identity_error is None
    # A config's plan takes every group's error from the release's own standard errors.
    assert report.total.total_squared_error is not None
    assert any("identity error" in note for note in report.total.notes)


def test_plan_lists_identity_and_the_skipped_candidates_under_zcdp(tmp_path: Path) -> None:
    domain = {"a": 3, "b": 4, "c": 2}
    workload = [{"name": "pairs", "kind": "marginals", "k": 2}]
    config = load_config(write_config(tmp_path, "auto", "zcdp", domain=domain, workload=workload))
    report = plan(config)
    assert report.chosen_method == "marginal_optimal"
    text = format_plan(report)
    assert "candidates tried by 'auto':" in text
    for name in AUTO_CANDIDATES:
        assert name in text
    assert "not tried: marginal_optimal is the proven optimum" in text
    identity = next(c for c in report.candidates if c.method == "identity")
    # Candidates are ranked by the continuous noise; the plan's figures state the discrete
    # noise the release adds (a variance below σ² for σ² = 1/4).
    assert identity.error == pytest.approx(identity_error(stack(config.workload), config.privacy))
    assert report.total.identity_error < identity.error


def test_a_method_that_cannot_apply_is_a_config_error(tmp_path: Path) -> None:
    # a union of marginals and a prefix over 10⁸ cells: its Gram has no structured inverse
    domain = {"a": 100, "b": 100, "c": 100, "d": 100}
    workload = [{"kind": "marginals", "k": 1}, {"kind": "prefix", "attribute": "a"}]
    path = write_config(tmp_path, "workload", domain=domain, workload=workload)
    with pytest.raises(ConfigError) as caught:
        plan(load_config(path))
    assert str(caught.value).startswith(f"{path}: strategy.method: ")


def test_plan_logs_progress_and_does_not_print(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="dpmm.plan"):
        report = plan(load_config(write_config(tmp_path)))
    assert isinstance(report, PlanReport)
    assert any("strategy" in record.getMessage() for record in caplog.records)
    assert all(record.name == "dpmm.plan" for record in caplog.records)
    assert capsys.readouterr() == ("", "")


def test_a_private_threshold_is_planned_on_the_measurement_budget_with_a_note(
    tmp_path: Path,
) -> None:
    document = {
        "name": "sums",
        "domain": {"attributes": [{"name": "income", "size": 4, "bins": [0, 10, 20, 40, 80]}]},
        "privacy": {"epsilon": 1},
        "workload": [
            {
                "name": "income-sums",
                "kind": "prefix_sum",
                "attribute": "income",
                "truncation": {"method": "svt", "share": "1/4", "start": 10},
            }
        ],
        "strategy": {"method": "identity"},
    }
    path = tmp_path / "sums.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    config = load_config(path)
    report = plan(config)
    W = config.workload[0].matrix.dense()
    measured = PureDP("3/4")  # the measurement's share of ε, with its discrete noise
    ratio = _unit(measured) / measured.noise_variance(1.0)
    expected = ratio * dense_error(W, np.eye(4), measured)
    assert report.total.total_squared_error == pytest.approx(expected, rel=1e-9)
    assert any("chosen from the data by svt with 1/4 of ε" in note for note in report.total.notes)


def test_a_spent_time_budget_is_in_the_plan_and_the_release_measures_what_it_chose(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, strategy={"method": "auto", "time_budget": 0.001})
    config = load_config(path)
    report = plan(config)
    reasons = [c.skipped or "" for c in report.candidates]
    assert any("time budget of 0.001 s" in reason for reason in reasons)
    assert report.candidates[0].skipped is None  # the baseline always runs
    released = choose_strategy(config)  # what a release of this config measures
    assert released.source == "plan"
    assert released.selected == report.decision.selected
    assert matrix_digest(released.quantized.integer) == matrix_digest(
        report.decision.quantized.integer
    )


def test_the_released_error_is_under_the_discrete_noise_measured() -> None:
    from fractions import Fraction

    from dpmm.error import expected_error
    from dpmm.linalg import Identity, Prefix
    from dpmm.measure.record import discrete_noise_variance
    from dpmm.pipeline.strategy_stage import released_error

    privacy = PureDP(Fraction(1, 2))  # discrete Laplace of scale 2: variance 7.83, not 8
    W = Prefix(8)
    released = released_error(W, QuantizedStrategy(Identity(8), 1), privacy)
    ratio = discrete_noise_variance("discrete_laplace", Fraction(2), None) / 8.0
    assert ratio < 0.98
    assert released == pytest.approx(expected_error(W, Identity(8), privacy) * ratio, rel=1e-12)
    # On a fine grid (a large quantization scale) the same strategy is released with noise
    # all but continuous: its error is the continuous one, whatever the scale.
    from dpmm.linalg import Weighted
    from dpmm.measure.quantize import measurable

    fine = measurable(Weighted(0.3, Identity(8)))
    assert fine.scale >= 2**14
    continuous = expected_error(W, Identity(8), privacy)
    assert released_error(W, fine, privacy) == pytest.approx(continuous, rel=1e-6)


def test_beyond_the_vector_auto_searches_only_what_tables_can_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2.7·10⁸ cells: a release counts marginal tables, so a Kronecker or eigen strategy
    # (which needs the data vector) is never searched for, only recorded as not tried; OPT_+
    # reads one table per product there, so it is.
    def never(W, privacy):
        raise AssertionError("a strategy the release cannot use was searched for")

    for name in ("identity", "hierarchical", "wavelet", "hdmm_kron", "eigen"):
        monkeypatch.setitem(dpmm.strategy.METHODS, name, never)
    domain = {"a": 100, "b": 30, "c": 300, "d": 300}
    workload = [
        {"name": "ranges", "kind": "kron", "factors": {"a": "prefix", "b": "all_range"}},
        {"name": "c", "kind": "prefix", "attribute": "c"},
    ]
    report = plan(load_config(write_config(tmp_path, "auto", domain=domain, workload=workload)))
    assert report.chosen_method in ("marginals", "hdmm_marginals", "hdmm_union")
    assert [c.method for c in report.candidates][:3] == ["marginals", "workload", "hdmm_marginals"]
    union = next(c for c in report.candidates if c.method == "hdmm_union")
    assert union.skipped is None and union.error > 0
    assert sorted(c.method for c in report.candidates) == sorted(AUTO_CANDIDATES)
    for candidate in report.candidates:
        if candidate.method in ("identity", "hierarchical", "hdmm_kron", "eigen"):
            assert candidate.skipped == (
                "not tried: it needs the data vector, and 270,000,000 cells are more "
                "than the 268,435,456 a release counts as a vector"
            )
            assert candidate.seconds == 0.0
    text = format_plan(report)
    assert "not tried: it needs the data vector" in text
