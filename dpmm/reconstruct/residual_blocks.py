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
so a term costs O(its rows · Σ block ranks) and never touches the domain.

A marginal table on attributes a is the term with identities on a and totals elsewhere,
computed without the per-attribute factors: only S ⊆ a contribute, and

    ``M_a x̂ = Σ_{S⊆a} (D_Sᵀ ẑ_S) broadcast over a∖S / Π_{i∈a∖S} n_i``,

where ``D_Sᵀ ẑ_S = H_Sᵀ (ẑ_S / √c)`` is a table over S found by cumulative sums
(:func:`~dpmm.linalg.helmert_blocks.helmert_transpose`), and the variance of its cells is
``diag(D_Sᵀ Cov(ẑ_S) D_S)``: for a diagonal block ``(H_S∘H_S)ᵀ (σ² / (G_S² c²))``. Tables of
equal shape are computed a batch at a time, O(2^|a| · table size) per marginal
(:func:`iter_block_marginals`); a closed-form residual strategy (one diagonal block per set,
all marginals of 100 attributes) is answered a table at a time without holding them all.

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

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Matrix
from dpmm.linalg.base import check_dense_size
from dpmm.linalg.helmert_blocks import (
    HelmertBlocks,
    HelmertEntries,
    helmert_row_norms,
    helmert_transpose,
)
from dpmm.linalg.kron import kron_rows
from dpmm.linalg.marginals import mask_members, members_mask
from dpmm.linalg.residual_general import FactorSplit, _reciprocal, read_sets, term_splits
from dpmm.linalg.residuals import DomainSizes, _ResidualStack

__all__ = [
    "BlockAnswers",
    "BlockEstimate",
    "BlockMarginal",
    "block_histogram",
    "block_marginals",
    "block_noise_coefficients",
    "block_workload_answers",
    "check_answerable",
    "iter_block_marginals",
]

#: Cells of equal-shaped marginal tables computed per batch (bounds the temporaries).
BATCH_CELLS = 1 << 22


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
    after = Z.shape[0] * batch
    before, tensor = 1, Z
    for piece in pieces:
        rows, cols = piece.shape
        after //= cols
        if piece.shape == (1, 1):  # a total off S: a scalar, no reshaping
            tensor = tensor * piece[0, 0]
            continue
        block = tensor.reshape(before, cols, after)
        tensor = piece @ block
        before *= rows
    return tensor.reshape(-1, batch)


