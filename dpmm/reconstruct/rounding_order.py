"""The order integer tables are rounded in without the data vector, decided from the
attribute sets alone (the plan decides it, the release follows it, the audit recomputes it).

:func:`~dpmm.reconstruct.integer.integer_tables` rounds each table not inside another one
attribute at a time from the one table of two or more attributes it shares with those
rounded before it: that is always feasible when every other table it shares with them lies
inside that one (an integer table with two fixed 2-way margins need not exist).

* :func:`rounding_steps` searches for such an order: the one taking, at each step, the
  table sharing the most attributes with those before it (ties: fewer attributes, then
  attribute order), and where that path runs into a table it cannot round, the other
  orders (depth first, memoized on the tables left, at most :data:`SEARCH_LIMIT` sets
  of them).
* :func:`rounding_plan`: where no order exists (every 3-way table of four attributes,
  say), the tables sharing two or more attributes with each other (a component) are
  rounded through their attributes' joint table instead, one table they all lie inside,
  when it has at most the cell limit; what is still left is refused, with the table, the
  tables it shares, and the joint table too large.

Example:
    >>> rounding_steps([(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)])[1].table
    (0, 2, 3)
    >>> rounding_plan([(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)], [2, 3, 4, 5], 10**5)
    RoundingPlan(joins=[(0, 1, 2, 3)], steps=[((0, 1, 2, 3), (0,))], stuck=None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["SEARCH_LIMIT", "RoundingPlan", "Step", "Stuck", "rounding_plan", "rounding_steps"]

#: The most sets of tables left :func:`rounding_steps` tries before it gives up (a family
#: of k tables has at most 2^k; 14 or fewer tables are searched whole).
SEARCH_LIMIT = 2**14

#: One rounding step: a table (sorted attributes) and the sub-table it starts from (one of
#: its attributes, or a table shared with one rounded before it), extended by its other
#: attributes one at a time.
Step = tuple[tuple[int, ...], tuple[int, ...]]


class Stuck(NamedTuple):
    """A table no order can round: the distinct tables of two or more attributes it shares
    with those rounded before it, and (from :func:`rounding_plan`) the joint table of its
    component's attributes with its cells, too large to round instead."""

    table: tuple[int, ...]
    shared: list[tuple[int, ...]]
    joint: tuple[int, ...] = ()
    cells: int = 0


class RoundingPlan(NamedTuple):
    """Joint tables rounded in place of the tables inside them, the steps, what is left."""

    joins: list[tuple[int, ...]]
    steps: list[Step]
    stuck: Stuck | None


def _largest(sets: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """The distinct sets of two or more attributes inside no other, by size then order."""
    wanted = {tuple(attrs) for attrs in sets if len(attrs) >= 2}
    return sorted(
        (a for a in wanted if not any(set(a) < set(b) for b in wanted)),
        key=lambda attrs: (len(attrs), attrs),
    )


def _shared(attrs: tuple[int, ...], earlier: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The distinct tables of two or more attributes ``attrs`` shares with ``earlier``,
    smallest first."""
    found = {tuple(i for i in attrs if i in other) for other in earlier}
    return sorted((s for s in found if len(s) >= 2), key=lambda s: (len(s), s))


def _options(left: list[tuple[int, ...]], done: list[tuple[int, ...]]) -> list[Step]:
    """The tables of ``left`` that can be rounded next, each from the largest table it
    shares with ``done`` (which must hold the others), most shared attributes first."""
    found = []
    for attrs in left:
        shared = _shared(attrs, done)
        top = shared[-1] if shared else attrs[:1]
        if all(set(s) <= set(top) for s in shared):
            found.append((attrs, top))
    return sorted(found, key=lambda step: -len(step[1]))  # stable: ties keep left's order


def rounding_steps(sets: Sequence[Sequence[int]]) -> tuple[list[Step], Stuck | None]:
    """An order rounding the largest of ``sets`` (those of two or more attributes inside
    no other) one at a time, each from a table it shares (see the module docstring).

    Returns:
        The steps, and None; or the steps of the first path that stopped and the table it
        stopped at (no order was found).

    Example:
        >>> rounding_steps([(0, 1), (0, 1, 2), (1, 2, 3), (2, 4)])
        ([((2, 4), (2,)), ((0, 1, 2), (0,)), ((1, 2, 3), (1, 2))], None)
    """
    failed: set[frozenset[tuple[int, ...]]] = set()
    first_stop: list[tuple[list[Step], Stuck]] = []

    def search(steps: list[Step], left: list[tuple[int, ...]]) -> list[Step] | None:
        if not left:
            return steps
        key = frozenset(left)
        if key in failed or len(failed) >= SEARCH_LIMIT:
            return None
        done = [attrs for attrs, _ in steps]
        options = _options(left, done)
        if not options and not first_stop:
            first_stop.append((steps, Stuck(left[0], _shared(left[0], done))))
        for attrs, top in options:
            found = search([*steps, (attrs, top)], [a for a in left if a != attrs])
            if found is not None:
                return found
        failed.add(key)
        return None

    found = search([], _largest(sets))
    if found is not None:
        return found, None
    return first_stop[0] if first_stop else ([], Stuck(_largest(sets)[0], []))


def _components(tables: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """``tables`` grouped by sharing two or more attributes (transitively), in order."""
    groups: list[list[tuple[int, ...]]] = []
    for attrs in tables:
        linked = [g for g in groups if any(len(set(attrs) & set(a)) >= 2 for a in g)]
        merged = [attrs] + [a for g in linked for a in g]
        groups = [g for g in groups if g not in linked] + [sorted(merged, key=tables.index)]
    return sorted(groups, key=lambda g: tables.index(g[0]))


def rounding_plan(sets: Sequence[Sequence[int]], sizes: Sequence[int], limit: int) -> RoundingPlan:
    """:func:`rounding_steps` for ``sets``, with each component no order can round
    replaced by its attributes' joint table (of at most ``limit`` cells; ``sizes`` are
    every attribute's), until one can, or a component's joint table is too large
    (``stuck``: its first table no order rounds, and the joint table)."""
    family = _largest(sets)
    joins: list[tuple[int, ...]] = []
    while True:
        steps, stuck = rounding_steps(family)
        if stuck is None:
            return RoundingPlan(joins, steps, None)
        component = next(c for c in _components(family) if rounding_steps(c)[1] is not None)
        _, left = rounding_steps(component)
        joint = tuple(sorted({i for attrs in component for i in attrs}))
        cells = math.prod(sizes[i] for i in joint)
        if cells > limit and left is not None:
            return RoundingPlan(joins, steps, left._replace(joint=joint, cells=cells))
        joins.append(joint)
        family = _largest([*family, joint])
