"""Plan reports: the page's table, targets and figures, and the error curve's arithmetic."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
import yaml

from dpmm.config import load_config
from dpmm.plan import plan
from dpmm.privacy import ZCDP, PureDP
from dpmm.report import plan_content, render_html, report_figures, write_report
from dpmm.report.figures import _curve_range, _like
from dpmm.targets import error_factor, least_budget_text

from ..conftest import example_copy

PNG = b"\x89PNG\r\n\x1a\n"
WORKLOAD = [
    {
        "name": "age-cdf-by-sex",
        "kind": "prefix",
        "attribute": "age",
        "by": ["sex"],
        "target": {"half_width": 30, "confidence": 0.95},
    },
    {"name": "pairs", "kind": "marginals", "k": 2, "target": {"rmse": 4}},
    {"name": "people", "kind": "total"},
]


def _config(folder: Path, privacy: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    document = {
        "name": "targets",
        "domain": {"sex": 2, "age": 16},
        "privacy": privacy,
        "workload": WORKLOAD,
        "strategy": {"method": "hierarchical"},
        "release": {"root": str(folder / "releases")},
    }
    path = folder / "targets.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _images(page: str) -> list[bytes]:
    return [
        base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    ]


@pytest.mark.parametrize("privacy", [{"epsilon": 1}, {"rho": "1/2"}], ids=["pure", "zcdp"])
def test_the_plan_page_has_the_error_table_the_targets_and_its_figures(
    tmp_path: Path, privacy: dict
) -> None:
    config = load_config(_config(tmp_path, privacy))
    report = plan(config)
    content = plan_content(report, config)
    figures = report_figures(content)
    assert [figure.key for figure in figures] == ["error-vs-budget", "budget-shares"]
    page = render_html(content, figures)
    # One table row per group, with the plan's own figures and each target's verdict.
    for group in report.groups:
        assert f"<td>{group.name}</td>" in page
    targets = {t.name: t for t in report.targets.groups}
    assert "<td>±30 at 95 %</td>" in page and "<td>RMSE ≤ 4</td>" in page
    for target in targets.values():
        assert f"<td>{least_budget_text(target.needed)}</td>" in page
    met = sum(t.met for t in targets.values())
    assert f"Accuracy targets: {met} of 2 met at" in page
    assert page.count("<tr>") == 1 + len(report.groups)
    # The figures are inline PNGs: nothing is fetched when the page opens.
    images = _images(page)
    assert len(images) == 2 and all(image.startswith(PNG) for image in images)
    assert images == [figure.png for figure in figures]
    assert not re.search(r"(src|href)=\"(?!data:)", page) and "http" not in page


def test_the_curve_meets_each_target_at_the_least_budget_the_plan_states(tmp_path: Path) -> None:
    """The figure moves the plan's errors along the budget with the noise's exact variance:
    at each target's least budget its figure is within the target, and a little below that
    budget it is not; the curve's range shows every least budget."""
    config = load_config(_config(tmp_path, {"epsilon": 1}))
    content = plan_content(plan(config), config)
    low, high = _curve_range(content)
    for group in content.groups:
        if group.target is None:
            continue
        target = group.target
        needed = target.needed
        assert low < float(needed.epsilon) < high
        at = error_factor(content.noise_variance, content.budget, needed)
        short = error_factor(
            content.noise_variance, content.budget, _like(needed, 0.99 * float(needed.epsilon))
        )
        assert target.achieved * at <= target.target.value < target.achieved * short
    # Anywhere on the curve: what the plan at that budget states (hierarchical: the same
    # strategy at any budget), with the discrete noise's exact variance (not just 1/ε²).
    for amount in ("1/4", "10"):
        other = plan(load_config(_config(tmp_path / amount.replace("/", "-"), {"epsilon": amount})))
        factor = error_factor(content.noise_variance, content.budget, PureDP(amount))
        for group, there in zip(content.groups, other.groups, strict=True):
            assert group.rmse * factor == pytest.approx(there.rmse, rel=1e-9)


def test_error_factor_is_none_where_the_samplers_cannot_draw() -> None:
    def variance(budget: ZCDP | PureDP) -> float:
        from dpmm.measure.exact import MeasurementError

        if budget.epsilon > 100:
            raise MeasurementError("out of range")
        return 2 / float(budget.epsilon) ** 2

    assert error_factor(variance, PureDP(1), PureDP(2)) == pytest.approx(0.5)
    assert error_factor(variance, PureDP(1), PureDP(1000)) is None


def test_a_plan_with_a_private_threshold_shows_the_budgets_split(tmp_path: Path) -> None:
    config = load_config(example_copy("income-sums-svt.yaml", tmp_path))
    content = plan_content(plan(config), config)
    assert content.budget == PureDP(1) and content.measurement == PureDP("9/10")
    assert content.thresholds == (("income-sums-by-site", PureDP("1/10")),)
    page = render_html(content, report_figures(content))
    assert "<dt>measurement</dt><dd>ε = 9/10</dd>" in page
    assert "private truncation thresholds θ take their shares" in page


def test_write_report_writes_one_page(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, {"epsilon": 1}))
    path = write_report(tmp_path / "plan.html", plan_content(plan(config), config))
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "Plan report: targets" in page and len(_images(page)) == 2
