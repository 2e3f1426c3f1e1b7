"""Least-squares marginal tables on huge domains, without the full data vector.

Measurements are noisy marginal tables ``y_a = w_a M_a x + noise`` (noise
standard deviation ``s_a``) over a domain of ``N = Π n_i`` cells, N possibly
10¹⁰ or more. The generalized least-squares estimate is

    ``x̂ = P Σ_a (w_a / s_a²) M_aᵀ y_a``,  ``P = (Σ_a (w_a² / s_a²) C(a))⁺ = Σ_c u_c C(c)``

with ``C(c) = ⊗_i (I if i ∈ c else J)``: P stays in the marginal algebra
(:class:`~dpmm.linalg.MarginalsGram`). A marginal of the estimate,
``M_b x̂ = Σ_{a,c} u_c (w_a/s_a²) M_b C(c) M_aᵀ y_a``, is computed table to
table: a table is a function on the domain that is constant along the
attributes it does not hold, and ``M_aᵀ`` (broadcast), ``C(c)`` (sum out the
attributes outside c) and ``M_b`` (sum out those outside b) act on that
representation, summing an axis the table holds or multiplying by ``n_i`` for
one it is constant along. No array is larger than the largest table involved.

Each cell of ``M_b x̂`` has variance ``diag(M_b P M_bᵀ)``, constant over the
table (:func:`dpmm.linalg.query_variances`); these standard errors are exact.

Not provided here: non-negative, mutually consistent marginal tables (a
graphical-model estimate such as private-pgm's). The least-squares tables are
consistent with each other (they are marginals of one x̂) but may be negative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Marginal, MarginalsGram, query_variances
from dpmm.linalg.marginals import members_mask
from dpmm.reconstruct.answers import WorkloadAnswers
from dpmm.reconstruct.protocol import ReconstructionError

__all__ = ["MarginalMeasurement", "marginal_tables", "noise_coefficients"]

#: Measured sets × coefficients grouped at once (bounds the arrays of one step).
GROUPING_SIZE = 1 << 20


@dataclass(frozen=True, eq=False)
class MarginalMeasurement:
    """A noisy marginal table: ``values = weight · M_attrs x + noise``.

    Attributes:
        attrs: Attribute positions of the table (any order; stored sorted).
        values: The noisy table, flat or shaped ``[n_i for i in sorted(attrs)]``.
        noise_std: The noise standard deviation of every cell.
        weight: The weight the marginal was measured with.
    """

    attrs: tuple[int, ...]
    values: np.ndarray
    noise_std: float
    weight: float = 1.0


def _sizes_outside(shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``masks ↦ Π n_i`` over the attributes outside each mask, by one lookup per byte.

    Masks are bit sets (int64, or Python integers in an object array past 62 attributes);
    each byte of the complement indexes a table of the products of its 8 attributes' sizes.
    """
    full = (1 << len(shape)) - 1
    tables = []
    for start in range(0, len(shape), 8):
        members = np.arange(1 << min(8, len(shape) - start))
        table = np.ones(members.size)
        for j, n in enumerate(shape[start : start + 8]):
            table[members >> j & 1 == 1] *= n
        tables.append(table)

    def outside(masks: np.ndarray) -> np.ndarray:
        missing = full & ~masks
        product = np.ones(masks.shape)
        for k, table in enumerate(tables):
            product *= table[((missing >> (8 * k)) & 255).astype(np.intp)]
        return product

    return outside


