"""The ``dpmm-plan`` flow: the strategy a config would use and its expected errors.

Reads no data and spends no budget.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_table_artifact

from dpmm.config import load_config
from dpmm.plan import plan
from flows.artifact_keys import artifact_key

__all__ = ["plan_flow"]


@flow(name="dpmm-plan")
def plan_flow(config_path: str) -> dict[str, Any]:
    """Plan a release; returns the plan as ``dpmm plan --json`` prints it."""
    config = load_config(config_path)
    report = plan(config)
    data = report.to_dict()
    targets = {t.name: t for t in report.targets.groups} if report.targets else {}
    rows = []
    for group in report.groups:
        row: dict[str, Any] = {"group": group.name, "queries": group.queries}
        row["expected RMSE"] = group.rmse
        if group.name in targets:  # accuracy targets: data-free, as the plan's whole
            target = targets[group.name]
            row |= {"target": target.target.describe(), "met": target.met}
            row["least budget"] = target.needed.to_dict() if target.needed else None
        rows.append(row)
    create_table_artifact(
        rows,
        key=artifact_key("dpmm-plan", config.name),
        description=f"Expected error per query group of release {config.name}",
    )
    return data
