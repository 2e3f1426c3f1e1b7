"""The ``dpmm-plan`` flow: the strategy a config would use and its expected errors.

Reads no data and spends no budget.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_table_artifact

from dpmm.config import load_config
from dpmm.plan import plan

__all__ = ["plan_flow"]


@flow(name="dpmm-plan")
def plan_flow(config_path: str) -> dict[str, Any]:
    """Plan a release; returns the plan as ``dpmm plan --json`` prints it."""
    config = load_config(config_path)
    report = plan(config)
    data = report.to_dict()
    create_table_artifact(
        [{"group": g.name, "queries": g.queries, "expected RMSE": g.rmse} for g in report.groups],
        key=f"dpmm-plan-{config.name}".lower(),
        description=f"Expected error per query group of release {config.name}",
    )
    return data
