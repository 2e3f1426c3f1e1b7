"""Residual measurements: the orthogonal basis of the marginal algebra, as a strategy.

Over a domain with attribute sizes ``n_1 … n_d``, the residual on a set of
attributes ``S`` is ``R_S = ⊗_{i∈S} D_i ⊗_{i∉S} 1ᵀ``, where ``D_i`` is the
``(n_i − 1) × n_i`` Helmert matrix: orthonormal rows spanning ``1^⊥``, so
``D_iᵀD_i = Q_i = I − J/n_i`` and ``D_i D_iᵀ = I``. Hence

* ``R_SᵀR_S = (Π_{i∉S} n_i) E_S``, with ``E_S`` the projections of the marginal
  algebra (see :mod:`dpmm.linalg.marginals`): a stack ``A = [w_S R_S]`` has
  ``AᵀA = Σ_S w_S² (Π_{i∉S} n_i) E_S``, diagonal in the algebra's eigenbasis;
* ``R_S R_Tᵀ = 0`` for ``S ≠ T`` and ``R_S R_Sᵀ = (Π_{i∉S} n_i) I``: the rows of A
  are orthogonal, so ``A⁺ = Aᵀ (AAᵀ)⁻¹`` is again a (transposed) residual stack;
* every column of ``R_S`` has squared L2 norm ``Π_{i∈S} (1 − 1/n_i)``, so the
  L2 sensitivity of A is ``√(Σ_S w_S² Π_{i∈S}(1 − 1/n_i))``, for every cell.

All of these cost O(|support| · 2^k) for k-way sets, never O(cells); only the
mat-vecs touch the domain. A Helmert factor is applied in O(n) by cumulative
sums: row k (1 ≤ k < n) is ``(x_0 + … + x_{k−1} − k x_k) / √(k(k+1))``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpmm.domain import Domain
from dpmm.errors import ArgumentError, DomainError, TooLargeError
from dpmm.linalg.base import Matrix, _check_norm, check_dense_size
from dpmm.linalg.marginals import (
    EIGEN_TOLERANCE,
    MarginalsGram,
    _shape_of,
    _submasks,
    mask_members,
)

__all__ = ["ResidualStrategy", "helmert"]


def helmert(n: int) -> np.ndarray:
    """The dense ``(n − 1) × n`` Helmert matrix (orthonormal rows orthogonal to ``1``).

    Example:
        >>> D = helmert(3)
        >>> np.allclose(D @ D.T, np.eye(2)), np.allclose(D.sum(axis=1), 0)
        (True, True)
    """
    return _helmert_apply(np.eye(n), axis=0)


def _helmert_apply(tensor: np.ndarray, axis: int) -> np.ndarray:
    """``D`` along ``axis`` (length n → n − 1), by a cumulative sum: O(size)."""
    moved = np.moveaxis(tensor, axis, -1)
    n = moved.shape[-1]
    k = np.arange(1, n, dtype=np.float64)
    partial = np.cumsum(moved, axis=-1)[..., :-1]
    result = (partial - k * moved[..., 1:]) / np.sqrt(k * (k + 1))
    return np.moveaxis(result, -1, axis)


def _helmert_adjoint(tensor: np.ndarray, axis: int) -> np.ndarray:
    """``Dᵀ`` along ``axis`` (length n − 1 → n): entry j is ``Σ_{k>j} z_k − j z_j``."""
    moved = np.moveaxis(tensor, axis, -1)
    n = moved.shape[-1] + 1
    k = np.arange(1, n, dtype=np.float64)
    scaled = np.zeros((*moved.shape[:-1], n))
    scaled[..., 1:] = moved / np.sqrt(k * (k + 1))
    after = np.cumsum(scaled[..., ::-1], axis=-1)[..., ::-1] - scaled
    result = after - np.arange(n, dtype=np.float64) * scaled
    return np.moveaxis(result, -1, axis)


class DomainSizes:
    """Products of attribute sizes over a set's members, exact and memoized.

    Each distinct set costs O(1) once its set minus one member is known, so a sweep
    over the submasks of a workload never pays O(d) per set.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)
        self.cells = math.prod(self.shape)
        self.full = (1 << len(self.shape)) - 1
        self._inside: dict[int, int] = {0: 1}
        self._multiplicity: dict[int, int] = {0: 1}
        self._column_norm: dict[int, float] = {}

    def _memo(self, store: dict[int, int], mask: int, offset: int) -> int:
        value = store.get(mask)
        if value is None:
            low = mask & -mask
            value = self._memo(store, mask ^ low, offset) * (
                self.shape[low.bit_length() - 1] - offset
            )
            store[mask] = value
        return value

    def inside(self, mask: int) -> int:
        """``Π_{i∈mask} n_i``."""
        return self._memo(self._inside, mask, 0)

    def outside(self, mask: int) -> int:
        """``Π_{i∉mask} n_i``."""
        return self.cells // self.inside(mask)

    def multiplicity(self, mask: int) -> int:
        """``Π_{i∈mask} (n_i − 1)``: the rank of ``E_mask`` and the rows of ``R_mask``."""
        return self._memo(self._multiplicity, mask, 1)

    def column_norm_squared(self, mask: int) -> float:
        """``Π_{i∈mask} (1 − 1/n_i)``: every column's squared L2 norm in ``R_mask``."""
        value = self._column_norm.get(mask)
        if value is None:
            value = self._column_norm[mask] = self.multiplicity(mask) / self.inside(mask)
        return value


