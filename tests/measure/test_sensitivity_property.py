"""Every method's strategy, quantized for measurement, records its exact sensitivity.

For random small workloads of every kind, each strategy method's result is put on an
integer grid as :func:`~dpmm.measure.measure_strategy` does (:func:`measurable`). The
sensitivities :func:`analyze_strategy` derives from the integer matrix's structure, and
the one a measurement records, must equal the largest column norm of the dense integer
matrix, computed in Python integers: ``Σ_i |b_ij|`` under pure DP, ``Σ_i b_ij²`` under
zCDP. Residual strategies (integer Helmert blocks) are also checked against their
definition in ``test_residual_blocks.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmm.errors import UnsupportedQueryError
from dpmm.linalg import (
    AllRange,
    Identity,
    Kron,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    RangeQueries,
    VStack,
    Weighted,
)
from dpmm.measure import analyze_strategy, measurable, measure
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import METHODS, optimize

PRIVACY = {"pure": PureDP(1), "zcdp": ZCDP("1/2")}
#: Seeds per (workload kind, privacy): 8 kinds × 2 × 3 = 48 cases.
SEEDS = range(3)


# -- random small workloads ------------------------------------------------------------------
def _one_dimensional(rng: np.random.Generator, n: int) -> Matrix:
    kind = rng.choice(["identity", "total", "prefix", "all_range", "ranges"])
    if kind == "identity":
        return Identity(n)
    if kind == "total":
        return Ones(1, n)
    if kind == "prefix":
        return Prefix(n)
    if kind == "all_range":
        return AllRange(n)
    return _ranges(rng, n)


def _ranges(rng: np.random.Generator, n: int) -> RangeQueries:
    ends = np.sort(rng.integers(0, n, size=(int(rng.integers(1, 6)), 2)), axis=1)
    return RangeQueries(n, [(int(low), int(high)) for low, high in ends])


def _shape(rng: np.random.Generator, attributes: int, max_cells: int = 36) -> tuple[int, ...]:
    while True:
        shape = tuple(int(n) for n in rng.integers(2, 5, size=attributes))
        if math.prod(shape) <= max_cells:
            return shape


def _attribute_sets(rng: np.random.Generator, dims: int) -> list[tuple[int, ...]]:
    """One to three distinct sets of attributes (the empty set is the total)."""
    masks = rng.choice(1 << dims, size=int(rng.integers(1, 4)), replace=False)
    return [tuple(i for i in range(dims) if int(mask) >> i & 1) for mask in masks]


def random_workload(kind: str, rng: np.random.Generator) -> Matrix:
    """A small workload of ``kind``, at most 36 cells."""
    if kind == "prefix":
        return Prefix(int(rng.integers(2, 11)))
    if kind == "all_range":
        return AllRange(int(rng.integers(2, 9)))
    if kind == "ranges":
        return _ranges(rng, int(rng.integers(2, 11)))
    if kind == "kron":
        shape = _shape(rng, int(rng.integers(2, 4)))
        return Kron([_one_dimensional(rng, n) for n in shape])
    if kind in ("marginals", "weighted_marginals"):
        shape = _shape(rng, int(rng.integers(2, 4)))
        sets = _attribute_sets(rng, len(shape))
        weighted = kind == "weighted_marginals"
        return Marginals(shape, {s: float(rng.uniform(0.5, 3)) if weighted else 1.0 for s in sets})
    if kind == "marginals_x_prefix":
        # A union of marginals on the first attributes, each times a prefix on the last.
        shape = _shape(rng, int(rng.integers(2, 4)))
        terms = []
        for attributes in _attribute_sets(rng, len(shape) - 1):
            factors = [Identity(n) if i in attributes else Ones(1, n) for i, n in enumerate(shape)]
            terms.append(Kron([*factors[:-1], Prefix(shape[-1])]))
        return VStack(terms)
    if kind == "weighted_union":
        shape = _shape(rng, 2)
        terms = [
            Weighted(float(rng.uniform(0.5, 3)), Kron([_one_dimensional(rng, n) for n in shape]))
            for _ in range(int(rng.integers(2, 4)))
        ]
        return VStack(terms)
    raise ValueError(f"unknown workload kind {kind!r}")


KINDS = (
    "prefix",
    "all_range",
    "ranges",
    "kron",
    "marginals",
    "weighted_marginals",
    "marginals_x_prefix",
    "weighted_union",
)
CASES = [(kind, privacy, seed) for kind in KINDS for privacy in PRIVACY for seed in SEEDS]
#: The last seed of every case runs with the slow tests (the default suite's time bar).
SLOW_SEEDS = {SEEDS[-1]}


# -- the brute-force oracle --------------------------------------------------------------------
def dense_integer_matrix(integer: Matrix) -> np.ndarray:
    """``integer.dense()`` as Python integers (object array), checked to be integral.

    Some integer types form their dense matrix through float products (integer Helmert
    blocks through the residual stack), so entries are rounded after a check that they are
    within rounding error of an integer.
    """
    dense = integer.dense()
    rounded = np.rint(dense)
    assert np.abs(dense - rounded).max(initial=0.0) < 1e-6, f"{integer!r} is not integral"
    return rounded.astype(np.int64).astype(object)


def dense_column_norms(B: np.ndarray) -> tuple[list[int], list[int]]:
    """Per column: ``Σ_i |b_ij|`` and ``Σ_i b_ij²``, exact Python integers."""
    return np.abs(B).sum(axis=0).tolist(), (B * B).sum(axis=0).tolist()


def case_data(kind: str, seed: int) -> tuple[Matrix, np.ndarray]:
    """The workload of a case and a small data vector, from the case's own seed."""
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    W = random_workload(kind, rng)
    return W, rng.integers(0, 5, size=W.shape[1])


def check_recorded_sensitivity(A: Matrix, privacy: str, x: np.ndarray, where: str) -> None:
    """Quantize ``A`` for measurement; its exact and recorded norms are the dense ones."""
    quantized = measurable(A)
    where = f"{where}: {quantized.integer!r:.200}"
    B = dense_integer_matrix(quantized.integer)
    l1, l2_squared = dense_column_norms(B)
    exact = analyze_strategy(quantized.integer)
    assert exact.sensitivity_l1 == max(l1), where
    assert exact.sensitivity_l2_squared == max(l2_squared), where
    if exact.column_l1.size == B.shape[1]:  # one norm per cell (not the astronomical form)
        assert exact.column_l1.tolist() == l1, where
        assert exact.column_l2_squared.tolist() == l2_squared, where
    assert exact.entry_bound >= max(np.abs(B).max(initial=0), 1), where
    record = measure(quantized, x, PRIVACY[privacy], rng=np.random.default_rng(len(x)))
    expected = max(l1) if privacy == "pure" else max(l2_squared)
    assert record.sensitivity == expected, where
    assert record.quantization_scale == quantized.scale, where


# -- the property --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "privacy", "seed"),
    [
        pytest.param(*case, marks=[pytest.mark.slow] if case[2] in SLOW_SEEDS else [])
        for case in CASES
    ],
    ids=[f"{k}-{p}-{s}" for k, p, s in CASES],
)
def test_recorded_sensitivity_is_the_largest_dense_column_norm(kind, privacy, seed):
    W, x = case_data(kind, seed)
    checked = []
    for method in METHODS:
        try:
            A = optimize(W, method, PRIVACY[privacy])
        except UnsupportedQueryError:  # the method does not apply to this workload
            continue
        check_recorded_sensitivity(A, privacy, x, f"{method} on {W!r}")
        checked.append(method)
    assert {"identity", "hierarchical", "wavelet", "marginals"} <= set(checked)
