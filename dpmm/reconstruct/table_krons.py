"""Consistent marginal tables from Kronecker blocks that each read one table, with exact variances.

A :class:`~dpmm.linalg.table_krons.TableKrons` strategy measures, per block b,
``y_b = α_b B_b t_b + e_b`` with ``t_b = M_{S_b} x`` the marginal table on the attributes S_b,
``B_b = ⊗_{i∈S_b} B_{b,i}`` of full column rank and noise of variance v on every answer.
The estimate:

1. per block, least squares on its own answers: ``t̂_b = B_b⁺ y_b / α_b``, unbiased with
   covariance ``(v/α_b²) ⊗_i K_{b,i}``, ``K_{b,i} = (B_{b,i}ᵀ B_{b,i})⁻¹``;
2. the weighted projection onto consistent tables
   (:class:`~dpmm.reconstruct.consistent_projection.TableLayout`).

In the coordinates ``φ_{b,T} = Q_T marg_T t_b`` (``Q_i = I − J/n_i``, T ⊆ S_b) the projection
is a weighted average per T, ``φ̄_T = Σ_{b ⊇ T} c_{b,T} φ_{b,T}`` with ``c_{b,T}`` summing
to one over the blocks holding T. The strategy carries them: OPT_+ chooses those least in
the workload's error (:func:`optimal_coefficients`), and by default they are proportional to
the inverse of the mean variance of ``φ_{b,T}``'s entries,
``α_b² / (Π_{i∈T} mean diag Q K_{b,i} Q · Π_{i∈S_b∖T} 1ᵀ K_{b,i} 1)``. A block's errors can
be far larger on some coordinates than on others (a prefix factor's sums, say), and its
coordinates are correlated, so one weight per table let a poor estimate of one coordinate
spoil a good one (on the SF1 tables, a 330× larger RMSE than the blocks' own answers). The
consistent
tables are the marginals of ``x̂ = Σ_T φ̄_T`` broadcast ``/ n_{[d]∖T}``. So a workload term
``w ⊗_{i∈R} W_i`` (the total on every other attribute) is answered by
``w (⊗_{i∈R} W_i) marg_R x̂ = Σ_b Σ_{T ⊆ R∩S_b} c_{b,T} L_{b,T} t̂_b`` with, per attribute,
``Q_i`` on T, ``J/n_i`` on ``(R∩S_b)∖T``, the broadcast ``1/n_i`` on ``R∖S_b`` and the sum
``1ᵀ`` on ``S_b∖R``. The blocks are independent, so its covariance is

    ``v Σ_b α_b⁻² Σ_{T,T' ⊆ R∩S_b} c_{b,T} c_{b,T'} ⊗_i W_i F_{i,T} K_{b,i} F_{i,T'}ᵀ W_iᵀ``,

a sum of Kronecker products of per-attribute matrices: its trace is a sum of products of
per-attribute traces and its diagonal a sum of Kronecker products of per-attribute
diagonals. Nothing is ever as large as the domain, and every figure is exact. The estimate
is unbiased for a term whose read attributes R lie in one table (else the term's parts
outside the tables' subsets are not measured).

Example:
    >>> from dpmm.linalg import Identity, Kron, Ones
    >>> from dpmm.linalg.table_krons import TableKrons
    >>> A = TableKrons((3, 2), [((0,), (Identity(3),), 1.0), ((1,), (Identity(2),), 1.0)])
    >>> W = Kron([Identity(3), Ones(1, 2)])   # 3 cells measured at variance 1 …
    >>> round(answer_error(W, A), 6)   # … whose total is averaged with the other table's
    2.4
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import Dense, Matrix, query_variances, trace_of_product
from dpmm.linalg.eigen_strategy import kron_apply
from dpmm.linalg.kron import KronTerm, kron_rows, kron_terms
from dpmm.linalg.table_krons import KronTable, TableKrons, read_attributes, subsets
from dpmm.reconstruct.consistent_projection import TableLayout

__all__ = [
    "answer_error",
    "answer_variances",
    "attribute_grams",
    "block_errors",
    "check_answerable",
    "coefficients",
    "consistent_tables",
    "coordinate_weights",
    "optimal_coefficients",
    "pair_errors",
    "table_marginal",
    "workload_answers",
]

Attributes = tuple[int, ...]

_TINY = float(np.finfo(np.float64).tiny)


def coordinate_weights(A: TableKrons) -> list[dict[Attributes, float]]:
    """Per block, each coordinate's weight in the projection: the inverse of the mean
    variance of its entries (at unit noise variance)."""
    weights = []
    for table in A.tables:
        centred, summed = {}, {}
        for i, K in zip(table.attributes, table.gram_pinvs, strict=True):
            rows = K.mean(axis=1)
            # mean diag(Q K Q) (a single cell's coordinate is 0: any weight will do)
            centred[i] = max(float(np.mean(np.diag(K)) - rows.mean()), _TINY)
            summed[i] = float(K.sum())
        weights.append(
            {
                subset: table.weight**2
                / math.prod(centred[i] if i in subset else summed[i] for i in table.attributes)
                for subset in subsets(table.attributes)
            }
        )
    return weights


def _block_estimate(table: KronTable, answers: np.ndarray) -> np.ndarray:
    """``B_b⁺ y_b / α_b``, one factor's pseudo-inverse applied along each axis."""
    shape = [factor.shape[0] for factor in table.factors]
    inverses = [np.linalg.pinv(factor.dense()) for factor in table.factors]
    return kron_apply(inverses, np.reshape(answers, shape)) / table.weight


