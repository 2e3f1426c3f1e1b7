"""HDMM's OPT_0: the best p-Identity strategy ``[I; Θ] D`` for a one-attribute workload.

With ``A = [I; Θ] D`` normalized to sensitivity 1 (see
:class:`dpmm.linalg.pidentity.PIdentity`), the expected error is the privacy
constant times

    ``loss(Θ) = trace(G (AᵀA)⁻¹) = trace(X⁻¹ Ĝ)``,  ``X = I + ΘᵀΘ``,  ``Ĝ = diag(d) G diag(d)``,

``d`` the columns' norms before scaling. With ``M = I_p + ΘΘᵀ`` (Woodbury) every
quantity reduces to one product of G with p vectors and O(n p²) work:

* ``T = M⁻¹Θ = Θ X⁻¹``, ``Q = T Ĝ``; ``e = diag(Ĝ) − colsum(Θ ∘ Q) = diag(X⁻¹ Ĝ)``; loss ``= Σ e``;
* through X: ``∂/∂Θ = −2 Θ X⁻¹ Ĝ X⁻¹ = −2 (Q − (QΘᵀ) T)`` (G symmetric);
* through d: ``∂/∂d_j = 2 e_j / d_j``, and ``∂d_j/∂Θ_ij`` is 1 (1-norm) or ``Θ_ij/d_j`` (2-norm).

The product with G costs ``p n²`` for a dense G, but only O(n p) for the semiseparable
Grams of prefix and all-range workloads (``G_st = lower[min(s,t)] · upper[max(s,t)]``),
which are recognized from the dense array or taken from a
:class:`~dpmm.linalg.elementary.ClosedFormGram`; the loss is then O(n p²).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg
import scipy.optimize

from dpmm.blas_threads import search_threads
from dpmm.errors import ArgumentError
from dpmm.linalg import Matrix
from dpmm.linalg.elementary import ClosedFormGram, semiseparable_product
from dpmm.linalg.pidentity import PIdentity, column_scale, woodbury_solve
from dpmm.strategy.template import (
    LARGE_PROBLEM,
    check_count,
    check_norm,
    optimize_template,
)

__all__ = ["PIdentityTemplate", "optimize_pidentity"]

#: L-BFGS iterations in all for the start kept: on AllRange(256)/(1024) the error is
#: within 0.5 % of its 2000-iteration value after 300, and beats HDMM's after 100–200.
MAX_ITERATIONS = 400


#: Iterations every random start gets before only the best continues (to
#: :data:`MAX_ITERATIONS`): after 100 the starts' order on AllRange(1024) is already that of
#: their end points, so the others' remaining iterations would be wasted.
SCREEN_ITERATIONS = 100

#: Fits from :data:`~dpmm.strategy.template.LARGE_PROBLEM` parameters up (OPT_0 from 693
#: cells, where the projected L-BFGS runs) screen for this many iterations and continue the
#: best (as many side by side as the process has cores) to :data:`LARGE_ITERATIONS` in all,
#: from starts of :data:`START_COLUMN_WEIGHT`. On Prefix+AllRange(4096) (10⁶ parameters,
#: pure ε) one continued start reached losses 0.07446 / 0.07432 / 0.07472 (seeds 0–2) in 49 s
#: of CPU, against 0.07440 in 282 s for SciPy's 3 × 100 + 924 iterations from HDMM's
#: starts; `dpmm plan` on that workload at ε = 0.1, quiet, two cores: RMSE 142.57 and 143.02
#: in 66–69 s with 500 iterations (two continued), 143.26 and 143.38 in 57–60 s with 400.
#: A large fit screens only the starts that run side by side at once (at least two): a
#: third start screened alone took a second wave, 50 iterations of wall time with one core
#: idle. Seeds 0–3 on that Gram: 3 starts screened, 2 continued: losses 0.074360 /
#: 0.074243 / 0.074671 / 0.074430 (mean 0.074426); 2 starts run side by side to 500:
#: 0.074881 / 0.074243 / 0.074437 / 0.074430 (mean 0.074498), at the same CPU time.
LARGE_SCREEN_ITERATIONS = 50
LARGE_ITERATIONS = 500

#: Expected 1-norm of a large fit's random start's Θ columns (entries uniform on
#: ``[0, 2 w / p]``). HDMM's entries uniform on [0, 1] give ``p / 2`` (128 at 4,096 cells),
#: whose first hundred iterations go to shrinking Θ: on Prefix+AllRange(4096) the loss after
#: 100 iterations was 2.56 from HDMM's start and 0.085 from this one (0.107 at w ≈ 0.4, and
#: 0.110 at w ≈ 13).
START_COLUMN_WEIGHT = 4.0


def iteration_budget(n: int, p: int | None = None) -> tuple[int, int]:
    """(screening, total) L-BFGS iterations of a p-Identity fit on an attribute of n cells.

    Example:
        >>> iteration_budget(512), iteration_budget(4096)
        ((100, 400), (50, 500))
    """
    p = max(1, n // 16) if p is None else p
    if p * n >= LARGE_PROBLEM:
        return LARGE_SCREEN_ITERATIONS, LARGE_ITERATIONS
    return SCREEN_ITERATIONS, MAX_ITERATIONS


#: Upper bound of every Θ entry. The Woodbury loss subtracts ``θ²/(1 + θ²)`` from 1 per
#: column, so an unbounded θ loses every digit: on Prefix(6), whose optimum is the identity,
#: L-BFGS-B drove one entry to 2·10⁹, where the computed loss of that column is 0 instead of
#: its true share, and OPT_⊗ reported an error of 0. At 10³ the loss keeps ~10 digits, and
#: optimized strategies sit far below it (Θ ≤ 21 on AllRange(256) and Prefix(256)).
THETA_MAX = 1e3


def _check_gram(workload_gram: object) -> np.ndarray:
    gram = np.asarray(workload_gram, dtype=np.float64)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 1:
        raise ArgumentError(f"The workload Gram must be a square n × n array, got {gram.shape}")
    if not np.all(np.isfinite(gram)):
        raise ArgumentError("The workload Gram must have finite entries")
    if not np.array_equal(gram, gram.T):
        # The gradient assumes symmetry; a Gram that is not exactly symmetric is rounding.
        if not np.allclose(gram, gram.T, rtol=1e-8, atol=0.0):
            raise ArgumentError("The workload Gram must be symmetric (it is WᵀW)")
        gram = (gram + gram.T) / 2
    return np.ascontiguousarray(gram)


#: Entry-wise relative tolerance for recognizing a dense Gram as semiseparable: rounding
#: of a rescaled closed form, far below anything that moves the loss's tenth digit.
SEMISEPARABLE_TOLERANCE = 1e-12


def semiseparable_generators(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lower, upper)`` with ``G_st = lower[min(s, t)] · upper[max(s, t)]``, or None.

    Prefix and all-range Grams (and their multiples, as the sweeps of OPT_⊗ weight
    them) have this form, which applies ``G`` in O(n) per vector
    (:func:`dpmm.linalg.elementary.semiseparable_product`). One O(n²) pass over G.

    Example:
        >>> from dpmm.linalg import AllRange, Identity
        >>> lower, upper = semiseparable_generators(AllRange(4).gram().dense())
        >>> lower.tolist(), upper.tolist()
        ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0])
        >>> semiseparable_generators(Identity(4).dense()) is None
        True
    """
    n = gram.shape[0]
    upper = gram[0].copy()  # lower[0] = 1: any other split rescales lower and upper
    if upper[-1] == 0.0:
        return None
    lower = gram[:, -1] / upper[-1]
    atol = SEMISEPARABLE_TOLERANCE * float(np.abs(upper).max(initial=0.0))
    columns = np.arange(n)
    rows = max(1, 2**22 // n)  # blocks of ~32 MB
    for first in range(0, n, rows):
        index = np.arange(first, min(n, first + rows))
        above = columns[None, :] >= index[:, None]
        expected = np.where(
            above, lower[index, None] * upper[None, :], lower[None, :] * upper[index, None]
        )
        block = gram[index]
        if np.any(np.abs(block - expected) > SEMISEPARABLE_TOLERANCE * np.abs(expected) + atol):
            return None
    return lower, upper


def _gram_generators(workload_gram: object) -> tuple[np.ndarray, np.ndarray] | None:
    if isinstance(workload_gram, ClosedFormGram) and workload_gram.generators is not None:
        lower, upper = workload_gram.generators
        return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    return None


class PIdentityTemplate:
    """OPT_0's parameters (Θ ≥ 0, ``p × n``, flattened) and its loss for a workload Gram G.

    A semiseparable G (prefix, all-range) is applied by cumulative sums, O(n p) per loss,
    instead of the dense O(n² p) product.
    """

    def __init__(self, workload_gram: np.ndarray, p: int, norm: int) -> None:
        self.generators = semiseparable_generators(workload_gram)
        self.gram = None if self.generators is not None else workload_gram
        self.gram_diagonal = workload_gram.diagonal().copy()
        self.p = p
        self.n = workload_gram.shape[0]
        self.norm = norm

    @classmethod
    def from_generators(
        cls, lower: np.ndarray, upper: np.ndarray, p: int, norm: int
    ) -> PIdentityTemplate:
        """The template for the semiseparable ``G_st = lower[min(s, t)] · upper[max(s, t)]``."""
        template = cls.__new__(cls)
        template.generators = (lower, upper)
        template.gram = None
        template.gram_diagonal = lower * upper
        template.p = p
        template.n = lower.size
        template.norm = norm
        return template

    def _times_scaled_gram(self, rows: np.ndarray, scale: np.ndarray, factor: float) -> np.ndarray:
        """``rows @ (factor · diag(d) G diag(d))`` for a ``p × n`` array, ``d = scale``.

        A semiseparable G scaled by ``d`` on both sides stays semiseparable, with
        generators ``(d ∘ lower, d ∘ upper)`` (``d_s d_t`` is symmetric in s and t): the
        scaling then costs O(n), not two passes over the ``p × n`` array.
        """
        if self.generators is None:
            scaled = (rows * (factor * scale)) @ self.gram  # the one O(n² p) BLAS call
            scaled *= scale
            return scaled
        lower, upper = self.generators
        return semiseparable_product(factor * scale * lower, scale * upper, rows, axis=-1)

    def bounds(self) -> scipy.optimize.Bounds:
        size = self.p * self.n
        return scipy.optimize.Bounds(np.zeros(size), np.full(size, THETA_MAX))

    def initial(self, rng: np.random.Generator) -> np.ndarray:
        start = rng.uniform(size=self.p * self.n)
        if start.size >= LARGE_PROBLEM:
            start *= 2.0 * START_COLUMN_WEIGHT / self.p
        return start

    def loss_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        theta = params.reshape(self.p, self.n)
        scale = column_scale(theta, self.norm)
        # T = M⁻¹Θ = Θ X⁻¹ (O(n p²)), then 2Q = 2 T Ĝ = T (2 diag(d) G diag(d)): one G
        # product, with the gradient's factor 2 and both scalings folded into it (three
        # fewer passes over the p × n arrays, ~2 ms of 47 at p × n = 256 × 4096).
        inverse_theta = woodbury_solve(theta)
        solved_twice = self._times_scaled_gram(inverse_theta, scale, 2.0)
        theta_solved = 0.5 * np.einsum("ij,ij->j", theta, solved_twice)
        per_column = self.gram_diagonal * scale**2 - theta_solved
        loss = float(per_column.sum())
        # ∂/∂Θ through X: −2 Q X⁻¹ = −2 (Q − (QΘᵀ) T), O(n p²).
        grad = (solved_twice @ theta.T) @ inverse_theta
        grad -= solved_twice
        scale_grad = 2.0 * per_column / scale
        if self.norm == 1:
            grad += scale_grad[None, :]
        else:
            grad += theta * (scale_grad / scale)[None, :]
        return loss, grad.reshape(-1)


def optimize_pidentity(
    workload_gram: np.ndarray | Matrix,
    *,
    norm: int,
    p: int | None = None,
    restarts: int = 3,
    rng: np.random.Generator | None = None,
    starts: Sequence[PIdentity] = (),
) -> tuple[PIdentity, float]:
    """The p-Identity strategy minimizing ``trace(G (AᵀA)⁻¹)`` at sensitivity 1, and that loss.

    Args:
        workload_gram: The symmetric n × n workload Gram G (any PSD matrix), dense, or a
            :class:`~dpmm.linalg.elementary.ClosedFormGram` (whose O(n) product is used)
            or any other :class:`~dpmm.linalg.Matrix` (made dense).
        norm: The sensitivity norm: 1 (Laplace) or 2 (Gaussian).
        p: Extra queries; default ``max(1, n // 16)`` as in HDMM.
        restarts: Random starts (Θ uniform on [0, 1], as HDMM's; large fits scaled by
            :data:`START_COLUMN_WEIGHT`). Each runs the screening iterations of
            :func:`iteration_budget`, then the best continues to its total; the best point
            seen is kept. A large fit takes at most as many as run side by side (at least
            two), and those run to the total without screening.
        rng: Random generator for the starts (a fresh OS-seeded one when None).
        starts: Strategies to start from as well (those with p extra queries; others
            are left out), such as an earlier fit to a nearby Gram.

    Returns:
        The strategy and its loss (its expected total squared error divided by the
        privacy constant, i.e. the error at unit noise variance).

    Raises:
        ArgumentError: a bad Gram, norm, p or number of restarts.

    Example:
        >>> from dpmm.linalg import Identity, Prefix
        >>> G = Prefix(32).gram().dense()
        >>> A, loss = optimize_pidentity(G, norm=1, rng=np.random.default_rng())
        >>> bool(loss < np.trace(G))  # better than Identity, whose loss is ‖W‖_F²
        True
    """
    generators = _gram_generators(workload_gram)
    if generators is None:
        if isinstance(workload_gram, Matrix):
            workload_gram = workload_gram.dense()
        gram = _check_gram(workload_gram)
        n = gram.shape[0]
    else:
        n = generators[0].size
    norm = check_norm(norm)
    p = check_count(max(1, n // 16) if p is None else p, "p (the p-Identity's extra queries)")
    if generators is None:
        template = PIdentityTemplate(gram, p, norm)
    else:
        template = PIdentityTemplate.from_generators(*generators, p, norm)
    restarts = check_count(restarts, "The number of restarts")
    screen, iterations = iteration_budget(n, p)
    large = p * n >= LARGE_PROBLEM
    if large:  # one wave of starts side by side (see LARGE_ITERATIONS)
        restarts = min(restarts, max(2, search_threads()))
    given = [start.theta.reshape(-1) for start in starts if start.theta.shape == (p, n)]
    if restarts + len(given) == 1 or (large and restarts + len(given) <= search_threads()):
        result = optimize_template(
            template, restarts=restarts, rng=rng, starts=given, max_iterations=iterations
        )
        return PIdentity(result.params.reshape(p, n), norm), result.loss
    result = optimize_template(
        template,
        restarts=restarts,
        rng=rng,
        starts=given,
        max_iterations=screen,
        then_iterations=iterations - screen,
    )
    return PIdentity(result.params.reshape(p, n), norm), result.loss
