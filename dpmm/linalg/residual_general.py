"""Strategies that measure each residual subspace through its own small matrix.

The residual ``R_S = ⊗_{i∈S} D_i ⊗_{i∉S} 1ᵀ`` (see :mod:`dpmm.linalg.residuals`)
reads the part of the data vector in the subspace of attribute set S. A
*residual block strategy* stacks ``L_S R_S`` over the sets S, where ``L_S`` is
a scalar times the identity (a plain weighted residual), a diagonal matrix (given by
its diagonal: a quantized weighted residual) or a small dense matrix with
``Π_{i∈S}(n_i − 1)`` columns. With ``M_S = L_SᵀL_S`` and
``c_S = Π_{i∉S} n_i`` (so ``R_S R_Sᵀ = c_S I`` and ``R_S R_Tᵀ = 0`` for S ≠ T):

* ``AᵀA = Σ_S R_Sᵀ M_S R_S`` and ``(AᵀA)⁺ = Σ_S R_Sᵀ M_S⁻¹ R_S / c_S²``;
* the squared L2 norm of the column of cell x is ``Σ_S (D_SᵀM_S D_S)_{x_S x_S}``
  (``D_S = ⊗_{i∈S} D_i``), so when every block has a constant such diagonal
  ``p_S`` the sensitivity is ``√(Σ_S p_S)`` for every cell;
* a workload term ``w ⊗_i W_i`` splits per attribute as
  ``W_i = a_i 1ᵀ + B_i D_i`` (``a_i = W_i 1 / n_i``, ``B_i = W_i D_iᵀ``), so its
  least-squares answers have covariance ``Σ_S V_S M_S⁻¹ V_Sᵀ`` with
  ``V_S = w ⊗_{i∈S} B_i ⊗_{i∉S} a_i`` over the sets the term reads (:func:`read_sets`):
  per-query variances cost O(rows of the term · block size), never O(cells).

With scalar blocks only (the weighted residuals of
:func:`~dpmm.strategy.marginal_optimal.marginal_optimal`) the Gram is in the marginal
algebra, and :meth:`ResidualBlockStrategy.gram` returns it as a
:class:`~dpmm.linalg.residuals.ResidualGram`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.domain import Domain
from dpmm.errors import ArgumentError, DomainError, UnsupportedQueryError
from dpmm.linalg.base import Matrix, Symmetric, _check_norm, _computed_once, check_dense_size
from dpmm.linalg.elementary import Identity, Ones
from dpmm.linalg.kron import Kron, kron_rows, kron_terms
from dpmm.linalg.marginals import (
    SUBSET_WORK_LIMIT,
    Marginal,
    Marginals,
    MarginalsGram,
    _shape_of,
    _submasks,
    cell_sums,
    mask_members,
)
from dpmm.linalg.residuals import DomainSizes, ResidualGram, _ResidualStack, helmert

__all__ = [
    "FactorSplit",
    "ResidualBlockGram",
    "ResidualBlockStrategy",
    "block_gram_pinv",
    "read_sets",
    "residual_variances",
    "split_factor",
    "subspace_basis",
    "term_splits",
]

#: Largest attribute size whose factor is split densely (an n × n Gram per factor).
MAX_FACTOR_SIZE = 4096

#: Most cells over which the L2 sensitivity is found by visiting every cell.
EXACT_CELLS = 10_000_000

#: A block: a scalar s (meaning s · I), a 1-D array g (meaning diag(g)) or a 2-D matrix.
Block = float | np.ndarray


def _is_matrix(block: Block) -> bool:
    return isinstance(block, np.ndarray) and block.ndim == 2


def _is_diagonal(block: Block) -> bool:
    return isinstance(block, np.ndarray) and block.ndim == 1


def _times(block: Block, piece: np.ndarray) -> np.ndarray:
    """``L piece`` for a block L (``Lᵀ = L`` for a scalar or diagonal block)."""
    if _is_matrix(block):
        return block @ piece
    return block[:, None] * piece if _is_diagonal(block) else block * piece


def _reciprocal(values: np.ndarray) -> np.ndarray:
    """``1 / v`` where ``v ≠ 0``, else 0: the pseudo-inverse of a diagonal."""
    result = np.zeros_like(values, dtype=np.float64)
    np.divide(1.0, values, out=result, where=values != 0)
    return result


@dataclass(frozen=True)
class FactorSplit:
    """One workload factor ``W_i = a 1ᵀ + B D`` as the dense pieces the error needs.

    Attributes:
        a: ``W_i 1 / n`` (one entry per query row).
        B: ``W_i Dᵀ`` (rows × n − 1).
        scalar: c when ``BᵀB = c I`` exactly by construction (identity, total), else None.
    """

    a: np.ndarray
    B: np.ndarray
    scalar: float | None

    @functools.cached_property
    def total_squared(self) -> float:
        """``‖a‖²``: the weight the factor puts on the attribute's total."""
        return float(self.a @ self.a)

    @functools.cached_property
    def has_residual(self) -> bool:
        """Whether ``B ≠ 0``: the factor reads more than the attribute's total."""
        return bool(np.any(self.B))

    @functools.cached_property
    def is_total(self) -> bool:
        """Whether the factor is the single total query (``a = [1]``, ``B = 0``)."""
        return not self.has_residual and self.total_squared == 1.0 and len(self.a) == 1

    @property
    def residual_gram(self) -> np.ndarray:
        """``BᵀB = D WᵀW Dᵀ``."""
        return self.B.T @ self.B

    @property
    def size(self) -> int:
        """The attribute's size n (``B`` has n − 1 columns)."""
        return self.B.shape[1] + 1


