"""Exact measurement of a residual strategy from marginal tables, never the data vector.

A :class:`~dpmm.linalg.residuals.ResidualStrategy` measures ``R_S x = D_S m_S`` for each
set S, with ``m_S`` the S-marginal table and ``D_S = ⊗_{i∈S} D_i`` a Kronecker product of
Helmert matrices. Helmert rows are irrational, but ``D_i = diag(1/√(k(k+1))) H_i`` with the
INTEGER rows ``h_k = (1, …, 1, −k, 0, …)`` (k ones, k = 1 … n_i − 1). So we measure the
integer query ``H_S m_S`` and add exact discrete Gaussian noise of variance
``σ_S² c_r`` to row r, ``c_r = Π_{i∈S} k_i(k_i + 1)``; divided by ``√c_r`` that is the
normalized residual answer with noise variance ``σ_S²``.

Privacy ([CKS20, Theorem 14], heterogeneous variances): one record in cell j changes row r
by ``H_S[r, j_S]``, so the cost is ``Σ_S Σ_r H_S[r, j_S]² / (2 σ_S² c_r)
= Σ_S ‖D_S[:, j_S]‖² / (2σ_S²) = Σ_S Π_{i∈S}(1 − 1/n_i) / (2σ_S²)`` for EVERY cell j:
per attribute, ``Σ_k h_k[j]² / (k(k+1)) = j/(j+1) + (1/(j+1) − 1/n) = 1 − 1/n``.
The σ_S² are rationals rounded up from the strategy's weights, so this exact cost is at most
ρ. A row whose variance the int64 sampler cannot take is raised to one it can
(:func:`~dpmm.privacy.samplers.sampler_sigma2`, relative change below 1/σ): that only lowers
the cost, so :attr:`ResidualMeasurement.rho` stays an exact upper bound.

Counting the tables is one pass over the records (:func:`count_marginals`), and each table
is turned into its residual answers by cumulative sums, a batch of equal-shaped tables at a
time: O(records · sets + Σ table sizes), never O(domain).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpmm.errors import DomainError
from dpmm.linalg.helmert_blocks import (
    checked_table,
    helmert_norms,
    helmert_row_norms,
    integer_helmert,
)
from dpmm.linalg.marginals import mask_members
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.measure.exact import MeasurementError
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy.params import ZCDP
from dpmm.privacy.randomness import RandomSource
from dpmm.privacy.samplers import discrete_gaussian, sampler_sigma2

__all__ = [
    "ResidualMeasurement",
    "count_marginals",
    "helmert_norms",
    "integer_helmert",
    "measure_residuals",
    "residual_answers",
    "residual_sigma2",
]

#: σ_S² is rounded up on a grid of 2^-j with 2^-j ≤ σ_S² · 2^-ROUNDING_BITS (relative error).
ROUNDING_BITS = 20
#: Tables transformed per batch: bounds the temporaries to ~this many int64 cells.
BATCH_CELLS = 1 << 23
#: Most noise samples drawn per sampler call.
NOISE_BATCH = 1 << 22
#: Integers (counts times entries) must stay below this to be exact in int64.
_INT_LIMIT = 2**62


@dataclass(frozen=True, eq=False)
class ResidualMeasurement:
    """Noisy integer residual answers, one block per set, with the noise that was added.

    Attributes:
        domain_shape: attribute sizes.
        sets: the measured attribute masks, in the strategy's block order (sets with no
            rows or weight zero are left out).
        offsets: ``offsets[t]`` is the first row of ``sets[t]``; one extra final entry.
        values: int64 noisy answers of ``H_S m_S`` (unnormalized Helmert rows, C order
            over the Helmert indices of S's attributes in ascending order).
        sigma2: ``{S: σ_S²}``: the normalized residual rows of S have noise variance σ_S²
            (or at most 1/σ more, for rows rounded for the sampler).
        rho: the exact zCDP cost ``Σ_S Π_{i∈S}(1 − 1/n_i) / (2σ_S²)``, an upper bound on
            the cost of the noise actually added (equal when ``rounded_rows`` is 0).
        rounded_rows: rows whose variance ``σ_S² c_r`` was raised for the sampler.
    """

    domain_shape: tuple[int, ...]
    sets: tuple[int, ...]
    offsets: np.ndarray
    values: np.ndarray
    sigma2: dict[int, Fraction]
    rho: Fraction
    rounded_rows: int

    def block(self, index: int) -> np.ndarray:
        """The noisy integer answers of ``sets[index]``, shaped by its Helmert indices."""
        mask = self.sets[index]
        shape = [self.domain_shape[i] - 1 for i in mask_members(mask)]
        return self.values[self.offsets[index] : self.offsets[index + 1]].reshape(shape)


def residual_sigma2(A: ResidualStrategy, privacy: ZCDP) -> tuple[dict[int, Fraction], Fraction]:
    """Rational noise variances ``σ_S²`` for A at ``privacy``, and their exact zCDP cost.

    ``σ_S²`` is ``T / (2ρ w_S²)`` with ``T = Σ_S w_S² p_S`` (the strategy's squared L2
    sensitivity, ``p_S = Π_{i∈S}(1 − 1/n_i)``), all in exact arithmetic from the float
    weights, rounded up to a multiple of a power of two with relative error below
    2^-ROUNDING_BITS. The cost ``Σ_S p_S / (2σ_S²)`` is therefore at most ρ.

    Raises:
        MeasurementError: privacy is not zCDP, or every weight is zero.

    Example:
        >>> A = ResidualStrategy((2, 3), {0: 1.0, 0b01: 1.0, 0b10: 1.0, 0b11: 1.0})
        >>> sigma2, rho = residual_sigma2(A, ZCDP(1))
        >>> sigma2[0], rho                      # T = 1 + 1/2 + 2/3 + 1/3
        (Fraction(5, 4), Fraction(1, 1))
    """
    if not isinstance(privacy, ZCDP):
        raise MeasurementError(f"residual measurements need zCDP (Gaussian noise), got {privacy}")
    shape = A.domain_shape
    # Many sets share a weight and an attribute-size profile: work per distinct pair.
    profiles: dict[int, tuple[Fraction, Fraction]] = {}
    counts: dict[tuple[Fraction, Fraction], int] = {}
    exact: dict[tuple[float, tuple[int, ...]], tuple[Fraction, Fraction]] = {}
    for mask, weight in A.weights.items():
        sizes = tuple(shape[i] for i in mask_members(mask))
        key = exact.get((weight, sizes))
        if key is None:
            rows = math.prod(n - 1 for n in sizes)
            key = (Fraction(weight * weight), Fraction(rows, math.prod(sizes)))
            exact[weight, sizes] = key
        if not key[0] or not key[1]:
            continue
        profiles[mask] = key
        counts[key] = counts.get(key, 0) + 1
    if not profiles:
        raise MeasurementError(f"{A!r} has no set with a non-zero weight and rows to measure")
    total = sum((n * w2 * p for (w2, p), n in counts.items()), Fraction(0))
    rounded: dict[Fraction, Fraction] = {}
    for w2, _ in counts:
        if w2 not in rounded:
            ideal = total / (2 * privacy.rho * w2)
            grid = 2 ** max(0, ROUNDING_BITS - math.floor(math.log2(ideal)))
            rounded[w2] = Fraction(math.ceil(ideal * grid), grid)
    cost = sum((n * p / (2 * rounded[w2]) for (w2, p), n in counts.items()), Fraction(0))
    return {mask: rounded[key[0]] for mask, key in profiles.items()}, cost


def count_marginals(
    chunks: Iterable[np.ndarray], shape: Sequence[int], attribute_sets: Iterable[Sequence[int]]
) -> MarginalCounts:
    """Marginal tables of records in one pass over them, a chunk of records at a time.

    Sets sharing all but their last attribute are counted with one ``bincount`` over
    ``records × last attributes``, so the cost is O(records · sets) with few Python steps.

    Args:
        chunks: integer record arrays of shape ``(records, len(shape))``, codes in
            ``[0, n_i)``.
        shape: attribute sizes.
        attribute_sets: the tables to count (attribute positions; sorted on output).

    Example:
        >>> counts = count_marginals([np.array([[0, 2], [1, 2], [1, 0]])], (2, 3),
        ...                          [(), (0,), (1, 0)])
        >>> counts.tables[()].item(), counts.tables[(0, 1)].tolist()
        (3, [[0, 0, 1], [1, 0, 1]])
    """
    shape = tuple(int(n) for n in shape)
    wanted = sorted({tuple(sorted({int(i) for i in attrs})) for attrs in attribute_sets})
    groups: dict[tuple[int, ...], list[int]] = {}
    for attrs in wanted:
        if attrs and not all(0 <= i < len(shape) for i in attrs):
            raise MeasurementError(f"the attribute set {list(attrs)} is not in the domain")
        if attrs:
            groups.setdefault(attrs[:-1], []).append(attrs[-1])
    buffers = {
        prefix: np.zeros(math.prod(shape[i] for i in prefix) * sum(shape[i] for i in lasts), "i4")
        for prefix, lasts in groups.items()
    }
    total, wide = 0, False
    for records in chunks:
        records = np.asarray(records)
        if records.ndim != 2 or records.shape[1] != len(shape):
            raise MeasurementError(f"a record chunk must be (records, {len(shape)}) integers")
        if records.size and (records.min() < 0 or (records >= np.array(shape)).any()):
            raise MeasurementError("a record has a code outside its attribute's range")
        if not wide and total + records.shape[0] >= 2**31:
            # int32 halves the memory of 10⁵ tables; widen only when the counts could overflow.
            wide, buffers = True, {prefix: b.astype(np.int64) for prefix, b in buffers.items()}
        total += records.shape[0]
        # One contiguous row per attribute: the last attributes of a group are a slice.
        columns = np.ascontiguousarray(records.T, dtype=np.int64)
        for prefix, lasts in groups.items():
            code = np.zeros(records.shape[0], dtype=np.int64)
            for i in prefix:  # C order: earlier attributes are the slower indices
                code = code * shape[i] + columns[i]
            sizes = np.array([shape[i] for i in lasts], dtype=np.int64)
            width = math.prod(shape[i] for i in prefix)
            starts = width * (np.cumsum(sizes) - sizes)  # each table's place in the buffer
            consecutive = lasts[-1] - lasts[0] == len(lasts) - 1
            last_codes = columns[lasts[0] : lasts[-1] + 1] if consecutive else columns[lasts]
            flat = last_codes + starts[:, None]
            flat += code * sizes[:, None] if len(set(sizes.tolist())) > 1 else code * sizes[0]
            buffers[prefix] += np.bincount(flat.reshape(-1), minlength=buffers[prefix].size)
    tables: dict[tuple[int, ...], np.ndarray] = {}
    if () in wanted:
        tables[()] = np.array(total, dtype=np.int64 if wide else np.int32)
    for prefix, lasts in groups.items():
        buffer, start = buffers.pop(prefix), 0
        for last in lasts:
            size = math.prod(shape[i] for i in prefix) * shape[last]
            tables[(*prefix, last)] = buffer[start : start + size].reshape(
                [shape[i] for i in (*prefix, last)]
            )
            start += size
    return MarginalCounts(shape, tables)


def _tables(
    counts: MarginalCounts | np.ndarray, shape: tuple[int, ...], sets: Sequence[int]
) -> MarginalCounts:
    """The tables, checked; a (small) data vector is summed into its marginals first."""
    if isinstance(counts, MarginalCounts):
        if tuple(counts.domain_shape) != shape:
            raise MeasurementError(
                f"the tables are over {tuple(counts.domain_shape)}, the strategy over {shape}"
            )
        return counts
    x = np.asarray(counts)
    if x.ndim != 1 or x.size != math.prod(shape) or not np.issubdtype(x.dtype, np.integer):
        raise MeasurementError(f"the data vector must be {math.prod(shape)} integer counts")
    cube = x.reshape(shape)
    tables = {}
    for mask in sets:
        members = mask_members(mask)
        others = tuple(i for i in range(len(shape)) if i not in members)
        tables[tuple(members)] = cube.sum(axis=others)
    return MarginalCounts(shape, tables)


def _classes(shape: tuple[int, ...], sets: Sequence[int]) -> dict[tuple[int, ...], list[int]]:
    """Positions in ``sets`` grouped by the attribute sizes of the set (equal table shapes)."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for index, mask in enumerate(sets):
        classes.setdefault(tuple(shape[i] for i in mask_members(mask)), []).append(index)
    return classes


def residual_answers(A: ResidualStrategy, counts: MarginalCounts | np.ndarray) -> np.ndarray:
    """The exact integer answers ``H_S m_S`` of every measured set, int64, in block order.

    Sets without rows or with weight zero are skipped, as in :func:`measure_residuals`.

    Raises:
        MeasurementError: a table is missing, of the wrong shape or dtype, negative, the
            tables disagree on the number of records, or an answer could overflow int64.
    """
    sets, offsets = _layout(A)
    shape = A.domain_shape
    counts = _tables(counts, shape, sets)
    values = np.empty(int(offsets[-1]), dtype=np.int64)
    totals: set[int] = set()
    for sizes, indices in _classes(shape, sets).items():
        rows = math.prod(n - 1 for n in sizes)
        step = max(1, BATCH_CELLS // max(1, math.prod(sizes)))
        for start in range(0, len(indices), step):
            batch = indices[start : start + step]
            stacked = np.stack([_checked(counts, sets[t], sizes) for t in batch])
            totals.update(np.unique(stacked.reshape(len(batch), -1).sum(axis=1)).tolist())
            # |H_S m_S| ≤ records · Π (n_i − 1), and the cumulative sums stay below that.
            if max(totals) * max(rows, 1) >= _INT_LIMIT:  # pragma: no cover - 2**40+ records
                raise MeasurementError("the residual answers could overflow int64")
            for axis in range(1, stacked.ndim):
                stacked = integer_helmert(stacked, axis)
            targets = offsets[batch][:, None] + np.arange(rows)
            values[targets] = stacked.reshape(len(batch), rows)
    if len(totals) > 1:
        raise MeasurementError("the marginal tables disagree on the number of records")
    return values


def _layout(A: ResidualStrategy) -> tuple[list[int], np.ndarray]:
    """The measured sets (non-zero weight, at least one row) and their row offsets."""
    shape = A.domain_shape
    sets = [
        mask
        for mask, weight in A.weights.items()
        if weight and math.prod(shape[i] - 1 for i in mask_members(mask))
    ]
    if len(set(sets)) != len(sets):  # pragma: no cover - weights is a dict
        raise MeasurementError("a residual set is measured twice")
    rows = [math.prod(shape[i] - 1 for i in mask_members(mask)) for mask in sets]
    return sets, np.array(list(itertools.accumulate(rows, initial=0)), dtype=np.int64)


def _checked(counts: MarginalCounts, mask: int, sizes: tuple[int, ...]) -> np.ndarray:
    try:
        return checked_table(counts.tables, mask, sizes)
    except DomainError as error:
        raise MeasurementError(str(error)) from None


def measure_residuals(
    A: ResidualStrategy,
    counts: MarginalCounts | np.ndarray,
    privacy: ZCDP,
    *,
    rng: RandomSource | np.random.Generator | None = None,
) -> ResidualMeasurement:
    """``H_S m_S`` plus exact discrete Gaussian noise of variance ``σ_S² c_r`` per row, in memory.

    Noise is drawn once per distinct row variance (rows grouped across all sets), so a
    symmetric domain of 10⁸ rows needs a few hundred sampler calls. Nothing is persisted
    or charged: the caller accounts for the budget. A release measures a residual strategy
    through :func:`~dpmm.measure.measure` (quantized to integer residual blocks), which
    persists the record before anything reads it.

    Args:
        A: the residual strategy (its weights fix the σ_S², see :func:`residual_sigma2`).
        counts: the marginal tables of every measured set, or a small data vector.
        privacy: the zCDP budget; the exact cost is returned as ``rho`` (at most this).
        rng: tests only: a ``numpy.random.Generator``. The default is the OS CSPRNG.

    Raises:
        MeasurementError: see :func:`residual_answers` and :func:`residual_sigma2`.
    """
    sigma2, rho = residual_sigma2(A, privacy)
    sets, offsets = _layout(A)
    values = residual_answers(A, counts)
    rounded = _add_noise(A.domain_shape, sets, offsets, sigma2, values, rng)
    return ResidualMeasurement(
        domain_shape=A.domain_shape,
        sets=tuple(sets),
        offsets=offsets,
        values=values,
        sigma2={mask: sigma2[mask] for mask in sets},
        rho=rho,
        rounded_rows=rounded,
    )


def _add_noise(
    shape: tuple[int, ...],
    sets: Sequence[int],
    offsets: np.ndarray,
    sigma2: dict[int, Fraction],
    values: np.ndarray,
    rng: RandomSource | np.random.Generator | None,
) -> int:
    """Add the noise to ``values`` in place; the number of rows rounded for the sampler."""
    # {row variance: [(first rows of the sets, positions inside a block)]}, in a fixed order
    # so that tables and a data vector draw identical noise from one seeded generator.
    plan: dict[Fraction, list[tuple[np.ndarray, np.ndarray]]] = {}
    rounded = 0
    for sizes, indices in _classes(shape, sets).items():
        distinct, inverse = np.unique(helmert_row_norms(sizes), return_inverse=True)
        positions = [np.flatnonzero(inverse == j) for j in range(distinct.size)]
        by_sigma: dict[Fraction, list[int]] = {}
        for t in indices:
            by_sigma.setdefault(sigma2[sets[t]], []).append(t)
        for s2, members in by_sigma.items():
            starts = offsets[members]
            for c, where in zip(distinct.tolist(), positions, strict=True):
                variance = sampler_sigma2(s2 * c)
                if variance != s2 * c:
                    rounded += len(members) * where.size
                plan.setdefault(variance, []).append((starts, where))
    for variance, parts in plan.items():
        rows = np.concatenate([(s[:, None] + p).reshape(-1) for s, p in parts])
        # One sampler call per variance, cut into batches that bound its temporaries.
        for start in range(0, rows.size, NOISE_BATCH):
            chunk = rows[start : start + NOISE_BATCH]
            values[chunk] += discrete_gaussian(variance, chunk.size, rng=rng)
    return rounded
