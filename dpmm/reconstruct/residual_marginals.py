"""Least-squares marginal tables from residual measurements, without the data vector.

A residual measurement (:mod:`dpmm.measure.residual_tables`) holds, for each set S,
``y_S = R_S x + noise`` with ``R_S = D_S ⊗_{i∉S} 1ᵀ`` (``D_S = ⊗_{i∈S} D_i``, Helmert).
The rows of different sets are orthogonal and ``R_S R_Sᵀ = (Π_{i∉S} n_i) I``, so each
normalized row estimates its own coordinate and least squares (ordinary or weighted: the
same here) is ``x̂ = Σ_S R_Sᵀ y_S / Π_{i∉S} n_i``. For a marginal ``M_a`` and one
attribute i, ``M_a R_Sᵀ`` has the factor ``D_iᵀ`` (i ∈ S ∩ a), ``1ᵀD_iᵀ = 0`` (i ∈ S∖a),
``1`` (i ∈ a∖S) or ``n_i`` (i ∉ a ∪ S). Hence only S ⊆ a contribute and

    ``M_a x̂ = Σ_{S⊆a} (D_Sᵀ y_S) broadcast over a∖S / Π_{i∈a∖S} n_i``,

the empty set giving ``total / Π_{i∈a} n_i``: ``D_Sᵀ y_S`` is the projection ``E_S`` of
the a-table, ``⊗_{i∈S} D_iᵀ D_i ⊗_{i∈a∖S} J/n_i``. With the measured integer rows
``v = H_S m_S + noise`` and ``D_S = diag(1/√c) H_S``, ``D_Sᵀ y_S = H_Sᵀ (v / c)``: no square
roots. Every cell of ``M_a x̂`` has the variance

    ``Σ_{S⊆a} σ_S² Π_{i∈S}(1 − 1/n_i) / (Π_{i∈a∖S} n_i)²``,

as every column of ``D_S`` has squared norm ``Π_{i∈S}(1 − 1/n_i)``. The cost is
O(2^|a| · table size) per marginal, in batches of equal-shaped tables.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg.marginals import mask_members
from dpmm.measure.residual_tables import ResidualMeasurement, helmert_norms

__all__ = [
    "ResidualMarginal",
    "iter_residual_marginals",
    "marginal_variance",
    "residual_marginals",
]

#: Cells per batch of equal-shaped tables (bounds the temporaries).
BATCH_CELLS = 1 << 23


@dataclass(frozen=True, eq=False)
class ResidualMarginal:
    """A least-squares marginal table and the variance of each of its cells.

    Attributes:
        attrs: sorted attribute positions.
        values: the table, shaped ``[n_i for i in attrs]`` (float64; may be negative).
        variance: the variance of every cell (exact under the nominal σ_S²).
    """

    attrs: tuple[int, ...]
    values: np.ndarray
    variance: float


def _mask(attrs: Iterable[int]) -> int:
    return sum(1 << i for i in attrs)


def _helmert_adjoint(table: np.ndarray, axis: int) -> np.ndarray:
    """``Hᵀ`` along ``axis`` (n − 1 → n): entry j is ``Σ_{k>j} u_k − j u_j`` (u_0 = 0)."""
    moved = np.moveaxis(table, axis, -1)
    padded = np.concatenate([np.zeros((*moved.shape[:-1], 1)), moved], axis=-1)
    suffix = np.cumsum(padded[..., ::-1], axis=-1)[..., ::-1]
    result = suffix - np.arange(1, padded.shape[-1] + 1) * padded
    return np.moveaxis(result, -1, axis)


class _Projections:
    """``D_Sᵀ y_S`` of measured sets, computed a batch of equal-shaped sets at a time."""

    def __init__(self, measurement: ResidualMeasurement) -> None:
        self.m = measurement
        self.index = {mask: t for t, mask in enumerate(measurement.sets)}
        self.cache: dict[int, np.ndarray] = {}
        self._norms: dict[tuple[int, ...], np.ndarray] = {}

    def rows(self, sizes: Sequence[int]) -> int:
        return math.prod(n - 1 for n in sizes)

    def compute(self, masks: Sequence[int], sizes: tuple[int, ...]) -> np.ndarray:
        """``(len(masks), *sizes)``: the projections of sets sharing the attribute sizes."""
        if sizes not in self._norms:
            norms = np.ones(1)
            for n in sizes:
                norms = np.multiply.outer(norms, helmert_norms(n)).reshape(-1)
            self._norms[sizes] = norms
        starts = self.m.offsets[[self.index[mask] for mask in masks]]
        rows = self.rows(sizes)
        block = self.m.values[starts[:, None] + np.arange(rows)] / self._norms[sizes]
        block = block.reshape(len(masks), *[n - 1 for n in sizes])
        for axis in range(1, block.ndim):
            block = _helmert_adjoint(block, axis)
        return block

    def fill(self, masks: Iterable[int]) -> None:
        """Compute and keep the projections of ``masks`` (grouped by shape, in batches)."""
        shape = self.m.domain_shape
        groups: dict[tuple[int, ...], list[int]] = {}
        for mask in masks:
            groups.setdefault(tuple(shape[i] for i in mask_members(mask)), []).append(mask)
        for sizes, group in groups.items():
            step = max(1, BATCH_CELLS // max(1, math.prod(sizes)))
            for start in range(0, len(group), step):
                batch = group[start : start + step]
                for mask, table in zip(batch, self.compute(batch, sizes), strict=True):
                    self.cache[mask] = table

    def stacked(self, masks: Sequence[int], sizes: tuple[int, ...]) -> np.ndarray:
        if all(mask in self.cache for mask in masks):
            return np.stack([self.cache[mask] for mask in masks])
        return self.compute(masks, sizes)


def _subset_positions(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Positions of the subsets S of a table's attributes with rows (all n_i > 1), in order."""
    return [
        positions
        for size in range(len(sizes) + 1)
        for positions in itertools.combinations(range(len(sizes)), size)
        if all(sizes[p] > 1 for p in positions)  # else E_S = 0: nothing measured or added
    ]


