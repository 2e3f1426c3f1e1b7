"""Consistent marginal tables from Kronecker blocks that each read one table, with exact variances.

A :class:`~dpmm.linalg.table_krons.TableKrons` strategy measures, per block b,
``y_b = α_b B_b t_b + e_b`` with ``t_b = M_{S_b} x`` the marginal table on the attributes S_b,
``B_b = ⊗_{i∈S_b} B_{b,i}`` of full column rank and noise of variance v on every answer.
The estimate:

1. per block, least squares on its own answers: ``t̂_b = B_b⁺ y_b / α_b``, unbiased with
   covariance ``(v/α_b²) ⊗_i K_{b,i}``, ``K_{b,i} = (B_{b,i}ᵀ B_{b,i})⁻¹``;
2. the weighted projection onto consistent tables
   (:class:`~dpmm.reconstruct.consistent_projection.TableLayout`), each table weighted by the
   inverse of its cells' mean variance ``ω_b = α_b² / Π_i mean diag K_{b,i}`` (blocks on one
   attribute set are first averaged with those weights, which the projection would do).

In the coordinates ``φ_{b,T} = Q_T marg_T t_b`` (``Q_i = I − J/n_i``, T ⊆ S_b) the projection
is a weighted average per T, ``φ̄_T = Σ_{b ⊇ T} c_{b,T} φ_{b,T}`` with
``c_{b,T} ∝ ω_b / n_{S_b∖T}`` summing to one over the blocks holding T, and the consistent
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
from dpmm.linalg.kron import KronTerm, kron_rows, kron_terms
from dpmm.linalg.table_krons import TableKrons, read_attributes
from dpmm.reconstruct.consistent_projection import TableLayout

__all__ = [
    "answer_error",
    "answer_variances",
    "check_answerable",
    "consistent_tables",
    "table_marginal",
    "table_weights",
    "workload_answers",
]

Attributes = tuple[int, ...]


def table_weights(A: TableKrons) -> list[float]:
    """Each block's projection weight: the inverse of its table's mean cell variance
    (at unit noise variance)."""
    return [
        table.weight**2 / math.prod(float(np.mean(np.diag(K))) for K in table.gram_pinvs())
        for table in A.tables
    ]


def _block_estimate(table, answers: np.ndarray) -> np.ndarray:
    """``B_b⁺ y_b / α_b``, one factor's pseudo-inverse applied along each axis."""
    estimate = np.asarray(answers, dtype=np.float64).reshape(
        [factor.shape[0] for factor in table.factors]
    )
    for axis, factor in enumerate(table.factors):
        inverse = np.linalg.pinv(factor.dense())
        estimate = np.moveaxis(np.tensordot(inverse, estimate, axes=([1], [axis])), 0, axis)
    return estimate / table.weight


def consistent_tables(A: TableKrons, answers: Sequence[np.ndarray]) -> dict[Attributes, np.ndarray]:
    """The consistent least-squares tables, one per attribute set the blocks read.

    ``answers``: each block's noisy answers, in block order.
    """
    if len(answers) != len(A.tables):
        raise ValueError(f"{A!r} has {len(A.tables)} blocks, got {len(answers)} answer arrays")
    sums: dict[Attributes, np.ndarray] = {}
    weights: dict[Attributes, float] = {}
    for table, omega, y in zip(A.tables, table_weights(A), answers, strict=True):
        estimate = omega * _block_estimate(table, y)
        key = table.attributes
        sums[key] = sums[key] + estimate if key in sums else estimate
        weights[key] = weights.get(key, 0.0) + omega
    averaged = {key: total / weights[key] for key, total in sums.items()}
    layout = TableLayout({key: t.shape for key, t in averaged.items()}, weights)
    return layout.unstack(layout.project(layout.stack(averaged)))


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


def _coefficients(A: TableKrons) -> list[dict[Attributes, float]]:
    """``c_{b,T}`` for every block b and subset T of its attributes."""
    omegas = table_weights(A)
    shape = A.domain_shape
    shares = [
        {
            subset: omega / math.prod(shape[i] for i in table.attributes if i not in subset)
            for k in range(len(table.attributes) + 1)
            for subset in itertools.combinations(table.attributes, k)
        }
        for table, omega in zip(A.tables, omegas, strict=True)
    ]
    totals: dict[Attributes, float] = {}
    for share in shares:
        for subset, value in share.items():
            totals[subset] = totals.get(subset, 0.0) + value
    return [{subset: value / totals[subset] for subset, value in share.items()} for share in shares]


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


def _pieces(
    A: TableKrons, term: KronTerm
) -> Iterator[tuple[float, dict[int, tuple[object, np.ndarray]], float]]:
    """Per block b and subsets T, T' ⊆ R∩S_b: ``c_{b,T} c_{b,T'} w² / α_b²``, per read
    attribute i a cache key and ``F_{i,T} K_{b,i} F_{i,T'}ᵀ`` (symmetrized), and the product
    of ``1ᵀ K_{b,i} 1`` over the attributes of S_b the term totals."""
    read = read_attributes(term.factors)
    _check_covered(A, read, term)
    shape = A.domain_shape
    broadcast = {i: (i, np.full((shape[i], shape[i]), 1.0 / shape[i] ** 2)) for i in read}
    for b, (table, coefficients) in enumerate(zip(A.tables, _coefficients(A), strict=True)):
        covariances = dict(zip(table.attributes, table.gram_pinvs(), strict=True))
        shared = tuple(i for i in read if i in covariances)
        summed = math.prod(float(K.sum()) for i, K in covariances.items() if i not in read)
        kinds = {i: _kinds(covariances[i]) for i in shared}
        scale = term.weight**2 / table.weight**2
        subsets = [s for k in range(len(shared) + 1) for s in itertools.combinations(shared, k)]
        for left, right in itertools.product(subsets, subsets):
            matrices = dict(broadcast)
            for i in shared:
                kind = (i in left, i in right)
                matrices[i] = ((b, i, kind), kinds[i][kind])
            yield coefficients[left] * coefficients[right] * scale, matrices, summed


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


def answer_error(W: Matrix, A: TableKrons) -> float:
    """The total variance of W's answers at unit noise variance: ``trace(W Σ Wᵀ)``."""
    total = 0.0
    for term in kron_terms(W):
        factors = _term_factors(term)
        grams = {i: f.gram() for i, f in factors.items()}
        traces: dict[object, float] = {}
        for coefficient, matrices, summed in _pieces(A, term):
            product = coefficient * summed
            for i, (key, matrix) in matrices.items():
                if key not in traces:
                    traces[key] = trace_of_product(grams[i], Dense(matrix))
                product *= traces[key]
            total += product
    return total


def answer_variances(W: Matrix, A: TableKrons) -> np.ndarray:
    """The variance of each of W's answers at unit noise variance, in W's row order."""
    parts = []
    for term in kron_terms(W):
        factors = _term_factors(term)
        rows = math.prod(f.shape[0] for f in term.factors)
        variances = np.zeros(rows)
        diagonals: dict[object, np.ndarray] = {}
        for coefficient, matrices, summed in _pieces(A, term):
            vectors = []
            for i in sorted(factors):
                key, matrix = matrices[i]
                if key not in diagonals:
                    diagonals[key] = query_variances(factors[i], Dense(matrix))
                vectors.append(diagonals[key])
            variances += coefficient * summed * (kron_rows(vectors) if vectors else 1.0)
        parts.append(variances)
    return np.concatenate(parts)
