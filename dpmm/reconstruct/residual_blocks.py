"""Least-squares workload answers from residual block measurements, without the data vector.

A measurement of integer residual blocks ``[Q_S H_S]``
(:class:`~dpmm.linalg.helmert_blocks.HelmertBlocks`) holds, per set S, integer answers
``y_S = G_S z_S + e_S`` with ``z_S = R_S x`` (the data's coordinates in the residual
subspace of S), ``G_S = Q_S diag(√c)`` and i.i.d. noise of variance σ² on every row. The
row spaces of different ``R_S`` are orthogonal and ``R_S R_Sᵀ = c_S I``
(``c_S = Π_{i∉S} n_i``), so least squares decouples per set:

    ``ẑ_S = G_S⁺ y_S``,  ``Cov(ẑ_S) = σ² G_S⁺G_S⁺ᵀ``,  ``x̂ = Σ_S R_Sᵀ ẑ_S / c_S``

(the minimum-norm solution ``A_q⁺ y``; the quantized scale cancels; a block with fewer
rows than its rank, from a rank-deficient strategy block, leaves the rest of its subspace
at zero exactly as ``A_q⁺`` does). A workload term
``w ⊗_i W_i`` splits per attribute as ``W_i = a_i 1ᵀ + B_i D_i``
(:func:`~dpmm.linalg.residual_general.split_factor`): ``W_i D_iᵀ = B_i`` and
``W_i 1 = n_i a_i``, so ``W R_Sᵀ / c_S = w ⊗_{i∈S} B_i ⊗_{i∉S} a_i =: V_S`` and

    ``W x̂ = Σ_S V_S ẑ_S``,  ``Cov(W x̂) = Σ_S V_S Cov(ẑ_S) V_Sᵀ``.

The empty set is the total (``R_∅ = 1ᵀ``, ``V_∅ = w ⊗_i a_i``). Only the sets with
``B_i ≠ 0`` on S and ``a_i ≠ 0`` off S contribute, and ``V_S`` is applied factor by factor,
so a term costs O(its rows · Σ block ranks) and never touches the domain. A marginal table on
attributes a is the term with identities on a and totals elsewhere.

Example:
    >>> from dpmm.linalg import Identity, Kron, Ones, Prefix
    >>> from dpmm.measure import measure, quantize
    >>> from dpmm.privacy import ZCDP
    >>> from dpmm.strategy import optimize
    >>> W = Kron([Prefix(2), Identity(3)])
    >>> quantized = quantize(optimize(W, "residual", ZCDP(1)))
    >>> record = measure(quantized, np.array([4, 0, 1, 2, 2, 3]), ZCDP(10**8))
    >>> estimate = BlockEstimate(quantized.integer, record.values, record.noise_variance())
    >>> np.rint(block_workload_answers(estimate, W).values).astype(int).tolist()
    [4, 0, 1, 6, 2, 4]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Identity, Matrix, Ones
from dpmm.linalg.base import check_dense_size
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.residual_general import FactorSplit, split_factor, term_splits
from dpmm.linalg.residuals import ResidualStrategy

__all__ = [
    "BlockAnswers",
    "BlockEstimate",
    "BlockMarginal",
    "block_histogram",
    "block_marginals",
    "block_workload_answers",
    "check_answerable",
]


@dataclass(frozen=True, eq=False)
class BlockAnswers:
    """Least-squares answers of a workload and the exact variance of each.

    Attributes:
        values: ``W x̂`` (rows of W in order).
        variances: ``diag Cov(W x̂)`` under the measured noise (quantized strategy).
    """

    values: np.ndarray
    variances: np.ndarray


@dataclass(frozen=True, eq=False)
class BlockMarginal:
    """A least-squares marginal table and the variance of each of its cells.

    Attributes:
        attrs: sorted attribute positions.
        values: the table, shaped ``[n_i for i in attrs]`` (float64; may be negative).
        variances: the variance of every cell, same shape.
    """

    attrs: tuple[int, ...]
    values: np.ndarray
    variances: np.ndarray


def _apply(pieces: Sequence[np.ndarray], Z: np.ndarray) -> np.ndarray:
    """``(⊗_i pieces[i]) Z`` factor by factor; Z is ``(Π columns, batch)``.

    Returns ``(Π rows, batch)``: rows in C order over the pieces, as a Kron product's.
    """
    batch = Z.shape[1]
    tensor = Z.reshape(*[p.shape[1] for p in pieces], batch)
    for axis, piece in enumerate(pieces):
        if piece.shape == (1, 1):  # a total off S: a scalar, no reshaping
            tensor = tensor * piece[0, 0]
            continue
        tensor = np.moveaxis(np.tensordot(piece, tensor, axes=([1], [axis])), 0, axis)
    return tensor.reshape(-1, batch)


class BlockEstimate:
    """Per-set least-squares coefficients ``ẑ_S`` and covariance factors, made on demand.

    Args:
        blocks: the integer strategy that was measured.
        values: its noisy integer answers, blocks in ``blocks.sets`` order.
        noise_variance: the variance of the noise on every answer (integer units).
    """

    def __init__(self, blocks: HelmertBlocks, values: np.ndarray, noise_variance: float) -> None:
        if np.shape(values) != (blocks.shape[0],):
            raise UnsupportedQueryError(
                f"{blocks!r} has {blocks.shape[0]} answers, the measurement {np.shape(values)}"
            )
        self.blocks = blocks
        self.values = values
        self.domain_shape = blocks.domain_shape
        self._index = {mask: t for t, mask in enumerate(blocks.sets)}
        self._sigma = math.sqrt(noise_variance)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._inverses: dict[tuple, np.ndarray] = {}

    def coefficients(self, mask: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ẑ_S, F_S)`` with ``Cov(ẑ_S) = F_S F_Sᵀ``.

        ``F_S`` is ``σ G_S⁺`` (rank × rows), or for a scalar block the vector of standard
        deviations (``Cov`` diagonal).

        Raises:
            UnsupportedQueryError: the set was not measured.
        """
        cached = self._cache.get(mask)
        if cached is not None:
            return cached
        t = self._index.get(mask)
        if t is None:
            raise UnsupportedQueryError(f"The residual on set {mask} was not measured")
        offsets = self.blocks.offsets
        y = self.values[offsets[t] : offsets[t + 1]].astype(np.float64)
        G = self.blocks.normalized(mask)
        if G.ndim == 1:
            result = (y / G, self._sigma / np.abs(G))
        else:
            # Symmetric domains repeat one integer block over many sets: invert it once.
            key = (G.shape, self.blocks.integers[mask].tobytes())
            inverse = self._inverses.get(key)
            if inverse is None:
                inverse = self._inverses[key] = np.linalg.pinv(G)
            result = (inverse @ y, self._sigma * inverse)
        self._cache[mask] = result
        return result

    def term(self, weight: float, splits: Sequence[FactorSplit]) -> BlockAnswers:
        """Answers and variances of the term ``weight · ⊗_i W_i`` (given by its splits).

        Raises:
            UnsupportedQueryError: the term reads a set that was not measured.
        """
        rows = math.prod(len(split.a) for split in splits)
        values, variances = np.zeros(rows), np.zeros(rows)
        for mask in _read_sets(splits, self.domain_shape, self._index):
            pieces = [
                split.B if mask >> i & 1 else split.a[:, None] for i, split in enumerate(splits)
            ]
            z, factor = self.coefficients(mask)
            values += _apply(pieces, z[:, None])[:, 0]
            if factor.ndim == 1:
                squares = [piece * piece for piece in pieces]
                variances += _apply(squares, (factor * factor)[:, None])[:, 0]
            else:
                spread = _apply(pieces, factor)
                variances += np.einsum("qk,qk->q", spread, spread)
        return BlockAnswers(weight * values, weight * weight * variances)


