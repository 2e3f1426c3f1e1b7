"""The accelerated projected gradient on blocks, many iterations per scheduler round trip.

:func:`~dpmm.reconstruct.projected_gradient.minimize_nonnegative_quadratic` pulls
a scalar to the driver every iteration (the momentum-restart test), so on a Dask
cluster each iteration costs scheduler round trips, whatever its size. Here the
same iterations are built as one task graph per *batch*: every block's step
reports its share of the restart test, and each block's next task sums the
shares itself (in block order, so all blocks decide alike); the stopping rule
is evaluated as a task at every
:data:`~dpmm.reconstruct.projected_gradient.CHECK_EVERY`-th iteration. The
driver persists a batch, then looks at its residuals: the returned iterate is
the first one whose residual met the tolerance, exactly as in the in-memory loop
(same iterates, same checks, same iteration count). On a distributed cluster the
next batch is submitted before the residuals are read, so workers never wait
for the driver.

The domain is split along its first axis into blocks. For ``H = G_0 ⊗ R`` (R the
Kronecker product of the other axes' factors) block c of ``H z`` is
``Σ_c' G_0[c, c'] ×_0 (R z_c')``: R is applied inside each block, and the first
axis needs one small product per pair of blocks (skipped where ``G_0[c, c']`` is
zero, so a diagonal ``G_0`` needs no communication at all). An iteration is four
tasks per block: a restart share, the momentum point with its products, the gradient
step, its projection. With a known total the projection onto ``{x ≥ 0, Σx = T}`` needs
the threshold τ of all blocks together: its fixed passes
(:mod:`~dpmm.reconstruct.simplex_threshold`) are tasks of the same graph, four small
ones per block and three combines, so a total adds no round trip to the driver.

ADMM (:mod:`~dpmm.reconstruct.admm`) runs on the same blocks and the same driver loop
(:func:`admm_on_blocks`): its products with the eigenbasis ``⊗Q_i`` follow the same
pattern (``Q_i`` inside each block, one small product per pair of blocks), and its
global scalars (the total's multiplier, ρ's rebalancing) are tasks that sum the blocks'
shares in block order, so it too costs one persist per batch.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from dpmm.linalg import Matrix
from dpmm.reconstruct.admm import (
    RELAXATION,
    KronSpectrum,
    balance_norms,
    balance_terms,
    inner,
    multiplier,
    outer,
    rebalanced_rho,
)
from dpmm.reconstruct.projected_gradient import CHECK_EVERY, DEFAULT_MAX_ITERATIONS, Solution
from dpmm.reconstruct.simplex_threshold import (
    HISTOGRAM_PASSES,
    exact,
    first_bracket,
    histogram,
    inside,
    narrow,
    summary,
)

__all__ = ["BlockKron", "admm_on_blocks", "minimize_on_blocks"]

#: Iterations built into one task graph (a multiple of CHECK_EVERY).
BATCH_ITERATIONS = 40


@dataclass(frozen=True)
class BlockKron:
    """``G_0 ⊗ R`` on a tensor split into blocks along its first axis.

    Attributes:
        first: ``G_0`` as a dense array, shape ``(n_0, n_0)``.
        others: The factors of the remaining axes, in order (dense arrays or matrices).
        bounds: Row offsets of the blocks along the first axis, ``0 = b_0 < … < b_B = n_0``.
    """

    first: np.ndarray
    others: Sequence[np.ndarray | Matrix]
    bounds: Sequence[int]

    def pieces(self) -> list[list[np.ndarray | None]]:
        """``G_0[c, c']`` for every pair of blocks, ``None`` where the piece is zero."""
        edges = list(self.bounds)
        rows = []
        for lo, hi in itertools.pairwise(edges):
            row = []
            for clo, chi in itertools.pairwise(edges):
                piece = np.ascontiguousarray(self.first[lo:hi, clo:chi])
                row.append(piece if np.any(piece) else None)
            rows.append(row)
        return rows


def apply_inside(block: np.ndarray, others: Sequence[np.ndarray | Matrix]) -> np.ndarray:
    """R applied to one block: every factor along its own axis (1, 2, …) of the block.

    Example:
        >>> block = np.arange(4.0).reshape(1, 2, 2)
        >>> apply_inside(block, [np.eye(2), np.array([[1.0, 1.0], [0.0, 1.0]])]).tolist()
        [[[1.0, 1.0], [5.0, 3.0]]]
    """
    shape = block.shape
    for axis, factor in enumerate(others, start=1):
        before = int(np.prod(shape[:axis]))
        # (before, n_axis, after): a batched product along the middle axis, no transposes.
        view = np.ascontiguousarray(block).reshape(before, shape[axis], -1)
        if isinstance(factor, np.ndarray):
            if axis == len(shape) - 1:
                out = view.reshape(before, shape[axis]) @ factor.T
            else:
                out = np.matmul(factor, view)
        else:
            moved = np.moveaxis(view, 1, 0).reshape(shape[axis], -1)
            flat = factor._matmat(moved)
            out = np.moveaxis(flat.reshape(flat.shape[0], before, -1), 0, 1)
        shape = (*shape[:axis], out.shape[1], *shape[axis + 1 :])
        block = out.reshape(shape)
    return block


def _across(piece: np.ndarray, inside: np.ndarray) -> np.ndarray:
    return (piece @ inside.reshape(inside.shape[0], -1)).reshape(piece.shape[0], *inside.shape[1:])


def _gradient(parts: list[np.ndarray], linear: np.ndarray) -> np.ndarray:
    if not parts:  # a zero column of G_0: no product reaches this block
        return -linear
    gradient = parts[0] - linear
    for part in parts[1:]:
        gradient += part
    return gradient


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.reshape(-1), b.reshape(-1)))


