"""Integer rounding: exact optima against enumeration, consistency of top-down tables."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmm.errors import ArgumentError
from dpmm.reconstruct import integer
from dpmm.reconstruct.integer import (
    chained_table,
    closed_sets,
    cumulative_rounding,
    integer_tables,
    joint_estimate,
    margin_rounding,
    nearest_integer_table,
    nearest_integer_vector,
    rounded_total,
    rounding_steps,
    sliced_rounding,
)
from dpmm.reconstruct.rounding_order import rounding_plan

SEED = 20261127


def _compositions(total: int, parts: int):
    """Every vector of ``parts`` non-negative integers summing to ``total``."""
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *bars, total + parts - 1)
        yield np.array([edges[i + 1] - edges[i] - 1 for i in range(parts)])


def test_the_vector_is_the_nearest_in_squared_distance_among_all_integer_vectors() -> None:
    rng = np.random.default_rng(SEED)
    for _ in range(300):
        n, total = int(rng.integers(1, 5)), int(rng.integers(0, 7))
        values = rng.normal(total / n, 2.0, n).round(int(rng.integers(0, 3)))  # ties too
        rounded = nearest_integer_vector(values, total)
        assert rounded.dtype == np.int64 and rounded.sum() == total and rounded.min() >= 0
        best = min(float(np.sum((z - values) ** 2)) for z in _compositions(total, n))
        assert float(np.sum((rounded - values) ** 2)) == pytest.approx(best, abs=1e-9)


def test_the_vector_keeps_integers_and_is_deterministic() -> None:
    rng = np.random.default_rng(SEED + 1)
    counts = rng.integers(0, 50, 1000)
    assert np.array_equal(nearest_integer_vector(counts.astype(float), counts.sum()), counts)
    values = rng.normal(3, 4, 10_000)
    first = nearest_integer_vector(values, 30_000)
    assert np.array_equal(first, nearest_integer_vector(values.copy(), 30_000))
    assert first.sum() == 30_000 and first.min() >= 0
    assert np.array_equal(nearest_integer_vector(values, 0), np.zeros(10_000, np.int64))


def test_running_sums_keep_every_run_of_cells_within_one() -> None:
    rng = np.random.default_rng(SEED + 4)
    for _ in range(50):
        n = int(rng.integers(1, 300))
        values = rng.exponential(2.0, n) * (rng.random(n) < 0.3)  # sparse, like NNLS's
        total = int(rng.integers(0, 600))
        rounded = cumulative_rounding(values, total)
        assert rounded.dtype == np.int64 and rounded.sum() == total and rounded.min() >= 0
        scaled = values * (total / values.sum()) if values.sum() > 0 else np.full(n, total / n)
        # the run [i, j) moved by moved[j] - moved[i]
        moved = np.concatenate([[0.0], np.cumsum(rounded - scaled)])
        assert np.ptp(moved) <= 1.0 + 1e-9
    counts = rng.integers(0, 9, 500)
    assert np.array_equal(cumulative_rounding(counts.astype(float), counts.sum()), counts)
    with pytest.raises(ArgumentError, match="≥ 0"):
        cumulative_rounding(np.array([1.0, -0.5]), 1)


def _tables(rows: np.ndarray, columns: np.ndarray):
    """Every non-negative integer table with these margins (tiny ones only)."""
    candidates = [list(_compositions(int(r), columns.size)) for r in rows]
    for choice in itertools.product(*candidates):
        table = np.array(choice)
        if np.array_equal(table.sum(axis=0), columns):
            yield table


def test_the_table_is_the_nearest_in_l1_among_all_tables_with_its_margins() -> None:
    rng = np.random.default_rng(SEED + 2)
    for _ in range(60):
        m, n = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        table = rng.normal(1.0, 1.2, (m, n))
        total = int(rng.integers(0, 7))
        rows = nearest_integer_vector(table.sum(axis=1), total)
        columns = nearest_integer_vector(table.sum(axis=0), total)
        rounded = nearest_integer_table(table, rows, columns)
        assert np.array_equal(rounded.sum(axis=1), rows)
        assert np.array_equal(rounded.sum(axis=0), columns) and rounded.min() >= 0
        best = min(float(np.abs(t - table).sum()) for t in _tables(rows, columns))
        assert float(np.abs(rounded - table).sum()) == pytest.approx(best, abs=1e-9)


def _noisy_table(rng: np.random.Generator, m: int, n: int) -> tuple[np.ndarray, ...]:
    """A signed noisy table of sparse counts and integer margins moved off its own."""
    truth = rng.poisson(rng.exponential(2.0, (m, n)) * (rng.random((m, n)) < 0.5))
    total = int(truth.sum()) + int(rng.integers(0, 6))
    rows = nearest_integer_vector(truth.sum(axis=1) + rng.normal(0, 2, m), total)
    columns = nearest_integer_vector(truth.sum(axis=0) + rng.normal(0, 2, n), total)
    return truth + rng.normal(0, 1.5, (m, n)), rows, columns


def test_margin_rounding_always_holds_both_margins() -> None:
    """The rule behind a capped solve: random signed tables (some all zero, some one
    line), margins away from the table's: integer, non-negative, on both margins; a
    table already integer on its own margins comes back unchanged."""
    rng = np.random.default_rng(SEED + 44)
    for case in range(200):
        m, n = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        table, rows, columns = _noisy_table(rng, m, n)
        if case % 10 == 0:
            table = np.zeros((m, n))
        rounded = margin_rounding(table, rows, columns)
        assert rounded.dtype == np.int64 and rounded.shape == (m, n) and rounded.min() >= 0
        assert np.array_equal(rounded.sum(axis=1), rows)
        assert np.array_equal(rounded.sum(axis=0), columns)
        counts = rng.poisson(3.0, (m, n))
        kept = margin_rounding(counts.astype(float), counts.sum(axis=1), counts.sum(axis=0))
        assert np.array_equal(kept, counts)


def test_a_solve_stopped_at_its_limit_falls_back_to_the_rule(monkeypatch) -> None:
    """HiGHS given no iterations returns no optimum: the table is the rule's, on its
    margins, and still deterministic; an optimum is never worse in L1."""
    rng = np.random.default_rng(SEED + 45)
    cases = [
        _noisy_table(rng, int(rng.integers(2, 30)), int(rng.integers(2, 30))) for _ in range(8)
    ]
    solved = [nearest_integer_table(*case) for case in cases]
    monkeypatch.setattr(integer, "TABLE_ITERATIONS", 0)
    for (table, rows, columns), optimum in zip(cases, solved, strict=True):
        fallback = nearest_integer_table(table, rows, columns)
        assert np.array_equal(fallback, margin_rounding(table, rows, columns))
        assert np.array_equal(fallback, nearest_integer_table(table, rows, columns))
        assert fallback.min() >= 0 and np.array_equal(fallback.sum(axis=1), rows)
        assert np.array_equal(fallback.sum(axis=0), columns)
        assert np.abs(optimum - table).sum() <= np.abs(fallback - table).sum() + 1e-9
    assert any(
        not np.array_equal(optimum, margin_rounding(*case))
        for case, optimum in zip(cases, solved, strict=True)
    )  # the limit did change what was returned


def test_top_down_tables_are_integer_non_negative_and_consistent() -> None:
    rng = np.random.default_rng(SEED + 3)
    shape = (4, 3, 5, 2)
    for _ in range(20):
        x = rng.poisson(3.0, shape) + rng.normal(0, 2.0, shape)  # a noisy, signed estimate
        pairs = [s for k in (1, 2) for s in itertools.combinations(range(4), k)]
        sets = closed_sets([s for s in pairs if rng.random() < 0.6])
        tables = {
            s: x.sum(axis=tuple(i for i in range(4) if i not in s)) + rng.normal(0, 0.5)
            for s in sets
        }
        total = rounded_total(float(x.sum()))
        rounded = integer_tables(tables, total)
        assert set(rounded) == set(sets)
        for attrs, table in rounded.items():
            assert table.dtype == np.int64 and table.min() >= 0 and table.sum() == total
            for i in attrs if len(attrs) == 2 else ():
                axis = 1 - attrs.index(i)
                assert np.array_equal(table.sum(axis=axis), rounded[(i,)])


def test_closed_sets_add_the_margins_of_two_way_sets() -> None:
    assert closed_sets([(1, 3), (0,)]) == [(0,), (1,), (3,), (1, 3)]
    assert closed_sets([()]) == [()]


def test_refusals_name_the_problem(monkeypatch) -> None:
    three = {s: np.ones((2,) * len(s)) for s in closed_sets([(0, 1, 2), (0, 1, 3), (0, 2, 3)])}
    assert integer_tables(three, 8)[(0, 2, 3)].sum() == 8  # through the 16-cell joint table
    monkeypatch.setattr(integer, "TABLE_CELL_LIMIT", 15)
    shares = r"on \[0, 2, 3\] shares the tables on \[0, 2\] and \[0, 3\] .* has 16 cells"
    with pytest.raises(ArgumentError, match=shares):
        integer_tables(three, 8)
    with pytest.raises(ArgumentError, match="1-way margins"):
        integer_tables({(0, 1): np.ones((2, 2))}, 4)
    with pytest.raises(ArgumentError, match="sums to"):
        nearest_integer_vector(np.ones(3), -1)
    with pytest.raises(ArgumentError, match="finite"):
        nearest_integer_vector(np.array([1.0, np.nan]), 1)
    with pytest.raises(ArgumentError, match="one total"):
        nearest_integer_table(np.ones((2, 2)), [1, 1], [1, 2])
    with pytest.raises(ArgumentError, match="finite"):
        rounded_total(float("inf"))


def test_declared_one_way_tables_replace_their_estimates_top_down() -> None:
    rng = np.random.default_rng(SEED + 40)
    for _ in range(20):
        m, n = (int(s) for s in rng.integers(2, 6, 2))
        table = rng.normal(5, 4, (m, n))
        declared = rng.multinomial(60, rng.dirichlet(np.ones(m)))
        tables = {(0,): table.sum(axis=1), (1,): table.sum(axis=0), (0, 1): table}
        rounded = integer_tables(tables, 60, {(0,): declared})
        assert np.array_equal(rounded[(0,)], declared)
        assert np.array_equal(rounded[(0, 1)].sum(axis=1), declared)
        assert np.array_equal(rounded[(0, 1)].sum(axis=0), rounded[(1,)])
    with pytest.raises(ArgumentError, match="must sum to 61"):
        integer_tables({(0,): np.ones(3)}, 61, {(0,): np.array([20, 20, 20])})


def test_sliced_rounding_gives_every_slice_its_total() -> None:
    rng = np.random.default_rng(SEED + 41)
    for _ in range(40):
        shape = tuple(int(s) for s in rng.integers(1, 6, 3))
        values = rng.exponential(2.0, shape) * (rng.random(shape) < 0.5)
        axes = [int(a) for a in rng.permutation(3)[: int(rng.integers(1, 3))]]
        totals = rng.integers(0, 30, [shape[a] for a in axes])
        rounded = sliced_rounding(values, axes, totals)
        assert rounded.shape == shape and rounded.dtype == np.int64 and rounded.min() >= 0
        others = tuple(a for a in range(3) if a not in axes)
        summed = rounded.sum(axis=others)  # its axes in domain order
        assert np.array_equal(summed, np.transpose(totals, np.argsort(axes)))
        assert np.array_equal(sliced_rounding(values.copy(), axes, totals.copy()), rounded)
        # The first slice in domain order carries nothing: its own running sums, rounded.
        first = tuple(0 if a in axes else slice(None) for a in range(3))
        one = cumulative_rounding(values[first], int(totals[(0,) * len(axes)]))
        assert np.array_equal(rounded[first], one)


def test_sliced_rounding_keeps_sums_across_slices_near_the_estimate() -> None:
    """A sparse estimate of 40 positions by 300 slices (the declared attribute the fastest,
    as age on the SF1 tables), each slice to its count: every block of consecutive slices
    by a run of consecutive positions stays within a few units of the estimate (here 2.1-2.7
    at worst). Rounding each slice on its own (the running sums of each, nothing carried)
    left blocks 13-22 off at worst on these estimates, and sums over all slices 14-16."""
    for seed in range(5):
        rng = np.random.default_rng(SEED + 43 + seed)
        values = rng.exponential(0.4, (40, 300)) * (rng.random((40, 300)) < 0.6)
        totals = cumulative_rounding(values.sum(axis=0), round(values.sum()))
        rounded = sliced_rounding(values, [1], totals)
        assert np.array_equal(rounded.sum(axis=0), totals)
        # Every block's error is a signed sum of four of these corner sums.
        corners = np.cumsum(np.cumsum(rounded - values, axis=0), axis=1)
        assert np.abs(corners).max() < 4.0
        assert np.abs(rounded.sum(axis=1) - values.sum(axis=1)).max() < 2.5


def _margins(table: np.ndarray) -> list[np.ndarray]:
    return [
        table.sum(axis=tuple(a for a in range(table.ndim) if a != i)) for i in range(table.ndim)
    ]


@pytest.mark.parametrize("carried", [False, True])
def test_a_chained_table_holds_its_start_and_every_margin(carried: bool) -> None:
    """Random noisy tables of 2-4 attributes, the margins moved away from the estimate's
    (declared counts need not agree with it): the result always exists, integer and
    non-negative, summing to the start over the added axes and to each margin."""
    rng = np.random.default_rng(SEED + 42)
    for _ in range(40):
        shape = tuple(int(s) for s in rng.integers(1, 6, int(rng.integers(2, 5))))
        truth = rng.poisson(rng.exponential(3.0, shape))
        real = truth + rng.normal(0, 2.0, shape)  # signed, like least squares
        total = int(truth.sum()) + int(rng.integers(0, 5))
        margins = [
            nearest_integer_vector(m + rng.normal(0, 3, m.size), total) for m in _margins(truth)
        ]
        fixed = int(rng.integers(1, len(shape)))
        start = (
            margins[0]
            if fixed == 1
            else chained_table(
                real.sum(axis=tuple(range(fixed, len(shape)))), margins[0], margins[1:fixed]
            )
        )
        table = chained_table(real, start, margins[fixed:], carried=carried)
        assert np.array_equal(table, chained_table(real, start, margins[fixed:], carried))
        assert table.dtype == np.int64 and table.shape == shape and table.min() >= 0
        assert np.array_equal(table.sum(axis=tuple(range(fixed, len(shape)))), start)
        for found, margin in zip(_margins(table), margins, strict=True):
            assert np.array_equal(found, margin)
    with pytest.raises(ArgumentError, match="does not extend"):
        chained_table(np.ones((2, 3)), np.array([3, 3]), [[2, 2]])


def test_a_carried_chain_moves_a_declared_margins_gap_within_runs_of_columns() -> None:
    """Four rows by 60 columns (sex and Hispanic origin by age): the estimate spreads each
    run of five columns evenly where the declared margin piles the run's count into its
    last column (a top-coded age, say), and the rows' shares differ from run to run.
    Carried, every row's sum over every run stays within a few units of the estimate's;
    L1 alone leaves where each column's gap goes to the vertex HiGHS returns."""
    rng = np.random.default_rng(SEED + 44)
    shares = rng.dirichlet(np.ones(4), 12)  # each run's row shares
    runs = rng.integers(50, 400, 12).astype(float)
    real = np.repeat((shares * runs[:, None]).T / 5, 5, axis=1) + rng.normal(0, 0.5, (4, 60))
    real = np.maximum(real, 0.0)
    declared = np.zeros((12, 5), dtype=np.int64)
    declared[:, 4] = np.round(real.sum(axis=0).reshape(12, 5).sum(axis=1))
    declared[0, 4] += real.sum().round() - declared.sum()  # one total
    start = nearest_integer_vector(real.sum(axis=1), int(declared.sum()))
    table = chained_table(real, start, [declared.reshape(-1)], carried=True)
    assert np.array_equal(table.sum(axis=0), declared.reshape(-1))
    assert np.array_equal(table.sum(axis=1), start)
    gaps = table.reshape(4, 12, 5).sum(axis=2) - real.reshape(4, 12, 5).sum(axis=2)
    assert np.abs(gaps).max() < 4.0


