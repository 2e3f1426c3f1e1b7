"""Lower a strategy's L1 sensitivity without changing its error profile (seed 000).

Two strategies with the same Gram ``AᵀA`` are *profile equivalent*: least
squares gives every query the same variance up to the noise scale, which under
pure ε-DP (Laplace) is ``‖A‖₁²``, the square of the largest column L1 norm. So
among all ``A′ = U A`` with ``UᵀU = I`` (exactly the matrices with
``A′ᵀA′ = AᵀA``) the one with the least ``‖A′‖₁`` is better for every query
at once, by the factor ``(‖A′‖₁ / ‖A‖₁)²``. ``U`` may be taller than ``A``:
extra rows are allowed and often help.

:func:`reduce_l1` searches that class:

* exact constructions where the seed gives one: the Haar wavelet ``Y`` becomes
  the weighted tree of interval counts ``Y″`` (``(k − 1) + √2`` instead of
  ``k + 1`` for ``n = 2ᵏ``);
* a smooth surrogate of the max column L1 norm (log-sum-exp over columns of
  ``√(t² + μ²)`` summed down each column), minimized over the Stiefel manifold
  ``{X : XᵀX = I}`` by Riemannian gradient descent with a QR retraction,
  Barzilai–Borwein steps and an Armijo line search, with the smoothing
  tightened in stages, from ``A`` itself, from the exact construction and from
  random starts;
* a Kronecker product factor by factor (see :func:`reduce_l1`).

The descent goes below the seed's ``Y″``: for ``Haar(4)`` each half's Gram
``[[3, 1], [1, 3]]`` is also that of the columns ``(p, q)``, ``(q, p)`` with
``p² + q² = 3``, ``2pq = 1``, whose L1 norm is ``p + q = 2`` (``Y″``: 2.414).

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Haar
    >>> Y = Haar(4)
    >>> reduced = reduce_l1(Y, max_iterations=400)
    >>> round(Y.sensitivity(1), 3), round(reduced.sensitivity(1), 3)
    (3.0, 2.0)
    >>> bool(np.allclose(reduced.gram().dense(), Y.gram().dense()))
    True
"""

from __future__ import annotations

import math

import numpy as np

from dpmm.errors import ArgumentError, TooLargeError
from dpmm.linalg import Dense, Haar, Identity, Kron, Matrix, Weighted
from dpmm.strategy.time_budget import check_time

__all__ = ["MAX_SIDE", "haar_tree_equivalent", "reduce_l1"]

#: Largest number of rows or columns of a (non-Kron) matrix that :func:`reduce_l1` optimizes.
#: One gradient step costs O(m′ n r) for m′ output rows and rank r, and every start takes
#: ``max_iterations`` of them: about 2 s per start at n = 64 and 20–40 s at n = 128 on one
#: core, growing like n³ (lower ``max_iterations`` near this limit).
MAX_SIDE = 2048

#: Relative slack on ``A′ᵀA′ = AᵀA`` below which a candidate counts as profile equivalent.
GRAM_TOLERANCE = 1e-10

#: Smoothing schedule: (log-sum-exp temperature, |·| smoothing), both relative to ‖A‖₁ and
#: to the typical entry size respectively. Coarse first to find the basin, then tight.
_SCHEDULE = ((3e-2, 1e-1), (1e-2, 3e-2), (3e-3, 1e-2), (1e-3, 3e-3), (3e-4, 1e-3))

_ARMIJO = 1e-4

#: Relative sizes of the random moves away from a start: near (stay in the start's basin),
#: far, and a uniformly random orthonormal start.
_SPREADS = (0.3, 1.0, math.inf)


