"""Non-negative, mutually consistent marginal tables, without the full data vector.

Given tables ``t_a`` (e.g. least-squares tables from :func:`marginal_tables` or
:func:`block_marginals`, which are consistent but may be negative) and one weight
``w_a`` per table, :func:`nonnegative_tables` returns the exact solution of

    ``minimize Σ_a w_a ‖μ_a − t_a‖²  over  μ ∈ C ∩ K``,

with ``C`` the consistent tables (``μ_a = M_a x`` for some real x: every two tables agree
on the marginal of their shared attributes and all share one total; optionally that total
is fixed) and ``K`` the non-negative tables. A natural weight is ``1 / cell variance``.
(Over ``C`` alone the nearest tables are the least-squares ones: :func:`marginal_tables`
of the tables measured with ``noise_std = 1 / √w_a``.)

Method. ``C`` is a subspace (affine with a known total), ``K`` a cone, both convex; the
projection onto ``C`` is the weighted average of each shared Fourier coordinate
(:mod:`dpmm.reconstruct.consistent_projection`), O(k · Σ table sizes), and onto ``K`` is
clipping. Plain alternating projections would reach *a* feasible point, not the nearest;
Dykstra's algorithm reaches the nearest. With a subspace it reduces to projected gradient
on the dual ``min_{ν ≥ 0} ½‖P_C(t + ν)‖²_w`` (gradient ``μ(ν) = P_C(t + ν)``, Lipschitz 1):
``ν ← max(ν − μ(ν), 0)`` is exactly Dykstra's update, with ``ν`` its correction term. The
default accelerates it (FISTA with gradient restarts, O'Donoghue & Candès 2015); pass
``accelerate=False`` for Dykstra itself. Each iterate ``μ(ν)`` is consistent by
construction, and it solves the problem once ``ν ≥ 0``, ``μ ≥ 0`` and ``ν ⊙ μ = 0``.

Stopping rule (certified). The projected-gradient step ``min(μ, ν)`` is the KKT residual:
``max |min(μ, ν)| ≤ tolerance · scale`` bounds the most negative cell and the
complementarity at once (``scale``: the consistent input's total). The last iterate's
remaining negative cells (at most ``tolerance · scale``) are removed by mixing with the
uniform consistent tables of the same total, ``(1 − λ) μ + λ T/n_a``, the smallest λ that
makes every cell non-negative, so the output is exactly non-negative and consistent up to
rounding. Weak duality gives ``gap``: the output's objective minus the dual value at
``ν``, an upper bound on its excess over the optimum. Memory is O(Σ table sizes).

A relaxation. Consistent non-negative tables form the *local polytope*: they need not be
the marginals of any non-negative vector. Pairwise tables of three binary attributes with
``x_0 = x_1``, ``x_1 = x_2`` but ``x_0 ≠ x_2`` (each with mass ½ on two cells) are
consistent and non-negative, yet no distribution has them. When the attribute sets form a
decomposable (acyclic) hypergraph, e.g. a junction tree's cliques, the two sets coincide.
Private-PGM (McKenna et al. 2019) instead fits a graphical model, whose marginals always
come from a non-negative vector (the *marginal polytope*), by mirror descent with exact
belief propagation, exponential in the junction tree's width: for all 3-way tables of
Adult's 14 attributes that tree has one clique of nearly every attribute. Its relaxed
variant (McKenna et al. 2021, "relaxed marginal consistency") optimizes over this same
local polytope with an entropic (KL) geometry; this module is its Euclidean counterpart,
solved exactly. Projecting the full vector (:func:`nnls`) gives realizable tables but
needs O(domain) memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import ArgumentError
from dpmm.reconstruct.consistent_projection import TableLayout, check_sizes

__all__ = [
    "ConsistentTables",
    "consistency_violation",
    "nonnegative_tables",
]


@dataclass(frozen=True, eq=False)
class ConsistentTables:
    """Non-negative consistent tables and the certificate of how they were reached.

    Attributes:
        tables: ``{sorted attrs: table}``, shaped ``[n_i for i in attrs]``.
        total: the common total of every table.
        iterations: projections onto the consistent tables (one per iteration).
        converged: whether the KKT residual reached the tolerance.
        kkt_residual: ``max |min(μ, ν)| / scale`` at the last iterate.
        mixing: the weight λ of the uniform tables mixed in to remove the last negatives.
        objective: ``Σ_a w_a ‖μ_a − t_a‖²`` of the output.
        gap: upper bound on ``objective`` minus the optimum (weak duality), ≥ 0 up to rounding.
    """

    tables: dict[tuple[int, ...], np.ndarray]
    total: float
    iterations: int
    converged: bool
    kkt_residual: float
    mixing: float
    objective: float
    gap: float


def _prepare(
    tables: Mapping[Sequence[int], np.ndarray],
    weights: Mapping[Sequence[int], float] | None,
    domain_shape: Sequence[int] | None,
    total: float | None,
) -> tuple[TableLayout, list[np.ndarray]]:
    """The validated tables' layout (with their weights and known total) and their stacks."""
    if not tables:
        raise ArgumentError("Consistent tables need at least one table.")
    shape = None if domain_shape is None else tuple(int(n) for n in domain_shape)
    prepared: dict[tuple[int, ...], np.ndarray] = {}
    originals: dict[tuple[int, ...], Sequence[int]] = {}
    for attrs, values in tables.items():
        key_list = [int(i) for i in attrs]
        key = tuple(sorted(key_list))
        if len(set(key)) != len(key) or any(i < 0 for i in key):
            raise ArgumentError(f"The table key {list(attrs)} must list distinct attributes ≥ 0.")
        if key in prepared:
            raise ArgumentError(f"The attribute set {list(key)} has two tables; merge them first.")
        array = np.asarray(values, dtype=np.float64)
        if shape is not None:
            if any(i >= len(shape) for i in key):
                raise ArgumentError(
                    f"The table on {list(attrs)} lies outside {len(shape)} attributes."
                )
            sizes = [shape[i] for i in key_list]
            if array.size != math.prod(sizes):
                raise ArgumentError(
                    f"The table on {list(attrs)} has {array.size} cells, not {math.prod(sizes)}."
                )
            array = array.reshape(sizes)
        elif array.ndim != len(key) and not (not key and array.size == 1):
            raise ArgumentError(
                f"The table on {list(attrs)} has {array.ndim} axes; "
                "pass domain_shape for flat tables."
            )
        array = np.transpose(array, np.argsort(key_list)) if key else array.reshape(())
        if not np.all(np.isfinite(array)):
            raise ArgumentError(f"The table on {list(attrs)} contains NaN or infinite values.")
        prepared[key] = np.array(array, order="C")  # ascontiguousarray makes 0-d 1-d
        originals[key] = attrs
    check_sizes({key: table.shape for key, table in prepared.items()})
    chosen = _weights(weights, originals)
    if total is not None and not (math.isfinite(total) and total >= 0):
        raise ArgumentError(f"A known total must be finite and non-negative, got {total}.")
    layout = TableLayout({k: t.shape for k, t in prepared.items()}, chosen, total)
    return layout, layout.stack(prepared)


