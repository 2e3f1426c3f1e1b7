"""Exact measurement of a residual block strategy from marginal tables, never the data vector.

A :class:`~dpmm.linalg.residual_general.ResidualBlockStrategy` measures ``L_S R_S x =
L_S D_S m_S`` per attribute set S (``m_S`` the S-marginal table). With the INTEGER Helmert
rows ``H_S`` (see :mod:`dpmm.measure.residual_tables`), ``D_S = diag(1/√c) H_S`` and
``c_r = Π_{i∈S} k_i(k_i + 1)``, so the block is ``(L_S diag(1/√c)) H_S m_S``. Its real
matrix ``L_S diag(1/√c)`` is rounded to integers ``Q_S`` on a grid of ``2^-k``:

* each block gets its own grid, ``bits`` significant bits relative to its largest entry
  (as :func:`~dpmm.measure.quantize.quantize` does for stacks), and all blocks are then
  brought to the finest grid ``2^-k`` by power-of-two factors, so a lightly weighted
  block keeps its precision and the blocks keep their relative weights;
* a scalar block ``s I`` stays diagonal: ``Q_S = diag(round(2^k s / √c_r))``;
* a rank-deficient dense block (a solved predicate's unread direction) is first replaced
  by a full-row-rank factor of its Gram, so rounding cannot create a barely-measured
  direction that least squares would read with enormous variance.

The integer strategy ``B = [Q_S H_S]`` (blocks stacked, each read from its table) is
measured exactly: ``H_S m_S`` by cumulative sums, ``Q_S (H_S m_S)`` in int64 after a
bound check, then discrete Gaussian noise of one rational variance ``σ²`` on every row.
The quantized strategy is ``A_q = B / 2^k`` and reconstruction uses it.

Privacy ([CKS20]): one record in cell j moves the answers by the column ``j`` of B, so the
cost is ``Δ² / (2σ²)`` with ``Δ² = max_j Σ_S ‖(Q_S H_S)[:, j_S]‖²``, an integer. It is
found exactly by visiting every cell combination on domains of at most ``EXACT_CELLS``
cells; beyond that ``Σ_S max_{j_S} ‖(Q_S H_S)[:, j_S]‖²`` is used, an upper bound (so the
recorded ρ is an upper bound on the cost). ``σ² = Δ² / (2ρ)`` is rounded up on a grid of
relative step ``2^-ROUNDING_BITS`` and then, if needed, to a variance the int64 sampler
takes, so the recorded ``rho = Δ² / (2σ²)`` never exceeds the requested ρ.

Example:
    >>> from dpmm.linalg.residual_general import ResidualBlockStrategy
    >>> A = ResidualBlockStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: np.eye(2), 0b11: 1.0})
    >>> quantized = quantize_blocks(A, bits=4)
    >>> quantized.scale, quantized.integers[0b10].tolist()   # 16 · diag(1/√2, 1/√6)
    (16, [[11, 0], [0, 7]])
    >>> m = measure_blocks(A, np.array([4, 0, 1, 2, 2, 3]), ZCDP(1), bits=4)
    >>> m.rho <= 1, m.sensitivity_exact
    (True, True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce

import numpy as np

from dpmm.errors import TooLargeError
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.measure.exact import MeasurementError
from dpmm.measure.quantize import QuantizationError
from dpmm.measure.residual_tables import (
    _INT_LIMIT,
    NOISE_BATCH,
    ROUNDING_BITS,
    checked_table,
    helmert_norms,
    integer_helmert,
)
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.privacy.params import ZCDP
from dpmm.privacy.randomness import RandomSource
from dpmm.privacy.samplers import discrete_gaussian, sampler_sigma2

__all__ = [
    "BLOCK_BITS",
    "BlockMeasurement",
    "QuantizedBlocks",
    "block_answers",
    "block_sensitivity",
    "measure_blocks",
    "quantize_blocks",
]

#: Significant bits per block. The columns of ``L_S diag(1/√c)`` differ in scale by up to
#: ``√c_max`` (90 on a 10 × 10 set), so the smallest columns keep ~7 bits fewer than this.
BLOCK_BITS = 20
#: Singular values of a dense block below this fraction of its largest are dropped.
RANK_TOLERANCE = 1e-8
#: Most cells over which the squared sensitivity is found exactly by visiting every cell.
EXACT_CELLS = 1 << 22
#: Most entries of one block's integer matrix ``Q_S H_S`` (rows × cells of S).
MAX_BLOCK_ENTRIES = 1 << 26


@dataclass(frozen=True, eq=False)
class QuantizedBlocks:
    """A residual block strategy on an integer grid: block S is ``Q_S H_S / scale``.

    Attributes:
        domain_shape: attribute sizes.
        sets: the measured attribute masks (blocks with rows and a non-zero entry), in the
            strategy's order.
        integers: ``{S: Q_S}``, int64: a ``(rows, rank)`` matrix of full rank (a rank
            deficient block is first reduced to its row space), or a ``(rank,)`` vector
            for a scalar block (``Q_S = diag(vector)``). Columns are the integer Helmert
            rows of S in C order over S's attributes in ascending order.
        scale: ``2^k``, an exact int.
    """

    domain_shape: tuple[int, ...]
    sets: tuple[int, ...]
    integers: dict[int, np.ndarray]
    scale: int

    def rows(self, mask: int) -> int:
        """How many answers block ``mask`` has."""
        return int(self.integers[mask].shape[0])

    def helmert_norms(self, mask: int) -> np.ndarray:
        """``c_r = Π_{i∈S} k_i(k_i + 1)`` for each integer Helmert row of ``mask`` (int64)."""
        return reduce(
            lambda acc, n: np.multiply.outer(acc, helmert_norms(n)).reshape(-1),
            [self.domain_shape[i] for i in mask_members(mask)],
            np.ones(1, dtype=np.int64),
        )

    def normalized(self, mask: int) -> np.ndarray:
        """``G_S = Q_S diag(√c)`` (float): block S's answers are ``G_S R_S x`` (integer units).

        A vector for a scalar block (the diagonal), else a ``(rows, rank)`` matrix.
        """
        root = np.sqrt(self.helmert_norms(mask).astype(np.float64))
        Q = self.integers[mask].astype(np.float64)
        return Q * root if Q.ndim == 1 else Q * root[None, :]

    def strategy(self) -> ResidualBlockStrategy:
        """The quantized strategy ``A_q = B / scale`` as a residual block strategy."""
        blocks: dict[int, float | np.ndarray] = {}
        for mask in self.sets:
            G = self.normalized(mask) / self.scale
            if G.ndim == 1 and G.size == 1:  # one row: a scalar block (same Gram)
                blocks[mask] = float(abs(G[0]))
            elif G.ndim == 2 and G.shape[1] == 1:
                blocks[mask] = float(np.linalg.norm(G))
            else:
                blocks[mask] = np.diag(G) if G.ndim == 1 else G
        return ResidualBlockStrategy(self.domain_shape, blocks)


@dataclass(frozen=True, eq=False)
class BlockMeasurement:
    """Noisy integer answers ``Q_S H_S m_S + noise`` of a quantized block strategy.

    Attributes:
        quantized: the integer strategy that was measured.
        offsets: ``offsets[t]`` is the first row of ``quantized.sets[t]``; one final entry.
        values: int64 noisy answers, blocks in ``quantized.sets`` order.
        sigma2: the exact variance parameter of the discrete Gaussian on every row
            (integer units; divide by ``scale²`` for the quantized strategy's units).
        squared_sensitivity: ``Δ²`` of the integer strategy (exact or an upper bound).
        sensitivity_exact: whether ``Δ²`` was found by visiting every cell.
        rho: ``Δ² / (2σ²)``: the exact zCDP cost when ``sensitivity_exact``, else an
            upper bound on it; never above the requested ρ.
        requested_rho: the budget the measurement was asked to stay within.
    """

    quantized: QuantizedBlocks
    offsets: np.ndarray
    values: np.ndarray
    sigma2: Fraction
    squared_sensitivity: int
    sensitivity_exact: bool
    rho: Fraction
    requested_rho: Fraction

    def block(self, mask: int) -> np.ndarray:
        """The noisy integer answers of set ``mask``."""
        t = self.quantized.sets.index(mask)
        return self.values[self.offsets[t] : self.offsets[t + 1]]


def _block_bits(bits: int) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 52:
        raise QuantizationError(f"bits must be an integer from 1 to 52, got {bits!r}")


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


def quantize_blocks(A: ResidualBlockStrategy, *, bits: int = BLOCK_BITS) -> QuantizedBlocks:
    """Round every block ``L_S diag(1/√c)`` of A to integers over one power-of-two scale.

    Raises:
        QuantizationError: A is not a residual block strategy, ``bits`` is out of range, a
            block is not finite, loses full column rank when rounded, or an integer
            exceeds 2^62.
    """
    if not isinstance(A, ResidualBlockStrategy):
        raise QuantizationError(
            f"block measurement needs a ResidualBlockStrategy, got {A!r:.120} (measure a "
            "ResidualStrategy with measure_residuals)"
        )
    _block_bits(bits)
    shape = A.domain_shape
    rounded: dict[int, tuple[np.ndarray, int]] = {}
    reduced: dict[tuple, np.ndarray] = {}
    full_rank: dict[tuple, bool] = {}
    for mask, block in A.blocks.items():
        rank = math.prod(shape[i] - 1 for i in mask_members(mask))
        if not rank:
            continue
        norms = reduce(
            lambda acc, n: np.multiply.outer(acc, helmert_norms(n)).reshape(-1),
            [shape[i] for i in mask_members(mask)],
            np.ones(1, dtype=np.int64),
        )
        inverse_root = 1.0 / np.sqrt(norms.astype(np.float64))
        if isinstance(block, np.ndarray):
            dense = np.asarray(block, dtype=np.float64)
            # Symmetric domains repeat one block over many sets: reduce each distinct once.
            key = (dense.shape, dense.tobytes())
            if key not in reduced:
                reduced[key] = _row_space(dense)
            values = reduced[key] * inverse_root[None, :]
        else:
            values = float(block) * inverse_root
        if not np.all(np.isfinite(values)):
            raise QuantizationError(f"the block of residual set {mask} is not finite")
        largest = float(np.abs(values).max())
        if largest == 0.0:
            continue  # a zero block measures nothing
        exponent = max(0, bits - math.frexp(largest)[1])  # largest < 2**frexp(largest)[1]
        rounded[mask] = (np.rint(np.ldexp(values, exponent)), exponent)
    if not rounded:
        raise QuantizationError(f"{A!r} has no block with rows and a non-zero entry")
    common = max(exponent for _, exponent in rounded.values())
    integers: dict[int, np.ndarray] = {}
    for mask, (values, exponent) in rounded.items():
        scaled = np.ldexp(values, common - exponent)
        if float(np.abs(scaled).max()) >= _INT_LIMIT:
            raise QuantizationError(
                f"the blocks of {A!r} differ too much in scale to share one integer grid "
                f"at {bits} bits; use fewer bits"
            )
        Q = scaled.astype(np.int64)
        key = (Q.shape, Q.tobytes())
        if Q.ndim == 2 and key not in full_rank:
            full_rank[key] = np.linalg.matrix_rank(Q.astype(np.float64)) == min(Q.shape)
        if Q.ndim == 2 and not full_rank[key]:
            raise QuantizationError(
                f"the block of residual set {mask} loses rank at {bits} bits; use more bits"
            )
        if Q.ndim == 1 and not Q.all():
            raise QuantizationError(
                f"the scalar block of residual set {mask} rounds to zero at {bits} bits"
            )
        integers[mask] = Q
    return QuantizedBlocks(shape, tuple(integers), integers, 1 << common)


def _integer_helmert_rows(sizes: Sequence[int]) -> np.ndarray:
    """The dense int64 ``H_S`` (rank × cells of S) for a set with these attribute sizes."""
    parts = [integer_helmert(np.eye(n, dtype=np.int64), 0) for n in sizes]
    return reduce(np.kron, parts, np.ones((1, 1), dtype=np.int64))


def _row_peaks(sizes: Sequence[int]) -> np.ndarray:
    """``max_j |H_S[r, j]| = Π k_i`` for each row (float64, only used for bounds)."""
    peaks = np.ones(1)
    for n in sizes:
        peaks = np.multiply.outer(peaks, np.arange(1, n, dtype=np.float64)).reshape(-1)
    return peaks


def _column_norms(quantized: QuantizedBlocks, mask: int) -> np.ndarray:
    """``‖(Q_S H_S)[:, j]‖²`` for every cell j of S, exact (int64 or Python ints)."""
    sizes = [quantized.domain_shape[i] for i in mask_members(mask)]
    Q = quantized.integers[mask]
    cells = math.prod(sizes)
    if Q.shape[0] * cells > MAX_BLOCK_ENTRIES:
        raise TooLargeError(
            f"the integer block of residual set {mask} has {Q.shape[0] * cells:,} entries, "
            f"more than the {MAX_BLOCK_ENTRIES:,} its sensitivity may visit"
        )
    H = _integer_helmert_rows(sizes)
    absolute = np.abs(Q).astype(np.float64)
    if Q.ndim == 1:
        peak = float((absolute * _row_peaks(sizes)).max())
    else:
        peak = float((absolute @ np.abs(H).astype(np.float64)).max())
    if peak >= _INT_LIMIT:
        raise MeasurementError(f"the integer block of residual set {mask} overflows int64")
    QH = Q[:, None] * H if Q.ndim == 1 else Q @ H
    if peak * peak * QH.shape[0] < _INT_LIMIT:
        return np.einsum("rj,rj->j", QH, QH)
    exact = QH.astype(object)
    return (exact * exact).sum(axis=0)


def block_sensitivity(quantized: QuantizedBlocks) -> tuple[int, bool]:
    """``(Δ², exact)``: the integer strategy's squared L2 sensitivity.

    ``max_j Σ_S ‖(Q_S H_S)[:, j_S]‖²`` over every cell when the domain has at most
    ``EXACT_CELLS`` cells (``exact`` True), else the upper bound ``Σ_S max ‖…‖²``.

    Raises:
        TooLargeError: a block's integer matrix is too large to visit.
    """
    shape = quantized.domain_shape
    norms: dict[int, np.ndarray] = {}
    distinct: dict[tuple, np.ndarray] = {}  # symmetric domains repeat blocks over many sets
    for mask in quantized.sets:
        Q = quantized.integers[mask]
        key = (tuple(shape[i] for i in mask_members(mask)), Q.shape, Q.tobytes())
        if key not in distinct:
            distinct[key] = _column_norms(quantized, mask)
        norms[mask] = distinct[key]
    peaks = {mask: int(max(column.tolist())) for mask, column in norms.items()}
    bound = sum(peaks.values())
    if math.prod(shape) > EXACT_CELLS:
        return bound, False
    wide = bound >= _INT_LIMIT
    total: np.ndarray = np.zeros(shape, dtype=object if wide else np.int64)
    for mask, column in norms.items():
        members = mask_members(mask)
        broadcast = [shape[i] if i in members else 1 for i in range(len(shape))]
        total = total + np.asarray(column, dtype=object if wide else np.int64).reshape(broadcast)
    return int(max(np.asarray(total).reshape(-1).tolist())), True


def _tables(counts: MarginalCounts | np.ndarray, quantized: QuantizedBlocks) -> dict:
    """``{mask: int64 table}`` for every measured set, checked; a data vector is summed."""
    shape = quantized.domain_shape
    if isinstance(counts, MarginalCounts):
        if tuple(counts.domain_shape) != shape:
            raise MeasurementError(
                f"the tables are over {tuple(counts.domain_shape)}, the strategy over {shape}"
            )
        source: Mapping[tuple[int, ...], np.ndarray] = counts.tables
    else:
        x = np.asarray(counts)
        if x.ndim != 1 or x.size != math.prod(shape) or not np.issubdtype(x.dtype, np.integer):
            raise MeasurementError(f"the data vector must be {math.prod(shape)} integer counts")
        cube = x.reshape(shape)
        source = {}
        for mask in quantized.sets:
            members = tuple(mask_members(mask))
            others = tuple(i for i in range(len(shape)) if i not in members)
            source[members] = cube.sum(axis=others)
    return {
        mask: checked_table(source, mask, tuple(shape[i] for i in mask_members(mask)))
        for mask in quantized.sets
    }


def _offsets(quantized: QuantizedBlocks) -> np.ndarray:
    rows = [quantized.rows(mask) for mask in quantized.sets]
    return np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)


def block_answers(quantized: QuantizedBlocks, counts: MarginalCounts | np.ndarray) -> np.ndarray:
    """The exact int64 answers ``Q_S H_S m_S`` of every block, in ``quantized.sets`` order.

    Raises:
        MeasurementError: a table is missing, of the wrong shape or dtype, negative, the
            tables disagree on the number of records, or an answer could overflow int64.
    """
    shape = quantized.domain_shape
    tables = _tables(counts, quantized)
    totals = {int(table.sum()) for table in tables.values()}
    if len(totals) > 1:
        raise MeasurementError("the marginal tables disagree on the number of records")
    records = totals.pop()
    pieces = []
    for mask in quantized.sets:
        table = tables[mask]
        for axis in range(table.ndim):
            table = integer_helmert(table, axis)
        helmert_values = table.reshape(-1)  # |entry r| ≤ records · Π k_i
        Q = quantized.integers[mask]
        peaks = _row_peaks([shape[i] for i in mask_members(mask)])
        absolute = np.abs(Q).astype(np.float64)
        # Every partial sum of row r is at most Σ_t |Q[r, t]| · records · Π k_i(t).
        worst = float((absolute * peaks if Q.ndim == 1 else absolute @ peaks).max())
        if worst * records >= _INT_LIMIT:
            raise MeasurementError(
                f"the answers of residual set {mask} on {records:,} records could overflow "
                "int64; quantize with fewer bits"
            )
        pieces.append(Q * helmert_values if Q.ndim == 1 else Q @ helmert_values)
    return np.concatenate(pieces).astype(np.int64, copy=False)


def _noise_variance(squared: int, rho: Fraction) -> Fraction:
    """``Δ² / (2ρ)`` rounded up on a relative grid, then to what the int64 sampler takes."""
    ideal = Fraction(squared) / (2 * rho)
    grid = 2 ** max(0, ROUNDING_BITS - math.floor(math.log2(ideal)))
    return sampler_sigma2(Fraction(math.ceil(ideal * grid), grid))


def measure_blocks(
    A: ResidualBlockStrategy | QuantizedBlocks,
    counts: MarginalCounts | np.ndarray,
    privacy: ZCDP,
    *,
    bits: int = BLOCK_BITS,
    store: str | os.PathLike[str] | None = None,
    measurement_id: str | None = None,
    ledger: Ledger | None = None,
    reservation: Reservation | None = None,
    rng: RandomSource | np.random.Generator | None = None,
) -> BlockMeasurement:
    """``Q_S H_S m_S`` for every block plus exact discrete Gaussian noise, at most ρ.

    With ``store``, ``measurement_id``, ``ledger`` and ``reservation`` (all four, as for
    :func:`~dpmm.measure.mechanism.measure`), the measurement is drawn once and persisted
    before it is returned (:func:`~dpmm.measure.residual_persist.measure_once`): the
    reservation is spent before the noise is drawn, the record (with the integer blocks
    ``Q_S``) is written atomically, and what is returned is read back from the store. A
    second call with the same id returns the stored measurement without drawing or
    spending. Without them, nothing is persisted or charged.

    Args:
        A: the strategy (quantized with ``bits``), or an already quantized one.
        counts: the marginal tables of every measured set (from :func:`count_marginals`
            of :mod:`dpmm.measure.residual_tables`), or a small integer data vector.
        privacy: the zCDP budget; the cost is recorded as ``rho`` (at most this). With a
            reservation, exactly its budget.
        bits: significant bits per block when A is not yet quantized.
        store: an existing folder holding the measurement records.
        measurement_id: the record's name in the store: letters, digits, '.', '_', '-'.
        ledger: the open ledger holding ``reservation``.
        reservation: the budget reserved for this measurement; marked spent before drawing.
        rng: tests only: a ``numpy.random.Generator``. The default is the OS CSPRNG.

    Raises:
        MeasurementError: privacy is not zCDP, or see :func:`block_answers`; with a store,
            also a reservation that is not *reserved* while no record exists, or only some
            of the four persistence arguments.
        MeasurementMismatch: a record with this id was taken with another strategy or budget.
        QuantizationError: see :func:`quantize_blocks`.
        TooLargeError: see :func:`block_sensitivity`.
    """
    # Imported here: the persistence modules import this one for BlockMeasurement.
    from dpmm.measure import residual_persist

    persisted = residual_persist.persistence_requested(
        store=store, measurement_id=measurement_id, ledger=ledger, reservation=reservation
    )
    if not isinstance(privacy, ZCDP):
        raise MeasurementError(f"block measurements need zCDP (Gaussian noise), got {privacy}")
    quantized = A if isinstance(A, QuantizedBlocks) else quantize_blocks(A, bits=bits)
    squared, exact = block_sensitivity(quantized)
    sigma2 = _noise_variance(squared, privacy.rho)

    def draw(values: np.ndarray) -> BlockMeasurement:
        for start in range(0, values.size, NOISE_BATCH):
            stop = min(values.size, start + NOISE_BATCH)
            values[start:stop] += discrete_gaussian(sigma2, stop - start, rng=rng)
        return BlockMeasurement(
            quantized=quantized,
            offsets=_offsets(quantized),
            values=values,
            sigma2=sigma2,
            squared_sensitivity=squared,
            sensitivity_exact=exact,
            rho=Fraction(squared) / (2 * sigma2),
            requested_rho=privacy.rho,
        )

    if not persisted:
        return draw(block_answers(quantized, counts))
    described = repr(A) if isinstance(A, ResidualBlockStrategy) else repr(quantized.strategy())
    return residual_persist.measure_once(
        residual_persist.blocks_plan(described, quantized, privacy, sigma2, squared, exact),
        store=store,
        measurement_id=measurement_id,
        ledger=ledger,
        reservation=reservation,
        answers=lambda: block_answers(quantized, counts),
        draw=draw,
    )