def _residual(shares: list[float], factor: float) -> float:
    return math.sqrt(sum(shares)) * factor


def _identity(value: Any) -> Any:
    return value


def _start(x: np.ndarray) -> tuple:
    # A positive restart share: the first step starts from x with momentum 1, as in memory.
    return x, 1.0, x, np.array([0.0, 1.0])


def _products(v: np.ndarray, others: Sequence[Any], column: list[np.ndarray | None]) -> list:
    """``G_0[c'', c] ×_0 (R v)`` for every block c'' (``None`` for a zero piece)."""
    inside = apply_inside(v, others)
    return [None if piece is None else _across(piece, inside) for piece in column]


def _advance(
    step: tuple, shares: list[float], others: Sequence[Any], column: list[np.ndarray | None]
) -> tuple:
    """Block c's momentum point z, its products and the momentum after the restart test.

    ``step`` is the block's last ``(x_new, share, x, momentum)``; the shares of all
    blocks come in block order, so every block sums them alike and decides alike.
    """
    x_new, _, x, momentum = step
    current = float(momentum[1])
    following = (1.0 + math.sqrt(1.0 + 4.0 * current * current)) / 2.0
    if sum(shares) > 0:  # momentum points uphill: restart from the new point
        momentum = np.array([0.0, 1.0])
    else:
        momentum = np.array([(current - 1.0) / following, following])
    z = x_new - x
    z *= momentum[0]
    z += x_new  # a zero coefficient (a restart) gives x_new exactly
    return z, _products(z, others, column), momentum


def _inside_x(step: tuple, others: Sequence[Any], column: list[np.ndarray | None]) -> list:
    return _products(step[0], others, column)


def _gather(products: list[list], c: int) -> list[np.ndarray]:
    return [p for p in (row[c] for row in products) if p is not None]


def _moved(own: tuple, advanced: list[tuple], linear: np.ndarray, c: int, size: float) -> Any:
    """Block c's gradient step from its momentum point, before the projection."""
    z, _, _ = own
    moved = _gradient(_gather([a[1] for a in advanced], c), linear)
    moved *= -size  # in place from here on: one temporary per block
    moved += z
    return moved


def _descend(own: tuple, moved: np.ndarray, threshold: float, step: tuple) -> tuple:
    """Block c's projected step: ``(x_new, share, x, momentum)``."""
    z, _, momentum = own
    x = step[0]
    x_new = np.maximum(moved - threshold, 0.0)
    return x_new, _dot(z - x_new, x_new - x), x, momentum