def coefficients(A: TableKrons) -> tuple[dict[Attributes, float], ...]:
    """``c_{b,T}``: the strategy's own, or each coordinate's inverse-variance weights."""
    if A.coefficients is not None:
        return A.coefficients
    weights = coordinate_weights(A)
    totals: dict[Attributes, float] = {}
    for block in weights:
        for subset, value in block.items():
            totals[subset] = totals.get(subset, 0.0) + value
    return tuple({s: value / totals[s] for s, value in block.items()} for block in weights)


def optimal_coefficients(
    W: Matrix, A: TableKrons, pairs: Sequence[dict[Pair, float]] | None = None
) -> tuple[dict[Attributes, float], ...]:
    """The coefficients that minimize W's total error (:func:`pair_errors`' quadratic form,
    computed unless ``pairs`` gives it) under ``Σ_b c_{b,T} = 1`` per shared coordinate T:
    one KKT system, as large as the blocks' coordinates. A coordinate W does not read keeps
    (nearly) its inverse-variance weight, by a ridge 10⁻⁹ of the form's scale."""
    pairs = pair_errors(W, A) if pairs is None else pairs
    holders: dict[Attributes, list[int]] = {}
    for b, table in enumerate(A.tables):
        for subset in subsets(table.attributes):
            holders.setdefault(subset, []).append(b)
    free = [(b, s) for s, blocks in holders.items() if len(blocks) > 1 for b in blocks]
    if not free:
        return coefficients(A.with_coefficients(None))
    index = {variable: j for j, variable in enumerate(free)}
    shared = sorted({s for _, s in free}, key=lambda s: (len(s), s))
    n, m = len(free), len(shared)
    H = np.zeros((n, n))
    linear = np.zeros(n)
    for b, block in enumerate(pairs):
        for (left, right), value in block.items():
            i, j = index.get((b, left)), index.get((b, right))
            if i is not None and j is not None:
                H[i, j] += value
            elif i is not None:  # the other coefficient is fixed at 1 (T held once)
                linear[i] += value
            elif j is not None:
                linear[j] += value
    weights = coordinate_weights(A)
    variances = np.array([1.0 / weights[b][s] for b, s in free])  # each coordinate's own
    scale = max(float(np.abs(np.diag(H)).max(initial=0.0)), _TINY)
    H += np.diag(1e-9 * scale * variances / variances.max())
    # In units of each coefficient's own diagonal (Jacobi): the entries span many decades.
    d = np.sqrt(np.diag(H))
    kkt = np.zeros((n + m, n + m))
    kkt[:n, :n] = (H + H.T) / np.outer(d, d)
    for row, subset in enumerate(shared):
        for b in holders[subset]:
            j = index[(b, subset)]
            kkt[n + row, j] = kkt[j, n + row] = 1.0 / d[j]
    rhs = np.concatenate([-linear / d, np.ones(m)])
    solution = np.linalg.solve(kkt, rhs)[:n] / d
    result = [dict.fromkeys(subsets(t.attributes), 1.0) for t in A.tables]
    for (b, subset), value in zip(free, solution, strict=True):
        result[b][subset] = float(value)
    for subset in shared:  # exact sums despite rounding: the last holder takes the rest
        *rest, last = holders[subset]
        result[last][subset] = 1.0 - math.fsum(result[b][subset] for b in rest)
    return tuple(result)


def consistent_tables(A: TableKrons, answers: Sequence[np.ndarray]) -> dict[Attributes, np.ndarray]:
    """The consistent least-squares tables, one per attribute set the blocks read.

    ``answers``: each block's noisy answers, in block order.
    """
    if len(answers) != len(A.tables):
        raise ValueError(f"{A!r} has {len(A.tables)} blocks, got {len(answers)} answer arrays")
    estimates = {
        table.attributes: _block_estimate(table, y)
        for table, y in zip(A.tables, answers, strict=True)
    }
    weights = {t.attributes: c for t, c in zip(A.tables, coefficients(A), strict=True)}
    layout = TableLayout(
        {key: t.shape for key, t in estimates.items()},
        dict.fromkeys(estimates, 1.0),
        coordinate_weights=weights,
    )
    return layout.unstack(layout.project(layout.stack(estimates)))


