"""HDMM's OPT_0: the best p-Identity strategy ``[I; Θ] D`` for a one-attribute workload.

With ``A = [I; Θ] D`` normalized to sensitivity 1 (see
:class:`dpmm.linalg.pidentity.PIdentity`), the expected error is the privacy
constant times

    ``loss(Θ) = trace(G (AᵀA)⁻¹) = trace(X⁻¹ Ĝ)``,  ``X = I + ΘᵀΘ``,  ``Ĝ = diag(d) G diag(d)``,

``d`` the columns' norms before scaling. With ``M = I_p + ΘΘᵀ`` (Woodbury) every
quantity reduces to one ``p × n × n`` matrix product and O(n p²) work:

* ``P = Θ Ĝ``, ``Q = M⁻¹ P``; ``e = diag(Ĝ) − colsum(Θ ∘ Q) = diag(X⁻¹ Ĝ)``; loss ``= Σ e``;
* through X: ``∂/∂Θ = −2 Θ X⁻¹ Ĝ X⁻¹ = −2 (Q − (QΘᵀ) M⁻¹Θ)`` (G symmetric);
* through d: ``∂/∂d_j = 2 e_j / d_j``, and ``∂d_j/∂Θ_ij`` is 1 (1-norm) or ``Θ_ij/d_j`` (2-norm).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.optimize

from dpmm.errors import ConfigError, UnsupportedQueryError
from dpmm.linalg import Matrix
from dpmm.linalg.pidentity import PIdentity, column_scale, woodbury_factor
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.product import kron_terms
from dpmm.strategy.template import check_restarts, optimize_template

__all__ = ["PIdentityTemplate", "optimize_pidentity", "select_pidentity"]

#: L-BFGS-B iterations per start: on AllRange(256)/(1024) the error is within 0.5 % of its
#: 2000-iteration value after 300, and beats HDMM's after 100–200.
MAX_ITERATIONS = 400

#: Largest attribute OPT_0 takes on (its dense n × n workload Gram: 512 MB).
MAX_DOMAIN = 8192


def _check_norm(norm: object) -> int:
    if norm not in (1, 2) or isinstance(norm, bool):
        raise ConfigError(f"The strategy's sensitivity norm must be 1 or 2, got {norm!r}")
    return int(norm)


def _check_gram(workload_gram: object) -> np.ndarray:
    gram = np.asarray(workload_gram, dtype=np.float64)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 1:
        raise ConfigError(f"The workload Gram must be a square n × n array, got {gram.shape}")
    if not np.all(np.isfinite(gram)):
        raise ConfigError("The workload Gram must have finite entries")
    if not np.array_equal(gram, gram.T):
        # The gradient assumes symmetry; a Gram that is not exactly symmetric is rounding.
        if not np.allclose(gram, gram.T, rtol=1e-8, atol=0.0):
            raise ConfigError("The workload Gram must be symmetric (it is WᵀW)")
        gram = (gram + gram.T) / 2
    return np.ascontiguousarray(gram)


class PIdentityTemplate:
    """OPT_0's parameters (Θ ≥ 0, ``p × n``, flattened) and its loss for a workload Gram G."""

    def __init__(self, workload_gram: np.ndarray, p: int, norm: int) -> None:
        self.gram = workload_gram
        self.gram_diagonal = workload_gram.diagonal().copy()
        self.p = p
        self.n = workload_gram.shape[0]
        self.norm = norm

    def bounds(self) -> scipy.optimize.Bounds:
        size = self.p * self.n
        return scipy.optimize.Bounds(np.zeros(size), np.full(size, np.inf))

    def initial(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(size=self.p * self.n)

    def loss_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        theta = params.reshape(self.p, self.n)
        scale = column_scale(theta, self.norm)
        # P = Θ Ĝ = ((Θ diag d) G) diag d: the one O(n² p) product.
        projected = ((theta * scale) @ self.gram) * scale
        factor = woodbury_factor(theta)
        solved = scipy.linalg.cho_solve(factor, projected, check_finite=False)  # Q, O(n p²)
        per_column = self.gram_diagonal * scale**2 - np.einsum("ij,ij->j", theta, solved)
        loss = float(per_column.sum())
        inverse_theta = scipy.linalg.cho_solve(factor, theta, check_finite=False)  # M⁻¹Θ
        grad = -2.0 * (solved - (solved @ theta.T) @ inverse_theta)  # O(n p²)
        scale_grad = 2.0 * per_column / scale
        if self.norm == 1:
            grad += scale_grad[None, :]
        else:
            grad += theta * (scale_grad / scale)[None, :]
        return loss, grad.reshape(-1)


def optimize_pidentity(
    workload_gram: np.ndarray,
    *,
    norm: int,
    p: int | None = None,
    restarts: int = 3,
    rng: np.random.Generator | None = None,
) -> tuple[PIdentity, float]:
    """The p-Identity strategy minimizing ``trace(G (AᵀA)⁻¹)`` at sensitivity 1, and that loss.

    Args:
        workload_gram: The dense, symmetric n × n workload Gram G (any PSD matrix).
        norm: The sensitivity norm: 1 (Laplace) or 2 (Gaussian).
        p: Extra queries; default ``max(1, n // 16)`` as in HDMM.
        restarts: Random starts (Θ uniform on [0, 1]); the best end point is kept.
        rng: Random generator for the starts (a fresh OS-seeded one when None).

    Returns:
        The strategy and its loss (its expected total squared error divided by the
        privacy constant, i.e. the error at unit noise variance).

    Raises:
        ConfigError: a bad Gram, norm, p or number of restarts.

    Example:
        >>> from dpmm.linalg import Identity, Prefix
        >>> G = Prefix(32).gram().dense()
        >>> A, loss = optimize_pidentity(G, norm=1, rng=np.random.default_rng(1))
        >>> bool(loss < np.trace(G))  # better than Identity, whose loss is ‖W‖_F²
        True
    """
    gram = _check_gram(workload_gram)
    norm = _check_norm(norm)
    n = gram.shape[0]
    if p is None:
        p = max(1, n // 16)
    if isinstance(p, bool) or not isinstance(p, int | np.integer) or p < 1:
        raise ConfigError(f"p (the p-Identity's extra queries) must be an integer ≥ 1, got {p!r}")
    template = PIdentityTemplate(gram, int(p), norm)
    result = optimize_template(
        template, restarts=check_restarts(restarts), rng=rng, max_iterations=MAX_ITERATIONS
    )
    return PIdentity(result.params.reshape(int(p), n), norm), result.loss


def select_pidentity(W: Matrix, privacy: PrivacyParameter) -> PIdentity:
    """OPT_0 for a one-attribute workload W under ``privacy`` (its norm), three restarts.

    Raises:
        UnsupportedQueryError: W spans several attributes, or its domain exceeds
            :data:`MAX_DOMAIN` cells.
    """
    if any(len(term.factors) != 1 for term in kron_terms(W)):
        raise UnsupportedQueryError(
            f"The p-Identity strategy applies to one attribute; workload {W!r} spans several"
        )
    n = W.shape[1]
    if n > MAX_DOMAIN:
        raise UnsupportedQueryError(
            f"The p-Identity strategy needs the dense {n:,} × {n:,} Gram of {W!r}; "
            f"it applies to at most {MAX_DOMAIN:,} cells"
        )
    strategy, _ = optimize_pidentity(W.gram().dense(), norm=privacy.norm)
    return strategy