def test_rounding_steps_start_each_table_from_the_one_it_shares() -> None:
    steps, stuck = rounding_steps([(0, 1), (1, 2), (0, 1, 3), (1, 3, 4), (3, 4), (5, 6, 7)])
    assert stuck is None
    rounded = [attrs for attrs, _ in steps]  # (3, 4) is inside (1, 3, 4): its sums
    assert sorted(rounded) == [(0, 1, 3), (1, 2), (1, 3, 4), (5, 6, 7)]
    for position, (attrs, start) in enumerate(steps):
        earlier = {tuple(i for i in attrs if i in a) for a in rounded[:position]}
        shared = [s for s in earlier if len(s) >= 2]
        assert all(set(s) <= set(start) for s in shared) and set(start) < set(attrs)
        assert len(start) >= 2 or not shared
    # Every 3-way table of 4 attributes: the third shares two 2-way tables with the others.
    steps, stuck = rounding_steps(list(itertools.combinations(range(4), 3)))
    assert len(steps) == 2 and stuck is not None and len(stuck[1]) == 2


def test_three_way_tables_round_to_integer_consistent_tables() -> None:
    """Random families of 1- to 4-way tables over noisy, mutually inconsistent estimates,
    those no order rounds through their joint tables: every result integer, non-negative,
    on the total, and every two agreeing on the attributes they share."""
    rng = np.random.default_rng(SEED + 43)
    shape = (3, 2, 4, 3, 2)
    from_shared, joined = 0, 0
    for _ in range(40):
        count = int(rng.integers(1, 5))
        sets = [
            tuple(sorted(int(i) for i in rng.choice(5, int(rng.integers(2, 5)), replace=False)))
            for _ in range(count)
        ]
        plan = rounding_plan(sets, shape, 10**5)
        assert plan.stuck is None  # 144 cells: every joint table can be rounded
        from_shared += any(len(start) >= 2 for _, start in plan.steps)
        joined += bool(plan.joins)
        x = rng.poisson(2.0, shape) + rng.normal(0, 1.5, shape)
        tables = {
            s: x.sum(axis=tuple(i for i in range(5) if i not in s)) + rng.normal(0, 0.5)
            for s in closed_sets(sets)
        }
        total = rounded_total(float(x.sum()))
        rounded = integer_tables(tables, total)
        assert set(rounded) == set(tables)
        for attrs, table in rounded.items():
            assert table.dtype == np.int64 and table.min() >= 0 and table.sum() == total
            assert table.shape == tuple(shape[i] for i in attrs)
        for (a, first), (b, second) in itertools.combinations(rounded.items(), 2):
            shared = tuple(i for i in a if i in b)
            left = first.sum(axis=tuple(p for p, i in enumerate(a) if i not in shared))
            right = second.sum(axis=tuple(p for p, i in enumerate(b) if i not in shared))
            assert np.array_equal(left, right), (a, b)
    assert from_shared and joined  # some tables started from a shared one, some joined


