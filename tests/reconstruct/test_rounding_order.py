"""The order tables are rounded in: found whenever one exists, joint tables otherwise."""

from __future__ import annotations

import itertools
import math

import numpy as np

from dpmm.reconstruct.rounding_order import _largest, _options, rounding_plan, rounding_steps

SEED = 20261127


def _random_family(rng: np.random.Generator, tables: int, attributes: int) -> list[tuple]:
    return [
        tuple(sorted(int(i) for i in rng.choice(attributes, int(rng.integers(2, 5)), False)))
        for _ in range(tables)
    ]


def _orderable(sets: list[tuple]) -> bool:
    """Whether some order of the largest tables rounds each from a table it shares (every
    permutation tried)."""
    for order in itertools.permutations(_largest(sets)):
        done: list[tuple] = []
        for attrs in order:
            if not _options([attrs], done):
                break
            done.append(attrs)
        else:
            return True
    return False


def test_an_order_is_found_whenever_one_exists() -> None:
    """Random families of up to 6 tables against every permutation; each step found starts
    from a table holding every other table it shares with those before it."""
    rng = np.random.default_rng(SEED)
    found = 0
    for _ in range(400):
        sets = _random_family(rng, int(rng.integers(2, 7)), int(rng.integers(4, 7)))
        steps, stuck = rounding_steps(sets)
        assert (stuck is None) == _orderable(sets), sets
        if stuck is not None:
            assert stuck.table in _largest(sets) and len(stuck.shared) >= 2
            continue
        found += 1
        assert sorted(attrs for attrs, _ in steps) == sorted(_largest(sets))
        for position, (attrs, start) in enumerate(steps):
            earlier = [a for a, _ in steps[:position]]
            shared = {tuple(i for i in attrs if i in a) for a in earlier}
            assert all(set(s) <= set(start) for s in shared if len(s) >= 2)
    assert 0 < found < 400


def test_families_no_order_rounds_go_through_their_joint_tables() -> None:
    """Random families of 3-way tables: where no order exists, each component's joint table
    is rounded instead when small enough; every table then lies in one table of the steps
    found, and a refusal names a table and a joint table over the limit."""
    rng = np.random.default_rng(SEED + 1)
    joined = refused = 0
    for _ in range(200):
        attributes = int(rng.integers(4, 7))
        sizes = [int(s) for s in rng.integers(2, 12, attributes)]
        sets = [
            tuple(sorted(int(i) for i in rng.choice(attributes, 3, False)))
            for _ in range(int(rng.integers(2, 6)))
        ]
        limit = int(rng.choice([200, 2000, 10**5]))
        plan = rounding_plan(sets, sizes, limit)
        orderable = rounding_steps(sets)[1] is None
        assert not (orderable and (plan.joins or plan.stuck))
        if plan.stuck is not None:
            refused += 1
            assert plan.stuck.cells == math.prod(sizes[i] for i in plan.stuck.joint) > limit
            assert set(plan.stuck.table) <= set(plan.stuck.joint)
            continue
        assert bool(plan.joins) == (not orderable)
        joined += bool(plan.joins)
        rounded = [attrs for attrs, _ in plan.steps]
        assert set(plan.joins) <= set(rounded)
        assert all(any(set(s) <= set(r) for r in rounded) for s in sets)
        for joint in plan.joins:
            assert math.prod(sizes[i] for i in joint) <= limit
        assert rounding_steps(rounded)[1] is None
    assert joined and refused


def test_every_three_way_table_of_four_attributes_is_one_joint_table() -> None:
    family = list(itertools.combinations(range(4), 3))
    steps, stuck = rounding_steps(family)
    assert len(steps) == 2 and stuck is not None and len(stuck.shared) == 2
    plan = rounding_plan(family, [5, 2, 6, 2], 10**5)
    assert plan.joins == [(0, 1, 2, 3)] and plan.steps == [((0, 1, 2, 3), (0,))]
    refused = rounding_plan(family, [5, 2, 6, 2], 119)
    assert refused.stuck is not None and refused.stuck.cells == 120