def block_histogram(estimate: BlockEstimate) -> np.ndarray:
    """The least-squares data vector ``x̂ = Σ_S R_Sᵀ ẑ_S / c_S`` (one value per cell).

    Raises:
        TooLargeError: the domain has too many cells for a dense vector.
    """
    shape = estimate.domain_shape
    check_dense_size(1, math.prod(shape), "the least-squares histogram")
    sets = estimate.blocks.sets
    outside = {
        mask: math.prod(n for i, n in enumerate(shape) if not mask >> i & 1) for mask in sets
    }
    stack = ResidualStrategy(shape, {mask: 1.0 / outside[mask] for mask in sets})
    z = np.concatenate([estimate.coefficients(mask)[0] for mask in sets])
    return stack.rmatvec(z)


def _read_sets(
    splits: Sequence[FactorSplit], shape: Sequence[int], measured: Iterable[int]
) -> list[int]:
    """The residual sets a term reads (B ≠ 0 on S, a ≠ 0 off S), all of them measured.

    Raises:
        UnsupportedQueryError: the term reads a set that is not in ``measured``.
    """
    masks = [0]
    for i, split in enumerate(splits):
        inside = split.has_residual and shape[i] > 1  # an attribute of size 1 has no residual
        outside = split.total_squared > 0
        masks = [m | 1 << i for m in masks if inside] + (masks if outside else [])
    for mask in masks:
        if mask not in measured:
            raise UnsupportedQueryError(
                f"The workload reads the residual on attributes "
                f"{[i for i in range(len(splits)) if mask >> i & 1]}, which was not measured"
            )
    return masks