def _iterate(block: tuple | np.ndarray) -> np.ndarray:
    """A block's x: the first of projected gradient's step, or ADMM's candidate itself."""
    return block[0] if isinstance(block, tuple) else block


def _kkt_point(
    products: list[list], linear: np.ndarray, block: tuple | np.ndarray, c: int, size: float
) -> Any:
    """Block c's ``x − ∇f(x)/L``, which the KKT residual projects."""
    point = _gradient(_gather(products, c), linear)
    point *= -size
    point += _iterate(block)
    return point


def _kkt_share(point: np.ndarray, threshold: float, block: tuple | np.ndarray) -> float:
    """Block c's share of ``‖x − Π(x − ∇f(x)/L)‖²``."""
    mapped = np.maximum(point - threshold, 0.0)
    np.subtract(_iterate(block), mapped, out=mapped)
    return _dot(mapped, mapped)


def _shifted(block: np.ndarray, threshold: float) -> np.ndarray:
    return np.maximum(block - threshold, 0.0)


class _Tasks:
    """A loop's tasks as a plain Dask graph, built batch by batch.

    ``dask.delayed`` merges and culls a growing graph at every call, which made building
    a batch quadratic in its length; here a batch is one dict, persisted at once. A task
    that needs another block's products takes that block's whole output: moving a few
    more megabytes is cheaper than one more task.
    """

    def __init__(self, step: float, total: float | None) -> None:
        self.prefix = f"pg-{uuid.uuid4().hex}"
        self.count = 0
        self.step = step
        self.total = total
        self.pending: dict[str, Any] = {}

    def key(self) -> str:
        self.count += 1
        return f"{self.prefix}-{self.count}"

    def literal(self, value: Any) -> str:
        key = self.key()
        self.pending[key] = (_identity, value)  # a task, so lists and tuples stay literal
        return key

    def task(self, function: Any, *args: Any) -> str:
        key = self.key()
        self.pending[key] = (function, *args)
        return key

    def persist(self, known: dict[str, Any], keys: list[str]) -> dict[str, Any]:
        """Run the pending tasks; the persisted values (or futures) of ``keys``."""
        import dask
        from dask.delayed import Delayed

        graph = {**known, **self.pending}
        self.pending = {}
        done = dask.persist(*[Delayed(key, graph) for key in keys])
        return {d.key: dict(d.__dask_graph__())[d.key] for d in done}

    def kkt_residual(
        self, products: list[str], linear: list[str], blocks: list[str], factor: float
    ) -> str:
        """The relative KKT residual at the blocks' x, from the products ``H x`` of each
        block: every block's point and share, and the threshold of their projection."""
        points = [
            self.task(_kkt_point, products, b, block, c, self.step)
            for c, (b, block) in enumerate(zip(linear, blocks, strict=True))
        ]
        threshold = self.threshold(points)
        shares = [
            self.task(_kkt_share, point, threshold, block)
            for point, block in zip(points, blocks, strict=True)
        ]
        return self.task(_residual, shares, factor)

    def threshold(self, blocks: list[str]) -> str | float:
        """The projection's threshold τ over ``blocks``: 0 without a total, else the key of
        the passes of :mod:`~dpmm.reconstruct.simplex_threshold` as tasks."""
        if self.total is None:
            return 0.0
        total = self.total
        bracket = self.task(first_bracket, [self.task(summary, b) for b in blocks], total)
        for _ in range(HISTOGRAM_PASSES):
            parts = [self.task(histogram, b, bracket) for b in blocks]
            bracket = self.task(narrow, parts, bracket, total)
        return self.task(exact, [self.task(inside, b, bracket) for b in blocks], bracket, total)

    def project(self, blocks: list[str]) -> list[str]:
        threshold = self.threshold(blocks)
        return [self.task(_shifted, block, threshold) for block in blocks]