def reduce_l1(
    A: Matrix,
    *,
    max_iterations: int = 2000,
    starts: int = 3,
    rows: int | None = None,
    rng: np.random.Generator | None = None,
) -> Matrix:
    """A profile-equivalent strategy with max column L1 norm no larger than ``A``'s.

    Returns ``A′ = U A`` with ``UᵀU = I`` (so ``A′ᵀA′ = AᵀA`` to about 1e-12
    relative) and ``‖A′‖₁ ≤ ‖A‖₁``; ``A`` itself when nothing better is found.

    * A :class:`~dpmm.linalg.Kron` is reduced factor by factor: the columns of
      ``A₁ ⊗ A₂`` are ``a ⊗ b``, whose L1 norm is ``‖a‖₁ ‖b‖₁``, so
      ``‖A₁ ⊗ A₂‖₁ = ‖A₁‖₁ ‖A₂‖₁``, and ``(A′₁ ⊗ A′₂)ᵀ(A′₁ ⊗ A′₂) =
      A₁ᵀA₁ ⊗ A₂ᵀA₂``. Lowering each factor's norm keeps the Gram and lowers
      the product (``U₁ ⊗ U₂`` has orthonormal columns). It is a search over
      Kronecker ``U`` only, which keeps the result implicit.
    * A :class:`~dpmm.linalg.Weighted` is reduced through its base.
    * :class:`~dpmm.linalg.Identity`, and any ``A`` whose norm already equals the
      lower bound ``max_j ‖a_j‖₂``, is returned unchanged.
    * Anything else is optimized as a dense array; the result is a
      :class:`~dpmm.linalg.Dense`.

    Args:
        A: The strategy.
        max_iterations: Gradient steps per start, over all smoothing stages.
        starts: Random orthonormal starts, besides ``A`` itself and the exact
            constructions. Ignored (no random start) when ``rng`` is None.
        rows: Rows of ``A′`` before all-zero rows are dropped (default
            ``max(m, 2 min(m, n))``); at least ``A``'s. Not used for Kron factors.
        rng: Source of random starts. With None only ``A`` and the exact
            constructions are descended from; a tree or other symmetric strategy
            is a critical point of the surrogate (its columns tie), so without
            random starts it usually comes back unchanged.

    Raises:
        TooLargeError: A non-Kron ``A`` (or Kron factor) has more than
            :data:`MAX_SIDE` rows or columns.
        ArgumentError: ``max_iterations``, ``starts`` or ``rows`` is out of range.

    Example:
        >>> from dpmm.linalg import Identity
        >>> strategy = Identity(5)   # ‖I‖₁ = 1 is the least any Gram-I matrix can have
        >>> reduce_l1(strategy) is strategy
        True
    """
    if max_iterations < 0 or starts < 0:
        raise ArgumentError(
            f"max_iterations and starts must be non-negative, got {max_iterations} and {starts}"
        )
    if isinstance(A, Kron):
        done: dict[int, Matrix] = {}  # a factor repeated across attributes is reduced once
        for factor in A.factors:
            if id(factor) not in done:
                done[id(factor)] = reduce_l1(
                    factor, max_iterations=max_iterations, starts=starts, rng=rng
                )
        factors = [done[id(factor)] for factor in A.factors]
        if all(new is old for new, old in zip(factors, A.factors, strict=True)):
            return A
        return Kron(factors)
    if isinstance(A, Weighted):
        base = reduce_l1(A.base, max_iterations=max_iterations, starts=starts, rows=rows, rng=rng)
        return A if base is A.base else Weighted(A.weight, base)
    if isinstance(A, Identity) or A.shape[0] == 0 or A.shape[1] == 0:
        return A
    m, n = A.shape
    if max(m, n) > MAX_SIDE:
        raise TooLargeError(
            f"Cannot reduce the L1 norm of {A!r}: profile search is dense and limited to "
            f"{MAX_SIDE:,} rows and columns"
        )
    if rows is not None and rows < m:
        raise ArgumentError(f"rows must be at least the strategy's {m} rows, got {rows}")
    dense = A.dense()
    norm = _l1_norm(dense)
    if norm <= float(np.sqrt((dense * dense).sum(axis=0)).max()) * (1 + 1e-12):
        return A  # every column already has L1 norm = L2 norm: nothing lower is possible
    gram = dense.T @ dense
    target_rows = rows if rows is not None else max(m, 2 * min(m, n))
    candidates = [dense]
    if isinstance(A, Haar):
        candidates.append(haar_tree_equivalent(n))
    candidates += [_optimize(start, target_rows, max_iterations) for start in candidates]
    candidates = [c for c in candidates if _same_gram(c, gram)]
    best = min(candidates, key=_l1_norm)
    if rng is not None:
        for index in range(starts):
            # Random moves away from the best point so far: near ones refine its basin,
            # far ones (and a uniformly random start) look for another.
            spread = _SPREADS[index % len(_SPREADS)]
            found = _optimize(best, target_rows, max_iterations, rng, spread)
            if _same_gram(found, gram) and _l1_norm(found) < _l1_norm(best):
                best = found
    if best is dense or _l1_norm(best) >= norm * (1 - 1e-12):
        return A
    return Dense(_drop_zero_rows(best), full_column_rank=A.known_full_column_rank)


