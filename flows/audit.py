"""The ``dpmm-audit`` flow: verify a release folder (hashes, privacy facts, ledger)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from dpmm.audit import audit_release

__all__ = ["audit_flow"]


@flow(name="dpmm-audit")
def audit_flow(release_dir: str, ledger: str | None = None, scheduler: str | None = None) -> bool:
    """Audit a release version folder; True when every check passes. A version made on the
    Dask workers is recomputed on the cluster its config describes, or on ``scheduler``."""
    report = audit_release(release_dir, ledger=ledger, scheduler=scheduler)
    logger = get_run_logger()
    for check in report.checks:
        (logger.info if check.ok else logger.error)("%s: %s", check.name, check.detail)
    create_table_artifact(
        [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
        key="dpmm-audit",
        description=f"Audit of {release_dir}",
    )
    return report.ok
