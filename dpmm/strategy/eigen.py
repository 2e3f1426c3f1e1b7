"""Eigen-design (seed 000): measure the eigenvectors of WᵀW, each with an optimized weight.

For a union of Kron products ``W = [w_k ⊗_i W_ki]`` whose factor Grams commute
per attribute, one orthonormal basis ``Q_i`` per attribute diagonalizes them
all, so ``WᵀW = (⊗Q_i) diag(λ) (⊗Q_i)ᵀ`` with ``λ = Σ_k w_k² ⊗_i λ_ki``. The
strategy ``diag(√u) (⊗Q_i)ᵀ`` then has expected error ``Σ λ/u`` times its
squared sensitivity, and the weights come from the convex program of
:mod:`dpmm.strategy.eigen_weights`:

* separable: ``u = ⊗u_i``; for one product the program splits per attribute
  and this is the exact optimum; for a union, attributes are solved in turn
  (block coordinate descent, each block the same convex program);
* non-separable: one weight per cell, warm-started from the separable dual,
  on numpy below :data:`IN_MEMORY_CELLS` cells and on chunked Dask arrays above.

Gaussian noise (2-norm sensitivity) uses ``M = Q∘Q``. Laplace noise (1-norm)
solves the same program for ``c = √u`` with ``M = |Q|`` — the 1-norm
sensitivity of ``diag(c) Qᵀ`` is ``max(|Q| c)`` — so the weights are optimal
for the exact 1-norm sensitivity the strategy reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpmm.errors import DpmmError, TooLargeError
from dpmm.linalg import DENSE_LIMIT, Dense, Identity, Kron, Matrix, VStack
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.linalg.spectral import COMMUTE_TOLERANCE, joint_eigenbasis
from dpmm.privacy import PrivacyParameter
from dpmm.strategy.eigen_profile import attribute_strategies, reduce_eigen_l1
from dpmm.strategy.eigen_weights import (
    DEFAULT_TOLERANCE,
    KronEigenvalues,
    WeightSolution,
    solve_weights,
)
from dpmm.strategy.product import kron_terms

__all__ = [
    "EigenDesign",
    "EigenProblem",
    "complete_factor",
    "eigen_design",
    "eigen_problem",
    "select_eigen",
]

#: Above this many cells the non-separable weights live in a chunked Dask array.
IN_MEMORY_CELLS = 4_000_000
#: Default cells per Dask chunk (80 MB of float64).
CHUNK_CELLS = 10_000_000
#: Most updates per block when the separable solution only warm-starts per-cell weights.
SEPARABLE_MAX_ITER = 2000
#: Most sweeps of the separable coordinate descent over the attributes.
MAX_SWEEPS = 50


@dataclass(frozen=True)
class EigenProblem:
    """The workload in its joint eigenbasis: one basis per attribute and the eigenvalues λ."""

    bases: tuple[np.ndarray, ...]
    eigenvalues: KronEigenvalues

    @property
    def cells(self) -> int:
        """The domain size."""
        return math.prod(q.shape[0] for q in self.bases)


@dataclass(frozen=True)
class EigenDesign:
    """A selected eigen strategy (sensitivity 1) and its certificate.

    ``objective`` is the expected total squared error at unit noise variance (multiply by
    ``privacy.noise_variance(1)``); ``dual_bound`` is a proven lower bound on what any weights
    of the searched family reach (separable weights for a union: the last block's bound).
    """

    strategy: EigenStrategy
    objective: float
    dual_bound: float
    separable: bool
    iterations: int  # dual updates of the last stage (per-cell stage when not separable)


def _dense_gram(factor: Matrix) -> np.ndarray:
    n = factor.shape[1]
    if n * n > DENSE_LIMIT:
        raise TooLargeError(f"The eigen-design needs the {n:,} × {n:,} Gram of {factor!r}")
    return factor.gram().dense()


def eigen_problem(W: Matrix) -> EigenProblem:
    """W's joint eigenbasis per attribute and its Gram eigenvalues as a sum of Kron vectors.

    Raises:
        UnsupportedQueryError: some attribute's factor Grams do not commute.
        TooLargeError: an attribute is too large for a dense eigendecomposition.
    """
    terms = kron_terms(W)
    dims = len(terms[0].factors)
    bases: list[np.ndarray] = []
    parts: list[list[np.ndarray]] = [[] for _ in terms]
    for i in range(dims):
        factors = [term.factors[i] for term in terms]
        distinct: dict[int, np.ndarray] = {}
        for factor in factors:
            if id(factor) not in distinct and not isinstance(factor, Identity):
                distinct[id(factor)] = _dense_gram(factor)
        n = factors[0].shape[1]
        basis = joint_eigenbasis(list(distinct.values())) if distinct else np.eye(n)
        rotated = {
            key: np.einsum("ij,ij->j", basis, gram @ basis) for key, gram in distinct.items()
        }
        for k, factor in enumerate(factors):
            values = np.ones(n) if isinstance(factor, Identity) else rotated[id(factor)]
            # Rounding leaves ±tiny values where the exact eigenvalue is 0 (a total's Gram):
            # zero them, or a weight of 0 would be given to a direction that is spent on.
            parts[k].append(np.where(values > COMMUTE_TOLERANCE * n * values.max(), values, 0.0))
        bases.append(basis)
    coefficients = tuple(term.weight**2 for term in terms)
    eigenvalues = KronEigenvalues(coefficients, tuple(tuple(p) for p in parts))
    return EigenProblem(tuple(bases), eigenvalues)


def _power_and_matrices(problem: EigenProblem, norm: int) -> tuple[int, list[np.ndarray]]:
    if norm == 2:
        return 1, [q * q for q in problem.bases]
    if norm == 1:
        return 2, [np.abs(q) for q in problem.bases]
    raise DpmmError(f"The eigen-design supports 1- and 2-norm sensitivity, got {norm}")


def _to_gram_weights(x: object, power: int) -> object:
    """The Gram eigenvalues ``u`` from the program's variable (``x = u`` or ``x = √u``)."""
    return x if power == 1 else x * x


def _spent(eigenvalues: np.ndarray, x: np.ndarray, power: int) -> float:
    """``Σ λ/x^a`` over the positive eigenvalues of one attribute."""
    positive = eigenvalues > 0
    return float((eigenvalues[positive] / x[positive] ** power).sum())


def _separable(
    problem: EigenProblem, power: int, matrices: list[np.ndarray], tol: float, max_iter: int
) -> tuple[list[np.ndarray], list[np.ndarray], float, float, int]:
    """Per-attribute weights ``x_i`` (each ``max(M_i x_i) = 1``) by block coordinate descent."""
    lam = problem.eigenvalues
    dims = len(problem.bases)
    xs = [np.ones(m.shape[1]) / m.sum(axis=1).max() for m in matrices]  # feasible start
    duals: list[np.ndarray | None] = [None] * dims
    objective, bound, iterations = math.inf, 0.0, 0
    ratios = [1.0] * dims
    for _ in range(MAX_SWEEPS):
        previous = objective
        for i in range(dims):
            # With the other attributes fixed, Σ λ/x^a is linear in attribute i's own sums.
            spent = [
                [_spent(part, x, power) for part, x in zip(parts, xs, strict=True)]
                for parts in lam.parts
            ]
            effective = sum(
                c * math.prod(s[other] for other in range(dims) if other != i) * parts[i]
                for c, s, parts in zip(lam.coefficients, spent, lam.parts, strict=True)
            )
            solution = solve_weights(
                effective, [matrices[i]], power, start=duals[i], tol=tol, max_iter=max_iter
            )
            xs[i], duals[i] = solution.weights, solution.dual
            objective, bound = solution.objective, solution.dual_bound
            ratios[i] = solution.gap + 1.0
            iterations += solution.iterations
        if len(lam.parts) == 1:
            # One product: F = Π_i F_i exactly, so the block gaps multiply into a global one.
            bound = objective / math.prod(ratios)
            break
        if objective >= previous * (1 - tol):
            break
    return xs, [d for d in duals if d is not None], objective, bound, iterations


def _chunks(problem: EigenProblem, chunk_cells: int) -> int:
    first = problem.bases[0].shape[0]
    return max(1, min(first, chunk_cells * first // problem.cells))


def solve_eigen_design(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    separable: bool | None = None,
    tol: float = DEFAULT_TOLERANCE,
    max_iter: int = 2000,
    chunk_cells: int | None = None,
) -> EigenDesign:
    """The eigen-design of ``W`` with its certificate (see :func:`eigen_design`)."""
    problem = eigen_problem(W)
    power, matrices = _power_and_matrices(problem, privacy.norm)
    if separable is None:
        separable = len(problem.eigenvalues.parts) == 1  # one product: separable is optimal
    # As a warm start the separable blocks get their usual budget: they are small.
    budget = max_iter if separable else max(max_iter, SEPARABLE_MAX_ITER)
    xs, duals, objective, bound, iterations = _separable(problem, power, matrices, tol, budget)
    if separable:
        weights = [_to_gram_weights(x, power) for x in xs]
        strategy = EigenStrategy(list(problem.bases), weights)
        return EigenDesign(strategy, objective, bound, True, iterations)
    use_dask = chunk_cells is not None or problem.cells > IN_MEMORY_CELLS
    chunks = _chunks(problem, chunk_cells or CHUNK_CELLS) if use_dask else None
    eigenvalues = problem.eigenvalues.tensor(chunks)
    # Any dual point bounds the full program; the separable one is a good start.
    start = KronEigenvalues((1.0,), (tuple(duals),)).tensor(chunks)
    full: WeightSolution = solve_weights(
        eigenvalues, matrices, power, start=start, tol=tol, max_iter=max_iter
    )
    strategy = EigenStrategy(list(problem.bases), _to_gram_weights(full.weights, power))
    return EigenDesign(strategy, full.objective, full.dual_bound, False, full.iterations)


def eigen_design(
    W: Matrix,
    privacy: PrivacyParameter,
    *,
    separable: bool | None = None,
    tol: float = DEFAULT_TOLERANCE,
    max_iter: int = 2000,
    chunk_cells: int | None = None,
    complete: bool = False,
) -> Matrix:
    """The eigen-design strategy for ``W`` under ``privacy``, scaled to sensitivity 1.

    Args:
        W: a matrix, a Kron product, or a union of weighted Kron products whose factor Grams
            commute per attribute.
        privacy: its ``norm`` (2 for Gaussian, 1 for Laplace) is the sensitivity optimized.
        separable: True for Kron weights ``u = ⊗u_i``; False for one weight per cell; None
            chooses Kron weights for a single product (exactly optimal there) and per-cell
            weights for a union.
        tol: certified relative duality gap at which the weight solver stops.
        max_iter: most solver iterations per weight problem.
        chunk_cells: cells per Dask chunk; giving it forces the Dask path for per-cell
            weights (otherwise used above :data:`IN_MEMORY_CELLS` cells).
        complete: with Kron weights, stack under each attribute's eigen factor the diagonal
            that brings every column to the factor's sensitivity (:func:`complete_factor`).
            The sensitivity is unchanged and the Gram only grows, so the error can only fall;
            the result is a Kron of small dense stacks instead of an :class:`EigenStrategy`.

    Raises:
        UnsupportedQueryError: the Grams of some attribute do not commute.

    Example:
        >>> from dpmm.linalg import AllRange
        >>> from dpmm.error import expected_error, svd_bound
        >>> from dpmm.privacy import ZCDP
        >>> W, privacy = AllRange(64), ZCDP(1)
        >>> A = eigen_design(W, privacy)
        >>> 1.0 <= expected_error(W, A, privacy) / svd_bound(W, privacy) < 1.1
        True
    """
    design = solve_eigen_design(
        W, privacy, separable=separable, tol=tol, max_iter=max_iter, chunk_cells=chunk_cells
    )
    if not complete:
        return design.strategy
    strategy = design.strategy
    if not strategy.is_kron:
        raise DpmmError("Completion needs Kron weights; call eigen_design with separable=True")
    factors = [complete_factor(factor, privacy.norm) for factor in attribute_strategies(strategy)]
    return factors[0] if len(factors) == 1 else Kron(factors)


def complete_factor(A: EigenStrategy, norm: int) -> Matrix:
    """``[A; D]`` with the diagonal D that raises every column's ``norm``-norm to A's maximum.

    Extra rows only add to ``AᵀA``, so every query's variance can only fall, while the
    sensitivity stays ``max_j ‖a_j‖`` (seed 000's observation that strategies with equal
    column norms waste no budget).

    Example:
        >>> import numpy as np
        >>> A = EigenStrategy([np.eye(2)], [np.array([1.0, 0.25])])
        >>> complete_factor(A, 2).dense().round(3).tolist()
        [[1.0, 0.0], [0.0, 0.5], [0.0, 0.0], [0.0, 0.866]]
    """
    norms = A.column_norms(norm)
    peak = norms.max()
    if norm == 2:
        slack = np.sqrt(np.maximum(peak**2 - norms**2, 0.0))
    else:
        slack = np.maximum(peak - norms, 0.0)
    return VStack([A, Dense(np.diag(slack))])


def select_eigen(W: Matrix, privacy: PrivacyParameter) -> Matrix:
    """The ``eigen`` method of :func:`dpmm.strategy.optimize` (default settings).

    Under Laplace noise the design's 1-norm is then lowered within its profile-equivalence
    class (:func:`dpmm.strategy.eigen_profile.reduce_eigen_l1`).

    Refuses domains above :data:`IN_MEMORY_CELLS` cells, so selection (and ``auto``)
    stays interactive and within memory; call :func:`eigen_design` directly for
    the Kron-weight or block-wise Dask solve on larger domains.

    Raises:
        TooLargeError: ``W`` has more than :data:`IN_MEMORY_CELLS` columns.
    """
    if W.shape[1] > IN_MEMORY_CELLS:
        raise TooLargeError(
            f"The eigen method handles up to {IN_MEMORY_CELLS:,} cells, and {W!r} has "
            f"{W.shape[1]:,}; call dpmm.strategy.eigen.eigen_design for larger domains"
        )
    design = eigen_design(W, privacy)
    if privacy.norm == 1:  # seed 000: then lower ‖A‖₁ among strategies with the same Gram
        return reduce_eigen_l1(design)
    return design
