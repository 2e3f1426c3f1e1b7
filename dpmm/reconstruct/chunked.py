"""NNLS on chunked Dask arrays: the Kronecker mat-vec applied factor by factor per block.

For a vector that does not fit one machine, ``x`` is a Dask array shaped as the
domain ``(n_1, …, n_d)``, chunked along one axis, and the products with the strategy
are :class:`~dpmm.linalg.chunked_kron.ChunkedKron`'s (no task holds more than one
block). This computes ``Aᵀy`` and the warm start.

With every factor small enough for a dense eigendecomposition, ADMM runs as in memory
(:mod:`~dpmm.reconstruct.admm`, the same iterates); with the first factor's Gram
small enough to be dense, projected gradient. Either runs in
:mod:`~dpmm.reconstruct.chunked_loop` (with or without a total): blocks along the
first axis, the other factors applied inside a block, many iterations per scheduler
round trip. Otherwise the loop of :mod:`~dpmm.reconstruct.projected_gradient` runs
unchanged on the Dask arrays (elementwise operations, sums, persisted iterates).

The Hessian is the Kronecker product of the factors' Grams (one pass, factor
Grams dense when small); the warm start is the least-squares estimate
``⊗_i (F_iᵀF_i)⁺F_iᵀ y`` when every factor has a structured Gram inverse.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmm.linalg import Dense, Kron, Matrix, Product
from dpmm.linalg.chunked_kron import ChunkedKron, chunk_count
from dpmm.linalg.kron import factor_gram_pinv
from dpmm.reconstruct.admm import KronSpectrum, kron_spectrum
from dpmm.reconstruct.chunked_loop import BlockKron, admm_on_blocks, minimize_on_blocks
from dpmm.reconstruct.gram import largest_gram_eigenvalue
from dpmm.reconstruct.projected_gradient import (
    Solution,
    minimize_nonnegative_quadratic,
    scalars,
)
from dpmm.reconstruct.protocol import (
    Estimate,
    ReconstructionError,
    check_noise_std,
    check_total,
    nonnegative_estimate,
    resolve_total,
)

__all__ = ["ChunkedKron", "chunked_least_squares", "chunked_nnls"]  # ChunkedKron: re-exported

#: Factor Grams up to this many cells per side are applied as dense arrays (BLAS).
DENSE_FACTOR_LIMIT = 2048


def chunked_least_squares(A: Kron, y: Any) -> Any:
    """The least-squares estimate ``⊗_i (F_iᵀF_i)⁺F_iᵀ y`` of a Kronecker strategy's
    measurements ``y`` (a Dask array shaped as its output tensor), factor by factor.

    Example:
        >>> import dask.array as da
        >>> from dpmm.linalg import Identity, Prefix
        >>> y = da.from_array(np.array([[1.0, 2.0], [4.0, 6.0]]), chunks=1)
        >>> chunked_least_squares(Kron([Prefix(2), Identity(2)]), y).compute().tolist()
        [[1.0, 2.0], [3.0, 4.0]]

    Raises:
        ReconstructionError: a factor has no structured Gram pseudo-inverse.
    """
    factors = list(A.factors) if type(A) is Kron else [A]
    pinvs = [factor_gram_pinv(f) for f in factors]
    if any(p is None for p in pinvs):
        raise ReconstructionError(
            f"Least squares on the cluster needs every factor of {A!r} to have a structured "
            "Gram pseudo-inverse, or few enough columns for a dense one."
        )
    solve = Kron([Product([p, f.T]) for p, f in zip(pinvs, factors, strict=True)])
    return ChunkedKron(solve).apply(y)


def _factor_gram(factor: Matrix) -> Matrix:
    gram = factor.gram()
    if factor.shape[1] <= DENSE_FACTOR_LIMIT:
        return Dense(gram.dense())
    return gram


def chunked_nnls(
    A: Matrix,
    y: Any,
    noise_std: float | np.ndarray | None,
    total: float | str | None,
    tolerance: float,
    max_iterations: int | None,
) -> Estimate:
    """:func:`~dpmm.reconstruct.nnls` for a Kronecker strategy and a Dask array ``y``.

    Called by :func:`~dpmm.reconstruct.nnls` with its own arguments, in their order.

    ``y`` is shaped as the output tensor ``(m_1, …, m_d)`` of ``A = ⊗ A_i``; the
    estimate is a Dask array shaped ``(n_1, …, n_d)``. Only a common noise scale is
    supported (per-row scales would break the Kronecker structure).

    Raises:
        ReconstructionError: A is not a Kronecker product, y has the wrong shape or a
            non-finite value, or noise_std is a vector.
    """
    factors = list(A.factors) if type(A) is Kron else None
    if factors is None:
        raise ReconstructionError(f"The chunked solver needs a Kronecker strategy, got {A!r}.")
    expected = tuple(f.shape[0] for f in factors)
    if tuple(y.shape) != expected:
        raise ReconstructionError(
            f"The chunked measurements have shape {tuple(y.shape)} but strategy {A!r} "
            f"answers a tensor of shape {expected}."
        )
    scales = check_noise_std(noise_std, A.shape[0])
    if scales is not None and np.ndim(scales) > 0:
        raise ReconstructionError(
            "The chunked solver supports one noise scale for all measurements, not one per row."
        )
    known_total = check_total(total)
    import dask.array as da

    (finite,) = scalars(da.isfinite(y).all())
    if not finite:
        raise ReconstructionError(
            "The measurements contain NaN or infinite values; every noisy answer must be finite."
        )
    y = y.astype(np.float64)
    strategy = ChunkedKron(A)
    linear = strategy.apply_adjoint(y).persist()
    if all(factor_gram_pinv(f) is not None for f in factors):
        start = chunked_least_squares(A, y)
    else:
        if isinstance(known_total, str):
            raise ReconstructionError(
                f"An estimated total needs a least-squares start, and {A!r} has a factor "
                "without a structured pseudo-inverse; pass the total as a number."
            )
        start = linear * 0.0
    if isinstance(known_total, str):
        (estimated,) = scalars(start.sum())
        known_total = resolve_total(known_total, estimated)
    grams = [_factor_gram(f) for f in factors]
    spectrum = kron_spectrum(Kron(grams))
    if spectrum is not None or isinstance(grams[0], Dense):
        solution = _solve_on_blocks(
            grams,
            spectrum,
            linear,
            start,
            largest_gram_eigenvalue(A),
            known_total,
            tolerance,
            max_iterations,
        )
        return nonnegative_estimate(solution, "nnls", scales, total, known_total)
    solution = minimize_nonnegative_quadratic(
        ChunkedKron(Kron(grams)).apply,
        linear,
        start,
        largest_gram_eigenvalue(A),
        total=known_total,
        tolerance=tolerance,
        max_iterations=max_iterations,
    )
    return nonnegative_estimate(solution, "nnls", scales, total, known_total)


def _solve_on_blocks(
    grams: list[Matrix],
    spectrum: KronSpectrum | None,
    linear: Any,
    start: Any,
    lipschitz: float,
    total: float | None,
    tolerance: float,
    max_iterations: int | None,
) -> Solution:
    """The batched loop of :mod:`~dpmm.reconstruct.chunked_loop` on first-axis blocks:
    ADMM with a spectrum, else projected gradient."""
    import dask
    import dask.array as da

    shape = linear.shape
    count = min(chunk_count(linear), shape[0])
    piece = -(-shape[0] // count)
    bounds = [*range(0, shape[0], piece), shape[0]]

    def split(tensor: Any) -> list[Any]:
        chunks = (piece, *([-1] * (len(shape) - 1)))
        # Persisted, so the loop's graphs refer to finished blocks, not to their recipes.
        return list(dask.persist(*tensor.rechunk(chunks).to_delayed().ravel()))

    limits = {"total": total, "tolerance": tolerance, "max_iterations": max_iterations}
    if spectrum is not None:
        solution, blocks = admm_on_blocks(
            spectrum, bounds, split(linear), split(start), lipschitz, **limits
        )
    else:
        others = [g.dense() if isinstance(g, Dense) else g for g in grams[1:]]
        operator = BlockKron(grams[0].dense(), others, bounds)
        solution, blocks = minimize_on_blocks(
            operator, split(linear), split(start), lipschitz, **limits
        )
    x = da.concatenate(
        [
            da.from_delayed(block, (hi - lo, *shape[1:]), dtype=np.float64)
            for block, lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True)
        ],
        axis=0,
    )
    return Solution(x, solution.iterations, solution.residual, solution.converged)
