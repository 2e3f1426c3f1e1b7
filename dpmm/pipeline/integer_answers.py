"""``release.output: integer``: the released answers as non-negative, consistent integer counts.

Post-processing of the real-valued estimate (no data, no budget), in one of two ways:

* **the vector** (a release that estimates the data vector): the NNLS estimate (the
  release's own, or solved for the rounding when least squares answered or a total is
  declared, constrained to that total) is rounded through its running sums
  (:func:`cumulative_rounding`: every cell, and every run of consecutive cells, within 1
  of it), and every answer is ``W x_int``. Every table released is then a marginal of
  one integer vector: integer, non-negative and consistent by construction, whatever
  the workload. The histogram written is ``x_int``. NNLS, not least squares, is what is
  rounded: a least-squares vector has negative cells (about half of them on sparse
  data), and no non-negative vector near it cell by cell has aggregates near its own.
  Up to :data:`NNLS_ROUNDING_LIMIT` cells (or with ``reconstruction: nnls``) NNLS is
  solved at the release's tolerance (1e-6: a looser 1e-4 stopped some Adult solves at
  twice the error): about 20 s on the SF1 tables' 500,480 cells, 10.5 minutes on 2·10⁶
  cells, unfinished after 25 minutes on 10⁷ (2 loaded cores). Above, it is stopped after
  :data:`ROUNDING_ITERATIONS` iterations, warm-started from least squares rounded
  top-down (:func:`~dpmm.reconstruct.integer.top_down_rounding`): on 10⁶ cells the
  one-way tables of the integers were 3,065 RMS off the truth rounded from the projection
  of least squares onto the simplex (NNLS's usual start), 1,115 from the top-down
  rounding, 12.2 after 200 iterations from it, 13.1 from NNLS to its tolerance (581 s
  against 87 s under load; ``benchmarks/integer_tables.py``). :func:`rounding_iterations`
  decides which from the config and domain alone, and the plan states it. A release that
  keeps its arrays on the Dask workers rounds there (:func:`integer_on_cluster`): NNLS on
  the cluster (from least squares itself), then the same rounding chunk by chunk, each
  block a task carrying the running sums along and the errors across
  (:func:`~dpmm.reconstruct.slices.chunked_sliced_rounding`); only the slices' sums (one,
  or the declared attributes' joint table) come to the flow's process.
* **the tables** (marginal tables or residual blocks, no vector): the least-squares
  tables the workload reads, and the 1-way margins of its larger tables, are rounded
  top-down (:func:`integer_tables`: total, then each 1-way table with that sum, then each
  2-way table with both margins fixed, each larger table one attribute at a time from
  the one table it shares with those before it; a table inside a larger one is its
  sums), and every answer is read from those tables. Every table of two or more
  attributes has at most :data:`TABLE_CELL_LIMIT` cells, and no table of three or more
  may share two tables with those rounded before it (fixing both could leave no integer
  table): where no order avoids that (every 3-way table of four attributes, say), the
  family's joint table, of at most :data:`TABLE_CELL_LIMIT` cells, is rounded in their
  place (one attribute at a time, towards a non-negative table fitted to the family's
  tables) and each table is its sums (:func:`rounding_plan`); the plan refuses others.

The total is the declared invariant (``invariants.total``, or what the declared margins
add up to; published exactly) or the estimate's own total rounded. A declared one-way
table (``invariants.margins``) is held exactly: on the tables path it replaces its
least-squares table before the tables below it are rounded; on the vector, the joint
table of the declared attributes is rounded first with every declared margin fixed
(:func:`declared_table`), then the estimate slice by slice of it, each slice to its count
and its rounding error carried to the next (that joint table of at most
:data:`TABLE_CELL_LIMIT` cells: the plan refuses larger).
Rounding is deterministic, so the audit recomputes the integers exactly.

Standard errors. The integer answer is the real-valued one moved by a known shift
``d = W x_int − W x̂`` (both public). By the triangle inequality its error is at most the
real-valued error plus ``|d|``, so each answer states ``standard_error + |d|``: the
real-valued estimate's (exact for least squares, the bootstrap's for NNLS) plus its own
rounding shift, flagged as not exact. The plan's dry run has no shift to add and keeps
the real-valued ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpmm.config import ReleaseConfig
from dpmm.errors import ConfigError
from dpmm.pipeline.ingest_stage import TABLE_PLANS
from dpmm.reconstruct.integer import (
    TABLE_CELL_LIMIT,
    TableSource,
    chained_table,
    closed_sets,
    cumulative_rounding,
    integer_tables,
    rounded_total,
    sliced_rounding,
)
from dpmm.reconstruct.rounding_order import RoundingPlan, rounding_plan
from dpmm.reconstruct.slices import chunked_sliced_rounding
from dpmm.workload.table_form import answer_from_tables, needed_tables, table_form

if TYPE_CHECKING:
    from dpmm.pipeline.cluster_answers import ClusterAnswers
    from dpmm.pipeline.reconstruction import GroupAnswers

__all__ = [
    "INVARIANTS_STATEMENT",
    "ROUNDING",
    "check_integer_output",
    "declared_table",
    "integer_from_tables",
    "integer_from_vector",
    "integer_on_cluster",
    "rounded_errors",
    "rounding_iterations",
    "tables_rounding",
    "vector_rounding",
]

#: Up to this many cells the integers of a vector come from NNLS solved to the release's
#: tolerance; above, from NNLS stopped after :data:`ROUNDING_ITERATIONS` (the full solve
#: took 20 s on the SF1 tables' 500,480 cells, 274-581 s on 10⁶ cells of a hierarchical
#: strategy, by the load: benchmarks/integer_tables.py).
NNLS_ROUNDING_LIMIT = 2**19
#: Iterations of NNLS behind the integers of a vector of more than
#: :data:`NNLS_ROUNDING_LIMIT` cells: ADMM's on a Kronecker strategy of small factors
#: (:mod:`~dpmm.reconstruct.admm`), else accelerated projected gradient's (0.13-0.4 s each
#: on 10⁶ cells, 2.7 s on 10⁷, on 2 loaded cores). On 10⁶ cells of per-attribute
#: hierarchical trees (one run, load average 10-15), 200 ADMM iterations from the top-down
#: rounding left the income CDF by age 6.51 RMS off the truth against projected
#: gradient's 8.77 (one-way tables 13.00 against 13.55, two-way 3.22 against 4.66) in 72 s
#: against 67 s; ADMM to the tolerance gave 6.50, 13.89 and 3.15 in 474 s.
ROUNDING_ITERATIONS = 200

#: How each 2-way step is rounded.
TRANSPORTATION = (
    "nearest in L1: a transportation problem, solved exactly by HiGHS or, should HiGHS stop "
    "at its iteration cap, by a rule that holds both margins"
)
#: How the manifest describes the rounding of each path.
ROUNDING = {
    "tables": (
        "the least-squares tables rounded top-down: the total, each 1-way table with that "
        "sum (nearest in squared distance), each 2-way table with both 1-way margins fixed "
        f"({TRANSPORTATION}); every answer is computed from them"
    ),
    "larger tables": (
        "the least-squares tables rounded top-down: the total, each 1-way table with that "
        "sum (nearest in squared distance), then each table not inside another, one "
        "attribute at a time from its first attribute's 1-way table or from the one table "
        "of two or more attributes it shares with those rounded before it, each step the "
        f"table so far against the next attribute's 1-way table with both fixed "
        f"({TRANSPORTATION}); a table inside another is its sums; every answer is computed "
        "from them"
    ),
}
#: What the manifest says of declared invariants.
INVARIANTS_STATEMENT = (
    "declared public by the config and published exactly: they are not protected by the "
    "differential-privacy guarantee, which covers everything else in the release"
)


def tables_rounding(config: ReleaseConfig) -> str:
    """How the manifest and the plan describe the rounding of tables: tables of three or
    more attributes are rounded in a chain, the others as 2-way tables, and the joint
    tables rounded in place of families no order rounds (:func:`rounding_plan`)."""
    reads = _group_sets(config)
    larger = any(len(a) > 2 for found in reads.values() for a in found)
    joined = "".join(
        f"; no order rounding the tables inside the joint table of {_names(config, joint)} "
        f"({math.prod(config.domain.shape[i] for i in joint):,} cells) one at a time, that "
        "table is rounded in their place, towards a non-negative table fitted to them "
        "(iterative proportional fitting), and they are its sums"
        for joint in _rounding_plan(config, reads).joins
    )
    return ROUNDING["larger tables" if larger else "tables"] + joined + _declared_note(config)


def _rounding_plan(config: ReleaseConfig, reads: dict[str, list[tuple[int, ...]]]) -> RoundingPlan:
    """The order the tables the groups read are rounded in, from the config alone."""
    sets = sorted({attrs for found in reads.values() for attrs in found})
    return rounding_plan(sets, config.domain.shape, TABLE_CELL_LIMIT)


def _declared_note(config: ReleaseConfig) -> str:
    names = [margin.attribute for margin in config.invariants.margins]
    if not names:
        return ""
    return (
        f"; the declared one-way table{'s' if len(names) > 1 else ''} of "
        f"{', '.join(names)} (invariants.margins) held exactly"
    )


def rounded_errors(description: str) -> str:
    """How integer answers' standard errors are had, given the real-valued ones'."""
    return f"{description}, plus each answer's rounding shift |integer − real-valued|"


def rounding_iterations(config: ReleaseConfig) -> int | None:
    """The iterations of the NNLS solve behind a vector's integers: None (to the release's
    tolerance) up to :data:`NNLS_ROUNDING_LIMIT` cells or with ``reconstruction: nnls``,
    else :data:`ROUNDING_ITERATIONS`. From the config and domain alone: the plan states
    what the release does."""
    if config.release.reconstruction == "nnls" or config.domain.size <= NNLS_ROUNDING_LIMIT:
        return None
    return ROUNDING_ITERATIONS


def vector_rounding(config: ReleaseConfig, on_cluster: bool = False) -> str:
    """How the manifest and the plan describe the rounding of a vector (``on_cluster``:
    kept on the Dask workers, its NNLS started from least squares itself)."""
    iterations = rounding_iterations(config)
    start = "" if on_cluster else " rounded top-down through its attribute prefixes"
    solved = (
        "solved to the release's tolerance"
        if iterations is None
        else f"stopped after {iterations} iterations from least squares{start}"
    )
    where = " on the Dask workers, chunk by chunk" if on_cluster else ""
    declared = len(config.invariants.margins)
    carried = (
        ", in domain order, each slice's running sums carrying what those before it lost "
        "against the estimate's, cell position by cell position"
    )
    sliced = (
        f", slice by slice of the declared table's attribute, each slice to its count{carried}"
        if declared == 1
        else ", slice by slice of the declared attributes' joint table, each slice to its "
        f"count{carried}; that table rounded first from the estimate's, one declared "
        "attribute at a time in domain order, each step the table so far rounded the same "
        "way to the next attribute's declared counts, then the table nearest that with the "
        f"table so far and those counts fixed ({TRANSPORTATION})"
        if declared
        else ""
    )
    return (
        f"the non-negative (NNLS) estimate of the data vector, constrained to the total "
        f"({solved}), rounded{where} through its running sums in cell order (every cell and every "
        f"run of consecutive cells within 1 of it){sliced}; every answer is computed from "
        f"it{_declared_note(config)}"
    )


def _without_vector(plan: str, blocks: bool) -> bool:
    return plan in TABLE_PLANS or blocks


def _group_sets(config: ReleaseConfig) -> dict[str, list[tuple[int, ...]]]:
    """The tables each group reads (its table form), or a ConfigError naming the group."""
    shape = config.domain.shape
    found = {}
    for group in config.workload:
        blocks = table_form(group.matrix, shape)
        if blocks is None:
            raise ConfigError(
                f"{config.path}: release.output: integer rounds marginal tables when the "
                f"release has no data vector, and workload group {group.name!r} is not "
                "answered from marginal tables"
            )
        found[group.name] = needed_tables(blocks)
    return found


def check_integer_output(config: ReleaseConfig, plan: str, blocks: bool) -> None:
    """Refuse, before anything is spent, a release whose answers cannot be rounded.

    Raises:
        ConfigError: on the vector (in memory or on the workers), declared margins whose
            joint table has more than :data:`TABLE_CELL_LIMIT` cells;
            without the vector, a group not in table form, a table of two or more
            attributes of more than :data:`TABLE_CELL_LIMIT` cells, or tables no order
            rounds whose joint table has more (:func:`rounding_plan`).
    """
    if not config.release.integer:
        return
    domain = config.domain
    if not _without_vector(plan, blocks):
        declared = [m.attribute for m in config.invariants.margins]
        cells = math.prod(domain[name].size for name in declared)
        if len(declared) > 1 and cells > TABLE_CELL_LIMIT:
            raise ConfigError(
                f"{config.path}: invariants.margins: a release that rounds the data vector "
                f"holds declared margins through their attributes' joint table, of up to "
                f"{TABLE_CELL_LIMIT:,} cells, and that of {', '.join(declared)} has "
                f"{cells:,}; declare fewer"
            )
        return
    reads = _group_sets(config)
    for name, sets in reads.items():
        for attrs in sets:
            cells = math.prod(domain.shape[i] for i in attrs)
            if len(attrs) > 1 and cells > TABLE_CELL_LIMIT:
                raise ConfigError(
                    f"{config.path}: release.output: integer rounds tables of up to "
                    f"{TABLE_CELL_LIMIT:,} cells, and workload group {name!r} reads the "
                    f"table of {_names(config, attrs)} ({cells:,} cells)"
                )
    stuck = _rounding_plan(config, reads).stuck
    if stuck is not None:
        inside = [(n, a) for n, sets in reads.items() for a in sets if set(a) <= set(stuck.table)]
        name, read = next((n, a) for n, a in inside if len(a) >= 2)
        table = "the table" if read == stuck.table else "tables inside the joint table"
        raise ConfigError(
            f"{config.path}: release.output: integer rounds a table of three or more "
            f"attributes from at most one table it shares with the tables rounded before it "
            f"when the release has no data vector, and workload group {name!r} reads "
            f"{table} of {_names(config, stuck.table)}, which shares the tables of "
            f"{' and of '.join(_names(config, s) for s in stuck.shared)} in every order (an "
            f"integer table with two of them fixed need not exist), and the joint table of "
            f"{_names(config, stuck.joint)} it could be rounded through instead has "
            f"{stuck.cells:,} cells, over {TABLE_CELL_LIMIT:,}"
        )


def _names(config: ReleaseConfig, attrs: Sequence[int]) -> str:
    return ", ".join(config.domain.attributes[i] for i in attrs)


def _declared_axes(config: ReleaseConfig) -> list[int]:
    """The declared margins' attributes, in domain order."""
    return sorted(config.domain.index(m.attribute) for m in config.invariants.margins)