def haar_tree_equivalent(n: int) -> np.ndarray:
    """Seed 000's ``Y → Y″``: a weighted tree of interval counts with the Gram of ``Haar(n)``.

    For two disjoint blocks L, R,
    ``(1_L + 1_R)(1_L + 1_R)ᵀ + (1_L − 1_R)(1_L − 1_R)ᵀ = 2 (1_L 1_Lᵀ + 1_R 1_Rᵀ)``,
    so a block carrying weight ``c`` in the Gram plus its Haar detail row equals
    weight ``c − 1`` on the block and ``2`` on each half. Walking the dyadic tree
    from the total (weight 1) down, every node below the root keeps weight 1 and
    every cell gets 2, so ``YᵀY = Σ_B w_B 1_B 1_Bᵀ`` and ``Y″`` has rows
    ``√w_B · 1_B``. It applies to every n (a block cut off by the end of the
    domain has detail row ``1_L``, which only adds 1 to the weight of L); for
    ``n = 2ᵏ``, k ≥ 1, its norm is ``(k − 1) + √2`` against ``‖Y‖₁ = k + 1``.

    Example:
        >>> haar_tree_equivalent(4).round(3).tolist()
        [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.414, 0.0, 0.0, 0.0], \
[0.0, 1.414, 0.0, 0.0], [0.0, 0.0, 1.414, 0.0], [0.0, 0.0, 0.0, 1.414]]
    """
    if n < 1:
        raise ArgumentError(f"A wavelet needs at least one cell, got n={n}")
    width = 1 << (n - 1).bit_length()
    weights: dict[tuple[int, int], float] = {}
    level = [((0, width), 1.0)]  # (dyadic block, weight carried into it)
    while level:
        next_level = []
        for (start, stop), carried in level:
            low, high = start, min(stop, n)
            if stop - start == 1:
                weights[(low, high)] = weights.get((low, high), 0.0) + carried
                continue
            middle = (start + stop) // 2
            if middle >= n:  # no right half: the detail row is the block's own count
                next_level.append(((start, middle), carried + 1.0))
                continue
            if carried < 1.0:  # pragma: no cover - the walk keeps every carried weight ≥ 1
                raise ValueError("negative tree weight")
            weights[(low, high)] = weights.get((low, high), 0.0) + carried - 1.0
            next_level += [((start, middle), 2.0), ((middle, stop), 2.0)]
        level = next_level
    blocks = [(block, w) for block, w in weights.items() if w > 0]
    blocks.sort(key=lambda item: (item[0][0] - item[0][1], item[0][0]))  # coarse to fine
    result = np.zeros((len(blocks), n))
    for row, ((low, high), weight) in enumerate(blocks):
        result[row, low:high] = math.sqrt(weight)
    return result


def _l1_norm(matrix: np.ndarray) -> float:
    return float(np.abs(matrix).sum(axis=0).max())


def _same_gram(candidate: np.ndarray, gram: np.ndarray) -> bool:
    error = np.linalg.norm(candidate.T @ candidate - gram)
    return bool(error <= GRAM_TOLERANCE * max(np.linalg.norm(gram), 1e-300))


def _drop_zero_rows(matrix: np.ndarray) -> np.ndarray:
    # Extra rows the optimizer did not use end at rounding level; they only cost a row.
    scale = np.abs(matrix).max()
    keep = np.abs(matrix).max(axis=1) > 1e-13 * scale
    return matrix[keep]


