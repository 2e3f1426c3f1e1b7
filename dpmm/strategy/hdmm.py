"""HDMM's strategy templates, chosen between by exact expected error.

* ``OPT_0`` — one attribute: a p-Identity strategy fitted to the workload Gram
  (:mod:`dpmm.strategy.pidentity`).
* ``OPT_⊗`` — a Kron of per-attribute factors, each the best of Identity, Total,
  Identity+Total and a p-Identity fitted to the attribute's weighted Gram, by
  block-coordinate sweeps over the attributes (:mod:`dpmm.strategy.kron_template`).
* ``OPT_M`` — weighted marginals (:mod:`dpmm.strategy.weighted_marginals`), fitted
  to the workload's closest Gram in the marginal algebra (HDMM's marginals
  approximation; exact for unions of marginals).
* ``OPT_+`` — one Kron strategy per part of a union with the budget split
  between them (:mod:`dpmm.strategy.union`).

Each works for Laplace (L1) and Gaussian (L2) noise: the templates normalize
their columns in the privacy parameter's norm.
"""

from __future__ import annotations

from dpmm.linalg import Matrix
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.kron_template import select_kron_template
from dpmm.strategy.selection import select
from dpmm.strategy.union import select_union
from dpmm.strategy.weighted_marginals import select_marginal_weights

__all__ = ["TEMPLATES", "select_hdmm"]


#: HDMM's templates by the name ``auto`` and ``dpmm plan`` report them under.
TEMPLATES = {
    "hdmm_kron": select_kron_template,
    "hdmm_marginals": select_marginal_weights,
    "hdmm_union": select_union,
}


def select_hdmm(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    """The HDMM template (OPT_⊗/OPT_0, OPT_M, OPT_+) with the least expected error for ``W``."""
    return select(W, privacy, TEMPLATES, list(TEMPLATES)).strategy