def _declared_counts(config: ReleaseConfig, real: np.ndarray) -> np.ndarray:
    """The declared attributes' joint table (attributes in domain order) rounded from the
    estimate's ``real`` one with every declared margin fixed
    (:func:`~dpmm.reconstruct.integer.chained_table` with ``carried``)."""
    margins = sorted(config.invariants.margins, key=lambda m: config.domain.index(m.attribute))
    first, others = np.array(margins[0].counts), [m.counts for m in margins[1:]]
    return chained_table(real, first, others, carried=True)


def declared_table(config: ReleaseConfig, estimate: np.ndarray) -> np.ndarray:
    """The non-negative estimate (shaped as the domain) rounded slice by slice of the
    declared attributes' joint table, each slice's rounding error carried to the next
    (:func:`~dpmm.reconstruct.integer.sliced_rounding`), that table itself the
    estimate's rounded with every declared margin fixed, the same way
    (:func:`~dpmm.reconstruct.integer.chained_table` with ``carried``, attributes in
    domain order): every declared margin held exactly, always feasible."""
    axes = _declared_axes(config)
    shaped = np.reshape(estimate, config.domain.shape)
    real = shaped.sum(axis=tuple(i for i in range(shaped.ndim) if i not in axes))
    joint = _declared_counts(config, real)
    return sliced_rounding(shaped, axes, joint).reshape(np.shape(estimate))