class ResidualGram(MarginalsGram):
    """``Σ_b λ_b E_b`` built from its eigenvalues, which it keeps (no O(d) work per set)."""

    def __init__(
        self,
        shape: Sequence[int],
        eigenvalues: Mapping[int, float],
        sizes: DomainSizes | None = None,
    ) -> None:
        """``sizes`` shares the memoized size products of an equal domain shape."""
        domain_shape = _shape_of(shape)
        if sizes is None or sizes.shape != domain_shape:
            sizes = DomainSizes(domain_shape)
        values = {b: float(v) for b, v in eigenvalues.items() if sizes.multiplicity(b)}
        scale = max((abs(v) for v in values.values()), default=0.0)
        self._eigen = {b: v for b, v in values.items() if abs(v) > EIGEN_TOLERANCE * scale}
        self._sizes = sizes
        # Möbius inversion E_b = Σ_{a⊆b} (−1)^{|b∖a|} C(a) / Π_{i∉a} n_i, with the sign
        # split as (−1)^{|b|} (−1)^{|a|} so the inner loop only adds.
        signed: dict[int, float] = {}
        for b, value in self._eigen.items():
            term = -value if b.bit_count() % 2 else value
            for a in _submasks(b):
                signed[a] = signed.get(a, 0.0) + term
        coefficients = {
            a: (-total if a.bit_count() % 2 else total) / sizes.outside(a)
            for a, total in signed.items()
        }
        super().__init__(domain_shape, coefficients)

    def _outside(self, mask: int) -> int:
        return self._sizes.outside(mask)

    def multiplicity(self, mask: int) -> int:
        return self._sizes.multiplicity(mask)

    def eigenvalues(self) -> dict[int, float]:
        return dict(self._eigen)

    def pinv(self) -> ResidualGram:
        inverse = {b: 1.0 / v for b, v in self._eigen.items()}
        return ResidualGram(self.domain_shape, inverse, self._sizes)