def _weights(
    weights: Mapping[Sequence[int], float] | None, originals: Mapping[tuple[int, ...], object]
) -> dict[tuple[int, ...], float]:
    if weights is None:
        return {key: 1.0 for key in originals}
    chosen = {tuple(sorted(int(i) for i in attrs)): float(w) for attrs, w in weights.items()}
    for key in originals:
        w = chosen.get(key)
        if w is None or not (math.isfinite(w) and w > 0):
            raise ArgumentError(
                f"The table on {list(key)} needs a positive finite weight, got {w}."
            )
    if set(chosen) - set(originals):
        extra = sorted(set(chosen) - set(originals))[0]
        raise ArgumentError(f"A weight is given for {list(extra)}, which has no table.")
    return chosen


def consistency_violation(
    tables: Mapping[Sequence[int], np.ndarray], *, domain_shape: Sequence[int] | None = None
) -> float:
    """The largest disagreement between two tables' marginals on their shared attributes.

    Example:
        >>> consistency_violation({(0,): np.array([1.0, 2.0]), (0, 1): np.ones((2, 2))})
        1.0
    """
    layout, stacks = _prepare(tables, None, domain_shape, None)
    return layout.disagreement(stacks)


def nonnegative_tables(
    tables: Mapping[Sequence[int], np.ndarray],
    *,
    weights: Mapping[Sequence[int], float] | None = None,
    domain_shape: Sequence[int] | None = None,
    total: float | None = None,
    tolerance: float = 1e-9,
    max_iterations: int = 20_000,
    accelerate: bool = True,
) -> ConsistentTables:
    """The non-negative consistent tables nearest ``tables`` in ``Σ_a w_a ‖μ_a − t_a‖²``.

    Args:
        tables: ``{attrs: table}``; axes follow the order of ``attrs`` (flat tables need
            ``domain_shape``). Inconsistent input is fine: it is projected as well.
        weights: one positive weight per table (default 1), e.g. ``1 / cell variance``.
        domain_shape: attribute sizes, to read flat tables and check every table's size.
        total: a known total every table must share (default: estimated).
        tolerance: stop when ``max |min(μ, ν)|`` (KKT residual: the most negative cell and
            the complementarity) is at most ``tolerance`` times the consistent input's total.
        max_iterations: most projections; the output is feasible even when it stops early.
        accelerate: FISTA with restarts on the dual (default), or plain Dykstra.

    Returns:
        The tables (keys sorted, axes in sorted attribute order) with the certificate.

    Raises:
        ArgumentError: an empty or duplicated table, a size that disagrees with the domain or
            with another table holding the same attribute, NaN values, a bad weight or total.

    Example:
        >>> t = {(0,): np.array([3.0, -1.0]), (0, 1): np.array([[2.0, 0.5], [-0.5, 0.0]])}
        >>> out = nonnegative_tables(t)
        >>> [np.round(v, 4).tolist() for v in out.tables.values()], out.converged
        ([[2.8333, 0.0], [[2.1667, 0.6667], [0.0, 0.0]]], True)
    """
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ArgumentError(f"The tolerance must be positive, got {tolerance}.")
    layout, target = _prepare(tables, weights, domain_shape, total)
    start = layout.project(target)
    scale = _total(start) if total is None else total
    if not scale > 0:
        scale = max(float(np.max(np.abs(s), initial=0.0)) for s in target) or 1.0
    primal, dual, steps, converged, residual = _iterate(
        layout, target, start, tolerance * scale, max_iterations, accelerate
    )
    return _finish(layout, target, primal, dual, steps, converged, residual / scale)