def _subset_positions(
    b: int, attributes: int
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``masks ↦ (every subset of b in increasing order, each mask's b-part's position
    there)``, read off the mask's bits in b: what ``np.unique(masks & b,
    return_inverse=True)`` gives without sorting, with the subsets never met too."""
    held = [i for i in range(attributes) if b >> i & 1]
    positions = np.arange(1 << len(held), dtype=np.int64)
    subsets = np.zeros_like(positions)
    for k, i in enumerate(held):  # position bit k is attribute i: the order is kept
        subsets |= ((positions >> k) & 1) << i

    def locate(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.zeros(masks.shape, dtype=np.int64)
        for k, i in enumerate(held):
            found |= ((masks >> i) & 1) << k
        return subsets, found

    return locate


def _terms(
    b: int,
    sets: list[int],
    weights: Sequence[float],
    P: MarginalsGram,
    shape: tuple[int, ...],
) -> Iterator[tuple[int, int, float]]:
    """``(measured index, d, G)`` with ``M_b x̂ = Σ G · (y_index summed to d, broadcast
    over b)``, ``d ⊆ b``; ``weights[index]`` is ``w_a / s_a²``.

    ``M_b C(c) M_aᵀ y_a`` is ``y_a`` summed to ``d = a ∩ b ∩ c``, times the sizes of the
    attributes outside ``a ∪ c`` and outside ``b ∪ (a ∩ c)``: the coefficients ``u_c``
    are grouped by ``(a, d)`` (vectorized over measured sets and coefficients), so each
    measured table is summed once per subset, not once per coefficient.
    """
    # Attribute sets are bit masks: int64 holds 62 attributes, Python integers any number.
    kind = np.int64 if len(shape) <= 62 else object
    masks = np.array(list(P.coefficients), dtype=kind)
    coefficients = np.fromiter(P.coefficients.values(), dtype=np.float64)
    measured = np.array(sets, dtype=kind)
    outside = _sizes_outside(shape)
    rows = max(1, GROUPING_SIZE // max(masks.size, 1))
    # b's subsets numbered directly where there are no more of them than coefficients.
    direct = kind is np.int64 and 1 << b.bit_count() <= masks.size
    positions = _subset_positions(b, len(shape)) if direct else None
    for start in range(0, measured.size, rows):
        a = measured[start : start + rows, None]
        meets = a & masks
        factors = coefficients * outside(a | masks) * outside(b | meets)
        if positions is None:
            subsets, which = np.unique(meets & b, return_inverse=True)
            which = which.reshape(meets.shape)
        else:
            subsets, which = positions(meets)
        which = which + subsets.size * np.arange(meets.shape[0])[:, None]
        cells = meets.shape[0] * subsets.size
        grouped = np.bincount(which.ravel(), weights=factors.ravel(), minlength=cells)
        grouped = grouped.reshape(meets.shape[0], subsets.size)
        for row, column in zip(*np.nonzero(grouped), strict=True):
            index = start + int(row)
            yield index, int(subsets[column]), float(grouped[row, column]) * weights[index]


def _parts(
    b: int,
    sets: list[int],
    tables: list[np.ndarray],
    measurements: Sequence[MarginalMeasurement],
    P: MarginalsGram,
    shape: tuple[int, ...],
    sums: dict[tuple[int, int], np.ndarray],
) -> dict[int, np.ndarray]:
    """``M_b x̂`` as tables on subsets ``d`` of b (each constant along ``b \\ d``)."""
    weights = [m.weight / m.noise_std**2 for m in measurements]
    parts: dict[int, np.ndarray] = {}
    for index, d, factor in _terms(b, sets, weights, P, shape):
        key = (index, d)
        if key not in sums:
            held = [i for i in range(len(shape)) if sets[index] >> i & 1]
            axes = tuple(pos for pos, i in enumerate(held) if not d >> i & 1)
            sums[key] = tables[index].sum(axis=axes) if axes else tables[index]
        term = factor * sums[key]
        parts[d] = parts[d] + term if d in parts else term
    return parts


def noise_coefficients(
    domain_shape: Sequence[int],
    measured: Sequence[tuple[Sequence[int], float]],
    attrs: Sequence[int],
    rows: np.ndarray,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The coefficients of least-squares answers ``r · M_attrs x̂`` on the measured cells'
    noise, as distinct magnitudes (repeats allowed) with multiplicities, one per row ``r``.

    By :func:`_parts`, the answer of cell v of the table over b is
    ``Σ_{(a,d)} G(a, d) Σ_{u: u_d = v_d} y_a[u]``, so ``r``'s coefficient on cell u of a
    measured table a is ``Σ_d G(a, d) R_d[u_d]`` with ``R_d`` the row summed to the
    attributes d ⊆ a ∩ b: a function of u's attributes in a ∩ b only, repeated
    ``Π_{a \\ b} n_i`` times. Nothing larger than ``|rows| × |a ∩ b|`` is formed.

    Args:
        domain_shape: Attribute sizes.
        measured: ``(attributes, weight)`` per measured table, every cell's noise of one
            standard deviation (least squares' coefficients do not depend on it).
        attrs: The answered table's attributes.
        rows: ``(queries, cells of that table)``: each answer's row on it (C order over
            the sorted attributes).

    Example:
        >>> [(v.tolist(), c.tolist()) for v, c in noise_coefficients((3,), [((0,), 1.0)],
        ...     (0,), np.array([[1.0, 1.0, 0.0]]))]   # y₀ + y₁ from the table itself
        [([1.0, 1.0, 0.0], [1, 1, 1])]
    """
    shape = tuple(int(n) for n in domain_shape)
    sets = [members_mask(sorted(int(i) for i in a)) for a, _ in measured]
    weights = [float(w) for _, w in measured]
    P = MarginalsGram(shape, {mask: w**2 for mask, w in zip(sets, weights, strict=True)}).pinv()
    b_attrs = sorted(int(i) for i in attrs)
    b = members_mask(b_attrs)
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, *[shape[i] for i in b_attrs])
    per_table: dict[int, dict[int, float]] = {}
    for index, d, factor in _terms(b, sets, weights, P, shape):
        per_table.setdefault(index, {})[d] = factor
    parts = []  # (coefficients: queries × cells of a ∩ b, multiplicity)
    for index, terms in per_table.items():
        common = [i for i in b_attrs if sets[index] >> i & 1]
        block = np.zeros((rows.shape[0], *[shape[i] for i in common]))
        for d, factor in terms.items():
            axes = tuple(1 + pos for pos, i in enumerate(b_attrs) if not d >> i & 1)
            summed = rows.sum(axis=axes, keepdims=True) if axes else rows
            kept = [0] + [1 + pos for pos, i in enumerate(b_attrs) if i in common]
            block = block + factor * summed.reshape([summed.shape[k] for k in kept])
        outside_b = [i for i in range(len(shape)) if sets[index] >> i & 1 and i not in common]
        parts.append((block.reshape(rows.shape[0], -1), math.prod(shape[i] for i in outside_b)))
    counts = np.concatenate(
        [np.full(block.shape[1], repeats, dtype=np.int64) for block, repeats in parts]
        or [np.zeros(0, dtype=np.int64)]
    )
    for query in range(rows.shape[0]):
        yield np.concatenate([block[query] for block, _ in parts] or [np.zeros(0)]), counts