class ResidualStrategy(Matrix):
    """The stack of weighted residuals ``[w_S R_S]``, in the order of ``weights``.

    Rows of ``R_S`` run over the Helmert indices of the attributes in ``S``
    (ascending attribute order, C order); ``R_∅`` is the total.

    Args:
        shape: the domain (or its attribute sizes).
        weights: ``{attribute mask: w_S}`` (bit i is attribute i).

    Example:
        >>> A = ResidualStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: 1.0, 0b11: 1.0})
        >>> A.shape, round(A.sensitivity(2) ** 2, 12)   # 1 + 1/2 + 2/3 + 1/3
        ((6, 6), 2.5)
        >>> A.known_full_column_rank, np.allclose(A.pinv() @ (A @ np.arange(6.0)), np.arange(6.0))
        (True, True)
    """

    def __init__(self, shape: Domain | Sequence[int], weights: Mapping[int, float]) -> None:
        self.domain_shape = _shape_of(shape)
        self._sizes = DomainSizes(self.domain_shape)
        self.weights: dict[int, float] = {}
        for mask, weight in weights.items():
            if not isinstance(mask, int | np.integer) or mask < 0 or mask & ~self._sizes.full:
                raise DomainError(
                    f"Residual attribute set {mask!r} is not a bit mask over "
                    f"{len(self.domain_shape)} attributes"
                )
            if not np.isfinite(weight):
                raise ArgumentError(
                    f"Residual weight for set {mask} must be finite, got {weight!r}"
                )
            self.weights[int(mask)] = float(weight)
        self.block_rows = [self._sizes.multiplicity(mask) for mask in self.weights]
        self.offsets = list(itertools.accumulate(self.block_rows, initial=0))
        super().__init__((sum(self.block_rows), self._sizes.cells))

    # O(|weights| · cells · k): sum out the other attributes, then one Helmert per member.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        columns = X.shape[1]
        tensor = X.reshape([*self.domain_shape, columns])
        dims = len(self.domain_shape)
        blocks = []
        for (mask, weight), rows in zip(self.weights.items(), self.block_rows, strict=True):
            members = mask_members(mask)
            others = tuple(i for i in range(dims) if i not in members)
            table = tensor.sum(axis=others)
            for position in range(len(members)):
                table = _helmert_apply(table, position)
            blocks.append(weight * table.reshape(rows, columns))  # -1: ambiguous if no columns
        if not blocks:
            return np.zeros((0, columns))
        return np.concatenate(blocks, axis=0)

    # Helmert adjoints per member, then broadcast over the attributes outside S.
    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        columns = Y.shape[1]
        dims = len(self.domain_shape)
        result = np.zeros([*self.domain_shape, columns])
        for (mask, weight), start, stop in zip(
            self.weights.items(), self.offsets[:-1], self.offsets[1:], strict=True
        ):
            members = mask_members(mask)
            table = Y[start:stop].reshape([self.domain_shape[i] - 1 for i in members] + [columns])
            for position in range(len(members)):
                table = _helmert_adjoint(table, position)
            full = [self.domain_shape[i] if i in members else 1 for i in range(dims)]
            result += weight * table.reshape([*full, columns])
        return result.reshape(self.shape[1], columns)  # -1: ambiguous if no columns

    @property
    def known_full_column_rank(self) -> bool:
        # Full rank iff every non-zero projection E_b (b over the attributes of size > 1)
        # gets a non-zero weight; only possible for few attributes.
        nontrivial = sum(1 for n in self.domain_shape if n > 1)
        if nontrivial > 30:
            return False
        covered = {m for m, w in self.weights.items() if w and self._sizes.multiplicity(m)}
        return len(covered) == 1 << nontrivial

    def eigenvalues(self) -> dict[int, float]:
        """``{S: w_S² Π_{i∉S} n_i}``: the eigenvalues of ``AᵀA`` on the projections E_S."""
        values: dict[int, float] = {}
        for mask, weight in self.weights.items():
            if weight and self._sizes.multiplicity(mask):
                values[mask] = values.get(mask, 0.0) + weight**2 * self._sizes.outside(mask)
        return values

    def gram(self) -> ResidualGram:
        return ResidualGram(self.domain_shape, self.eigenvalues(), self._sizes)

    def gram_pinv(self) -> ResidualGram:
        return self.gram().pinv()

    def pinv(self) -> Matrix:
        # Rows are orthogonal with A Aᵀ = diag(w_S² Π_{i∉S} n_i): A⁺ = Aᵀ (A Aᵀ)⁻¹.
        inverse = {
            mask: (1.0 / (weight * self._sizes.outside(mask)) if weight else 0.0)
            for mask, weight in self.weights.items()
        }
        return ResidualStrategy(self.domain_shape, inverse).T

    def _squared_column_norm(self) -> float:
        # fsum: a sensitivity of exactly 1 must not drift with the number of residuals.
        return math.fsum(
            w * w * self._sizes.column_norm_squared(m) for m, w in self.weights.items()
        )

    def uniform_column_norm(self, p: float = 1) -> float | None:
        # Helmert columns have equal L2 norms, but not equal L1 or ∞ norms.
        if _check_norm(p) == 2:
            return math.sqrt(self._squared_column_norm())
        return None

    def sensitivity(self, p: float = 1) -> float:
        if _check_norm(p) == 2:
            return math.sqrt(self._squared_column_norm())
        if self._sizes.cells > 50_000_000:
            raise TooLargeError(
                f"The L{p:g} sensitivity of {self!r} varies over its {self._sizes.cells:.3g} "
                "cells; only the L2 sensitivity is computed without visiting every cell"
            )
        return float(self.column_norms(p).max())

    def column_norms(self, p: float = 1) -> np.ndarray:
        p = _check_norm(p)
        check_dense_size(1, self.shape[1], f"the column norms of {self!r}")
        if p == 2:
            return np.full(self.shape[1], math.sqrt(self._squared_column_norm()))
        # A Kron's column norms are the Kron of its factors' (entries are products).
        dims = len(self.domain_shape)
        total = np.zeros(self.domain_shape)
        for mask, weight in self.weights.items():
            if not self._sizes.multiplicity(mask):
                continue
            norms = np.ones([1] * dims)
            for i in mask_members(mask):
                factor = helmert(self.domain_shape[i])
                per_column = np.abs(factor).sum(0) if p == 1 else np.abs(factor).max(0)
                norms = norms * per_column.reshape([-1 if j == i else 1 for j in range(dims)])
            contribution = abs(weight) * norms
            total = total + contribution if p == 1 else np.maximum(total, contribution)
        return total.reshape(-1)

    def marginal_variance(self, mask: int) -> float:
        """Variance of one cell of marginal ``mask`` under unit noise and least squares.

        Every cell has ``Σ_{S⊆mask} Π_{i∈S}(1 − 1/n_i) / (Π_{i∈mask∖S} n_i² · w_S²)``;
        infinite if a needed residual has weight zero. O(2^|mask|), independent of the domain.
        """
        total = 0.0
        for subset in _submasks(mask):
            if not self._sizes.multiplicity(subset):
                continue
            weight = self.weights.get(subset, 0.0)
            if not weight:
                return math.inf
            ratio = self._sizes.inside(mask) // self._sizes.inside(subset)
            total += self._sizes.column_norm_squared(subset) / (ratio**2 * weight**2)
        return total

    def __repr__(self) -> str:
        return f"ResidualStrategy({len(self.weights)} residuals over {self.domain_shape})"
