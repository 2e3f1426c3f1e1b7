"""Least squares over a scaled simplex, stopped by a certified bound on the answers' error.

The problem is ``min f(z) = ½‖W z − Y‖²`` over ``Δₙ = {z ≥ 0, Σz = n}``, whose answers
``W ẑ`` are the Euclidean projection of ``Y`` onto ``C = n·conv{w_j}`` (many ``ẑ`` may share
them; the answers are unique).

Certificate. For any dual point v ∈ ℝᵏ, weak duality for the projection onto C gives

    f* ≥ D(v) = ⟨v, Y⟩ − ½‖v‖² − n · max_j (Wᵀv)_j,

and at ``v = Y − W z`` for a feasible z the gap ``f(z) − D(v)`` is exactly the Frank–Wolfe
gap ``g(z) = ⟨∇f(z), z⟩ − n · min_j ∇f(z)_j``. The solver keeps the best feasible z and the
best ``D`` over every residual it computes (each scaled by its best factor ``t ≥ 0``, a
closed form), so ``g = f(z) − max D ≥ f(z) − f*``. In the answers ``a = W z`` the objective
is ``½‖a − Y‖²``, 1-strongly convex on the convex set C, so with ``a* = P_C(Y)`` the
first-order optimality of ``a*`` gives

    ½‖W z − a*‖² ≤ f(z) − f* ≤ g,   i.e.  ‖W z − P_C(Y)‖ ≤ √(2g).

The solver stops once ``√(2g) ≤ τ · scale``; the returned ``bound = √(2g)`` is a proof, not
an estimate. With ``scale`` the size of the noise (``√Σσᵢ²``, the root of the expected
squared error of Y) the projected answers satisfy, on every draw,
``‖Ŷ − truth‖ ≤ ‖P_C(Y) − truth‖ + τ·scale ≤ ‖Y − truth‖ + τ·scale``: at most a fraction τ
of the noise worse than the exact projection. Without a noise scale, ``scale`` is the
current residual ``‖Y − W z‖`` (then the loss against the exact projection is at most about
τ times the distance the projection moves Y).

A relative residual on the gradient is no such proof: its size in the answers depends on n
and on W's conditioning, which is why a tolerance of 1e-6 could leave the "projection" farther
from the truth than its input.

Method: FISTA (Beck–Teboulle) with the gradient restart of O'Donoghue–Candès and the exact
Euclidean projection onto ``Δₙ``. The step is ``1/L`` for L the largest eigenvalue
of ``WᵀW`` on the sum-zero subspace: the projection onto ``Δₙ`` ignores moves along the
all-ones vector, and for a union of marginals that direction carries the largest eigenvalue
(7 times the next one for all 2-way marginals on 14 attributes). W is applied as a dense
array when it fits :data:`~dpmm.linalg.base.DENSE_LIMIT`, else implicitly; ``W y`` of the
extrapolated point comes from linearity, so an iteration costs one ``W z`` and one ``Wᵀv``.

The dual bound converges slower than the objective (an error ε in the answers costs about
``n·ε`` in ``D`` but only ``ε²`` in f), so FISTA alone needs ~1,500 iterations where ~300
already hold the answers within the target. Hence the polish (array W only): after
:data:`FIRST_POLISH` iterations, then at doubling intervals, column generation solves the
problem exactly (Lawson–Hanson NNLS) on a few hundred columns — the iterate's heaviest and
the best-scoring by ``Wᵀ(Y − W y)`` — scores all columns at that solution, adds the best,
and repeats; once the columns hold an optimal face, the dual bound at the exact restricted
solution is tight. On 2-way marginals of 8–14 binary attributes one polish certifies the
answers to within 10⁻³–10⁻² of the noise in a few rounds.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Identity
    >>> fit = SimplexLeastSquares(Identity(3)).solve(np.array([4.0, -2.0, 1.0]), 3.0)
    >>> fit.x.round(6), fit.bound <= 1e-3
    (array([3., 0., 0.]), True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls
from scipy.sparse.linalg import LinearOperator, eigsh

from dpmm.errors import ArgumentError
from dpmm.linalg import Marginals, Matrix
from dpmm.linalg.base import DENSE_LIMIT
from dpmm.reconstruct.projected_gradient import project

__all__ = ["DEFAULT_ACCURACY", "SimplexFit", "SimplexLeastSquares", "project_simplex"]

#: τ: the certified distance from the exact projection, as a fraction of the scale.
DEFAULT_ACCURACY = 0.01

#: Iteration limit when the caller gives none.
DEFAULT_MAX_ITERATIONS = 20_000

#: Safety factor on a Lanczos estimate of the largest eigenvalue (Ritz values are low).
EIGENVALUE_MARGIN = 1.02

#: FISTA iteration of the first exact polish; the later ones come at doubling intervals.
FIRST_POLISH = 20

#: Weight of the row ``Σz = n`` (relative to W's largest column norm) in the polish's
#: penalized non-negative least squares; rescaling to the total afterwards removes the rest.
SUM_WEIGHT = 1e4

#: Column-generation rounds per polish.
POLISH_ROUNDS = 20

Vector = np.ndarray


#: The exact Euclidean projection onto ``{z ≥ 0, Σz = total}``,
#: shared with NNLS: :func:`~dpmm.reconstruct.projected_gradient.project`.
project_simplex = project


@dataclass(frozen=True)
class SimplexFit:
    """A solution of :meth:`SimplexLeastSquares.solve`.

    Attributes:
        x: ``x ≥ 0`` with ``Σx = total`` (up to rounding).
        answers: ``W x``.
        iterations: FISTA iterations.
        gap: ``f(x)`` minus the best Lagrangian dual value found: a certified upper bound
            on ``f(x) − f*`` (at x's own residual it is the Frank–Wolfe gap).
        bound: ``√(2·gap)``, a certified upper bound on ``‖W x − P_C(Y)‖``.
        target: the bound the solver was asked for (``τ · scale``).
        converged: whether ``bound ≤ target``.
    """

    x: np.ndarray
    answers: np.ndarray
    iterations: int
    gap: float
    bound: float
    target: float
    converged: bool


class _Operators:
    """``z ↦ W z``, ``u ↦ Wᵀu`` and chosen columns of W: an array when W fits, else implicit."""

    def __init__(self, W: Matrix) -> None:
        rows, cols = W.shape
        self.dense: np.ndarray | None = None
        if rows * cols > DENSE_LIMIT:
            self.forward = lambda z: np.asarray(W @ z, dtype=np.float64)
            self.adjoint = lambda u: np.asarray(W.T @ u, dtype=np.float64)
            return
        # Dense BLAS products cost about what sparse ones do at marginal densities (1/4 on
        # binary attributes) and need no conversion.
        dense = np.asarray(W.dense(), dtype=np.float64)
        self.dense = dense
        self.forward = dense.__matmul__
        self.adjoint = dense.T.__matmul__

    def column_norm(self) -> float:
        """The largest column norm (only used when W is an array)."""
        if self.dense is None:
            return 1.0
        return float(np.sqrt(np.max(np.einsum("ij,ij->j", self.dense, self.dense), initial=0.0)))


def _sum_zero_lipschitz(W: Matrix, operators: _Operators) -> float:
    """The largest eigenvalue of ``P WᵀW P``, ``P = I − 11ᵀ/N`` (an upper bound on it)."""
    if isinstance(W, Marginals):
        # E_0 (mask 0) is the projector onto the constants: drop it, the rest is exact.
        values = [v for mask, v in W.gram().eigenvalues().items() if mask != 0]
        return max(values, default=0.0)
    cols = W.shape[1]
    if cols == 1:
        return 0.0

    def centred(v: Vector) -> Vector:
        return v - v.mean()

    if cols <= 64:
        dense = np.column_stack([operators.forward(e) for e in np.eye(cols)])
        centre = np.eye(cols) - 1.0 / cols
        return float(np.linalg.eigvalsh(centre @ dense.T @ dense @ centre)[-1])
    operator = LinearOperator(
        (cols, cols),
        matvec=lambda v: centred(operators.adjoint(operators.forward(centred(v)))),
        dtype=np.float64,
    )
    # A fixed, non-constant start vector: no seed needed.
    start = centred(1.0 + 0.5 * np.sin(np.arange(cols) * 2.399963))
    value = eigsh(operator, k=1, which="LA", v0=start, tol=1e-4, return_eigenvectors=False)
    return EIGENVALUE_MARGIN * float(value[0])


def _dual_value(residual: Vector, scores: Vector, Y: Vector, total: float) -> float:
    """``max_{t ≥ 0} D(t·v)`` for ``v = residual``, ``scores = Wᵀv``: a lower bound on f*.

    ``D(v) = ⟨v, Y⟩ − ½‖v‖² − n·max_j (Wᵀv)_j`` is the Lagrangian dual of the projection
    of Y onto ``n·conv{w_j}``; along the ray ``t·v`` it is a concave quadratic.
    """
    slope = float(residual @ Y) - total * float(scores.max())
    curvature = float(residual @ residual)
    if curvature == 0 or slope <= 0:
        return 0.0  # t = 0: f* ≥ 0
    return slope * slope / (2.0 * curvature)


class SimplexLeastSquares:
    """``min ½‖W z − Y‖²`` over ``{z ≥ 0, Σz = n}`` for one W and many (Y, n).

    Building it prepares W (a dense array when it fits) and the step size once;
    :meth:`solve` then costs milliseconds per iteration on 2-way marginals of 14 binary
    attributes (364 × 16,384).

    Polish: the dual bound lags the primal value (it is first order in the distance to
    the optimum, the primal second order), so at doubling intervals the solver runs column
    generation on an array W: solve the problem exactly on a few hundred columns (the
    current support and the best-scoring others; Lawson–Hanson NNLS with a weighted row
    for ``Σz = n``), score every column at that point, add the best-scoring ones, repeat.
    Once the columns hold the optimal face the exact solution makes the dual bound tight;
    the certificate does not depend on how a point was found, so the polish can only help.

    Args:
        W: the matrix (any dpmm.linalg matrix).

    Raises:
        ArgumentError: W is not a dpmm.linalg matrix.
    """

    def __init__(self, W: Matrix) -> None:
        if not isinstance(W, Matrix):
            raise ArgumentError(f"W must be a dpmm.linalg matrix, got {type(W).__name__}")
        self.shape = W.shape
        self._operators = _Operators(W)
        self.lipschitz = _sum_zero_lipschitz(W, self._operators)
        self._sum_weight = SUM_WEIGHT * max(self._operators.column_norm(), 1.0)

    def _restricted(self, chosen: np.ndarray, Y: Vector, total: float) -> Vector | None:
        """The (numerically) exact optimum over the chosen columns, scaled to ``Σz = n``."""
        dense, weight = self._operators.dense, self._sum_weight
        if dense is None:
            return None
        system = np.vstack([dense[:, chosen], np.full((1, chosen.size), weight)])
        try:
            values, _ = nnls(system, np.append(Y, weight * total), maxiter=50 * chosen.size)
        except RuntimeError:  # iteration limit: keep the FISTA iterate
            return None
        mass = float(values.sum())
        if mass <= 0:
            return None
        restricted = np.zeros(self.shape[1])
        # Rescaling (not the simplex projection) removes the penalty's tiny sum error
        # without spreading mass onto every column.
        restricted[chosen] = values * (total / mass)
        return restricted

    def solve(
        self,
        Y: np.ndarray,
        total: float,
        *,
        scale: float | None = None,
        accuracy: float = DEFAULT_ACCURACY,
        max_iterations: int | None = None,
        start: np.ndarray | None = None,
    ) -> SimplexFit:
        """Solve until the answers are certified within ``accuracy · scale`` of the optimum.

        Args:
            Y: the k target values.
            total: n ≥ 0.
            scale: the length the accuracy is relative to (typically the noise's
                ``√Σσᵢ²``); ``None``: the current residual ``‖Y − W z‖``.
            accuracy: τ > 0.
            max_iterations: FISTA iteration limit (``None``: :data:`DEFAULT_MAX_ITERATIONS`).
            start: a warm start (projected onto the simplex first); default uniform.

        Raises:
            ArgumentError: a bad accuracy, scale, iteration limit or start.
        """
        Y = np.asarray(Y, dtype=np.float64)
        x = self._check(Y, total, scale, accuracy, max_iterations, start)
        limit = DEFAULT_MAX_ITERATIONS if max_iterations is None else int(max_iterations)
        run = _Run(self._operators.forward, self._operators.adjoint, Y, total, scale, accuracy)
        run.consider(x)
        if total == 0 or self.lipschitz <= 0:
            # One feasible point (n = 0), or f constant on the simplex: any x is optimal.
            return run.fit(0, exact=True)
        step = 1.0 / self.lipschitz
        forward = self._operators.forward
        answers = run.best_answers
        momentum, iteration, next_polish = 1.0, 0, FIRST_POLISH
        y, y_answers = x, answers
        while True:
            scores = run.dual(y_answers)  # −∇f(y); Y − W y is a dual point
            if run.certified() or iteration >= limit:
                break
            if iteration == next_polish and self._operators.dense is not None:
                next_polish *= 2
                if self._polish(run, x, scores):
                    break
                # Continue from the best point, without momentum.
                x = y = run.best_x
                answers = y_answers = run.best_answers
                scores, momentum = run.dual(y_answers), 1.0
            iteration += 1
            x_new = project_simplex(y + step * scores, total)
            new_answers = forward(x_new)
            run.consider(x_new, new_answers)
            next_momentum = (1.0 + math.sqrt(1.0 + 4.0 * momentum * momentum)) / 2.0
            if float((y - x_new) @ (x_new - x)) > 0:
                # The momentum points uphill: restart from the new point.
                y, y_answers, next_momentum = x_new, new_answers, 1.0
            else:
                beta = (momentum - 1.0) / next_momentum
                y = x_new + beta * (x_new - x)
                # W y by linearity: no extra product with W.
                y_answers = new_answers + beta * (new_answers - answers)
            x, answers, momentum = x_new, new_answers, next_momentum
        return run.fit(iteration)

    def _polish(self, run: _Run, x: Vector, scores: Vector) -> bool:
        """Column generation from x and the scores; True once the bound is certified."""
        batch = max(16, self.shape[0] // 2)
        top = np.argsort(scores)[::-1][:batch]
        chosen = np.union1d(top, np.argsort(x)[::-1][: min(batch, np.count_nonzero(x))])
        for _ in range(POLISH_ROUNDS):
            point = self._restricted(chosen, run.Y, run.total)
            if point is None:
                return False
            scores = run.dual(run.consider(point))
            if run.certified():
                return True
            chosen = np.union1d(np.flatnonzero(point), np.argsort(scores)[::-1][:batch])
        return False

    def _check(
        self,
        Y: np.ndarray,
        total: float,
        scale: float | None,
        accuracy: float,
        max_iterations: int | None,
        start: np.ndarray | None,
    ) -> Vector:
        """Validate the arguments of :meth:`solve`; return the feasible starting point."""
        rows, cols = self.shape
        if Y.shape != (rows,) or not np.all(np.isfinite(Y)):
            raise ArgumentError(f"Y must be a finite vector of {rows} values, got shape {Y.shape}")
        if not (math.isfinite(total) and total >= 0):
            raise ArgumentError(f"total must be a non-negative finite number, got {total!r}")
        if not (isinstance(accuracy, int | float) and math.isfinite(accuracy) and accuracy > 0):
            raise ArgumentError(f"accuracy must be a positive number, got {accuracy!r}")
        if scale is not None and not (math.isfinite(scale) and scale >= 0):
            raise ArgumentError(f"scale must be a non-negative number, got {scale!r}")
        if max_iterations is not None and int(max_iterations) < 0:
            raise ArgumentError(f"max_iterations must be non-negative, got {max_iterations!r}")
        if start is None:
            return np.full(cols, total / cols)
        start = np.asarray(start, dtype=np.float64)
        if start.shape != (cols,) or not np.all(np.isfinite(start)):
            raise ArgumentError(f"start must be a finite vector of {cols} values")
        return project_simplex(start, total)


class _Run:
    """One solve's bookkeeping: the best feasible point, the best dual bound, the target."""

    def __init__(
        self,
        forward: Callable[[Vector], Vector],
        adjoint: Callable[[Vector], Vector],
        Y: Vector,
        total: float,
        scale: float | None,
        accuracy: float,
    ) -> None:
        self.forward, self.adjoint = forward, adjoint
        self.Y, self.total, self.scale, self.accuracy = Y, total, scale, accuracy
        self.best_x: Vector = np.zeros(0)
        self.best_answers: Vector = np.zeros(0)
        self.best_value, self.lower = math.inf, 0.0

    def consider(self, x: Vector, answers: Vector | None = None) -> Vector:
        """Keep x if it beats the best feasible point; return its answers ``W x``."""
        answers = self.forward(x) if answers is None else answers
        value = 0.5 * float(np.sum((answers - self.Y) ** 2))
        if value < self.best_value:
            self.best_x, self.best_answers, self.best_value = x, answers, value
        return answers

    def dual(self, answers: Vector) -> Vector:
        """Raise the dual bound with the residual of ``answers``; return ``Wᵀ(Y − answers)``."""
        residual = self.Y - answers
        scores = self.adjoint(residual)
        self.lower = max(self.lower, _dual_value(residual, scores, self.Y, self.total))
        return scores

    def gap(self) -> float:
        return max(0.0, self.best_value - self.lower)

    def target(self) -> float:
        if self.scale is not None:
            return self.accuracy * self.scale
        return self.accuracy * float(np.linalg.norm(self.Y - self.best_answers))

    def certified(self) -> bool:
        return math.sqrt(2.0 * self.gap()) <= self.target()

    def fit(self, iterations: int, *, exact: bool = False) -> SimplexFit:
        gap = 0.0 if exact else self.gap()
        bound, target = math.sqrt(2.0 * gap), 0.0 if exact else self.target()
        return SimplexFit(
            self.best_x, self.best_answers, iterations, gap, bound, target, bound <= target
        )