def _total(config: ReleaseConfig, estimated: float) -> int:
    declared = config.invariants.known_total
    return declared if declared is not None else rounded_total(estimated)


def _replace(answers: GroupAnswers, values: np.ndarray, dry_run: bool) -> GroupAnswers:
    """A group's answers replaced by their integers, its standard errors and interval
    half-widths by the real-valued ones plus the rounding shift (the dry run's shift means
    nothing)."""
    shift = np.abs(values - answers.values)
    errors = answers.standard_errors if dry_run else answers.standard_errors + shift
    # |integer − truth| ≤ |real − truth| + shift: the real-valued interval, widened by the
    # shift, still covers at its level.
    widths = answers.half_widths
    return dataclasses.replace(
        answers,
        values=values,
        standard_errors=errors,
        exact_errors=False,
        least_squares_rmse=answers.expected_rmse,
        half_widths=None if widths is None else widths + shift,
        exact_intervals=False,
    )


def integer_from_vector(
    config: ReleaseConfig, groups: Sequence[GroupAnswers], estimate: np.ndarray, dry_run: bool
) -> tuple[list[GroupAnswers], np.ndarray]:
    """Every group answered from a non-negative estimate rounded to an integer vector,
    and that vector (as floats, the histogram's type)."""
    if config.invariants.margins:
        rounded = declared_table(config, estimate)
    else:
        rounded = cumulative_rounding(estimate, _total(config, math.fsum(estimate)))
    as_float = rounded.astype(np.float64)
    replaced = [
        _replace(g, np.asarray(g.group.matrix @ as_float, dtype=np.float64).reshape(-1), dry_run)
        for g in groups
    ]
    return replaced, as_float