def _optimize(
    start: np.ndarray,
    rows: int,
    iterations: int,
    rng: np.random.Generator | None = None,
    spread: float = 0.0,
) -> np.ndarray:
    """Minimize the max column L1 norm of ``X R`` over ``XᵀX = I``, where ``start = Q R``.

    The initial X is ``Q`` padded with zero rows, moved by Gaussian noise of
    relative size ``spread`` when ``rng`` is given: structured strategies sit at
    critical points of the surrogate (ties between many equal columns), so a
    nudge lets the descent leave them. ``spread = inf`` is a uniformly random X.
    """
    q, r = np.linalg.qr(start)  # start = Q R; every X R with XᵀX = I has Gram RᵀR
    rank = r.shape[0]
    rows = max(rows, start.shape[0])
    x = np.zeros((rows, rank))
    x[: q.shape[0]] = q
    if rng is not None and spread > 0:
        noise = rng.standard_normal((rows, rank)) / math.sqrt(rows)
        x = _retract(noise if math.isinf(spread) else x + spread * noise)
    scale = float(np.abs(start).sum(axis=0).max())
    entry = scale / math.sqrt(rows)  # a typical entry of a spread-out column
    stage_iterations = max(1, iterations // len(_SCHEDULE)) if iterations else 0
    for temperature, smoothing in _SCHEDULE:
        x = _descend(x, r, temperature * scale, smoothing * entry, stage_iterations)
    return _retract(x) @ r  # Householder once more: XᵀX = I to rounding, whatever the steps


def _surrogate(
    x: np.ndarray, r: np.ndarray, temperature: float, smoothing: float
) -> tuple[float, np.ndarray]:
    """Smoothed max column L1 norm of ``X R`` and its Euclidean gradient in X. O(rows·n·rank)."""
    product = x @ r
    soft_abs = np.sqrt(product * product + smoothing * smoothing)
    columns = soft_abs.sum(axis=0) - product.shape[0] * smoothing
    top = columns.max()
    weights = np.exp((columns - top) / temperature)
    total = weights.sum()
    value = top + temperature * math.log(total)
    gradient = (product / soft_abs) * (weights / total)
    return value, gradient @ r.T


def _retract(y: np.ndarray) -> np.ndarray:
    """The Q factor of ``y`` with a positive diagonal of R: a retraction onto XᵀX = I."""
    q, r = np.linalg.qr(y)
    signs = np.sign(np.diagonal(r))
    signs[signs == 0] = 1.0
    return q * signs


def _step(x: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The QR retraction of ``x + direction`` for a tangent direction, by Cholesky QR.

    For a tangent direction ``YᵀY = I + DᵀD`` is well conditioned, so Cholesky QR gives the
    same Q as Householder QR to rounding, with one small factorization instead of a
    blocked LAPACK QR (which is slow on small matrices when BLAS threads compete).
    """
    y = x + direction
    try:
        lower = np.linalg.cholesky(y.T @ y)
    except np.linalg.LinAlgError:  # pragma: no cover - only for huge steps
        return _retract(y)
    # numpy's solve, not scipy's solve_triangular: the latter costs milliseconds per call
    # on small matrices when BLAS threads compete for the cores.
    return np.linalg.solve(lower, y.T).T


def _descend(
    x: np.ndarray, r: np.ndarray, temperature: float, smoothing: float, iterations: int
) -> np.ndarray:
    """Riemannian gradient descent on the Stiefel manifold, BB steps + Armijo backtracking."""
    value, euclidean = _surrogate(x, r, temperature, smoothing)
    gradient = _project(x, euclidean)
    step = 1.0 / max(float(np.abs(gradient).max()), 1e-300) * smoothing
    previous: tuple[np.ndarray, np.ndarray] | None = None
    for _ in range(iterations):
        check_time()
        slope = float((gradient * gradient).sum())
        if slope <= 1e-24 * max(value * value, 1e-300):
            break
        if previous is not None:
            # Barzilai–Borwein step from the last move; the line search below keeps it safe.
            moved, changed = x - previous[0], gradient - previous[1]
            curvature = float((moved * changed).sum())
            if curvature > 0:
                step = float((moved * moved).sum()) / curvature
        for _ in range(40):
            candidate = _step(x, -step * gradient)
            new_value, new_euclidean = _surrogate(candidate, r, temperature, smoothing)
            if new_value <= value - _ARMIJO * step * slope:
                break
            step *= 0.5
        else:
            break  # no descent at rounding level: this stage has converged
        previous = (x, gradient)
        x, value = candidate, new_value
        gradient = _project(x, new_euclidean)
    return x


def _project(x: np.ndarray, euclidean: np.ndarray) -> np.ndarray:
    """The Riemannian gradient: the Euclidean one projected onto the tangent space at X."""
    inner = x.T @ euclidean
    return euclidean - x @ ((inner + inner.T) / 2)