def _to_cells(tensor: np.ndarray, entries: HelmertEntries) -> np.ndarray:
    """``H_Sᵀ`` (``"signed"``) or ``(H_S∘H_S)ᵀ`` (``"squared"``) on every axis but the first.

    ``tensor`` is ``(batch, n_1 − 1, …)``; the result ``(batch, n_1, …)``.
    """
    for axis in range(1, tensor.ndim):
        tensor = helmert_transpose(tensor, axis, entries)
    return tensor


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
        self._variance = float(noise_variance)
        self._sigma = math.sqrt(noise_variance)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._inverses: dict[tuple, np.ndarray] = {}
        self._row_norms: dict[tuple[int, ...], np.ndarray] = {}

    def measured(self, mask: int) -> bool:
        """Whether the residual on set ``mask`` was measured."""
        return mask in self._index

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

    def projections(
        self, masks: Sequence[int], sizes: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``D_Sᵀ ẑ_S`` and the variance of each of its cells, for sets of equal sizes.

        ``D_Sᵀ ẑ_S`` is the part of the S-marginal of ``x̂`` that the residual on S
        explains. Diagonal blocks are read straight from the values, a batch at a time,
        and nothing is cached; other blocks go through :meth:`coefficients`.

        Args:
            masks: measured sets whose attributes have the sizes ``sizes``.
            sizes: their attribute sizes, in ascending attribute order.

        Returns:
            ``(values, variances)``, shaped ``(len(masks), *sizes)``; the variances are
            ``(1, *sizes)`` when every set shares them (one diagonal block).

        Raises:
            UnsupportedQueryError: a set was not measured.
        """
        for mask in masks:
            if mask not in self._index:
                raise UnsupportedQueryError(f"The residual on set {mask} was not measured")
        if not masks:
            empty = np.zeros((0, *sizes))
            return empty, empty
        norms = self._row_norms.get(sizes)
        if norms is None:
            norms = self._row_norms[sizes] = helmert_row_norms(sizes).astype(np.float64)
        ranks = [n - 1 for n in sizes]
        blocks = [self.blocks.integers[mask] for mask in masks]
        if not all(Q.ndim == 1 for Q in blocks):
            parts = [self._projection(mask, np.sqrt(norms), ranks) for mask in masks]
            return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
        first = blocks[0]
        Q = first if all(block is first for block in blocks) else np.stack(blocks)
        scaled = Q * norms  # G_S √c = Q_S c
        starts = self.blocks.offsets[[self._index[mask] for mask in masks]]
        y = self.values[starts[:, None] + np.arange(norms.size)]
        values = _to_cells((y / scaled).reshape(len(masks), *ranks), "signed")
        # Independent coefficients of variance σ²/G_r²: Var = (H_S∘H_S)ᵀ (σ² / (G_S² c)),
        # found once when the sets share their block.
        seeds = self._variance / (scaled * scaled)
        return values, _to_cells(seeds.reshape(-1, *ranks), "squared")

    def _projection(
        self, mask: int, root: np.ndarray, ranks: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(D_Sᵀ ẑ_S, its cell variances)`` of one set, through :meth:`coefficients`."""
        z, factor = self.coefficients(mask)
        values = _to_cells((z / root).reshape(1, *ranks), "signed")[0]
        if factor.ndim == 1:  # independent coefficients
            seeds = (factor * factor / (root * root)).reshape(1, *ranks)
            return values, _to_cells(seeds, "squared")[0]
        # Cov(ẑ_S) = F Fᵀ: the cell variances are the squared rows of H_Sᵀ diag(1/√c) F.
        spread = _to_cells((factor / root[:, None]).T.reshape(-1, *ranks), "signed")
        return values, np.einsum("k...,k...->...", spread, spread)

    def term(self, weight: float, splits: Sequence[FactorSplit]) -> BlockAnswers:
        """Answers and variances of the term ``weight · ⊗_i W_i`` (given by its splits).

        Raises:
            UnsupportedQueryError: the term reads a set that was not measured.
        """
        rows = math.prod(len(split.a) for split in splits)
        values, variances = np.zeros(rows), np.zeros(rows)
        for mask in _read_sets(splits, self._index):
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
    sets, sizes = estimate.blocks.sets, DomainSizes(shape)
    stack = _ResidualStack(sizes, {mask: 1.0 / sizes.outside(mask) for mask in sets})
    z = np.concatenate([estimate.coefficients(mask)[0] for mask in sets])
    return stack.rmatmat(z[:, None])[:, 0]


def _read_sets(splits: Sequence[FactorSplit], measured: Iterable[int]) -> list[int]:
    """The residual sets a term reads (:func:`read_sets`), all of them measured.

    Raises:
        UnsupportedQueryError: the term reads a set that is not in ``measured``.
    """
    masks = read_sets(splits)
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
        _read_sets(splits, measured)


def block_noise_coefficients(
    blocks: HelmertBlocks, W: Matrix, work_limit: int
) -> Iterator[tuple[int, np.ndarray]] | None:
    """``(first query, rows)`` blocks of each answer's coefficients on the measured integer
    noise: ``W x̂ = Σ_S w V_S G_S⁺ y_S`` is linear in each set's noise ``e_S``, so query q's
    row is row q of ``w V_S G_S⁺`` over the sets S its term reads, side by side (the sets'
    noise is independent). Data-free, so the plan states the intervals the release
    publishes (:mod:`dpmm.pipeline.interval_stage`); None when the rows would take more
    than ``work_limit`` entries (rows × (rank + measured rows) of each set read).

    Raises:
        UnsupportedQueryError: W is not a union of Kron products over the domain, or
            reads an unmeasured residual set.
    """
    measured = set(blocks.sets)
    terms = [
        (weight, splits, _read_sets(splits, measured))
        for weight, splits in term_splits(W, blocks.domain_shape)
    ]
    work = sum(
        math.prod(len(split.a) for split in splits)
        * sum(sum(blocks.integers[mask].shape) for mask in masks)
        for _, splits, masks in terms
    )
    if work > work_limit:
        return None

    def rows() -> Iterator[tuple[int, np.ndarray]]:
        inverses: dict[tuple, np.ndarray] = {}  # symmetric domains repeat one block
        first = 0
        for weight, splits, masks in terms:
            parts = [np.zeros((math.prod(len(split.a) for split in splits), 0))]
            for mask in masks:
                pieces = [s.B if mask >> i & 1 else s.a[:, None] for i, s in enumerate(splits)]
                V = weight * np.atleast_2d(kron_rows(pieces))
                G = blocks.normalized(mask)
                if G.ndim == 1:  # diag(G)⁺: one noise draw per coordinate of ẑ_S
                    parts.append(V * _reciprocal(G))
                    continue
                key = (G.shape, blocks.integers[mask].tobytes())
                if key not in inverses:
                    inverses[key] = np.linalg.pinv(G)
                parts.append(V @ inverses[key])
            yield first, np.hstack(parts)
            first += parts[0].shape[0]

    return rows()


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


def iter_block_marginals(
    estimate: BlockEstimate, queries: Iterable[Sequence[int]]
) -> Iterator[BlockMarginal]:
    """Least-squares marginal tables and cell variances, a batch of equal-shaped tables at a time.

    Tables come grouped by shape (not in query order). Only the projections
    :meth:`BlockEstimate.projections` of sets strictly inside a query are kept; each
    query's own is computed with its batch, so memory stays near the largest batch plus
    the lower-order projections (all ≤3-way marginals of 100 attributes: the 2-way ones).

    Args:
        estimate: the measurement's estimate.
        queries: attribute sets (any order); duplicates are answered once.

    Raises:
        UnsupportedQueryError: a query is outside the domain or needs an unmeasured set.
    """
    shape = estimate.domain_shape
    wanted = list(dict.fromkeys(tuple(sorted({int(i) for i in q})) for q in queries))
    classes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for attrs in wanted:
        if not all(0 <= i < len(shape) for i in attrs):
            raise UnsupportedQueryError(f"The marginal on {list(attrs)} is outside the domain")
        classes.setdefault(tuple(shape[i] for i in attrs), []).append(attrs)
    # Equal sizes give every query of a class the same subsets (by position) and scales.
    subsets = {sizes: _subset_positions(sizes) for sizes in classes}
    masks: dict[tuple[int, ...], list[int]] = {}
    for sizes, members in classes.items():
        for attrs in members:
            masks[attrs] = _subset_masks(estimate, attrs, subsets[sizes])
    inner = {m for attrs, own in masks.items() for m in own if m != members_mask(attrs)}
    kept = _Projections(estimate)
    kept.fill(sorted(inner))
    for sizes, members in classes.items():
        scales = _scales(sizes, subsets[sizes])
        step = max(1, BATCH_CELLS // math.prod(sizes))
        for start in range(0, len(members), step):
            batch = members[start : start + step]
            values = np.zeros((len(batch), *sizes))
            # One table of variances while every part's is shared by the batch (sets
            # sharing a block, as in a closed-form residual strategy): half the work.
            variances = np.zeros((1, *sizes))
            for j, (positions, scale) in enumerate(zip(subsets[sizes], scales, strict=True)):
                part, spread = kept.stacked(
                    [masks[attrs][j] for attrs in batch], tuple(sizes[p] for p in positions)
                )
                broadcast = [n if p in positions else 1 for p, n in enumerate(sizes)]
                values += part.reshape(len(batch), *broadcast) * scale
                spread = spread.reshape(len(spread), *broadcast) * (scale * scale)
                if len(spread) > len(variances):
                    variances = variances + spread
                else:
                    variances += spread
            shared = np.broadcast_to(variances, values.shape)
            for attrs, table, cells in zip(batch, values, shared, strict=True):
                yield BlockMarginal(attrs, table, cells)


def block_marginals(
    estimate: BlockEstimate, queries: Iterable[Sequence[int]]
) -> dict[tuple[int, ...], BlockMarginal]:
    """``{sorted attrs: BlockMarginal}``: least-squares marginal tables and cell variances.

    All the tables at once (see :func:`iter_block_marginals`, which streams them).

    Raises:
        UnsupportedQueryError: a query is outside the domain or needs an unmeasured set.
    """
    return {item.attrs: item for item in iter_block_marginals(estimate, queries)}


def _subset_positions(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Positions of the subsets S of a table's attributes with a residual (all n_i > 1)."""
    return [
        positions
        for size in range(len(sizes) + 1)
        for positions in itertools.combinations(range(len(sizes)), size)
        if all(sizes[p] > 1 for p in positions)  # else R_S has no rows: nothing to add
    ]


def _subset_masks(
    estimate: BlockEstimate, attrs: tuple[int, ...], subsets: list[tuple[int, ...]]
) -> list[int]:
    """The masks of a query's subsets (in the order of ``subsets``), checked to be measured.

    Raises:
        UnsupportedQueryError: a subset was not measured.
    """
    bits = [1 << i for i in attrs]
    masks = [sum(bits[p] for p in positions) for positions in subsets]
    for mask, positions in zip(masks, subsets, strict=True):
        if not estimate.measured(mask):
            raise UnsupportedQueryError(
                f"The marginal on attributes {list(attrs)} needs the residual on "
                f"{[attrs[p] for p in positions]}, which was not measured"
            )
    return masks


def _scales(sizes: Sequence[int], subsets: list[tuple[int, ...]]) -> list[float]:
    """``1 / Π_{i∈a∖S} n_i`` for each subset (by positions) of a table of these sizes."""
    total = math.prod(sizes)
    return [math.prod(sizes[p] for p in positions) / total for positions in subsets]


class _Projections:
    """Projections of the sets inside queries, kept while the queries are answered."""

    def __init__(self, estimate: BlockEstimate) -> None:
        self.estimate = estimate
        self.kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def fill(self, masks: Iterable[int]) -> None:
        """Compute and keep the projections of ``masks`` (grouped by shape, in batches)."""
        shape = self.estimate.domain_shape
        groups: dict[tuple[int, ...], list[int]] = {}
        for mask in masks:
            groups.setdefault(tuple(shape[i] for i in mask_members(mask)), []).append(mask)
        for sizes, group in groups.items():
            step = max(1, BATCH_CELLS // math.prod(sizes))
            for start in range(0, len(group), step):
                batch = group[start : start + step]
                values, variances = self.estimate.projections(batch, sizes)
                shared = variances[0] if len(variances) == 1 else None
                for t, mask in enumerate(batch):
                    self.kept[mask] = (values[t], variances[t] if shared is None else shared)

    def stacked(
        self, masks: Sequence[int], sizes: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The projections of ``masks`` as :meth:`BlockEstimate.projections` gives them:
        the kept ones, else computed now (and not kept)."""
        if not all(mask in self.kept for mask in masks):
            return self.estimate.projections(masks, sizes)
        values = np.stack([self.kept[mask][0] for mask in masks])
        first = self.kept[masks[0]][1]
        if all(self.kept[mask][1] is first for mask in masks):
            return values, first[None]
        return values, np.stack([self.kept[mask][1] for mask in masks])