def split_factor(factor: Matrix) -> FactorSplit:
    """Split one per-attribute query matrix into its total and residual parts.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> part = split_factor(Prefix(3))
        >>> np.allclose(np.outer(part.a, np.ones(3)) + part.B @ helmert(3), Prefix(3).dense())
        True
    """
    rows, n = factor.shape
    if n > MAX_FACTOR_SIZE:
        raise UnsupportedQueryError(
            f"Attribute of size {n:,} exceeds the residual method's limit of {MAX_FACTOR_SIZE:,}"
        )
    if isinstance(factor, Identity):
        return FactorSplit(np.full(n, 1.0 / n), helmert(n).T, 1.0)
    if isinstance(factor, Ones):
        return FactorSplit(np.ones(rows), np.zeros((rows, n - 1)), 0.0)
    check_dense_size(rows, n, f"the residual split of {factor!r}")
    dense = factor.dense()
    return FactorSplit(dense.sum(axis=1) / n, dense @ helmert(n).T, None)


def term_splits(
    W: Matrix, shape: Sequence[int] | None = None
) -> list[tuple[float, list[FactorSplit]]]:
    """W as weighted Kron terms, each factor split: ``[(weight, factor splits)]``.

    A factor object shared by several terms is split once, and so are all identities
    (and all totals) of one size; a union of marginals is read from its attribute sets
    without listing the factors of each marginal.

    Args:
        W: a (weighted) stack of Kron products (Marginal and Marginals included).
        shape: the attribute sizes W must be over; W's own when None.

    Raises:
        UnsupportedQueryError: W is not a union of Kron products over ``shape``.
    """
    if not isinstance(W, Matrix):
        raise UnsupportedQueryError(f"The workload must be a dpmm Matrix, got {type(W)!r}")
    marginals = isinstance(W, Marginals | Marginal)
    terms = [] if marginals else kron_terms(W)
    own = W.domain_shape if marginals else tuple(f.shape[1] for f in terms[0].factors)
    if shape is not None and own != tuple(shape):
        raise UnsupportedQueryError(f"Workload {W!r} is not a union of Kron products over {shape}")
    if marginals:
        weights = W.weights if isinstance(W, Marginals) else {W.mask: 1.0}
        keep = [split_factor(Identity(n)) for n in own]
        drop = [split_factor(Ones(1, n)) for n in own]
        return [
            (float(w), [keep[i] if m >> i & 1 else drop[i] for i in range(len(own))])
            for m, w in weights.items()
        ]
    shared: dict[tuple, FactorSplit] = {}
    by_object: dict[int, FactorSplit] = {}  # factor objects repeat across thousands of terms

    def split(factor: Matrix) -> FactorSplit:
        found = by_object.get(id(factor))  # the terms keep every factor alive: ids stay unique
        if found is None:
            key = (type(factor).__name__, factor.shape)
            if not isinstance(factor, Identity | Ones):
                found = split_factor(factor)
            elif (found := shared.get(key)) is None:
                found = shared[key] = split_factor(factor)
            by_object[id(factor)] = found
        return found

    return [(float(term.weight), [split(f) for f in term.factors]) for term in terms]


