"""Weighted least-squares projection of marginal tables onto the consistent ones.

A family of tables ``μ_a`` (attribute sets a, any domain size) is *consistent* when
``μ_a = M_a x`` for some real vector x. Write ``Q_i = I − J/n_i`` and, for ``S ⊆ a``,

    ``φ_{a,S} = (⊗_{i∈S} Q_i) marg_S(μ_a)``  (the centred S-marginal of ``μ_a``).

These are the table's coordinates in the orthogonal decomposition of the marginal
algebra (:mod:`dpmm.linalg.marginals`, ``E_S``): ``μ_a = Σ_{S⊆a} φ_{a,S} / n_{a∖S}``
broadcast over ``a∖S`` (``n_B = Π_{i∈B} n_i``), the terms are orthogonal and
``‖μ_a‖² = Σ_{S⊆a} ‖φ_{a,S}‖² / n_{a∖S}``. If ``μ_a = M_a x`` then ``φ_{a,S} = Q_S M_S x``
depends on S alone; conversely tables whose coordinates agree (``φ_{a,S} = φ_S``) are the
marginals of ``x = Σ_S φ_S``-broadcast ``/ n_{[d]∖S}``. So pairwise agreement on shared
sub-marginals is the same as being marginals of one real vector (it is not for
non-negative vectors; see :mod:`dpmm.reconstruct.consistent_tables`).

With one weight ``w_a`` per table the squared distance ``Σ_a w_a ‖μ_a − t_a‖²`` splits
over S, and its minimum over consistent μ is a weighted average per S:

    ``φ_S = Σ_{a⊇S} (w_a / n_{a∖S}) φ_{a,S} / Σ_{a⊇S} (w_a / n_{a∖S})``,

then ``μ_a = t_a + Σ_S (φ_S − φ_{a,S}) / n_{a∖S}`` over the S shared by two or more
tables (an S inside one table only keeps its coordinate). A known total fixes ``φ_∅``.
Tables with equal attribute sizes are stacked and processed together, and the only
arrays are the tables themselves and their lower-order coordinates: memory is
O(Σ table sizes), never O(domain). One projection costs O(k · Σ table sizes) for
k-way tables (k reductions and k broadcast additions per table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import ArgumentError

__all__ = ["TableLayout"]

Positions = tuple[int, ...]


def _subset_positions(k: int) -> list[Positions]:
    """Every subset of ``range(k)`` as sorted positions, largest first (parents before)."""
    return [
        tuple(p for p in range(k) if bits >> p & 1)
        for bits in sorted(range(1 << k), key=lambda b: -b.bit_count())
    ]


def _marginal(memo: dict[Positions, np.ndarray], positions: Positions) -> np.ndarray:
    """The stacked marginal on ``positions``, summed from a memoized parent one axis larger.

    A module function, not a closure: a recursive closure is a reference cycle that would
    keep the stacks alive until the cyclic garbage collector happens to run.
    """
    if positions not in memo:
        k = max(len(p) for p in memo)
        extra = next(p for p in range(k) if p not in positions)
        parent = tuple(sorted((*positions, extra)))
        memo[positions] = _marginal(memo, parent).sum(axis=1 + parent.index(extra))
    return memo[positions]


@dataclass
class _Part:
    """One subset position tuple P of a group: the sets ``S_j = attrs_j[P]`` it reaches."""

    positions: Positions
    sizes: tuple[int, ...]  # n_i for i ∈ S (the stored coordinate's shape)
    rows: np.ndarray  # row of each table's S in the store of its size class
    outside: float  # n_{a∖S}, equal for the whole group
    scales: np.ndarray  # each table's weight in the average of S: w_a / n_{a∖S} by default


@dataclass
class _Group:
    """Tables with equal attribute sizes, stacked along a leading axis."""

    sizes: tuple[int, ...]
    keys: list[tuple[int, ...]]
    weights: np.ndarray
    parts: list[_Part]


class TableLayout:
    """The attribute sets of a family of tables, and the weighted projection onto consistency.

    Args:
        sizes: ``{sorted attribute tuple: table shape}`` (validated by the caller).
        weights: one positive weight per table (same keys).
        total: a known total, or None to estimate it with the other shared coordinates.
        coordinate_weights: ``{table: {subset S: weight}}`` to average each shared
            coordinate ``φ_S`` with its own weights instead of ``w_a / n_{a∖S}`` (the
            tables' errors need not be alike on every coordinate); the projection is then
            orthogonal in the inner product these weights define, not in :meth:`inner`'s.
    """

    def __init__(
        self,
        sizes: Mapping[tuple[int, ...], tuple[int, ...]],
        weights: Mapping[tuple[int, ...], float],
        total: float | None = None,
        coordinate_weights: Mapping[tuple[int, ...], Mapping[tuple[int, ...], float]] | None = None,
    ) -> None:
        self.total = total
        by_sizes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for key, shape in sizes.items():
            by_sizes.setdefault(shape, []).append(key)
        # A coordinate S changes only if two tables hold it (or S = ∅ with a known total).
        holders: dict[tuple[int, ...], int] = {}
        for key in sizes:
            for positions in _subset_positions(len(key)):
                subset = tuple(key[p] for p in positions)
                holders[subset] = holders.get(subset, 0) + 1
        shared = {s for s, count in holders.items() if count > 1}
        if total is not None:
            shared.add(())
        lookup: dict[int, int] = {}
        for key, shape in sizes.items():
            lookup.update(zip(key, shape, strict=True))
        self.rows: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}
        counts: dict[tuple[int, ...], int] = {}
        for subset in sorted(shared, key=lambda s: (len(s), s)):
            shape = tuple(lookup[i] for i in subset)
            self.rows[subset] = (shape, counts.get(shape, 0))
            counts[shape] = counts.get(shape, 0) + 1
        self.groups: list[_Group] = []
        for shape, keys in by_sizes.items():
            w = np.array([float(weights[key]) for key in keys])
            parts = []
            for positions in _subset_positions(len(shape)):
                subsets = [tuple(key[p] for p in positions) for key in keys]
                if not any(s in shared for s in subsets):
                    continue
                kept = tuple(shape[p] for p in positions)
                outside = math.prod(shape) / math.prod(kept)
                # A table whose S is not shared still gets a (private) row: it averages
                # with itself only, which leaves it unchanged.
                rows = np.array([self._row(s, kept, counts) for s in subsets], dtype=np.int64)
                scales = (
                    w / outside
                    if coordinate_weights is None
                    else np.array(
                        [coordinate_weights[k][s] for k, s in zip(keys, subsets, strict=True)]
                    )
                )
                parts.append(_Part(positions, kept, rows, outside, scales))
            self.groups.append(_Group(shape, keys, w, parts))
        self.class_sizes = dict(counts)
        self.denominators = {shape: np.zeros(n) for shape, n in counts.items()}
        for group in self.groups:
            for part in group.parts:
                np.add.at(self.denominators[part.sizes], part.rows, part.scales)

    def _row(self, subset: tuple[int, ...], kept: tuple[int, ...], counts: dict) -> int:
        if subset in self.rows:
            return self.rows[subset][1]
        row = counts.get(kept, 0)
        counts[kept] = row + 1
        self.rows[subset] = (kept, row)
        return row

    # ----------------------------------------------------------------- conversions
    def stack(self, tables: Mapping[tuple[int, ...], np.ndarray]) -> list[np.ndarray]:
        """The tables as one float64 array per group, shaped ``(tables, *sizes)``."""
        return [
            np.stack([np.asarray(tables[key], dtype=np.float64) for key in g.keys]).reshape(
                len(g.keys), *g.sizes
            )
            for g in self.groups
        ]

    def unstack(self, stacks: Sequence[np.ndarray]) -> dict[tuple[int, ...], np.ndarray]:
        """``{sorted attrs: table}`` from the group stacks (views, not copies)."""
        return {
            key: stack[j]
            for g, stack in zip(self.groups, stacks, strict=True)
            for j, key in enumerate(g.keys)
        }

    # ----------------------------------------------------------------- geometry
    def inner(self, left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> float:
        """``Σ_a w_a ⟨left_a, right_a⟩``: the inner product the projection is orthogonal in."""
        return math.fsum(
            float(g.weights @ (a * b).reshape(len(g.keys), -1).sum(axis=1))
            for g, a, b in zip(self.groups, left, right, strict=True)
        )

    def _coordinates(self, group: _Group, stack: np.ndarray) -> list[np.ndarray]:
        """``φ_{a,S}`` of every part: marginals by repeated sums (memoized), then centred."""
        marginals: dict[Positions, np.ndarray] = {tuple(range(len(group.sizes))): stack}
        coordinates = []
        for part in group.parts:
            centred = _marginal(marginals, part.positions)
            for axis in range(1, centred.ndim):
                centred = centred - centred.mean(axis=axis, keepdims=True)
            coordinates.append(centred)
        return coordinates

    def project(self, stacks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The weighted least-squares consistent tables nearest ``stacks`` (new arrays)."""
        numerators = {shape: np.zeros((n, *shape)) for shape, n in self.class_sizes.items()}
        coordinates = []
        for group, stack in zip(self.groups, stacks, strict=True):
            phis = self._coordinates(group, stack)
            coordinates.append(phis)
            for part, phi in zip(group.parts, phis, strict=True):
                scaled = phi * part.scales.reshape(-1, *[1] * len(part.sizes))
                np.add.at(numerators[part.sizes], part.rows, scaled)
        consensus = {
            shape: numerators[shape] / self.denominators[shape].reshape(-1, *[1] * len(shape))
            for shape in numerators
        }
        if self.total is not None:
            consensus[()][self.rows[()][1]] = self.total
        result = []
        for group, stack, phis in zip(self.groups, stacks, coordinates, strict=True):
            out = stack.copy()
            k = len(group.sizes)
            for part, phi in zip(group.parts, phis, strict=True):
                change = (consensus[part.sizes][part.rows] - phi) / part.outside
                broadcast = [group.sizes[p] if p in part.positions else 1 for p in range(k)]
                out += change.reshape(len(group.keys), *broadcast)
            result.append(out)
        return result

    def disagreement(self, stacks: Sequence[np.ndarray]) -> float:
        """The largest difference between two tables' marginals on a shared attribute set."""
        highest = {shape: np.full((n, *shape), -np.inf) for shape, n in self.class_sizes.items()}
        lowest = {shape: np.full((n, *shape), np.inf) for shape, n in self.class_sizes.items()}
        for group, stack in zip(self.groups, stacks, strict=True):
            k = len(group.sizes)
            for part in group.parts:
                axes = tuple(1 + p for p in range(k) if p not in part.positions)
                marginal = stack.sum(axis=axes) if axes else stack
                np.maximum.at(highest[part.sizes], part.rows, marginal)
                np.minimum.at(lowest[part.sizes], part.rows, marginal)
        gaps = [
            float(np.max(highest[s] - lowest[s], initial=0.0, where=np.isfinite(lowest[s])))
            for s in highest
        ]
        return max(gaps, default=0.0)


def check_sizes(keys_and_shapes: Mapping[tuple[int, ...], tuple[int, ...]]) -> None:
    """Raise ArgumentError when one attribute has two different sizes across the tables."""
    seen: dict[int, tuple[int, tuple[int, ...]]] = {}
    for key, shape in keys_and_shapes.items():
        for attr, n in zip(key, shape, strict=True):
            if attr in seen and seen[attr][0] != n:
                raise ArgumentError(
                    f"Attribute {attr} has size {seen[attr][0]} in the table on "
                    f"{list(seen[attr][1])} but size {n} in the table on {list(key)}."
                )
            seen.setdefault(attr, (n, key))
