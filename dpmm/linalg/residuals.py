"""The residual basis of the marginal algebra: Helmert factors, size products, Grams.

Over a domain with attribute sizes ``n_1 … n_d``, the residual on a set of
attributes ``S`` is ``R_S = ⊗_{i∈S} D_i ⊗_{i∉S} 1ᵀ``, where ``D_i`` is the
``(n_i − 1) × n_i`` Helmert matrix: orthonormal rows spanning ``1^⊥``, so
``D_iᵀD_i = Q_i = I − J/n_i`` and ``D_i D_iᵀ = I``. Hence

* ``R_SᵀR_S = (Π_{i∉S} n_i) E_S``, with ``E_S`` the projections of the marginal
  algebra (see :mod:`dpmm.linalg.marginals`): a stack ``A = [w_S R_S]`` has
  ``AᵀA = Σ_S w_S² (Π_{i∉S} n_i) E_S``, diagonal in the algebra's eigenbasis
  (:class:`ResidualGram`);
* ``R_S R_Tᵀ = 0`` for ``S ≠ T`` and ``R_S R_Sᵀ = (Π_{i∉S} n_i) I``: the rows of A
  are orthogonal, so ``A⁺ = Aᵀ (AAᵀ)⁻¹`` is again a (transposed) residual stack;
* every column of ``R_S`` has squared L2 norm ``Π_{i∈S} (1 − 1/n_i)``, so the
  L2 sensitivity of A is ``√(Σ_S w_S² Π_{i∈S}(1 − 1/n_i))``, for every cell.

All of these cost O(|support| · 2^k) for k-way sets, never O(cells); only the
mat-vecs touch the domain. A Helmert factor is applied in O(n) by cumulative
sums: row k (1 ≤ k < n) is ``(x_0 + … + x_{k−1} − k x_k) / √(k(k+1))``. The
strategies built on residuals (a weighted stack is one of scalar blocks) are
:class:`~dpmm.linalg.residual_general.ResidualBlockStrategy`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

import numpy as np

from dpmm.linalg.marginals import (
    DomainSizes,
    MarginalsGram,
    _nonzero_eigenvalues,
    _shape_of,
    _submasks,
    mask_members,
)

__all__ = ["HelmertEntries", "helmert", "helmert_norms", "helmert_transpose", "integer_helmert"]


def helmert(n: int) -> np.ndarray:
    """The dense ``(n − 1) × n`` Helmert matrix (orthonormal rows orthogonal to ``1``).

    Example:
        >>> D = helmert(3)
        >>> np.allclose(D @ D.T, np.eye(2)), np.allclose(D.sum(axis=1), 0)
        (True, True)
    """
    return _helmert_apply(np.eye(n), axis=0)


def helmert_norms(n: int) -> np.ndarray:
    """``k(k+1)`` for k = 1 … n − 1: the squared norms of the integer Helmert rows.

    Example:
        >>> helmert_norms(4).tolist()
        [2, 6, 12]
    """
    k = np.arange(1, n, dtype=np.int64)
    return k * (k + 1)


def integer_helmert(table: np.ndarray, axis: int) -> np.ndarray:
    """``H`` along ``axis`` (length n → n − 1): row k is ``x_0 + … + x_{k−1} − k x_k``.

    Example:
        >>> integer_helmert(np.array([3, 1, 2]), 0).tolist()
        [2, 0]
    """
    moved = np.moveaxis(table, axis, -1)
    k = np.arange(1, moved.shape[-1], dtype=moved.dtype)
    result = np.cumsum(moved, axis=-1)[..., :-1] - k * moved[..., 1:]
    return np.moveaxis(result, -1, axis)


#: Which matrix :func:`helmert_transpose` transposes: H, |H| or H∘H.
HelmertEntries = Literal["signed", "absolute", "squared"]
#: The entry of column j in row j of each of them.
_DIAGONAL = {
    "signed": lambda j: -j,
    "absolute": lambda j: j,
    "squared": lambda j: j * j,
}


def helmert_transpose(
    table: np.ndarray, axis: int, entries: HelmertEntries = "signed"
) -> np.ndarray:
    """``Hᵀ`` along ``axis`` (length n − 1 → n), or the transpose of ``|H|`` or ``H∘H``.

    Column j of the integer Helmert rows holds 1 in every row k > j and −j in row j (rows
    k = 1 … n − 1), so entry j is ``Σ_{k>j} u_k − j u_j`` (``+ j u_j`` for ``|H|``,
    ``+ j² u_j`` for ``H∘H``; ``u_0 = 0``): one cumulative sum, in the table's own dtype
    (int64 and Python integers stay exact).

    Args:
        table: an array whose ``axis`` has length n − 1.
        axis: the attribute's axis.
        entries: ``"signed"`` (H), ``"absolute"`` (|H|) or ``"squared"`` (H∘H).

    Example:
        >>> helmert_transpose(np.array([1, 1]), 0).tolist()      # (1, −1, 0) + (1, 1, −2)
        [2, 0, -2]
        >>> helmert_transpose(np.array([1, 1]), 0, "squared").tolist()
        [2, 2, 4]
    """
    moved = np.moveaxis(table, axis, -1)
    padded = np.concatenate([np.zeros_like(moved, shape=(*moved.shape[:-1], 1)), moved], axis=-1)
    after = np.cumsum(padded[..., ::-1], axis=-1)[..., ::-1] - padded  # Σ_{k>j} u_k
    diagonal = _DIAGONAL[entries](np.arange(padded.shape[-1], dtype=np.int64))
    return np.moveaxis(after + diagonal * padded, -1, axis)


def _helmert_apply(tensor: np.ndarray, axis: int) -> np.ndarray:
    """``D`` along ``axis`` (length n → n − 1): the integer rows, each divided by its norm."""
    rows = np.moveaxis(integer_helmert(tensor, axis), axis, -1)
    return np.moveaxis(rows / np.sqrt(helmert_norms(rows.shape[-1] + 1)), -1, axis)


def _helmert_adjoint(tensor: np.ndarray, axis: int) -> np.ndarray:
    """``Dᵀ`` along ``axis`` (length n − 1 → n): each row divided by its norm, then ``Hᵀ``."""
    moved = np.moveaxis(tensor, axis, -1)
    scaled = moved / np.sqrt(helmert_norms(moved.shape[-1] + 1))
    return helmert_transpose(np.moveaxis(scaled, -1, axis), axis)


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
        values = {b: float(v) for b, v in eigenvalues.items()}
        self._eigen = _nonzero_eigenvalues(values, sizes)
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
        self._sizes = sizes  # the caller's memoized products, shared

    def eigenvalues(self) -> dict[int, float]:
        return dict(self._eigen)

    def pinv(self) -> ResidualGram:
        inverse = {b: 1.0 / v for b, v in self._eigen.items()}
        return ResidualGram(self.domain_shape, inverse, self._sizes)


class _ResidualStack:
    """The stack ``[w_S R_S]`` in the order of ``weights``: its products and row offsets.

    The residual mat-vecs under :class:`~dpmm.linalg.residual_general.ResidualBlockStrategy`
    (unit weights) and the least-squares histogram; not a :class:`Matrix`. Rows of ``R_S``
    run over the Helmert indices of the attributes in ``S`` (ascending attribute order,
    C order); ``R_∅`` is the total.
    """

    def __init__(self, sizes: DomainSizes, weights: Mapping[int, float]) -> None:
        self.domain_shape, self.cells = sizes.shape, sizes.cells
        self.weights = dict(weights)
        rows = [sizes.multiplicity(mask) for mask in self.weights]
        self.offsets = list(itertools.accumulate(rows, initial=0))

    def spans(self) -> Iterator[tuple[tuple[int, float], int, int]]:
        """Each ``(set, weight)`` with its rows ``[start, stop)`` in the stack."""
        return zip(self.weights.items(), self.offsets[:-1], self.offsets[1:], strict=True)

    # O(|weights| · cells · k): sum out the other attributes, then one Helmert per member.
    def matmat(self, X: np.ndarray) -> np.ndarray:
        columns = X.shape[1]
        tensor = X.reshape([*self.domain_shape, columns])
        dims = len(self.domain_shape)
        blocks = [np.zeros((0, columns))]
        for (mask, weight), start, stop in self.spans():
            members = mask_members(mask)
            table = tensor.sum(axis=tuple(i for i in range(dims) if i not in members))
            for position in range(len(members)):
                table = _helmert_apply(table, position)
            blocks.append(weight * table.reshape(stop - start, columns))
        return np.concatenate(blocks, axis=0)

    # Helmert adjoints per member, then broadcast over the attributes outside S.
    def rmatmat(self, Y: np.ndarray) -> np.ndarray:
        columns = Y.shape[1]
        dims = len(self.domain_shape)
        result = np.zeros([*self.domain_shape, columns])
        for (mask, weight), start, stop in self.spans():
            members = mask_members(mask)
            table = Y[start:stop].reshape([self.domain_shape[i] - 1 for i in members] + [columns])
            for position in range(len(members)):
                table = _helmert_adjoint(table, position)
            full = [self.domain_shape[i] if i in members else 1 for i in range(dims)]
            result += weight * table.reshape([*full, columns])
        return result.reshape(self.cells, columns)  # -1: ambiguous if no columns