def read_sets(splits: Sequence[FactorSplit]) -> list[int]:
    """The residual sets S a Kron term reads: ``B_i ≠ 0`` on S and ``a_i ≠ 0`` off S.

    Example:
        >>> read_sets([split_factor(Identity(2)), split_factor(Ones(1, 3))])
        [1, 0]
    """
    masks = [0]
    for i, split in enumerate(splits):
        if split.has_residual:
            inside = [m | 1 << i for m in masks]
            masks = inside + masks if split.total_squared > 0 else inside
        elif not split.total_squared > 0:  # a zero factor: the term reads nothing
            return []
    return masks


def subspace_basis(shape: Sequence[int], mask: int) -> np.ndarray:
    """``D_S = ⊗_{i∈S} D_i`` densely (``Π(n_i − 1) × Π n_i``; ``[[1]]`` for the empty set)."""
    return np.atleast_2d(kron_rows([helmert(shape[i]) for i in mask_members(mask)]))


def _block_inverse(block: Block) -> Block:
    if _is_diagonal(block):
        return _reciprocal(block)
    if isinstance(block, np.ndarray):
        # A Gram of a wide block is singular (directions no workload query reads): the
        # pseudo-inverse then gives the least-squares variances, as a dense pinv does.
        return np.linalg.pinv(block, hermitian=True)
    return 1.0 / block if block else 0.0


def block_gram_pinv(block: Block) -> Block:
    """``(LᵀL)⁺`` from the block L itself: a wide block of full row rank has no singular
    value at the rounding level, where its Gram's pseudo-inverse would have to cut."""
    if _is_diagonal(block):
        return _reciprocal(block * block)
    if isinstance(block, np.ndarray):
        inverse = np.linalg.pinv(block)
        return inverse @ inverse.T
    return 1.0 / (block * block) if block else 0.0


def residual_variances(splits: Sequence[FactorSplit], mask: int, inverse: Block) -> np.ndarray:
    """``diag(V_S M_S⁺ V_Sᵀ)``: each query's variance from set S (unit noise and weight),
    with ``inverse = M_S⁺`` (:func:`block_gram_pinv`) and ``V_S = ⊗_{i∈S} B_i ⊗_{i∉S} a_i``."""
    pieces = [s.B if mask >> i & 1 else s.a[:, None] for i, s in enumerate(splits)]
    if not isinstance(inverse, np.ndarray):
        return inverse * kron_rows([np.sum(p * p, axis=1) for p in pieces])
    V = kron_rows(pieces)
    if _is_diagonal(inverse):
        return (V * V) @ inverse
    return np.einsum("qk,kl,ql->q", V, inverse, V)


class _Blocks:
    """Shared bookkeeping: the domain, its residual stack R and the blocks per set."""

    def _setup(self, shape: Domain | Sequence[int], blocks: Mapping[int, Block]) -> None:
        self.domain_shape = _shape_of(shape)
        self._sizes = DomainSizes(self.domain_shape)
        self.blocks: dict[int, Block] = {}
        for mask, block in blocks.items():
            if not isinstance(mask, int | np.integer) or mask < 0 or mask & ~self._sizes.full:
                raise DomainError(f"Residual set {mask!r} is not a bit mask of the domain")
            rank = self._sizes.multiplicity(int(mask))
            if isinstance(block, np.ndarray) and block.shape[-1] != rank:
                raise DomainError(f"Block of set {mask} needs {rank} columns, got {block.shape}")
            if not isinstance(block, np.ndarray) and not np.isfinite(block):
                raise ArgumentError(f"Residual block of set {mask} must be finite, got {block!r}")
            self.blocks[int(mask)] = block if isinstance(block, np.ndarray) else float(block)
        self._stack = _ResidualStack(self._sizes, dict.fromkeys(self.blocks, 1.0))

    def _all_scalar(self) -> bool:
        return not any(isinstance(b, np.ndarray) for b in self.blocks.values())


