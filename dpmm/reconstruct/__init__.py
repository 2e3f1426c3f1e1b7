"""Reconstruction: from noisy strategy answers to a data estimate and workload answers.

Interchangeable solvers share one keyword-only signature (:class:`Solver`):

* :func:`least_squares` — (generalized) least squares, closed form through the
  strategy's structure (Kronecker, marginal algebra, trees), else LSMR;
* :func:`nnls` — non-negative least squares by accelerated projected gradient,
  on numpy vectors or chunked Dask arrays;
* :func:`workload_nnls` — WNNLS: non-negative x closest to the unbiased workload answers.

Then :func:`workload_answers` gives ``W x̂`` with per-query standard errors,
:func:`isotonic` makes monotone families (prefix sums) monotone, and
:func:`marginal_tables` reconstructs marginal tables on huge domains without
the full vector, as :func:`block_marginals` (or :func:`iter_block_marginals`, a batch at
a time) does from a measurement of integer residual blocks.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Hierarchical, Prefix
    >>> A, y = Hierarchical(4), np.array([10.0, 7.0, 2.0, 4.0, 4.0, -1.0, 3.0])
    >>> ls, nn = least_squares(A, y, noise_std=1.0), nnls(A, y, noise_std=1.0)
    >>> bool(ls.x.min() < 0 <= nn.x.min())
    True
    >>> workload_answers(Prefix(4), A, nn).exact_errors
    False
"""

from dpmm.reconstruct.answers import WorkloadAnswers, covariance_factor, workload_answers
from dpmm.reconstruct.consistent_tables import (
    ConsistentTables,
    consistency_violation,
    nonnegative_tables,
)
from dpmm.reconstruct.isotonic import isotonic
from dpmm.reconstruct.least_squares import least_squares, whiten
from dpmm.reconstruct.marginal_tables import MarginalMeasurement, marginal_tables
from dpmm.reconstruct.nnls import nnls
from dpmm.reconstruct.protocol import Estimate, ReconstructionError, Solver
from dpmm.reconstruct.residual_blocks import (
    BlockAnswers,
    BlockEstimate,
    BlockMarginal,
    block_marginals,
    block_workload_answers,
    iter_block_marginals,
)
from dpmm.reconstruct.workload_nnls import workload_nnls

__all__ = [
    "BlockAnswers",
    "BlockEstimate",
    "BlockMarginal",
    "ConsistentTables",
    "Estimate",
    "MarginalMeasurement",
    "ReconstructionError",
    "Solver",
    "WorkloadAnswers",
    "block_marginals",
    "block_workload_answers",
    "consistency_violation",
    "covariance_factor",
    "isotonic",
    "iter_block_marginals",
    "least_squares",
    "marginal_tables",
    "nnls",
    "nonnegative_tables",
    "whiten",
    "workload_answers",
    "workload_nnls",
]