class _Graph(_Tasks):
    """The accelerated projected gradient's tasks: three per block and iteration (four
    with the restart share)."""

    def __init__(self, operator: BlockKron, step: float, total: float | None) -> None:
        super().__init__(step, total)
        # Shipped once; tasks refer to these keys instead of embedding the arrays.
        self.others = self.literal(list(operator.others))
        pieces = operator.pieces()
        # Column c holds the pieces block c's products need: G_0[c'', c] for every c''.
        self.columns = [self.literal([row[c] for row in pieces]) for c in range(len(pieces))]

    @property
    def constants(self) -> list[str]:
        """The keys of what every batch's tasks share (persisted once)."""
        return [self.others, *self.columns]

    def start(self, x: list[str]) -> list[str]:
        """The blocks' first steps from the projected start ``x``."""
        return [self.task(_start, block) for block in x]

    def check(
        self, linear: list[str], steps: list[str], factor: float, *, first: bool
    ) -> tuple[str, list[str], list[str]]:
        """The relative KKT residual at the x of ``steps``, the keys of x's blocks, and
        the steps to go on from."""
        blocks = [self.task(itemgetter(0), step) for step in steps]
        return self.residual(linear, steps, factor), blocks, steps

    def iterate(self, linear: list[str], steps: list[str]) -> list[str]:
        """The blocks' ``(x_new, share, x, momentum)`` one iteration after ``steps``."""
        shares = [self.task(itemgetter(1), step) for step in steps]
        advanced = [
            self.task(_advance, step, shares, self.others, column)
            for step, column in zip(steps, self.columns, strict=True)
        ]
        moved = [
            self.task(_moved, own, advanced, b, c, self.step)
            for c, (own, b) in enumerate(zip(advanced, linear, strict=True))
        ]
        threshold = self.threshold(moved)
        return [
            self.task(_descend, own, point, threshold, step)
            for own, point, step in zip(advanced, moved, steps, strict=True)
        ]

    def residual(self, linear: list[str], steps: list[str], factor: float) -> str:
        """The relative KKT residual at the x of ``steps``."""
        products = [
            self.task(_inside_x, step, self.others, column)
            for step, column in zip(steps, self.columns, strict=True)
        ]
        return self.kkt_residual(products, linear, steps, factor)


def _eigen_block(factors: Sequence[np.ndarray], first: np.ndarray) -> np.ndarray:
    """A block of a Kronecker vector (λ or q): ``first`` (the block's rows of the first
    factor's part) times the others', shaped as the block."""
    return outer([first, *factors]).reshape(len(first), *(len(f) for f in factors))


def _admm_start(x: np.ndarray, rho: float) -> tuple:
    """Block c's ADMM state ``(z, u, ρ, x, rhs, μ)`` at the projected start."""
    return x, np.zeros_like(x), rho, x, None, 0.0


def _admm_in(state: tuple, linear: np.ndarray, others: Sequence[Any], column: list) -> tuple:
    """Block c's x-step right-hand side ``b + ρ(z − u)`` and its products towards the
    eigenbasis (``Q_0ᵀ[c'', c] ×_0 (R_Qᵀ rhs)`` for every block c'')."""
    z, u, rho = state[:3]
    rhs = z - u
    rhs *= rho
    rhs += linear
    return rhs, _products(rhs, others, column)


def _admm_divide(
    entered: list[tuple], c: int, values: np.ndarray, ones: np.ndarray | None, state: tuple
) -> tuple:
    """Block c of ``w = Qᵀrhs / (λ + ρ)`` and its shares of ``qᵀw`` and ``Σ q²/(λ + ρ)``."""
    shifted = values + state[2]
    w = _gradient(_gather([e[1] for e in entered], c), 0.0) / shifted
    if ones is None:
        return w, (0.0, 0.0)
    return w, (inner(ones, w), inner(ones, ones / shifted))


def _share(divided: tuple) -> tuple[float, float]:
    return divided[1]