class ResidualBlockGram(_Blocks, Symmetric, Matrix):
    """``Σ_S R_Sᵀ M_S R_S``, each ``M_S`` a scalar (times I), a diagonal or a dense matrix."""

    def __init__(
        self,
        shape: Sequence[int],
        blocks: Mapping[int, Block],
        *,
        pseudo_inverses: Mapping[int, Block] | None = None,
    ) -> None:
        self._setup(shape, blocks)
        #: ``{S: M_S⁺}`` when known exactly (from a strategy's blocks ``L_S``).
        self._pseudo_inverses = pseudo_inverses
        cells = self._sizes.cells
        super().__init__((cells, cells))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        residuals = self._stack.matmat(X)
        for block, (_, start, stop) in zip(self.blocks.values(), self._stack.spans(), strict=True):
            residuals[start:stop] = _times(block, residuals[start:stop])
        return self._stack.rmatmat(residuals)

    def pinv(self) -> ResidualBlockGram:
        # R_S R_Sᵀ = c_S I and the sets' row spaces are orthogonal: invert block by block.
        inverse: dict[int, Block] = {}
        known = self._pseudo_inverses or {}
        for mask, block in self.blocks.items():
            scale = self._sizes.outside(mask) ** 2
            inner = known[mask] if mask in known else _block_inverse(block)
            inverse[mask] = inner / scale
        return ResidualBlockGram(self.domain_shape, inverse)

    def _trace_dot(self, other: Matrix) -> float | object:
        """``trace(other @ self)`` for Kron and marginal-algebra Grams."""
        if isinstance(other, MarginalsGram) and other.domain_shape == self.domain_shape:
            return self._trace_marginal(other)
        if isinstance(other, Kron) and other.is_square_over(self.domain_shape):
            return self._trace_kron(other.factors)
        return NotImplemented

    def _block_trace(self, mask: int) -> float:
        block = self.blocks[mask]
        if _is_diagonal(block):
            return float(block.sum())
        if isinstance(block, np.ndarray):
            return float(np.trace(block))
        return block * self._sizes.multiplicity(mask)

    def _candidates(self, support: int) -> list[int]:
        """The measured sets inside ``support``, by whichever enumeration is shorter."""
        if support.bit_count() < 20 and 1 << support.bit_count() < len(self.blocks):
            return [s for s in _submasks(support) if s in self.blocks]
        return [s for s in self.blocks if not s & ~support]

    def _trace_marginal(self, other: MarginalsGram) -> float:
        # R_S C(a) R_Sᵀ = 0 unless S ⊆ a; then I on S times Π_{i∈a∖S} n_i Π_{i∉a} n_i².
        total = 0.0
        for a, u in other.coefficients.items():
            outside = self._sizes.outside(a)
            for mask in self._candidates(a):
                ratio = self._sizes.inside(a) // self._sizes.inside(mask)
                total += u * self._block_trace(mask) * ratio * outside**2
        return total

    def _trace_kron(self, factors: Sequence[Matrix]) -> float:
        sums, projected, support = [], {}, 0
        for i, factor in enumerate(factors):
            check_dense_size(*factor.shape, f"a factor of {factor!r}")
            dense = factor.dense()
            sums.append(float(dense.sum()))
            D = helmert(self.domain_shape[i])
            inner = D @ dense @ D.T
            if np.any(inner):  # D J Dᵀ = 0: a total's attribute has no residual part
                projected[i] = inner
                support |= 1 << i
        total = 0.0
        for mask in self._candidates(support):
            block = self.blocks[mask]
            outside = math.prod(s for i, s in enumerate(sums) if not mask >> i & 1)
            pieces = [projected[i] for i in mask_members(mask)]
            if _is_diagonal(block):
                inner = float(kron_rows([np.diag(p) for p in pieces]) @ block)
            elif isinstance(block, np.ndarray):
                inner = float(np.sum(kron_rows(pieces) * block))
            else:
                inner = block * math.prod(float(np.trace(p)) for p in pieces)
            total += outside * inner
        return total

    def __repr__(self) -> str:
        return f"ResidualBlockGram({len(self.blocks)} blocks over {self.domain_shape})"