def _iterate(
    layout: TableLayout,
    target: list[np.ndarray],
    start: list[np.ndarray],
    limit: float,
    max_iterations: int,
    accelerate: bool,
) -> tuple[list[np.ndarray], list[np.ndarray], int, bool, float]:
    """Projected gradient on the dual (Dykstra), optionally accelerated with restarts.

    Returns the consistent primal ``μ = P_C(t + ν)``, the dual ``ν ≥ 0`` it belongs to,
    the projections made, whether the KKT residual reached ``limit``, and that residual.
    """
    dual = [np.zeros_like(s) for s in target]
    point, momentum, steps = dual, 1.0, 0
    primal, converged, residual = start, False, math.inf
    while steps < max_iterations:
        if steps:  # at ν = 0 the projection of the input is already known
            primal = layout.project([t + z for t, z in zip(target, point, strict=True)])
        steps += 1
        updated = [np.maximum(z - m, 0.0) for z, m in zip(point, primal, strict=True)]
        residual = max(
            float(np.max(np.abs(z - u), initial=0.0)) for z, u in zip(point, updated, strict=True)
        )
        if residual <= limit:
            if point is dual:  # a dual-feasible point: its KKT residual is certified
                converged = True
                break
            point, momentum = updated, 1.0  # check the feasible point next
            dual = updated
            continue
        if accelerate:
            restart = layout.inner(
                [z - u for z, u in zip(point, updated, strict=True)],
                [u - d for u, d in zip(updated, dual, strict=True)],
            )
            if restart > 0:
                momentum, point = 1.0, updated
            else:
                following = (1.0 + math.sqrt(1.0 + 4.0 * momentum**2)) / 2.0
                beta = (momentum - 1.0) / following
                point = [u + beta * (u - d) for u, d in zip(updated, dual, strict=True)]
                momentum = following
        else:
            point = updated
        dual = updated
    if not converged:  # the last primal iterate belongs to the point before the update
        primal = layout.project([t + d for t, d in zip(target, dual, strict=True)])
        steps += 1
        residual = max(
            float(np.max(np.abs(np.minimum(m, d)), initial=0.0))
            for m, d in zip(primal, dual, strict=True)
        )
    return primal, dual, steps, converged, residual


def _total(stacks: Sequence[np.ndarray]) -> float:
    first = stacks[0]
    return float(first[0].sum())


def _finish(
    layout: TableLayout,
    target: list[np.ndarray],
    primal: list[np.ndarray],
    dual: list[np.ndarray],
    steps: int,
    converged: bool,
    residual: float,
) -> ConsistentTables:
    """Mix in uniform tables to clear the last negatives, and bound the gap by duality."""
    total = _total(primal)
    if total <= 0:  # only the zero tables are non-negative with a non-positive total
        output = [np.zeros_like(m) for m in primal]
        mixing, total = 1.0, 0.0
    else:
        mixing = 0.0
        for group, table in zip(layout.groups, primal, strict=True):
            uniform = total / math.prod(group.sizes)
            negative = table[table < 0]
            if negative.size:
                mixing = max(mixing, float(np.max(-negative / (uniform - negative))))
        output = [
            (1.0 - mixing) * m + mixing * (total / math.prod(g.sizes))
            for g, m in zip(layout.groups, primal, strict=True)
        ]
        output = [np.maximum(o, 0.0) for o in output]  # rounding only: o ≥ −1e-16·total
    difference = [o - t for o, t in zip(output, target, strict=True)]
    objective = layout.inner(difference, difference)
    at_dual = [m - t for m, t in zip(primal, target, strict=True)]
    dual_value = layout.inner(at_dual, at_dual) - 2.0 * layout.inner(dual, primal)
    return ConsistentTables(
        tables=layout.unstack(output),
        total=total,
        iterations=steps,
        converged=converged,
        kkt_residual=residual,
        mixing=mixing,
        objective=objective,
        gap=max(objective - dual_value, 0.0),
    )
