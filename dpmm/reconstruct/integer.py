"""Integer, non-negative, mutually consistent counts from a real-valued estimate.

Statistical agencies publish counts that add up: every table's cells sum to its
margins, every margin to the total, nothing negative, nothing fractional. A
least-squares or NNLS estimate is real-valued; rounding each answer on its own breaks
the sums. The functions here round *jointly*, as post-processing of public values
(no budget, no data), deterministically (same input, same integers: the audit
recomputes them):

* :func:`cumulative_rounding` — a non-negative vector (the domain's NNLS estimate x̂)
  to integers with a given sum, by rounding its running sums: ``z_i = ⌊C_i + ½⌋ −
  ⌊C_{i−1} + ½⌋`` with ``C`` the running sums scaled to end at the total. Every cell
  moves by less than 1 and so does every run of consecutive cells (any range of the
  last attribute within one cell of the others), O(n), and every table ``M z`` is then
  integer and consistent by construction. Rounding each cell to the nearest instead
  lets a query's errors add up over its cells: on the Census SF1 tables (500,480 cells)
  it moved the answers by 71 (RMS) where running sums moved them by 3.3.
* :func:`nearest_integer_vector` — the non-negative integer vector with a given sum
  nearest a real vector (signed) in squared distance: each 1-way table below a fixed
  total. Method: the exact projection onto the simplex ``{w ≥ 0, Σ w = T}``
  (sort-based, O(n log n)), then largest remainders. The result is
  ``max(0, round(v_i − τ))`` for one shift τ, which is optimal for a separable convex
  cost under one sum (the marginal cost of a unit more is at least ``−2τ`` everywhere
  and the saving of a unit less at most that). It is no way to round a signed vector
  of many cells: clipping its negative cells and shifting the rest moves every
  aggregate (1,100 RMS on Adult's 2-way tables from a least-squares vector of 13,440
  cells, against 12 for the estimate itself).
* :func:`top_down_rounding` — a signed estimate of a large domain's vector to a
  non-negative integer vector with a given total, the way census geographies are rounded
  (Abowd et al. 2022's TopDown, least squares in place of their noisy measurements): the
  cells in their flat order form a tree whose levels are the attribute prefixes (an
  attribute of more than :data:`BRANCHING` values split into runs of consecutive values
  first), and from the root's total down each node's children get the nearest
  non-negative integers summing to the node's own (:func:`nearest_in_segments`, the
  rule of :func:`nearest_integer_vector` for every node of a level at once). A node's
  clipping and shift stay among its own children, and the upper levels' sums (large
  counts, little noise) are kept almost whole; O(n log b) per level, a few seconds on
  10⁷ cells.
* :func:`nearest_integer_table` — the non-negative integer 2-way table with given
  integer row and column sums nearest a real table in L1 (controlled rounding). Each
  cell is its floor ``f`` (of the table clipped at 0) plus a first unit up (cost
  ``1 − 2·frac``), further units up (cost 1) and units down to 0 (cost 1): a
  transportation problem whose constraint matrix is totally unimodular, so its LP
  optimum is integral: SciPy's HiGHS dual simplex (:func:`scipy.optimize.linprog`)
  returns a vertex, checked integral (a 300 × 300 table took 4.5 s here, against 19 s
  as a MILP with integrality declared). A solve is capped (iterations, then seconds);
  short of an optimum the table is :func:`margin_rounding`'s (largest cells first, each
  rounded within what its row and column have left, then the north-west corner rule), so
  an integer table on the margins is always returned.
* :func:`chained_table` — a table of three or more attributes (or a declared table of
  several attributes' joint counts) one attribute at a time: the integer table so far
  (flattened, as rows) against the next attribute's 1-way table, each step a 2-way table
  rounded by :func:`nearest_integer_table`. A 3-way table with all its 2-way margins
  fixed is not totally unimodular (an integer table may not even exist); a chain fixes
  one table and 1-way margins at each step, so it always has an integral optimum.
  :func:`integer_tables` rounds the largest tables a workload reads this way, each from
  the one table it shares with those rounded before it (:func:`rounding_steps` orders
  them). A family no order rounds (every 3-way table of four attributes: the last would
  have two 2-way margins fixed) is rounded through its attributes' joint table instead,
  when that has at most :data:`TABLE_CELL_LIMIT` cells (:func:`rounding_plan`; the
  release refuses others in its plan), towards :func:`joint_estimate`'s non-negative
  table fitted to the family's tables, and each table is the integer joint table's sums.

Example:
    >>> cumulative_rounding(np.array([0.4, 0.4, 0.4, 1.8]), 3).tolist()
    [0, 1, 0, 2]
    >>> nearest_integer_vector(np.array([2.6, -0.4, 1.3, 0.5]), 4).tolist()
    [3, 0, 1, 0]
    >>> top_down_rounding(np.array([[2.6, -0.4], [1.3, 0.5]]), 4).tolist()
    [[2, 0], [1, 1]]
    >>> nearest_integer_table(np.array([[0.3, 1.7], [1.6, 0.4]]), [2, 2], [2, 2]).tolist()
    [[0, 2], [2, 0]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy import optimize, sparse

from dpmm.errors import ArgumentError
from dpmm.reconstruct.rounding_order import Step, rounding_plan, rounding_steps
from dpmm.reconstruct.slices import sliced_rounding

__all__ = [
    "BRANCHING",
    "TABLE_CELL_LIMIT",
    "TABLE_ITERATIONS",
    "Step",
    "TableSource",
    "chained_table",
    "closed_sets",
    "cumulative_rounding",
    "integer_tables",
    "joint_estimate",
    "level_starts",
    "margin_rounding",
    "nearest_in_segments",
    "nearest_integer_table",
    "nearest_integer_vector",
    "rounded_total",
    "rounding_steps",
    "sliced_rounding",
    "top_down_rounding",
]

#: Simplex iterations HiGHS may take on a 2-way table, per row, column and cell: noisy
#: tables of 10⁴-10⁵ cells took 0.07-0.22 (2,232-10,710 iterations), so a solve stops at
#: 18-57 times that, deterministically. There is no time limit: an iteration count, unlike
#: seconds, is the same when the audit recomputes the table on another machine.
TABLE_ITERATIONS = 4
#: The most cells of a 2-way table the release rounds (its plan refuses larger ones): the
#: LP grows faster than linearly (9·10⁴ cells took 4.5 s here).
TABLE_CELL_LIMIT = 10**5
#: Sweeps of iterative proportional fitting behind a joint table's target
#: (:func:`joint_estimate`).
FITTING_SWEEPS = 200


def rounded_total(value: float) -> int:
    """The non-negative integer nearest an estimated total (halves up).

    Example:
        >>> rounded_total(41.5), rounded_total(-3.2)
        (42, 0)
    """
    if not np.isfinite(value):
        raise ArgumentError(f"An estimated total must be finite, got {value}.")
    return max(0, int(np.floor(value + 0.5)))


def cumulative_rounding(values: np.ndarray, total: int) -> np.ndarray:
    """Non-negative ``values`` rounded to integers summing to ``total`` through their
    running sums (see the module docstring): deterministic, O(n).

    The running sums are scaled to end exactly at ``total`` (a no-op up to rounding for
    values that already sum to it; all zero values with a positive total are spread
    evenly by the same rule).

    Raises:
        ArgumentError: a negative or non-finite value, or a negative total.
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    total = int(total)
    if total < 0 or (flat.size == 0 and total > 0):
        raise ArgumentError(f"No non-negative vector of {flat.size} cells sums to {total}.")
    if flat.size == 0:
        return np.zeros(np.shape(values), dtype=np.int64)
    return sliced_rounding(flat, [], total).reshape(np.shape(values))