class ResidualBlockStrategy(_Blocks, Matrix):
    """The stack ``[L_S R_S]`` over residual sets S, in the order of ``blocks``.

    Args:
        shape: the domain's attribute sizes.
        blocks: ``{attribute mask: L_S}``, a scalar (``L_S = s I``), a 1-D array (its
            diagonal: ``L_S = diag(g)``) or a dense matrix
            with ``Π_{i∈S}(n_i − 1)`` columns (square and invertible, or wide of full row
            rank when the set's workload leaves some directions unread).

    Rows of ``R_S`` run over the Helmert indices of the attributes in S (ascending
    attribute order, C order); ``R_∅`` is the total.

    Example:
        >>> A = ResidualBlockStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: np.eye(2), 0b11: 1.0})
        >>> A.shape, round(A.sensitivity(2) ** 2, 12)   # 1 + 1/2 + 2/3 + 1/3
        ((6, 6), 2.5)
        >>> B = ResidualBlockStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: 1.0, 0b11: 1.0})
        >>> B.known_full_column_rank, type(B.gram()).__name__
        (True, 'ResidualGram')
    """

    closed_form_gram_pinv = True

    def __init__(self, shape: Domain | Sequence[int], blocks: Mapping[int, Block]) -> None:
        self._setup(shape, blocks)
        self.block_rows = [
            b.shape[0] if _is_matrix(b) else self._sizes.multiplicity(m)
            for m, b in self.blocks.items()
        ]
        self.offsets = np.cumsum([0, *self.block_rows])
        super().__init__((int(self.offsets[-1]), self._sizes.cells))

    def _spans(self) -> Iterator[tuple]:
        """Each block with its rows in the residual stack and in this stack."""
        rows = zip(self.offsets[:-1], self.offsets[1:], strict=True)
        return zip(self.blocks.values(), self._stack.spans(), rows, strict=True)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        residuals = self._stack.matmat(X)
        out = np.empty((self.shape[0], X.shape[1]))
        for block, (_, start, stop), (low, high) in self._spans():
            out[low:high] = _times(block, residuals[start:stop])
        return out

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        residuals = np.empty((self._stack.offsets[-1], Y.shape[1]))
        for block, (_, start, stop), (low, high) in self._spans():
            piece = Y[low:high]
            residuals[start:stop] = block.T @ piece if _is_matrix(block) else _times(block, piece)
        return self._stack.rmatmat(residuals)

    @property
    def known_full_column_rank(self) -> bool:
        # Scalar blocks: full rank iff every non-zero projection E_b (b over the attributes
        # of size > 1) gets a non-zero weight; only possible for few attributes.
        nontrivial = sum(1 for n in self.domain_shape if n > 1)
        if nontrivial > 30 or not self._all_scalar():
            return False
        covered = {m for m, b in self.blocks.items() if b and self._sizes.multiplicity(m)}
        return len(covered) == 1 << nontrivial

    def gram(self) -> ResidualBlockGram | ResidualGram:
        """``AᵀA``; in the marginal algebra (eigenvalue ``s_S² c_S`` on ``E_S``) when every
        block is a scalar, so that the algebra's closed forms apply to it."""
        if self._all_scalar() and sum(1 << m.bit_count() for m in self.blocks) <= SUBSET_WORK_LIMIT:
            eigen = {
                m: b**2 * self._sizes.outside(m)
                for m, b in self.blocks.items()
                if b and self._sizes.multiplicity(m)
            }
            return ResidualGram(self.domain_shape, eigen, self._sizes)
        return ResidualBlockGram(
            self.domain_shape,
            {m: b.T @ b if _is_matrix(b) else b * b for m, b in self.blocks.items()},
            pseudo_inverses={m: block_gram_pinv(b) for m, b in self.blocks.items()},
        )

    def pinv(self) -> Matrix:
        # A⁺ = (AᵀA)⁺Aᵀ: block S becomes R_Sᵀ L_S⁺ / c_S (rows of distinct sets orthogonal).
        inverse: dict[int, Block] = {}
        for mask, block in self.blocks.items():
            scale = self._sizes.outside(mask)
            if _is_diagonal(block):
                inverse[mask] = _reciprocal(block) / scale
            elif isinstance(block, np.ndarray):
                inverse[mask] = np.linalg.pinv(block).T / scale
            else:
                inverse[mask] = 1.0 / (block * scale) if block else 0.0
        return ResidualBlockStrategy(self.domain_shape, inverse).T

    def row_space_projector(self) -> ResidualBlockGram:
        """``(AᵀA)⁺AᵀA = Σ_S R_Sᵀ P_S R_S / c_S``, ``P_S = L_S⁺L_S`` the projector onto
        the row space of block S (I for an invertible block)."""
        support: dict[int, Block] = {}
        for mask, block in self.blocks.items():
            scale = 1.0 / self._sizes.outside(mask)
            if _is_diagonal(block):
                support[mask] = scale * (block != 0)
            elif isinstance(block, np.ndarray):
                support[mask] = scale * (np.linalg.pinv(block) @ block)
            elif block:
                support[mask] = scale
        return ResidualBlockGram(self.domain_shape, support)

    def block_diagonals(self) -> dict[int, np.ndarray]:
        """``{S: diag(D_Sᵀ M_S D_S)}`` over the cells of S: each set's squared column norms."""
        result = {}
        for mask, block in self.blocks.items():
            if isinstance(block, np.ndarray):
                basis = subspace_basis(self.domain_shape, mask)
                result[mask] = np.sum(np.square(_times(block, basis)), axis=0)
            else:
                cells = self._sizes.inside(mask)
                result[mask] = np.full(cells, block * block * self._sizes.column_norm_squared(mask))
        return result

    def _squared_sensitivity_bound(self) -> float:
        # Σ_S max_x (D_SᵀM_S D_S)_xx: the largest column norm when each block's diagonal
        # is constant, otherwise an upper bound on it.
        return math.fsum(float(d.max()) for d in self.block_diagonals().values())

    @_computed_once
    def squared_sensitivity(self) -> float:
        """The squared L2 sensitivity: exact up to ``EXACT_CELLS`` cells, else an upper bound.

        Blocks with a constant diagonal (scaled residuals) make ``Σ_S max diag`` exact on
        any domain; a solved block's diagonal may vary (cells whose constraint is slack at
        the optimum), and then only a visit of every cell finds the true maximum.
        """
        if self._all_scalar():
            return self._scalar_squared_norm()
        diagonals = self.block_diagonals()
        if all(np.ptp(d) == 0 for d in diagonals.values()) or (self._sizes.cells > EXACT_CELLS):
            return self._squared_sensitivity_bound()
        return float(cell_sums(self.domain_shape, diagonals.items()).max())

    def _scalar_squared_norm(self) -> float:
        # Scaled residuals: every column has Σ_S s_S² Π_{i∈S}(1 − 1/n_i), no array needed.
        return math.fsum(b * b * self._sizes.column_norm_squared(m) for m, b in self.blocks.items())

    def uniform_column_norm(self, p: float = 1) -> float | None:
        if _check_norm(p) != 2:
            return None
        if self._all_scalar():
            return math.sqrt(self._scalar_squared_norm())
        diagonals = self.block_diagonals().values()
        if all(np.ptp(d) == 0 for d in diagonals):
            return math.sqrt(self._squared_sensitivity_bound())
        return None

    def sensitivity(self, p: float = 1) -> float:
        """L2: the largest column norm (see :meth:`squared_sensitivity`).

        Above ``EXACT_CELLS`` cells with a solved block it is ``√(Σ_S max diag)``, an
        upper bound that exceeds the largest column norm only by the spread of the
        solved blocks' diagonals, so noise scaled to it never spends more than the
        requested privacy budget.
        """
        if _check_norm(p) == 2:
            return math.sqrt(self.squared_sensitivity())
        return float(self.column_norms(p).max())

    def column_norms(self, p: float = 1) -> np.ndarray:
        p = _check_norm(p)
        check_dense_size(1, self.shape[1], f"the column norms of {self!r}")
        if p != 2:
            return Matrix.column_norms(self, p)
        return np.sqrt(cell_sums(self.domain_shape, self.block_diagonals().items()))

    def __repr__(self) -> str:
        dense = sum(_is_matrix(b) for b in self.blocks.values())
        return (
            f"ResidualBlockStrategy({len(self.blocks)} residual sets, {dense} dense, "
            f"over {self.domain_shape})"
        )