def _admm_out(
    divided: tuple,
    shares: list[tuple[float, float]],
    values: np.ndarray,
    ones: np.ndarray | None,
    state: tuple,
    total: float | None,
    others: Sequence[Any],
    column: list,
) -> tuple:
    """Block c's w after the total's multiplier μ, its products back from the eigenbasis,
    and μ (every block sums the shares in block order, so all find the same μ)."""
    w = divided[0]
    mu = 0.0
    if ones is not None:
        rotated = sum(share[0] for share in shares)
        weight = sum(share[1] for share in shares)
        mu = multiplier(rotated, weight, total)
        w = w - mu * (ones / (values + state[2]))
    return _products(w, others, column), mu


def _admm_update(state: tuple, entered: tuple, left: list[tuple], c: int) -> tuple:
    """Block c's state after the x-step, the over-relaxation and the z and u steps."""
    z, u, rho = state[:3]
    x = _gradient(_gather([o[0] for o in left], c), 0.0)
    mu = left[c][1]
    relaxed = RELAXATION * x + (1.0 - RELAXATION) * z
    z_new = np.maximum(relaxed + u, 0.0)
    return z_new, u + relaxed - z_new, rho, x, entered[0], mu


def _admm_norms(state: tuple, linear: np.ndarray) -> np.ndarray:
    z, u, rho, x, rhs, mu = state
    return balance_norms(x, z, u, rhs, linear, rho, mu)


def _admm_rho(norms: list[np.ndarray], state: tuple) -> tuple[float, float]:
    """The next ρ by OSQP's rule from every block's norms (summed in block order), and
    the factor that keeps the unscaled dual ρu."""
    rho = state[2]
    summed = norms[0].copy()
    for part in norms[1:]:
        summed += part
    new = rebalanced_rho(rho, *balance_terms(summed, rho))
    return new, rho / new


def _admm_rescaled(state: tuple, balanced: tuple[float, float]) -> tuple:
    z, u, _, x, rhs, mu = state
    rho, ratio = balanced
    return z, u * ratio, rho, x, rhs, mu


def _eigen_products(
    entered: list[list], c: int, values: np.ndarray, others: Sequence[Any], column: list
) -> list:
    """Block c of ``λ · Qᵀv`` (from every block's products) and its products back."""
    return _products(_gradient(_gather(entered, c), 0.0) * values, others, column)