def _checked_vector(values: np.ndarray, total: int) -> tuple[np.ndarray, int]:
    """``values`` as a flat float vector and ``total`` as an int, or ArgumentError."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    total = int(total)
    if total < 0 or (flat.size == 0 and total > 0):
        raise ArgumentError(f"No non-negative vector of {flat.size} cells sums to {total}.")
    if not np.all(np.isfinite(flat)):
        raise ArgumentError("Values to round must be finite.")
    return flat, total


def nearest_integer_vector(values: np.ndarray, total: int) -> np.ndarray:
    """The non-negative integer vector summing to ``total`` nearest ``values`` (L2):
    :func:`nearest_in_segments` with one segment.

    Ties between equal remainders go to the lower index, so the result depends on the
    values alone.

    Args:
        values: A real vector (negative entries allowed: they end at 0 or above).
        total: The sum the result must have, a non-negative integer.

    Returns:
        An int64 vector of ``values``' shape.

    Raises:
        ArgumentError: an empty vector with a positive total, a negative total, or values
            that are not finite.
    """
    flat, total = _checked_vector(values, total)
    if flat.size == 0:
        return np.zeros(np.shape(values), dtype=np.int64)
    one = np.zeros(flat.size, dtype=np.int64)
    rounded = nearest_in_segments(flat, one, np.array([total], dtype=np.int64))
    return rounded.reshape(np.shape(values))


def nearest_integer_table(
    table: np.ndarray, row_sums: Sequence[int] | np.ndarray, column_sums: Sequence[int] | np.ndarray
) -> np.ndarray:
    """The non-negative integer table with these row and column sums nearest ``table``
    in L1 (controlled rounding, see the module docstring).

    Args:
        table: A real ``m × n`` table (negative cells allowed).
        row_sums: ``m`` non-negative integers.
        column_sums: ``n`` non-negative integers with the same sum.

    Returns:
        An int64 ``m × n`` table.

    Should HiGHS stop short of an integral optimum (:data:`TABLE_ITERATIONS`) or fail,
    the table is :func:`margin_rounding`'s: on its margins all the same, so nothing after
    a release's spend can fail here.

    Raises:
        ArgumentError: shapes or sums that disagree, or non-finite cells.
    """
    values = np.asarray(table, dtype=np.float64)
    rows = np.asarray(row_sums, dtype=np.int64).reshape(-1)
    columns = np.asarray(column_sums, dtype=np.int64).reshape(-1)
    if values.ndim != 2 or values.shape != (rows.size, columns.size):
        raise ArgumentError(
            f"A {values.shape} table needs {values.shape[0]} row and "
            f"{values.shape[-1]} column sums, got {rows.size} and {columns.size}."
        )
    if rows.sum() != columns.sum() or np.any(rows < 0) or np.any(columns < 0):
        raise ArgumentError("Row and column sums must be non-negative with one total.")
    if not np.all(np.isfinite(values)):
        raise ArgumentError("Tables to round must be finite.")
    m, n = values.shape
    if m == 1 or n == 1:  # one line: its cells are the other margin
        return (rows[:, None] if n == 1 else columns[None, :]).astype(np.int64).copy()
    clipped = np.maximum(values, 0.0).reshape(-1)
    floors = np.floor(clipped)
    first_up_cost = 1.0 - 2.0 * (clipped - floors)
    cells = m * n
    # Variables: first unit up ∈ [0, 1], more units up ≥ 0, units down ∈ [0, floor].
    cost = np.concatenate([first_up_cost, np.ones(cells), np.ones(cells)])
    upper = np.concatenate([np.ones(cells), np.full(cells, np.inf), floors])
    index = np.arange(cells)
    incidence = sparse.vstack(
        [
            sparse.csr_array((np.ones(cells), (index // n, index)), shape=(m, cells)),
            sparse.csr_array((np.ones(cells), (index % n, index)), shape=(n, cells)),
        ]
    )
    constraints = sparse.hstack([incidence, incidence, -incidence]).tocsr()
    base = floors.reshape(m, n)
    needed = np.concatenate([rows - base.sum(axis=1), columns - base.sum(axis=0)])
    rounded = _highs_table(cost, constraints, needed, upper, (m, n))
    if rounded is not None:
        rounded += floors.reshape(m, n).astype(np.int64)
        if (
            np.array_equal(rounded.sum(axis=1), rows)
            and np.array_equal(rounded.sum(axis=0), columns)
            and rounded.min() >= 0
        ):
            return rounded
    return margin_rounding(values, rows, columns)


def _highs_table(
    cost: np.ndarray,
    constraints: sparse.csr_array,
    needed: np.ndarray,
    upper: np.ndarray,
    shape: tuple[int, int],
) -> np.ndarray | None:
    """The optimal moves from the floors (an ``m × n`` integer table), or None when HiGHS
    stops short of an integral optimum (its iteration limit, or any failure)."""
    cells = shape[0] * shape[1]
    limit = TABLE_ITERATIONS * (cells + shape[0] + shape[1])
    solved = optimize.linprog(
        cost,
        A_eq=constraints,
        b_eq=needed,
        bounds=np.stack([np.zeros(cost.size), upper], axis=1),
        method="highs-ds",  # a vertex: integral, the matrix being totally unimodular
        options={"maxiter": limit},
    )
    if solved.status != 0 or solved.x is None:
        return None
    if np.max(np.abs(solved.x - np.rint(solved.x)), initial=0.0) > 1e-6:
        return None
    moves = np.rint(solved.x).astype(np.int64)
    rounded = moves[:cells] + moves[cells : 2 * cells] - moves[2 * cells :]
    return rounded.reshape(shape)


def margin_rounding(table: np.ndarray, row_sums: np.ndarray, column_sums: np.ndarray) -> np.ndarray:
    """A non-negative integer table with these row and column sums near ``table``, by a
    rule that cannot fail (what :func:`nearest_integer_table` returns when HiGHS stops
    short): the cells, largest first (ties: lower index), each take their value rounded
    (clipped at 0) up to what is left of their row and column, then the north-west corner
    rule places what is left (the rows and columns left add up to one total, so it
    always can). O(mn log mn); an integer table on its margins is returned unchanged.

    Example:
        >>> margin_rounding(np.array([[0.3, 1.7], [1.6, 0.4]]), np.array([2, 2]),
        ...                 np.array([1, 3])).tolist()
        [[0, 2], [1, 1]]
    """
    values = np.maximum(np.asarray(table, dtype=np.float64), 0.0)
    m, n = values.shape
    rows_left = np.asarray(row_sums, dtype=np.int64).copy()
    columns_left = np.asarray(column_sums, dtype=np.int64).copy()
    wanted = np.floor(values.reshape(-1) + 0.5).astype(np.int64)
    result = np.zeros(m * n, dtype=np.int64)
    order = np.lexsort((np.arange(wanted.size), -values.reshape(-1)))
    for cell in order[wanted[order] > 0].tolist():
        row, column = divmod(cell, n)
        taken = min(int(wanted[cell]), int(rows_left[row]), int(columns_left[column]))
        result[cell] = taken
        rows_left[row] -= taken
        columns_left[column] -= taken
    row, column = 0, 0
    while row < m and column < n:  # the north-west corner rule on what is left
        taken = min(int(rows_left[row]), int(columns_left[column]))
        result[row * n + column] += taken
        rows_left[row] -= taken
        columns_left[column] -= taken
        if rows_left[row] == 0:
            row += 1
        else:
            column += 1
    return result.reshape(m, n)


def chained_table(
    values: np.ndarray,
    start: np.ndarray,
    margins: Sequence[np.ndarray | Sequence[int]],
    carried: bool = False,
) -> np.ndarray:
    """An integer table from a real one, one attribute at a time: the integer ``start``
    (the table of the first ``start.ndim`` axes) against the next axis's 1-way
    ``margins[0]``, then that result against ``margins[1]``, and so on. Each step is a
    2-way table with both margins fixed (:func:`nearest_integer_table`: the table so far,
    flattened, as rows; the next attribute as columns), always feasible (both margins
    add up to one total) and integral, so the result exists whatever the inputs: its
    sums over the added axes are ``start``, over all but an added axis its margin.

    Args:
        values: The real table, shaped ``start.shape + (len(m) for m in margins)``.
        start: Non-negative integers summing to the margins' common total.
        margins: One integer vector per axis after ``start``'s.
        carried: Margins far from the table's own sums (declared counts, not rounded
            from the same estimate): each step's table, clipped at 0 and its rows scaled
            to the table so far, is first rounded to the margin's counts through
            :func:`sliced_rounding` (each count's slice in turn, what one takes from
            the estimate going to the next), and the 2-way table is rounded towards that
            (L1 alone leaves where a margin's gap goes to whichever vertex HiGHS
            returns: on the SF1 tables with sex, Hispanic origin and age declared, their
            joint table left the sex by single-year-of-age table 47.6 RMS off the truth
            against 9.3 for the estimate, and carried 9.0, three runs).

    Example:
        >>> chained_table(np.array([[[0.6, 0.4], [1.2, 0.8]], [[0.3, 0.7], [0.4, 0.6]]]),
        ...               np.array([3, 2]), [[2, 3], [2, 3]]).tolist()
        [[[1, 0], [1, 1]], [[0, 1], [0, 1]]]
    """
    real = np.asarray(values, dtype=np.float64)
    table = np.asarray(start, dtype=np.int64)
    if real.shape != table.shape + tuple(len(m) for m in margins):
        raise ArgumentError(
            f"A {real.shape} table does not extend a {table.shape} one by margins of "
            f"{[len(m) for m in margins]} values."
        )
    fixed = table.ndim
    for axis in range(fixed, real.ndim):
        target = real.sum(axis=tuple(range(axis + 1, real.ndim)))
        target = target.reshape(table.size, real.shape[axis])
        column_sums = np.asarray(margins[axis - fixed], dtype=np.int64)
        if carried:
            target = np.maximum(target, 0.0)
            sums = target.sum(axis=1)
            rows = table.reshape(-1) / np.where(sums > 0, sums, 1.0)
            target = sliced_rounding(target * rows[:, None], [1], column_sums).astype(float)
        table = nearest_integer_table(target, table.reshape(-1), column_sums)
        table = table.reshape(real.shape[: axis + 1])
    return table


def _sums(table: np.ndarray, attrs: tuple[int, ...], kept: tuple[int, ...]) -> np.ndarray:
    """The table of ``kept`` (a subset of ``attrs``, both sorted) summed from ``table``."""
    return table.sum(axis=tuple(p for p, i in enumerate(attrs) if i not in kept))


def integer_tables(
    tables: Mapping[tuple[int, ...], np.ndarray],
    total: int,
    declared: Mapping[tuple[int, ...], np.ndarray] | None = None,
) -> dict[tuple[int, ...], np.ndarray]:
    """Round marginal tables top-down: the total, each 1-way table with its sum fixed (or
    as ``declared``: published counts summing to the total, which replace the estimate),
    then each largest table in :func:`rounding_steps`' order by :func:`chained_table`,
    from its first attribute's 1-way table or from the table it shares with one rounded
    before it; a table inside a larger one is that one's sums. A 2-way table is thus
    rounded with both 1-way margins fixed.

    Every two results then agree wherever they share attributes (a shared attribute's
    margin and the total are fixed before every table holding them, a shared table of
    two or more attributes is fixed from the first table rounded that holds it), so the
    integer tables are mutually consistent whatever the input's consistency, and every
    step is feasible.

    Args:
        tables: ``{sorted attrs: real table}`` (flat or shaped); every 1-way margin of a
            larger table must be among them.
        total: The integer total every table sums to.

    Raises:
        ArgumentError: a missing 1-way margin, a declared table off the total, or tables
            :func:`rounding_steps` cannot order.

    Example:
        >>> t = {(0,): np.array([1.4, 1.6]), (1,): np.array([2.2, 0.8]),
        ...      (0, 1): np.array([[1.1, 0.3], [1.1, 0.5]])}
        >>> {k: v.tolist() for k, v in integer_tables(t, 3).items()}
        {(0,): [1, 2], (1,): [2, 1], (0, 1): [[1, 0], [1, 1]]}
    """
    rounded: dict[tuple[int, ...], np.ndarray] = {}
    for attrs in sorted((a for a in tables if len(a) < 2), key=len):
        values = np.asarray(tables[attrs], dtype=np.float64)
        fixed = (declared or {}).get(attrs)
        if fixed is not None and (int(np.sum(fixed)) != total or np.min(fixed) < 0):
            raise ArgumentError(f"The declared table on {list(attrs)} must sum to {total}.")
        rounded[attrs] = (
            nearest_integer_vector(values, total)
            if fixed is None
            else np.asarray(fixed, dtype=np.int64).copy()
        )
    larger = [attrs for attrs in tables if len(attrs) >= 2]
    missing = [attrs for attrs in larger if any((i,) not in rounded for i in attrs)]
    if missing:
        raise ArgumentError(f"The table on {list(missing[0])} needs its 1-way margins rounded.")
    sizes = {i: rounded[(i,)].size for attrs in larger for i in attrs}
    sizes_list = [sizes.get(i, 1) for i in range(1 + max(sizes, default=-1))]
    joins, steps, stuck = rounding_plan(larger, sizes_list, TABLE_CELL_LIMIT)
    if stuck is not None:
        joint = f" (their joint table has {stuck.cells:,} cells)" if stuck.joint else ""
        raise ArgumentError(
            f"The table on {list(stuck.table)} shares the tables on "
            f"{' and '.join(str(list(s)) for s in stuck.shared)} with tables rounded before "
            f"it: an integer table with both fixed need not exist{joint}."
        )
    real = {attrs: np.asarray(table, dtype=np.float64) for attrs, table in tables.items()}
    for joint in joins:
        real[joint] = joint_estimate(real, joint, sizes)
    for attrs, start in steps:
        shape = tuple(sizes[i] for i in attrs)
        values = real[attrs].reshape(shape)
        rest = tuple(i for i in attrs if i not in start)
        order = [attrs.index(i) for i in (*start, *rest)]
        holder = next(a for a in rounded if set(start) <= set(a))  # a 1-way or earlier table
        fixed = _sums(rounded[holder], holder, start)
        table = chained_table(np.transpose(values, order), fixed, [rounded[(i,)] for i in rest])
        rounded[attrs] = np.transpose(table, np.argsort(order))
    rounded_steps = [attrs for attrs, _ in steps]
    for attrs in larger:
        if attrs not in rounded:
            holder = next(a for a in rounded_steps if set(attrs) <= set(a))
            rounded[attrs] = _sums(rounded[holder], holder, attrs)
    return {attrs: rounded[attrs] for attrs in tables}


def joint_estimate(
    tables: Mapping[tuple[int, ...], np.ndarray],
    joint: tuple[int, ...],
    sizes: Mapping[int, int],
) -> np.ndarray:
    """A non-negative real table of ``joint`` (sorted attributes) whose sums are near the
    tables inside it (clipped at 0): iterative proportional fitting from a uniform table,
    :data:`FITTING_SWEEPS` sweeps over the tables, largest first (for consistent
    non-negative tables, the maximum-entropy table with those sums). The target a family
    of tables is rounded through when no order rounds them one by one. A signed target
    (least squares' minimum-norm joint table) has many cells negative: rounded, it left
    every 3-way table of six Adult attributes (13,440 cells) 277 off the truth (RMS, one
    run) against 23 for the real-valued tables; this one 18.0 against 22.3 (20 runs,
    ``benchmarks/integer_tables.py --case adult-3way``).

    Example:
        >>> t = {(0, 1): np.array([[1.0, 2.0], [3.0, 4.0]]), (1, 2): np.array([[2.0, 2.0],
        ...      [3.0, 3.0]])}
        >>> joint_estimate(t, (0, 1, 2), {0: 2, 1: 2, 2: 2}).sum(axis=2).round(6).tolist()
        [[1.0, 2.0], [3.0, 4.0]]
    """
    shape = [sizes[i] for i in joint]
    inside = sorted(
        (attrs for attrs in tables if attrs and set(attrs) <= set(joint)),
        key=lambda attrs: (-len(attrs), attrs),
    )
    targets = [np.maximum(np.reshape(tables[a], [sizes[i] for i in a]), 0.0) for a in inside]
    total = float(np.mean([t.sum() for t in targets])) if targets else 0.0
    fitted = np.full(shape, total / max(math.prod(shape), 1))
    for _ in range(FITTING_SWEEPS):
        for attrs, target in zip(inside, targets, strict=True):
            summed_out = tuple(p for p, i in enumerate(joint) if i not in attrs)
            current = fitted.sum(axis=summed_out)
            ratio = np.divide(target, current, out=np.zeros_like(current), where=current > 0)
            fitted *= np.reshape(ratio, [sizes[i] if i in attrs else 1 for i in joint])
    return fitted


def closed_sets(sets: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``sets`` with every 1-way margin of a larger set added (what :func:`integer_tables`
    needs), in order of size.

    Example:
        >>> closed_sets([(0, 2), (1,)])
        [(0,), (1,), (2,), (0, 2)]
    """
    found = set(sets) | {(i,) for attrs in sets if len(attrs) >= 2 for i in attrs}
    return sorted(found, key=lambda attrs: (len(attrs), attrs))


#: ``estimate_tables(sets)``: real-valued (least-squares) tables of these attribute sets.
TableSource = Callable[[Sequence[tuple[int, ...]]], Mapping[tuple[int, ...], np.ndarray]]


#: An attribute with more values than this is split into runs of BRANCHING^j consecutive
#: values before its single values, so a run's clipping stays in the run (a range query
#: over the attribute keeps the sums of the runs it covers).
BRANCHING = 16


def level_starts(shape: Sequence[int], branching: int = BRANCHING) -> list[np.ndarray]:
    """The first cell (flat, C order) of every node of each level below the root, top down;
    the last level is every cell.

    Example:
        >>> [s.tolist() for s in level_starts([2, 3])]
        [[0, 3], [0, 1, 2, 3, 4, 5]]
        >>> [s.tolist() for s in level_starts([5], branching=2)]
        [[0, 4], [0, 2, 4], [0, 1, 2, 3, 4]]
    """
    levels: list[np.ndarray] = []
    outer = 1
    for axis, size in enumerate(shape):
        inner = math.prod(shape[axis + 1 :])
        width = 1
        while width * branching < size:
            width *= branching
        prefixes = np.arange(outer, dtype=np.int64)[:, None] * size
        while width >= 1:
            values = np.arange(0, size, width, dtype=np.int64)[None, :]
            if width > 1 or size > 1:  # a size-1 attribute adds no level
                levels.append(((prefixes + values) * inner).reshape(-1))
            width //= branching
        outer *= size
    if not levels or levels[-1].size != outer:
        levels.append(np.arange(outer, dtype=np.int64))
    return levels


def nearest_in_segments(values: np.ndarray, segments: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Per segment, the non-negative integers summing to its total nearest ``values`` in
    squared distance (projection onto the segment's simplex, then largest remainders,
    ties to the lower index).

    Args:
        values: Real values (negative allowed), one per element.
        segments: The segment of each element, non-decreasing, every segment
            ``0 … len(totals) − 1`` non-empty.
        totals: Each segment's non-negative integer sum.

    Example:
        >>> nearest_in_segments(np.array([2.6, -0.4, 0.5, 0.5]), np.array([0, 0, 1, 1]),
        ...                     np.array([2, 1])).tolist()
        [2, 0, 1, 0]
    """
    count = totals.size
    firsts = np.searchsorted(segments, np.arange(count))
    offsets = firsts[segments]  # each element's segment's first position
    order = np.lexsort((-values, segments))  # each segment's values, largest first
    ordered = values[order]
    del order
    shifts = np.cumsum(ordered)  # then the shift that leaves the first j in the support
    shifts -= (shifts[firsts] - ordered[firsts])[segments]
    shifts -= totals[segments]
    shifts /= np.arange(1, values.size + 1) - offsets
    support = np.bincount(segments, weights=ordered > shifts, minlength=count).astype(np.int64)
    del ordered
    # A segment of total 0 has no support: every element goes to 0.
    tau = np.full(count, np.inf)
    kept = support > 0
    tau[kept] = shifts[firsts[kept] + support[kept] - 1]
    del shifts
    projected = values - tau[segments]
    np.maximum(projected, 0.0, out=projected)
    rounded = np.floor(projected)
    short = totals - np.bincount(segments, weights=rounded, minlength=count).astype(np.int64)
    order = np.lexsort((rounded - projected, segments))  # largest remainders first
    up = order[np.arange(values.size) - offsets < short[segments]]
    del order, offsets
    rounded = rounded.astype(np.int64)
    rounded[up] += 1
    for segment in np.flatnonzero(short < 0):  # float rounding of a projection: rare
        rows = slice(firsts[segment], firsts[segment] + np.sum(segments == segment))
        rounded[rows] = _take_smallest(rounded[rows], projected[rows], int(-short[segment]))
    return rounded


def _take_smallest(rounded: np.ndarray, projected: np.ndarray, units: int) -> np.ndarray:
    """``units`` taken off the positive cells of smallest remainder (ties: lower index)."""
    result = rounded.copy()
    order = np.lexsort((np.arange(result.size), projected - np.floor(projected)))
    order = order[result[order] > 0]
    result[order[:units]] -= 1
    return result


def top_down_rounding(estimate: np.ndarray, total: int, branching: int = BRANCHING) -> np.ndarray:
    """The estimate (shaped as the domain) rounded to a non-negative integer vector
    summing to ``total``, top-down through :func:`level_starts`' tree.

    Raises:
        ArgumentError: a negative total, an empty vector with a positive one, or values
            that are not finite.
    """
    values = np.asarray(estimate, dtype=np.float64)
    flat, total = _checked_vector(values, total)
    if flat.size == 0:
        return np.zeros(values.shape, dtype=np.int64)
    counts = np.array([total], dtype=np.int64)
    parents = np.array([0], dtype=np.int64)
    for starts in level_starts(values.shape or (1,), branching):
        sums = flat if starts.size == flat.size else np.add.reduceat(flat, starts)
        segments = np.searchsorted(parents, starts, side="right") - 1
        counts = nearest_in_segments(sums, segments, counts)
        parents = starts
    return counts.reshape(values.shape)