def _expand(table: np.ndarray, held: list[int], attrs: list[int], shape: tuple[int, ...]):
    """Broadcast a table over ``held ⊆ attrs`` to the full table over ``attrs``."""
    index = [slice(None) if i in held else np.newaxis for i in attrs]
    full = table[tuple(index)] if held or attrs else table
    return np.broadcast_to(full, [shape[i] for i in attrs])


def marginal_tables(
    domain_shape: Sequence[int],
    measurements: Sequence[MarginalMeasurement],
    queries: Sequence[Sequence[int]],
) -> dict[tuple[int, ...], WorkloadAnswers]:
    """Least-squares marginal tables, each with exact per-cell standard errors.

    Args:
        domain_shape: Attribute sizes ``n_1 … n_d`` (their product may be astronomical).
        measurements: The noisy marginal tables.
        queries: Attribute sets whose tables to estimate; each must lie inside a
            measured set (else it is not identifiable from the measurements).

    Returns:
        ``{sorted attrs: WorkloadAnswers}`` with the flattened table (C order over the
        sorted attributes) and its standard errors.

    Raises:
        ReconstructionError: a table of the wrong size, non-finite values, bad noise.
        UnsupportedQueryError: a query is not a subset of any measured attribute set.

    Example:
        >>> import numpy as np
        >>> shape = (10**5, 10**5, 10**4)                   # 10¹⁴ cells
        >>> y = MarginalMeasurement((0,), np.full(10**5, 2.0), noise_std=1.0)
        >>> tables = marginal_tables(shape, [y], [(), (0,)])
        >>> float(tables[()].values[0]), float(tables[(0,)].standard_errors[0])
        (200000.0, 1.0)
    """
    shape = tuple(int(n) for n in domain_shape)
    sets, tables = _check(shape, measurements)
    P = MarginalsGram(
        shape,
        {mask: m.weight**2 / m.noise_std**2 for mask, m in zip(sets, measurements, strict=True)},
    ).pinv()
    results: dict[tuple[int, ...], WorkloadAnswers] = {}
    sums: dict[tuple[int, int], np.ndarray] = {}  # (measured set, subset) → summed table
    for query in queries:
        attrs = sorted({int(i) for i in query})
        b = members_mask(attrs)
        if not any(b & ~a == 0 for a in sets):
            raise UnsupportedQueryError(
                f"The marginal on attributes {attrs} is not contained in any measured "
                "marginal, so least squares cannot estimate it."
            )
        estimate = np.zeros([shape[i] for i in attrs])
        for d, part in _parts(b, sets, tables, measurements, P, shape, sums).items():
            held = [i for i in range(len(shape)) if d >> i & 1]
            estimate = estimate + _expand(part, held, attrs, shape)
        variances = query_variances(Marginal(shape, attrs), P)
        results[tuple(attrs)] = WorkloadAnswers(
            values=estimate.reshape(-1),
            standard_errors=np.sqrt(np.maximum(variances, 0.0)),
            method="least_squares",
            exact_errors=True,
        )
    return results


def _check(
    shape: tuple[int, ...], measurements: Sequence[MarginalMeasurement]
) -> tuple[list[int], list[np.ndarray]]:
    if not measurements:
        raise ReconstructionError("Marginal reconstruction needs at least one measured table.")
    sets, tables = [], []
    for m in measurements:
        attrs = sorted({int(i) for i in m.attrs})
        if any(not 0 <= i < len(shape) for i in attrs):
            raise ReconstructionError(
                f"Measured attributes {attrs} lie outside a domain of {len(shape)} attributes."
            )
        cells = math.prod(shape[i] for i in attrs)
        values = np.asarray(m.values, dtype=np.float64)
        if values.size != cells:
            raise ReconstructionError(
                f"The measured marginal on {attrs} has {values.size:,} values but {cells:,} cells."
            )
        if not np.all(np.isfinite(values)):
            raise ReconstructionError(
                f"The measured marginal on {attrs} contains NaN or infinite values."
            )
        if not (np.isfinite(m.noise_std) and m.noise_std > 0 and np.isfinite(m.weight)):
            raise ReconstructionError(
                f"The marginal on {attrs} needs a positive noise_std and a finite weight."
            )
        sets.append(members_mask(attrs))
        tables.append(values.reshape([shape[i] for i in attrs]))
    if len(set(sets)) != len(sets):
        raise ReconstructionError("The same marginal is measured twice; merge the tables first.")
    return sets, tables
