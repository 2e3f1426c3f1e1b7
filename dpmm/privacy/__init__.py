"""Privacy: exact parameters and accounting, exact samplers, and the budget ledger.

* :mod:`~dpmm.privacy.params` — ``PureDP(ε)`` and ``ZCDP(ρ)`` as exact rationals.
* :mod:`~dpmm.privacy.accounting` — ``ApproxDP``, composition, conversions, calibration.
* :mod:`~dpmm.privacy.samplers` — exact discrete Laplace and Gaussian from the OS CSPRNG.
* :mod:`~dpmm.privacy.ledger` — the durable budget ledger (``Ledger``).
"""

from dpmm.privacy.accounting import (
    ApproxDP,
    Guarantee,
    compose,
    discrete_gaussian_zcdp,
    gaussian_sigma2,
    laplace_scale,
    pure_to_approx,
    pure_to_zcdp,
    zcdp_to_approx,
)
from dpmm.privacy.ledger import BudgetExceeded, Ledger, LedgerTampered, Reservation
from dpmm.privacy.params import ZCDP, PrivacyParameter, PureDP, exact_fraction, privacy_from_config
from dpmm.privacy.samplers import discrete_gaussian, discrete_laplace

__all__ = [
    "ZCDP",
    "ApproxDP",
    "BudgetExceeded",
    "Guarantee",
    "Ledger",
    "LedgerTampered",
    "PrivacyParameter",
    "PureDP",
    "Reservation",
    "compose",
    "discrete_gaussian",
    "discrete_gaussian_zcdp",
    "discrete_laplace",
    "exact_fraction",
    "gaussian_sigma2",
    "laplace_scale",
    "privacy_from_config",
    "pure_to_approx",
    "pure_to_zcdp",
    "zcdp_to_approx",
]