class _AdmmGraph(_Tasks):
    """ADMM's tasks (:mod:`~dpmm.reconstruct.admm`): per block and iteration, the
    right-hand side with its products into the eigenbasis, the division by the shifted
    spectrum with the block's shares of the total's multiplier, the products back, and
    the update of ``(z, u)``. A product with ``⊗Q_i`` or its transpose is a
    :class:`BlockKron` product: ``Q_i`` inside each block, one small product with a piece
    of ``Q_0`` per pair of blocks. At a check, the projection of z, ``H`` applied to it
    (both bases), the KKT residual and ρ's rebalancing are tasks of the same graph."""

    def __init__(
        self, spectrum: KronSpectrum, bounds: Sequence[int], step: float, total: float | None
    ) -> None:
        super().__init__(step, total)
        vectors = spectrum.factor_vectors
        into = BlockKron(vectors[0].T, [q.T for q in vectors[1:]], bounds)
        back = BlockKron(vectors[0], list(vectors[1:]), bounds)
        self.into_others = self.literal(list(into.others))
        self.back_others = self.literal(list(back.others))
        into_pieces, back_pieces = into.pieces(), back.pieces()
        count = len(into_pieces)
        self.into_columns = [self.literal([r[c] for r in into_pieces]) for c in range(count)]
        self.back_columns = [self.literal([r[c] for r in back_pieces]) for c in range(count)]
        edges = list(bounds)
        first_values = spectrum.weight * spectrum.factor_values[0]
        rest_values = self.literal(list(spectrum.factor_values[1:]))
        self.values = [
            self.task(_eigen_block, rest_values, first_values[lo:hi])
            for lo, hi in itertools.pairwise(edges)
        ]
        self.ones: list[str | None] = [None] * count
        if total is not None:
            sums = [q.sum(axis=0) for q in vectors]
            rest_ones = self.literal(sums[1:])
            self.ones = [
                self.task(_eigen_block, rest_ones, sums[0][lo:hi])
                for lo, hi in itertools.pairwise(edges)
            ]
        self.rho = spectrum.initial_rho()

    @property
    def constants(self) -> list[str]:
        fixed = [self.into_others, self.back_others, *self.into_columns, *self.back_columns]
        return [*fixed, *self.values, *(k for k in self.ones if k is not None)]

    def start(self, x: list[str]) -> list[str]:
        return [self.task(_admm_start, block, self.rho) for block in x]

    def iterate(self, linear: list[str], steps: list[str]) -> list[str]:
        """The blocks' states one ADMM iteration after ``steps``."""
        entered = [
            self.task(_admm_in, state, b, self.into_others, column)
            for state, b, column in zip(steps, linear, self.into_columns, strict=True)
        ]
        divided = [
            self.task(_admm_divide, entered, c, values, ones, state)
            for c, (values, ones, state) in enumerate(
                zip(self.values, self.ones, steps, strict=True)
            )
        ]
        shares = [self.task(_share, d) for d in divided] if self.total is not None else []
        left = [
            self.task(
                _admm_out, d, shares, values, ones, state, self.total, self.back_others, column
            )
            for d, values, ones, state, column in zip(
                divided, self.values, self.ones, steps, self.back_columns, strict=True
            )
        ]
        return [
            self.task(_admm_update, state, e, left, c)
            for c, (state, e) in enumerate(zip(steps, entered, strict=True))
        ]

    def check(
        self, linear: list[str], steps: list[str], factor: float, *, first: bool
    ) -> tuple[str, list[str], list[str]]:
        """The residual at the projection of z, that projection's blocks, and the states
        with ρ rebalanced (not at the start, as in memory)."""
        z = [self.task(itemgetter(0), state) for state in steps]
        candidate = z if first else self.project(z)
        entered = [
            self.task(_products, block, self.into_others, column)
            for block, column in zip(candidate, self.into_columns, strict=True)
        ]
        scaled = [
            self.task(_eigen_products, entered, c, values, self.back_others, column)
            for c, (values, column) in enumerate(zip(self.values, self.back_columns, strict=True))
        ]
        residual = self.kkt_residual(scaled, linear, candidate, factor)
        if first:
            return residual, candidate, steps
        norms = [self.task(_admm_norms, state, b) for state, b in zip(steps, linear, strict=True)]
        balanced = self.task(_admm_rho, norms, steps[0])
        states = [self.task(_admm_rescaled, state, balanced) for state in steps]
        return residual, candidate, states


def _value(key: str, entry: Any) -> Any:
    """The value behind a persisted entry (a future on a cluster, else the value)."""
    import dask
    from dask.delayed import Delayed

    (value,) = dask.compute(Delayed(key, {key: entry}))
    return value


def _distributed() -> bool:
    """Whether a distributed client is active (its persist returns before the work ends)."""
    try:
        from distributed import default_client
    except ImportError:
        return False
    try:
        default_client()
    except ValueError:
        return False
    return True


def minimize_on_blocks(
    operator: BlockKron,
    linear: list[Any],
    start: list[Any],
    lipschitz: float,
    *,
    total: float | None = None,
    tolerance: float,
    max_iterations: int | None,
) -> tuple[Solution, list[Any]]:
    """Minimize ``½ xᵀH x − bᵀx`` over ``x ≥ 0`` (and ``Σx = total`` when given) with
    ``H`` a :class:`BlockKron`.

    Args:
        operator: H, split as the blocks are.
        linear: The blocks of b (Dask delayed values split along the first axis).
        start: The blocks of the warm start (projected onto ``x ≥ 0`` first).
        lipschitz: An upper bound on the largest eigenvalue of H.
        total: The known total, or ``None``.
        tolerance: Relative gradient-mapping residual to stop at.
        max_iterations: Iteration limit (``None``: the in-memory loop's default).

    Returns:
        The :class:`Solution` (its ``x`` is ``None``) and the solution's blocks (Dask
        delayed values).
    """
    graph = _Graph(operator, 1.0 / lipschitz, total)
    return _drive(graph, linear, start, lipschitz, tolerance, max_iterations)


