"""Quantize a real-valued strategy to a rational grid so it can be measured exactly.

Exact noise (DESIGN §5.1) needs an integer query and an exact sensitivity. A real-valued
strategy ``A`` (eigen-design, HDMM, weighted marginals) is rounded to ``A_q = B / D`` with
``B`` integer-valued and ``D`` a power of two. ``B`` is an integer strategy that
:func:`~dpmm.measure.measure` handles as it is; its noisy answers divided by ``D`` estimate
``A_q x``, with exact sensitivity ``Δ(B) / D``, and reconstruction uses ``A_q``.

Rounding keeps the structure: a Kronecker product stays a product of quantized factors, a
stack stays a stack of quantized blocks, weighted marginals stay marginals with integer
weights, so nothing large is ever made dense. Each rounded quantity (an array, a weight)
gets its own grid, relative to its largest magnitude: the largest becomes an integer with
``bits`` significant bits and every entry moves by at most half a grid step, i.e. by at
most ``2**-bits`` times that largest magnitude. Ties round half to even (``numpy.rint``).
Integer-valued parts are never rounded, and a grid is coarsened while every rounded value
is even, so an integer strategy comes back unchanged with ``D = 1``.

The grid trades accuracy against the size of ``B``: the expected error of ``A_q`` differs
from that of ``A`` by about ``2**-bits`` relatively (more for ill-conditioned strategies),
while the entries of ``B`` grow like ``2**bits`` per rounded factor, and ``measure``
computes ``B x`` exactly only while its largest entry times the number of records stays
below ``2**53``. ``DEFAULT_BITS = 13`` keeps the change of expected error below 0.1 % on
dense eigen-design-like, Kronecker and weighted-marginal strategies (typically 0.002 %-0.02 %,
at most 0.08 % over random Gaussian Kronecker products), and leaves room for about 2**40
records on a one-factor strategy and 2**26 on a Kronecker product of two real factors.
Pass fewer bits for more records, more bits for a closer match.

Example:
    >>> from dpmm.linalg import Hierarchical
    >>> quantized = quantize(Weighted(0.3, Hierarchical(4)), bits=8)
    >>> quantized.integer.weight, quantized.scale
    (77.0, 256)
    >>> float(quantized.matrix.dense()[0, 0])   # A_q = 77/256 · tree, near 0.3
    0.30078125
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from dpmm.errors import TooLargeError
from dpmm.linalg import (
    DENSE_LIMIT,
    Dense,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    RangeQueries,
    Sparse,
    VStack,
    Weighted,
)
from dpmm.linalg.helmert_blocks import HelmertBlocks, helmert_row_norms
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.exact import MeasurementError, analyze_strategy

__all__ = [
    "DEFAULT_BITS",
    "QUANTIZATION_BITS",
    "QuantizationError",
    "QuantizedStrategy",
    "measurable",
    "quantize",
]

#: Significant bits kept per rounded array or weight (see the module docstring).
DEFAULT_BITS = 13
#: Rounded values must stay integers that float64 holds exactly.
_MAX_BITS = 52
#: Singular values of a dense residual block below this fraction of its largest are dropped.
RANK_TOLERANCE = 1e-8


class QuantizationError(MeasurementError):
    """A strategy cannot be put on an integer grid as requested."""


@dataclass(frozen=True)
class QuantizedStrategy:
    """A strategy on a rational grid: ``A_q = integer / scale``.

    ``integer`` has integer entries and is what :func:`~dpmm.measure.measure` measures;
    ``scale`` is a power of two, an exact int. Dividing the noisy answers by ``scale``
    estimates ``A_q x``, and :attr:`matrix` is the ``A_q`` that reconstruction uses.
    """

    integer: Matrix
    scale: int

    def __post_init__(self) -> None:
        if not isinstance(self.scale, int) or self.scale < 1 or self.scale & (self.scale - 1):
            raise QuantizationError(
                f"a quantization scale must be a power of two, got {self.scale!r}"
            )

    @cached_property
    def matrix(self) -> Matrix:
        """The quantized strategy ``A_q = integer / scale`` (a residual block strategy for
        integer residual blocks, so its Gram keeps the residual structure). One object per
        strategy, so that what it computes once (its Gram's inverse) is computed once."""
        if isinstance(self.integer, HelmertBlocks | TableKrons):
            return self.integer.divided(self.scale)
        return self.integer if self.scale == 1 else Weighted(1 / self.scale, self.integer)


def quantize(A: Matrix, *, bits: int = DEFAULT_BITS) -> QuantizedStrategy:
    """Round ``A`` to ``integer / scale`` with a power-of-two scale, keeping its structure.

    Args:
        A: the strategy, a dpmm.linalg matrix.
        bits: significant bits kept for each rounded array or weight, 1 to 52.

    Raises:
        QuantizationError: ``bits`` is out of range, ``A`` is not a dpmm matrix, or it is an
            unstructured type too large to round as a dense array.
    """
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= _MAX_BITS:
        raise QuantizationError(f"bits must be an integer from 1 to {_MAX_BITS}, got {bits!r}")
    if not isinstance(A, Matrix):
        raise QuantizationError(f"a strategy must be a dpmm.linalg matrix, got {type(A).__name__}")
    integer, exponent = _quantize(A, bits)
    return QuantizedStrategy(integer, 1 << exponent)


#: Quantization grids tried in turn: the finest whose integer strategy can be measured
#: exactly (a product of several fitted factors needs coarser grids per factor).
QUANTIZATION_BITS = (13, 10, 8, 6)


def measurable(matrix: Matrix) -> QuantizedStrategy:
    """The finest quantization of ``matrix`` whose integer form has exact column norms.

    Raises:
        MeasurementError: Even the coarsest grid gives norms too large to hold exactly.
    """
    for bits in QUANTIZATION_BITS:
        quantized = quantize(matrix, bits=bits)
        try:
            analyze_strategy(quantized.integer)
            return quantized
        except MeasurementError as error:
            problem = error
    raise MeasurementError(
        f"strategy {matrix!r:.120} cannot be quantized to an integer strategy with "
        f"exact norms ({problem})"
    ) from None


# The recursion returns (integer matrix, e) with scale 2**e, and hands back the very same
# object when nothing was rounded, so subclasses (Marginal, Hierarchical) keep their type.


def _quantize(A: Matrix, bits: int) -> tuple[Matrix, int]:
    if isinstance(A, Identity | Ones | Prefix | RangeQueries):
        return A, 0
    if isinstance(A, Dense):
        return _quantize_dense(A, bits)
    if isinstance(A, Sparse):
        return _quantize_sparse(A, bits)
    if isinstance(A, Weighted):
        return _quantize_weighted(A, bits)
    if isinstance(A, Kron):
        parts = [_quantize(factor, bits) for factor in A.factors]
        if all(part is factor for (part, _), factor in zip(parts, A.factors, strict=True)):
            return A, 0
        return Kron([part for part, _ in parts]), sum(exponent for _, exponent in parts)
    if isinstance(A, Marginals):
        return _quantize_marginals(A, bits)
    if isinstance(A, TableKrons):
        return _quantize_table_krons(A, bits)
    if isinstance(A, VStack):
        return _quantize_stack(A, bits)
    if isinstance(A, ResidualBlockStrategy):
        return _quantize_residual(A, bits)
    if isinstance(A, PIdentity):
        return _quantize_pidentity(A, bits)
    return _quantize_other(A, bits)


def _round(values: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    """Integers ``k`` (as float64) and ``e`` with ``k / 2**e`` within a grid step of values."""
    if np.array_equal(values, np.rint(values)):
        return values, 0
    largest = float(np.abs(values).max())
    exponent = max(0, bits - math.frexp(largest)[1])  # largest < 2**frexp(largest)[1]
    rounded = np.rint(np.ldexp(values, exponent))  # scaling by 2**e is exact in float64
    return _coarsen(rounded, exponent)


def _coarsen(rounded: np.ndarray, exponent: int) -> tuple[np.ndarray, int]:
    """Halve the grid while every value stays an integer: the smallest exact scale."""
    while exponent > 0 and not np.any(np.fmod(rounded, 2)):
        rounded, exponent = rounded / 2, exponent - 1
    return rounded, exponent


def _round_weight(weight: float, bits: int) -> tuple[int, int]:
    rounded, exponent = _round(np.array([weight]), bits)
    return int(rounded[0]), exponent


def _rounded_dense(rounded: np.ndarray) -> Dense:
    """``Dense(rounded)``, promising independent columns where a cheap proof shows them.

    Rows with a single nonzero entry that together cover every column hold a nonsingular
    diagonal: the columns are then independent, and the strategy's Gram is inverted
    directly instead of through an SVD. A p-Identity ``[I; Θ] D`` keeps its identity block
    through rounding: on 4,096 cells its error took two SVDs of 4,352 × 4,096 (about a
    minute of the plan's selection).
    """
    single = np.count_nonzero(rounded, axis=1) == 1
    covered = np.zeros(rounded.shape[1], dtype=bool)
    covered[np.argmax(rounded[single] != 0, axis=1)] = True
    return Dense(rounded, full_column_rank=bool(covered.all()))


def _quantize_dense(A: Dense, bits: int) -> tuple[Matrix, int]:
    rounded, exponent = _round(A.array, bits)
    return (A, 0) if rounded is A.array else (_rounded_dense(rounded), exponent)


def _quantize_sparse(A: Sparse, bits: int) -> tuple[Matrix, int]:
    csr = A.matrix
    if csr.nnz == 0:
        return A, 0
    rounded, exponent = _round(csr.data, bits)
    if rounded is csr.data:
        return A, 0
    result = sp.csr_array((rounded, csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
    result.eliminate_zeros()
    return Sparse(result), exponent


def _quantize_weighted(A: Weighted, bits: int) -> tuple[Matrix, int]:
    base, base_exponent = _quantize(A.base, bits)
    weight, weight_exponent = _round_weight(A.weight, bits)
    if base is A.base and weight == A.weight:
        return A, 0
    integer = base if weight == 1 else Weighted(weight, base)
    return integer, base_exponent + weight_exponent


def _quantize_stack(A: VStack, bits: int) -> tuple[Matrix, int]:
    parts = [_quantize(block, bits) for block in A.blocks]
    if all(part is block for (part, _), block in zip(parts, A.blocks, strict=True)):
        return A, 0
    # Every block keeps its own precision, so a lightly weighted block is not lost; the
    # others are brought to the finest grid by integer (power-of-two) weights.
    common = max(exponent for _, exponent in parts)
    blocks = [
        part if exponent == common else Weighted(1 << (common - exponent), part)
        for part, exponent in parts
    ]
    return VStack(blocks), common


def _rounded_weights(weights: Sequence[float], bits: int) -> list[tuple[int, int]]:
    """Each weight to ``bits`` significant bits, ``(integer, exponent)``, on a grid no finer
    than ``bits`` below the largest weight's: a weight far below the others (an optimizer
    may leave one at 10⁻³⁰) would otherwise set a grid so fine that the largest overflows
    the exact norms. There it keeps at least one step, so every measured table is still
    measured."""
    rounded = [_round_weight(weight, bits) for weight in weights]
    finest = _round_weight(max(weights, key=abs), bits)[1] + bits
    return [
        (weight, exponent)
        if exponent <= finest
        else (max(1, round(math.ldexp(old, finest))), finest)
        for (weight, exponent), old in zip(rounded, weights, strict=True)
    ]


def _quantize_table_krons(A: TableKrons, bits: int) -> tuple[Matrix, int]:
    """Each block's factors and weight rounded (the weights as :func:`_rounded_weights`
    rounds them), then brought to the finest grid by integer (power-of-two) weights, as
    :func:`_quantize_stack` does: still one table per block."""
    rounded = []
    weights = _rounded_weights([table.weight for table in A.tables], bits)
    for table, (weight, exponent) in zip(A.tables, weights, strict=True):
        factors = [_quantize(factor, bits) for factor in table.factors]
        exponent += sum(e for _, e in factors)
        rounded.append((table.attributes, [f for f, _ in factors], weight, exponent))
    common = max((exponent for *_, exponent in rounded), default=0)
    tables = [(s, f, w * (1 << (common - e))) for s, f, w, e in rounded]
    return TableKrons(A.domain_shape, tables, A.coefficients), common


def _quantize_marginals(A: Marginals, bits: int) -> tuple[Matrix, int]:
    """Each weight as :func:`_rounded_weights` rounds it, on the finest of their grids."""
    rounded = _rounded_weights(list(A.weights.values()), bits)
    if all(weight == old for (weight, _), old in zip(rounded, A.weights.values(), strict=True)):
        return A, 0
    common = max(exponent for _, exponent in rounded)
    weights = {
        tuple(mask_members(mask)): weight << (common - exponent)
        for mask, (weight, exponent) in zip(A.weights, rounded, strict=True)
    }
    return Marginals(A.domain_shape, weights), common


def _quantize_other(A: Matrix, bits: int) -> tuple[Matrix, int]:
    try:
        array = A.dense(limit=DENSE_LIMIT)
    except TooLargeError:
        raise QuantizationError(
            f"{A!r} ({type(A).__name__}) has no structure to quantize and is too large to "
            "round as a dense array; express it as Dense, Sparse, Weighted, Kron or VStack"
        ) from None
    rounded, exponent = _round(array, bits)
    return _rounded_dense(rounded), exponent


def _quantize_pidentity(A: PIdentity, bits: int) -> tuple[Matrix, int]:
    """``[I; Θ] D`` on one grid as the stack ``[diag(q); R]``: the same integers as its
    rounded dense array, but the Gram keeps the p-Identity's Woodbury inverse."""
    rows = np.vstack([1.0 / A.scale, A.theta / A.scale[None, :]])
    rounded, exponent = _round(rows, bits)
    if not np.all(rounded[0] != 0):  # a column lost its identity entry: no structure left
        return _quantize_other(A, bits)
    diagonal = Sparse(sp.diags_array(rounded[0]), full_column_rank=True)
    return VStack([diagonal, Dense(rounded[1:])]), exponent


def _row_space(block: np.ndarray) -> np.ndarray:
    """A full-row-rank block with the same Gram ``LᵀL``, when L is rank deficient.

    A solved block may leave a direction unmeasured (a predicate's null space). Rounding
    would turn that zero singular value into a tiny one, and least squares would then read
    the direction with enormous variance; ``Σ_r V_rᵀ`` measures the same row space only.
    """
    if not block.size:
        return block
    _, values, rows = np.linalg.svd(block, full_matrices=False)
    rank = int(np.count_nonzero(values > RANK_TOLERANCE * values[0]))
    if rank == block.shape[0]:  # already of full row rank (invertible, or wide)
        return block
    return values[:rank, None] * rows[:rank]


def _round_residual(
    mask: int,
    block: float | np.ndarray,
    sizes: tuple[int, ...],
    bits: int,
    reduced: dict[tuple, np.ndarray],
) -> tuple[np.ndarray, int] | None:
    """``L_S diag(1/√c)`` rounded on its own grid: ``(integers as floats, exponent)``, or
    None for a zero block. ``reduced`` keeps the row-space factors of dense blocks."""
    inverse_root = 1.0 / np.sqrt(helmert_row_norms(sizes).astype(np.float64))
    if isinstance(block, np.ndarray) and block.ndim == 1:  # a diagonal block
        values = np.asarray(block, dtype=np.float64) * inverse_root
    elif isinstance(block, np.ndarray):
        dense = np.asarray(block, dtype=np.float64)
        key = (dense.shape, dense.tobytes())  # symmetric domains repeat one block
        if key not in reduced:
            reduced[key] = _row_space(dense)
        values = reduced[key] * inverse_root[None, :]
    else:
        values = float(block) * inverse_root
    if not np.all(np.isfinite(values)):
        raise QuantizationError(f"the block of residual set {mask} is not finite")
    magnitudes = np.abs(values)
    if not magnitudes.any():
        return None
    # A diagonal row is its own query: each keeps ``bits`` significant bits (its weight
    # 1/√c_r spans orders of magnitude); a dense block is rounded as a whole.
    reference = magnitudes[magnitudes > 0].min() if values.ndim == 1 else magnitudes.max()
    exponent = max(0, bits - math.frexp(float(reference))[1])
    return np.rint(np.ldexp(values, exponent)), exponent


def _on_common_grid(
    A: ResidualBlockStrategy,
    mask: int,
    values: np.ndarray,
    shift: int,
    bits: int,
) -> np.ndarray:
    """A rounded block moved ``shift`` bits to the common grid: a read-only int64 ``Q_S``.

    Raises:
        QuantizationError: it does not fit int64, loses rank, or has a zero diagonal row.
    """
    scaled = np.ldexp(values, shift)
    if float(np.abs(scaled).max()) >= 2**62:  # int64, with room for sums
        raise QuantizationError(
            f"the blocks of {A!r} differ too much in scale to share one integer grid "
            f"at {bits} bits; use fewer bits"
        )
    Q = scaled.astype(np.int64)
    if Q.ndim == 2 and np.linalg.matrix_rank(Q.astype(np.float64)) != min(Q.shape):
        raise QuantizationError(
            f"the block of residual set {mask} loses rank at {bits} bits; use more bits"
        )
    if Q.ndim == 1 and not Q.all():
        raise QuantizationError(
            f"the scalar block of residual set {mask} rounds to zero at {bits} bits"
        )
    Q.setflags(write=False)
    return Q


def _quantize_residual(A: ResidualBlockStrategy, bits: int) -> tuple[Matrix, int]:
    """Round every block ``L_S diag(1/√c)`` of A to integers ``Q_S`` over one power of two.

    Each block gets its own grid, ``bits`` significant bits relative to its largest entry
    (every entry of a diagonal block: its rows are scaled by ``1/√c_r``, which spans
    orders of magnitude), and all are brought to the finest grid by power-of-two factors,
    so a lightly weighted block keeps its precision and the blocks keep their relative
    weights. A scalar block ``s I`` becomes a diagonal one; a rank-deficient dense block
    is first replaced by a full-row-rank factor of its Gram (:func:`_row_space`). The
    result is the integer strategy ``[Q_S H_S]``
    (:class:`~dpmm.linalg.helmert_blocks.HelmertBlocks`); sets with equal blocks and
    attribute sizes share one read-only integer array.
    """
    shape = A.domain_shape
    # Symmetric domains repeat one block (and its attribute sizes) over many sets: each
    # distinct one is rounded once, and its sets share one read-only integer array.
    distinct: dict[tuple, tuple[np.ndarray, int] | None] = {}
    reduced: dict[tuple, np.ndarray] = {}
    rounded: dict[int, tuple[np.ndarray, int]] = {}
    for mask, block in A.blocks.items():
        sizes = tuple(shape[i] for i in mask_members(mask))
        if not math.prod(n - 1 for n in sizes):
            continue
        if isinstance(block, np.ndarray):
            key: tuple = (sizes, block.shape, np.asarray(block, dtype=np.float64).tobytes())
        else:
            key = (sizes, float(block))
        if key not in distinct:
            distinct[key] = _round_residual(mask, block, sizes, bits, reduced)
        result = distinct[key]
        if result is not None:  # a zero block measures nothing
            rounded[mask] = result
    if not rounded:
        raise QuantizationError(f"{A!r} has no block with rows and a non-zero entry")
    common = max(exponent for _, exponent in rounded.values())
    on_grid: dict[int, np.ndarray] = {}  # by id of the rounded array: shared arrays stay shared
    integers: dict[int, np.ndarray] = {}
    for mask, (values, exponent) in rounded.items():
        if id(values) not in on_grid:
            on_grid[id(values)] = _on_common_grid(A, mask, values, common - exponent, bits)
        integers[mask] = on_grid[id(values)]
    return HelmertBlocks(shape, integers), common