def check_answerable(blocks: HelmertBlocks, W: Matrix) -> None:
    """Refuse, before anything is measured, a workload the blocks cannot answer.

    Raises:
        UnsupportedQueryError: W is not a union of Kron products over the domain, or
            reads a residual set the blocks do not measure.
    """
    measured = set(blocks.sets)
    for _, splits in term_splits(W, blocks.domain_shape):
        _read_sets(splits, blocks.domain_shape, measured)


def block_workload_answers(estimate: BlockEstimate, W: Matrix) -> BlockAnswers:
    """``W x̂`` and its per-query variances, for a union of Kron products W.

    Args:
        estimate: the measurement's estimate (shared across workloads).
        W: a (weighted) stack of Kron products of per-attribute query matrices over the
            measurement's domain (Marginal, Marginals and single Kron products included).

    Raises:
        UnsupportedQueryError: W is not such a union, or reads an unmeasured residual set.
    """
    parts = [
        estimate.term(weight, splits) for weight, splits in term_splits(W, estimate.domain_shape)
    ]
    return BlockAnswers(
        np.concatenate([p.values for p in parts]), np.concatenate([p.variances for p in parts])
    )


def block_marginals(
    estimate: BlockEstimate, queries: Iterable[Sequence[int]]
) -> dict[tuple[int, ...], BlockMarginal]:
    """``{sorted attrs: BlockMarginal}``: least-squares marginal tables and cell variances.

    Raises:
        UnsupportedQueryError: a query is outside the domain or needs an unmeasured set.
    """
    shape = estimate.domain_shape
    keep = {n: split_factor(Identity(n)) for n in set(shape)}
    drop = {n: split_factor(Ones(1, n)) for n in set(shape)}
    result = {}
    for query in queries:
        attrs = tuple(sorted({int(i) for i in query}))
        if not all(0 <= i < len(shape) for i in attrs):
            raise UnsupportedQueryError(f"The marginal on {list(attrs)} is outside the domain")
        if attrs in result:
            continue
        splits = [keep[n] if i in attrs else drop[n] for i, n in enumerate(shape)]
        answers = estimate.term(1.0, splits)
        sizes = [shape[i] for i in attrs]
        result[attrs] = BlockMarginal(
            attrs, answers.values.reshape(sizes), answers.variances.reshape(sizes)
        )
    return result