def admm_on_blocks(
    spectrum: KronSpectrum,
    bounds: Sequence[int],
    linear: list[Any],
    start: list[Any],
    lipschitz: float,
    *,
    total: float | None = None,
    tolerance: float,
    max_iterations: int | None,
) -> tuple[Solution, list[Any]]:
    """:func:`~dpmm.reconstruct.admm.minimize_kron_quadratic` on blocks along the first
    axis (row offsets ``bounds``), many iterations per round trip; the other arguments
    and the result are :func:`minimize_on_blocks`'s."""
    graph = _AdmmGraph(spectrum, bounds, 1.0 / lipschitz, total)
    return _drive(graph, linear, start, lipschitz, tolerance, max_iterations)


def _drive(
    graph: _Graph | _AdmmGraph,
    linear: list[Any],
    start: list[Any],
    lipschitz: float,
    tolerance: float,
    max_iterations: int | None,
) -> tuple[Solution, list[Any]]:
    """The driver's loop: persist a batch, read its checks' residuals, stop at the first
    that met the tolerance (or at the limit)."""
    from dask.delayed import Delayed

    limit = DEFAULT_MAX_ITERATIONS if max_iterations is None else int(max_iterations)
    b = [graph.task(_identity, block.key) for block in linear]
    x = graph.project([block.key for block in start])
    steps = graph.start(x)
    scale = graph.task(_residual, [graph.task(_dot, block, block) for block in b], 1.0)
    constants = graph.persist(_gather_inputs(linear, start), [*b, *graph.constants, *steps, scale])
    factor = lipschitz / (_value(scale, constants.pop(scale)) or 1.0)
    live = {key: constants.pop(key) for key in steps}
    first, blocks, steps = graph.check(b, steps, factor, first=True)
    live.update(graph.persist({**constants, **live}, [first, *blocks, *steps]))
    residual = _value(first, live[first])
    if residual <= tolerance or limit <= 0:
        solution = Solution(None, 0, residual, residual <= tolerance)
        return solution, [Delayed(k, {k: live[k]}) for k in blocks]
    pipelined = _distributed()
    pending = _submit(graph, constants, live, b, steps, 0, limit, factor)
    while True:
        live, steps, checks = pending
        done = checks[-1][0]
        ahead = None
        if pipelined and done < limit:  # keep the workers busy while the driver reads
            ahead = _submit(graph, constants, live, b, steps, done, limit, factor)
        for iteration, key, blocks in checks:
            residual = _value(key, live[key])
            if residual <= tolerance or iteration == limit:
                solution = Solution(None, iteration, residual, residual <= tolerance)
                return solution, [Delayed(k, {k: live[k]}) for k in blocks]
        pending = ahead or _submit(graph, constants, live, b, steps, done, limit, factor)


def _gather_inputs(*block_lists: list[Any]) -> dict[str, Any]:
    """The graphs behind the input blocks (Dask delayed values), merged into one dict."""
    graph: dict[str, Any] = {}
    for blocks in block_lists:
        for block in blocks:
            graph.update(dict(block.__dask_graph__()))
    return graph


def _submit(
    graph: _Graph | _AdmmGraph,
    constants: dict[str, Any],
    live: dict[str, Any],
    linear: list[str],
    steps: list[str],
    done: int,
    limit: int,
    factor: float,
) -> tuple[dict[str, Any], list[str], list[tuple[int, str, list[str]]]]:
    """Persist the iterations after ``done`` up to the next batch end (or the limit).

    Returns the persisted entries, the last iteration's step keys, and per checked
    iteration its number, the key of its residual and the keys of its x blocks.
    """
    checks = []
    for iteration in range(done + 1, min(done + BATCH_ITERATIONS, limit) + 1):
        steps = graph.iterate(linear, steps)
        if iteration % CHECK_EVERY == 0 or iteration == limit:
            residual, blocks, steps = graph.check(linear, steps, factor, first=False)
            checks.append((iteration, residual, blocks))
    keys = [*steps, *(key for _, key, _ in checks), *(k for *_, blocks in checks for k in blocks)]
    persisted = graph.persist({**constants, **live}, keys)
    return {**constants, **persisted}, steps, checks