def _subset_masks(
    index: dict[int, int], attrs: tuple[int, ...], subsets: list[tuple[int, ...]]
) -> list[int]:
    """The masks of a query's subsets (in the order of ``subsets``), checked to be measured."""
    bits = [1 << i for i in attrs]
    masks = [sum(bits[p] for p in positions) for positions in subsets]
    for mask, positions in zip(masks, subsets, strict=True):
        if mask not in index:
            raise UnsupportedQueryError(
                f"The marginal on attributes {list(attrs)} needs the residual on "
                f"{[attrs[p] for p in positions]}, which was not measured"
            )
    return masks


def _unit_variances(measurement: ResidualMeasurement) -> dict[int, float]:
    """``{S: σ_S² Π_{i∈S}(1 − 1/n_i)}``: each set's contribution before the 1/rest² factor."""
    shape = measurement.domain_shape
    unit = {}
    for mask, s2 in measurement.sigma2.items():
        members = mask_members(mask)
        p = math.prod(shape[i] - 1 for i in members) / math.prod(shape[i] for i in members)
        unit[mask] = float(s2) * p
    return unit


def _scales(sizes: Sequence[int], subsets: list[tuple[int, ...]]) -> list[float]:
    """``1 / Π_{i∈a∖S} n_i`` for each subset (by positions) of a table of these sizes."""
    total = math.prod(sizes)
    return [math.prod(sizes[p] for p in positions) / total for positions in subsets]


