"""Local differential privacy: the workload factorization mechanism (seed 004).

Each user randomizes their own type u with an ε-LDP strategy matrix ``Q`` (output o with
probability ``Q[o, u]``); the server counts reports and answers the workload with the
variance-optimal unbiased reconstruction ``V = W (QᵀD⁻¹Q)⁺ QᵀD⁻¹``.

* :mod:`~dpmm.local.mechanism` — LDP check, reconstruction, per-user variances, sample complexity.
* :mod:`~dpmm.local.optimize` — the optimized strategy (projected gradient descent),
  returned only where it beats every baseline on the worst-case variance.
* :mod:`~dpmm.local.baselines` — randomized response, Hadamard, hierarchical, Fourier
  (:func:`~dpmm.local.baselines.baseline_strategies`: all of them for one n and ε), and
  the per-user matrix mechanism's analytic variance.
* :mod:`~dpmm.local.protocol` — exact client sampling from the OS CSPRNG on a certified
  quantized strategy; server aggregation, estimates and WNNLS.
* :mod:`~dpmm.local.bounds` — the singular-value lower bound.
* :mod:`~dpmm.local.workloads` — the six workloads of the experiments.

Example:
    >>> import numpy as np
    >>> from dpmm.local import optimize_strategy, check_ldp, worst_case_variance
    >>> from dpmm.local import worst_case_lower_bound
    >>> result = optimize_strategy(np.eye(4), 1.0, iterations=50, rng=np.random.default_rng())
    >>> check_ldp(result.Q, 1.0)
    >>> worst_case_variance(np.eye(4), result.Q) >= worst_case_lower_bound(np.eye(4), 1.0)
    True
    >>> result.worst_case == min(result.candidates.values())
    True
"""

from dpmm.local.baselines import (
    baseline_strategies,
    fourier,
    hadamard,
    hierarchical,
    per_user_matrix_mechanism_variance,
)
from dpmm.local.bounds import objective_lower_bound, worst_case_lower_bound
from dpmm.local.mechanism import (
    LdpViolationError,
    check_ldp,
    per_user_variance,
    per_user_variance_from_gram,
    randomized_response,
    reconstruction,
    sample_complexity,
    worst_case_variance,
)
from dpmm.local.optimize import (
    Objective,
    OptimizedStrategy,
    loss_and_gradient,
    optimize_strategy,
    project_columns,
)
from dpmm.local.protocol import (
    QuantizedStrategy,
    WnnlsResult,
    aggregate,
    estimate_workload,
    quantize_strategy,
    randomize,
    randomize_users,
    workload_nnls,
)
from dpmm.local.workloads import WORKLOADS, build_workload

__all__ = [
    "WORKLOADS",
    "LdpViolationError",
    "Objective",
    "OptimizedStrategy",
    "QuantizedStrategy",
    "WnnlsResult",
    "aggregate",
    "baseline_strategies",
    "build_workload",
    "check_ldp",
    "estimate_workload",
    "fourier",
    "hadamard",
    "hierarchical",
    "loss_and_gradient",
    "objective_lower_bound",
    "optimize_strategy",
    "per_user_matrix_mechanism_variance",
    "per_user_variance",
    "per_user_variance_from_gram",
    "project_columns",
    "quantize_strategy",
    "randomize",
    "randomize_users",
    "randomized_response",
    "reconstruction",
    "sample_complexity",
    "workload_nnls",
    "worst_case_lower_bound",
    "worst_case_variance",
]
