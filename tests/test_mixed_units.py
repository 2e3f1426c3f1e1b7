"""The plan's warning when sums and counts share one strategy at a cost to one part."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpmm.config import ReleaseConfig, load_config
from dpmm.error import expected_error
from dpmm.mixed_units import mixing_note
from dpmm.plan import plan
from dpmm.strategy import select_strategy
from dpmm.workload import stack

EXAMPLES = Path(__file__).resolve().parents[1] / "config" / "examples"


def _mixed(tmp_path: Path, count_group: str) -> ReleaseConfig:
    text = (EXAMPLES / "income-sums.yaml").read_text()
    text = text.replace("\nstrategy:", f"\n  - {count_group}\nstrategy:")
    path = tmp_path / "mixed.yaml"
    path.write_text(text)
    return load_config(path)


def _alone(config: ReleaseConfig, index: int, method: str = "auto") -> float:
    W = stack([config.workload[index]])
    privacy = config.measurement_privacy
    return expected_error(W, select_strategy(W, method, privacy).strategy, privacy)


@pytest.mark.slow
def test_a_part_far_above_its_own_optimum_is_warned_with_the_even_split(tmp_path: Path) -> None:
    config = _mixed(tmp_path, "{name: people, kind: prefix, attribute: income, by: [site]}")
    sums, counts = _alone(config, 0), _alone(config, 1)
    # Sums at 18× their own RMSE (18² in squared error), counts at their optimum.
    note = mixing_note(config.workload, config.measurement_privacy, "auto", [324 * sums, counts])
    assert note is not None
    assert "sums' expected RMSE is 18×" in note and "counts' 1×" in note
    assert "ε = 1/2 each" in note and "more than 2× its own" in note
    # Within what an even split guarantees (2× RMSE under pure ε): no warning.
    assert (
        mixing_note(config.workload, config.measurement_privacy, "auto", [3.9 * sums, counts])
        is None
    )


def test_the_example_with_a_count_group_plans_without_a_false_alarm(tmp_path: Path) -> None:
    config = _mixed(tmp_path, "{name: people, kind: prefix, attribute: income, by: [site]}")
    report = plan(config)
    assert not any("measured with one strategy" in note for note in report.total.notes)


def test_a_workload_of_one_kind_gets_no_note(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "income-sums.yaml")
    assert mixing_note(config.workload, config.measurement_privacy, "auto", [1e12]) is None


def test_under_rho_the_even_split_doubles_the_error(tmp_path: Path) -> None:
    config = _mixed(tmp_path, "{name: people, kind: prefix, attribute: income, by: [site]}")
    path = config.path
    path.write_text(path.read_text().replace("epsilon: 1", "rho: 1/2"))
    config = load_config(path)
    sums, counts = _alone(config, 0, "hierarchical"), _alone(config, 1, "hierarchical")
    privacy = config.measurement_privacy
    note = mixing_note(config.workload, privacy, "hierarchical", [9 * sums, counts])
    assert note is not None and "ρ = 1/4 each" in note and "more than 1.4× its own" in note
    assert mixing_note(config.workload, privacy, "hierarchical", [1.9 * sums, counts]) is None
