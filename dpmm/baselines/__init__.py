"""Seed 001's mechanisms: Gaussian and factorization mechanisms, γ₂, projection, PMW.

* :mod:`~dpmm.baselines.factorization` — ``M(h) = R(Ah + G)``, its mean squared and
  worst-case error, the Gaussian mechanism (``R = I``).
* :mod:`~dpmm.baselines.gamma2` — the γ₂ factorization norm with certified lower and upper
  bounds, and the strategy minimizing the worst-case error.
* :mod:`~dpmm.baselines.projection` — the projection mechanism (noisy answers projected
  onto the answers of some dataset of n records).
* :mod:`~dpmm.baselines.exponential` — an exact exponential mechanism.
* :mod:`~dpmm.baselines.pmw` — private multiplicative weights, charged to the ledger.
"""

from dpmm.baselines.exponential import (
    exponential_mechanism,
    grid_scores,
    rounded_sensitivity,
)
from dpmm.baselines.factorization import (
    Factorization,
    NoisyAnswers,
    factorization_mechanism,
    gaussian_mechanism,
    identity_factorization,
    mean_squared_error,
    noise_sigma2,
    row_norms_squared,
    strategy_factorization,
    worst_case_error,
)
from dpmm.baselines.gamma2 import Gamma2Bounds, dual_bound, gamma2, worst_case_strategy
from dpmm.baselines.pmw import PMWBudget, PMWResult, pmw, pmw_budget
from dpmm.baselines.projection import (
    Projection,
    noisy_total,
    project_measurements,
    projection_mechanism,
)
from dpmm.baselines.simplex_solver import SimplexFit, SimplexLeastSquares, project_simplex

__all__ = [
    "Factorization",
    "Gamma2Bounds",
    "NoisyAnswers",
    "PMWBudget",
    "PMWResult",
    "Projection",
    "SimplexFit",
    "SimplexLeastSquares",
    "dual_bound",
    "exponential_mechanism",
    "factorization_mechanism",
    "gamma2",
    "gaussian_mechanism",
    "grid_scores",
    "identity_factorization",
    "mean_squared_error",
    "noise_sigma2",
    "noisy_total",
    "pmw",
    "pmw_budget",
    "project_measurements",
    "project_simplex",
    "projection_mechanism",
    "rounded_sensitivity",
    "row_norms_squared",
    "strategy_factorization",
    "worst_case_error",
    "worst_case_strategy",
]