def table_marginal(tables: dict[Attributes, np.ndarray], attributes: Attributes) -> np.ndarray:
    """The marginal on ``attributes`` (sorted) of the consistent tables, from one holding them.

    Raises:
        UnsupportedQueryError: no table holds them all.
    """
    key = next((k for k in tables if set(attributes) <= set(k)), None)
    if key is None:
        raise UnsupportedQueryError(f"no measured table holds the attributes {list(attributes)}")
    dropped = tuple(p for p, i in enumerate(key) if i not in attributes)
    return tables[key].sum(axis=dropped) if dropped else tables[key]


def workload_answers(W: Matrix, tables: dict[Attributes, np.ndarray]) -> np.ndarray:
    """W's answers from consistent tables: each product from the marginal it reads, its
    factors applied axis by axis through their own structure (never densely)."""
    parts = []
    for term in kron_terms(W):
        read = read_attributes(term.factors)
        values = table_marginal(tables, read)
        for axis, i in enumerate(read):
            moved = np.moveaxis(values, axis, 0)
            applied = term.factors[i] @ moved.reshape(moved.shape[0], -1)
            values = np.moveaxis(applied.reshape(-1, *moved.shape[1:]), 0, axis)
        parts.append(term.weight * np.asarray(values, dtype=np.float64).reshape(-1))
    return np.concatenate(parts)


def check_answerable(W: Matrix, A: TableKrons) -> None:
    """Raise unless every product of W reads only attributes one of A's tables holds.

    Raises:
        UnsupportedQueryError: a product no table holds.
    """
    for term in kron_terms(W):
        _check_covered(A, read_attributes(term.factors), term)


def _check_covered(A: TableKrons, read: Attributes, term: KronTerm) -> None:
    if not any(set(read) <= set(table.attributes) for table in A.tables):
        raise UnsupportedQueryError(
            f"Strategy {A!r} cannot answer the product {term.factors!r}: no table it measures "
            f"holds all of the attributes {list(read)}"
        )


Pair = tuple[Attributes, Attributes]


def _pieces(
    A: TableKrons, term: KronTerm, blocks: Sequence[int] | None = None
) -> Iterator[tuple[int, Pair, float, dict[int, tuple[object, np.ndarray]], float]]:
    """Per block b (of ``blocks``, default all) and subsets T, T' ⊆ R∩S_b: b, (T, T'),
    ``w² / α_b²``, per read attribute i a cache key and ``F_{i,T} K_{b,i} F_{i,T'}ᵀ``
    (symmetrized), and the product of ``1ᵀ K_{b,i} 1`` over the attributes of S_b the term
    totals."""
    read = read_attributes(term.factors)
    _check_covered(A, read, term)
    shape = A.domain_shape
    broadcasts: dict[int, tuple[object, np.ndarray]] = {}
    for b in range(len(A.tables)) if blocks is None else blocks:
        table = A.tables[b]
        covariances = dict(zip(table.attributes, table.gram_pinvs, strict=True))
        shared = tuple(i for i in read if i in covariances)
        summed = math.prod(float(K.sum()) for i, K in covariances.items() if i not in read)
        kinds = {i: _kinds(covariances[i]) for i in shared}
        scale = term.weight**2 / table.weight**2
        broadcast = {
            i: broadcasts.setdefault(i, (i, np.full((shape[i],) * 2, 1.0 / shape[i] ** 2)))
            for i in read
            if i not in covariances
        }
        within = subsets(shared)
        for left, right in itertools.product(within, within):
            matrices = dict(broadcast)
            for i in shared:
                kind = (i in left, i in right)
                matrices[i] = ((b, i, kind), kinds[i][kind])
            yield b, (left, right), scale, matrices, summed


def _kinds(K: np.ndarray) -> dict[tuple[bool, bool], np.ndarray]:
    """``F K F'ᵀ`` (symmetrized) for F, F' each ``Q`` (True) or ``J/n`` (False), O(n²)."""
    n = K.shape[0]
    rows = K.sum(axis=1) / n  # K 1 / n
    mean = float(rows.mean())  # 1ᵀ K 1 / n²
    centred = rows - mean
    both = K - rows[:, None] - rows[None, :] + mean
    cross = np.add.outer(centred, centred) / 2  # sym((Q K 1/n) 1ᵀ)
    return {
        (True, True): both,
        (True, False): cross,
        (False, True): cross,
        (False, False): np.full((n, n), mean),
    }


