"""The release pipeline as plain functions (the Prefect flows in ``flows/`` only wire them).

Example:
    See :func:`run_release`; ``dpmm demo`` runs it on a generated census-like dataset.
"""

from dpmm.pipeline.ingest_stage import VECTOR_LIMIT, Counts, count_input, counting_plan
from dpmm.pipeline.reconstruct_stage import reconstruct
from dpmm.pipeline.reconstruction import GroupAnswers, Reconstruction
from dpmm.pipeline.release import ReleaseResult, open_ledger, rerun_post_processing, run_release
from dpmm.pipeline.run_state import ReleaseBusy, ReleaseRun, open_run
from dpmm.pipeline.strategy_stage import ChosenStrategy, choose_strategy
from dpmm.pipeline.write_stage import HISTOGRAM_LIMIT, build_manifest, write_release

__all__ = [
    "HISTOGRAM_LIMIT",
    "VECTOR_LIMIT",
    "ChosenStrategy",
    "Counts",
    "GroupAnswers",
    "Reconstruction",
    "ReleaseBusy",
    "ReleaseResult",
    "ReleaseRun",
    "build_manifest",
    "choose_strategy",
    "count_input",
    "counting_plan",
    "open_ledger",
    "open_run",
    "reconstruct",
    "rerun_post_processing",
    "run_release",
    "write_release",
]