def marginal_variance(measurement: ResidualMeasurement, attrs: Sequence[int]) -> float:
    """The variance of every cell of the least-squares marginal on ``attrs``.

    ``Σ_{S⊆a} σ_S² Π_{i∈S}(1 − 1/n_i) / (Π_{i∈a∖S} n_i)²``; O(2^|a|).

    Raises:
        UnsupportedQueryError: a needed residual was not measured.
    """
    attrs_sorted = tuple(sorted({int(i) for i in attrs}))
    sizes = [measurement.domain_shape[i] for i in attrs_sorted]
    subsets = _subset_positions(sizes)
    index = {mask: t for t, mask in enumerate(measurement.sets)}
    masks = _subset_masks(index, attrs_sorted, subsets)
    unit = _unit_variances(measurement)
    return math.fsum(
        unit[m] * scale * scale for m, scale in zip(masks, _scales(sizes, subsets), strict=True)
    )


def iter_residual_marginals(
    measurement: ResidualMeasurement, queries: Iterable[Sequence[int]]
) -> Iterator[ResidualMarginal]:
    """Least-squares marginal tables, yielded a batch of equal-shaped tables at a time.

    Only the projections of sets strictly inside a query are kept; each query's own one is
    computed with its batch, so memory stays near the largest batch plus the lower-order
    projections (at 100 attributes and all ≤3-way tables: ~5 MB of 2-way ones).

    Args:
        measurement: the residual measurement.
        queries: attribute sets (any order); duplicates are answered once.

    Raises:
        UnsupportedQueryError: a query needs a residual that was not measured.
    """
    shape = measurement.domain_shape
    projections = _Projections(measurement)
    wanted = list(dict.fromkeys(tuple(sorted({int(i) for i in q})) for q in queries))
    for attrs in wanted:
        if not all(0 <= i < len(shape) for i in attrs):
            raise UnsupportedQueryError(f"The marginal on {list(attrs)} is outside the domain")
    classes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for attrs in wanted:
        classes.setdefault(tuple(shape[i] for i in attrs), []).append(attrs)
    # Equal sizes give every query of a class the same subset positions and scales.
    subsets = {sizes: _subset_positions(sizes) for sizes in classes}
    masks: dict[tuple[int, ...], list[int]] = {}
    inner: set[int] = set()
    for sizes, members in classes.items():
        for attrs in members:
            masks[attrs] = _subset_masks(projections.index, attrs, subsets[sizes])
            own = _mask(attrs)
            inner.update(mask for mask in masks[attrs] if mask != own)
    projections.fill(sorted(inner))
    unit = _unit_variances(measurement)
    for sizes, members in classes.items():
        scales = _scales(sizes, subsets[sizes])
        squares = [scale * scale for scale in scales]
        step = max(1, BATCH_CELLS // max(1, math.prod(sizes)))
        for start in range(0, len(members), step):
            batch = members[start : start + step]
            tables = np.zeros((len(batch), *sizes))
            for j, (positions, scale) in enumerate(zip(subsets[sizes], scales, strict=True)):
                kept = tuple(sizes[p] for p in positions)
                part = projections.stacked([masks[attrs][j] for attrs in batch], kept)
                broadcast = [n if p in positions else 1 for p, n in enumerate(sizes)]
                tables += part.reshape(len(batch), *broadcast) * scale
            for attrs, table in zip(batch, tables, strict=True):
                variance = sum(unit[m] * q for m, q in zip(masks[attrs], squares, strict=True))
                yield ResidualMarginal(attrs, table, variance)


def residual_marginals(
    measurement: ResidualMeasurement, queries: Iterable[Sequence[int]]
) -> dict[tuple[int, ...], ResidualMarginal]:
    """``{sorted attrs: ResidualMarginal}`` for every query (see :func:`iter_residual_marginals`).

    Example:
        >>> from dpmm.linalg.residuals import ResidualStrategy
        >>> from dpmm.measure.residual_tables import measure_residuals
        >>> from dpmm.privacy import ZCDP
        >>> A = ResidualStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: 1.0, 0b11: 1.0})
        >>> x = np.array([4, 0, 1, 2, 2, 3])
        >>> y = measure_residuals(A, x, ZCDP(10**6))
        >>> np.round(residual_marginals(y, [(0,)])[(0,)].values).tolist()
        [5.0, 7.0]
    """
    return {item.attrs: item for item in iter_residual_marginals(measurement, queries)}