def _term_factors(term: KronTerm) -> dict[int, Matrix]:
    return {i: term.factors[i] for i in read_attributes(term.factors)}


def pair_errors(W: Matrix, A: TableKrons) -> list[dict[Pair, float]]:
    """Per block b, for the coordinates T, T' of its table: the part of W's total variance
    (unit noise) that is ``c_{b,T} c_{b,T'}`` times the entry: the error is
    ``Σ_b Σ_{T,T'} c_{b,T} c_{b,T'} H_b[T, T']``, a quadratic form in the coefficients."""
    pairs: list[dict[Pair, float]] = [{} for _ in A.tables]
    for term in kron_terms(W):
        factors = _term_factors(term)
        grams = {i: f.gram() for i, f in factors.items()}
        traces: dict[object, float] = {}
        for b, pair, scale, matrices, summed in _pieces(A, term):
            product = scale * summed
            for i, (key, matrix) in matrices.items():
                if key not in traces:
                    traces[key] = trace_of_product(grams[i], Dense(matrix))
                product *= traces[key]
            pairs[b][pair] = pairs[b].get(pair, 0.0) + product
    return pairs


def block_errors(
    pairs: Sequence[dict[Pair, float]], coefficients: Sequence[dict[Attributes, float]]
) -> list[float]:
    """Each block's part of W's total variance: its :func:`pair_errors` quadratic form at
    the coefficients."""
    return [
        math.fsum(c[left] * c[right] * value for (left, right), value in block.items())
        for block, c in zip(pairs, coefficients, strict=True)
    ]


def attribute_grams(
    W: Matrix, A: TableKrons, b: int, attributes: Sequence[int] | None = None
) -> dict[int, np.ndarray]:
    """Per attribute i of block ``b`` (of ``attributes``, default all): the matrix ``G_i``
    with the block's part of W's total variance (unit noise, A's coefficients) equal to
    ``trace(G_i K_{b,i})``, every other factor of the block fixed.

    Each of the block's pieces (:func:`pair_errors`) holds ``K_{b,i}`` once: as
    ``trace(G F_T K F_{T'})`` where the term reads attribute i (G its factor's Gram) and as
    ``1ᵀ K 1`` where it totals it. So ``G_i`` sums ``sym(F_{T'} G F_T)``, or ``J``, times the
    rest of each piece: a refit of that factor against ``G_i`` is one attribute's problem,
    as in OPT_⊗'s sweeps.
    """
    c = coefficients(A)
    table = A.tables[b]
    own = dict(zip(table.attributes, table.gram_pinvs, strict=True))
    wanted = table.attributes if attributes is None else tuple(attributes)
    result = {i: np.zeros(own[i].shape) for i in wanted}
    for term in kron_terms(W):
        factors = _term_factors(term)
        grams = {j: f.gram() for j, f in factors.items()}
        kinds = {i: _kinds(grams[i].dense()) for i in wanted if i in factors}
        traces: dict[object, float] = {}
        for _, (left, right), scale, matrices, summed in _pieces(A, term, [b]):
            per_attribute = {}
            for j, (key, matrix) in matrices.items():
                if key not in traces:
                    traces[key] = trace_of_product(grams[j], Dense(matrix))
                per_attribute[j] = traces[key]
            weight = c[b][left] * c[b][right] * scale
            for i in wanted:
                rest = weight * math.prod(t for j, t in per_attribute.items() if j != i)
                if i in kinds:
                    result[i] += rest * summed * kinds[i][(i in left, i in right)]
                else:  # the term totals attribute i: 1ᵀ K 1 = trace(J K)
                    result[i] += rest * summed / float(own[i].sum())
    return result


def answer_error(W: Matrix, A: TableKrons) -> float:
    """The total variance of W's answers at unit noise variance: ``trace(W Σ Wᵀ)``."""
    return math.fsum(block_errors(pair_errors(W, A), coefficients(A)))


def answer_variances(W: Matrix, A: TableKrons) -> np.ndarray:
    """The variance of each of W's answers at unit noise variance, in W's row order."""
    c = coefficients(A)
    parts = []
    for term in kron_terms(W):
        factors = _term_factors(term)
        rows = math.prod(f.shape[0] for f in term.factors)
        variances = np.zeros(rows)
        diagonals: dict[object, np.ndarray] = {}
        for b, (left, right), scale, matrices, summed in _pieces(A, term):
            vectors = []
            for i in sorted(factors):
                key, matrix = matrices[i]
                if key not in diagonals:
                    diagonals[key] = query_variances(factors[i], Dense(matrix))
                vectors.append(diagonals[key])
            coefficient = c[b][left] * c[b][right] * scale * summed
            variances += coefficient * (kron_rows(vectors) if vectors else 1.0)
        parts.append(variances)
    return np.concatenate(parts)
