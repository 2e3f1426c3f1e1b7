"""Prefect flows: thin wiring of :mod:`dpmm.pipeline` into flow and task runs.

* ``flows/release.py`` — ``release_flow`` (``dpmm-release``): a release, end to end.
* ``flows/plan.py`` — ``plan_flow`` (``dpmm-plan``): the strategy and expected errors.
* ``flows/audit.py`` — ``audit_flow`` (``dpmm-audit``): verify a release folder.
"""
