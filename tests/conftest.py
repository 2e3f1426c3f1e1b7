"""What the tests of the whole package share: the repository's paths and the plan's JSON keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))

#: Keys every ``dpmm plan --json`` object (``PlanReport.to_dict()``) has at its top level.
PLAN_KEYS = {
    "strategy",
    "method",
    "total_squared_error",
    "rmse",
    "svd_bound",
    "identity_error",
    "identity_rmse",
    "queries",
    "domain_size",
    "seconds",
    "privacy",
    "config_sha256",
    "groups",
}
#: Keys every entry of its ``groups`` list has.
PLAN_GROUP_KEYS = {
    "name",
    "kind",
    "queries",
    "total_squared_error",
    "rmse",
    "svd_bound",
    "identity_error",
    "identity_rmse",
    "seconds",
}


def assert_plan_keys(data: dict[str, Any]) -> None:
    """A plan's JSON object has every documented key, and so has each of its groups."""
    assert set(data) >= PLAN_KEYS, f"missing {sorted(PLAN_KEYS - set(data))}"
    for group in data["groups"]:
        assert set(group) >= PLAN_GROUP_KEYS, f"missing {sorted(PLAN_GROUP_KEYS - set(group))}"