def integer_on_cluster(
    config: ReleaseConfig, groups: Sequence[GroupAnswers], solved: ClusterAnswers, dry_run: bool
) -> list[GroupAnswers]:
    """Every group answered from the cluster's non-negative estimate rounded to an integer
    vector on the workers, by the rule of :func:`integer_from_vector`
    (:func:`~dpmm.reconstruct.slices.chunked_sliced_rounding`: the same integers as in
    memory from the same estimate and totals). The estimate's total and the joint table of
    the declared attributes are its slices' sums added along the running sums (in memory,
    by ``math.fsum`` and numpy's sums: the same up to floating-point rounding). The plan's
    dry run computes nothing: its answers stay the real-valued recipe."""
    if dry_run:
        return [_replace(g, g.values, dry_run) for g in groups]
    estimate = solved.nonnegative(config.invariants.known_total, rounding_iterations(config))

    def totals(real: np.ndarray) -> np.ndarray:
        if config.invariants.margins:
            return _declared_counts(config, real)
        return np.array(_total(config, float(real)))

    rounded = chunked_sliced_rounding(estimate, _declared_axes(config), totals)
    as_float = rounded.astype(np.float64).persist()  # kept on the workers for every group
    return [_replace(g, solved.answers(g.group, as_float), dry_run) for g in groups]


def integer_from_tables(
    config: ReleaseConfig, groups: Sequence[GroupAnswers], estimate: TableSource, dry_run: bool
) -> list[GroupAnswers]:
    """Every group answered from the least-squares tables it reads, rounded top-down."""
    shape = config.domain.shape
    reads = _group_sets(config)
    sets = closed_sets([(), *{attrs for found in reads.values() for attrs in found}])
    real = {attrs: np.asarray(t, np.float64) for attrs, t in estimate(sets).items()}
    total = _total(config, float(real[()].sum()))
    declared = {
        (config.domain.index(m.attribute),): np.array(m.counts, dtype=np.int64)
        for m in config.invariants.margins
    }
    rounded = integer_tables({a: t for a, t in real.items() if a}, total, declared)
    rounded[()] = np.array([total], dtype=np.int64)
    tables = {attrs: table.astype(np.float64) for attrs, table in rounded.items()}
    return [
        _replace(g, answer_from_tables(table_form(g.group.matrix, shape), tables), dry_run)
        for g in groups
    ]