def test_the_joint_estimate_is_non_negative_with_the_tables_inside_it_as_sums() -> None:
    """Consistent non-negative tables (of a sparse table): fitted within half a count;
    noisy signed ones (least squares'): a non-negative table near them (noise of 1)."""
    rng = np.random.default_rng(SEED + 46)
    for _ in range(20):
        shape = tuple(int(s) for s in rng.integers(2, 5, 4))
        x = rng.poisson(rng.exponential(20.0, shape)) * (rng.random(shape) < 0.7)
        sets = [(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)][: int(rng.integers(2, 5))]
        tables = {s: x.sum(axis=tuple(i for i in range(4) if i not in s)) for s in sets}
        joint = joint_estimate(tables, (0, 1, 2, 3), dict(enumerate(shape)))
        assert joint.shape == shape and joint.min() >= 0
        for s, table in tables.items():
            summed = joint.sum(axis=tuple(i for i in range(4) if i not in s))
            assert np.allclose(summed, table, atol=0.5)
        noisy = {s: t + rng.normal(0, 1.0, t.shape) for s, t in tables.items()}
        fitted = joint_estimate(noisy, (0, 1, 2, 3), dict(enumerate(shape)))
        assert fitted.min() >= 0
        for s, table in noisy.items():
            summed = fitted.sum(axis=tuple(i for i in range(4) if i not in s))
            assert np.sqrt(np.mean((summed - table) ** 2)) < 2.5  # counts of ~20 per cell
