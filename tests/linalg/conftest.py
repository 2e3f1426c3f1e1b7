"""Random small instances of every implicit matrix type, and the dense oracle helpers.

Every strategy returns a :class:`dpmm.linalg.Matrix` whose dense form has at
most ``MAX_SIDE`` rows and columns, so a test can compare any operation with
numpy on ``M.dense()``. Explicit arrays are drawn from a seed (not entry by
entry) and are well conditioned on their row space, so a pseudo-inverse
computed two ways agrees to a tight tolerance; exact rank deficiency (low-rank
``Dense``, ``Ones``, marginals, short interval lists) is kept on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    HStack,
    Identity,
    Kron,
    Marginal,
    Marginals,
    MarginalsGram,
    Matrix,
    Ones,
    Prefix,
    Product,
    RangeQueries,
    Sparse,
    Sum,
    VStack,
    Weighted,
)

#: Largest dense side of a generated matrix: keeps every dense oracle in the milliseconds.
MAX_SIDE = 64

#: Hypothesis settings of the oracle tests: no deadline (a first call may touch cold LAPACK
#: paths), and fewer examples than the default so the whole suite stays near ten seconds.
ORACLE = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

WEIGHTS = st.sampled_from([-2.5, -1.0, -0.5, 0.5, 1.5, 3.0])
SEEDS = st.integers(0, 2**32 - 1)


# -- dense oracle helpers ------------------------------------------------------------------
def assert_close(actual: object, expected: object, rtol: float = 1e-7) -> None:
    """Entrywise agreement, with an absolute floor scaled to the expected magnitude."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def dense_of(M: Matrix) -> np.ndarray:
    """``M.dense()``, checked against ``M @ I`` so that ``dense`` itself is under test."""
    dense = M.dense()
    assert dense.shape == M.shape
    assert_close(M @ np.eye(M.shape[1]), dense)
    return dense


def pinv_oracle(dense: np.ndarray) -> np.ndarray:
    """numpy's pseudo-inverse with dpmm's cutoff: singular values below 1e-10 of the largest.

    numpy's default cutoff (1e-15) is below the rounding error of a formed Gram or of the
    marginal algebra's cancelling terms, so on a rank-deficient matrix it inverts noise.
    """
    return np.linalg.pinv(dense, rcond=1e-10)


def well_conditioned(rows: int, cols: int, rank: int, seed: int) -> np.ndarray:
    """A ``rows × cols`` array of exact rank ``rank`` with singular values in [0.5, 2]."""
    rng = np.random.default_rng(seed)
    rank = min(rank, rows, cols)
    left, _ = np.linalg.qr(rng.standard_normal((rows, rows)))
    right, _ = np.linalg.qr(rng.standard_normal((cols, cols)))
    values = rng.uniform(0.5, 2.0, size=rank)
    return (left[:, :rank] * values) @ right[:, :rank].T


def sparse_array(rows: int, cols: int, seed: int) -> sp.csr_array:
    """A sparse array with entries in {-1, 1, 2}, about 40% filled, some columns empty.

    Its non-zero part is made well conditioned by a diagonally dominant core, so its
    pseudo-inverse is stable.
    """
    rng = np.random.default_rng(seed)
    values = rng.choice([-1.0, 1.0, 2.0], size=(rows, cols))
    values *= rng.random((rows, cols)) < 0.4
    core = min(rows, cols)
    values[np.arange(core), np.arange(core)] = 3.0 * max(rows, cols)
    empty = rng.random(cols) < 0.2
    values[:, empty] = 0.0
    return sp.csr_array(values)


def factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Every ordered way to write n as a product of ``parts`` positive integers."""
    if parts == 1:
        return [(n,)]
    return [
        (d, *rest)
        for d in range(1, n + 1)
        if n % d == 0
        for rest in factorizations(n // d, parts - 1)
    ]


# -- leaves with a given number of columns ----------------------------------------------
@st.composite
def interval_lists(draw: st.DrawFn, n: int, count: int | None = None) -> list[tuple[int, int]]:
    size = draw(st.integers(1, 12)) if count is None else count
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).map(lambda p: tuple(sorted(p)))
    return draw(st.lists(pair, min_size=size, max_size=size))


@st.composite
def domain_shapes(draw: st.DrawFn, cells: int) -> tuple[int, ...]:
    """A domain shape of 1–3 attributes whose sizes multiply to ``cells``."""
    choices = [shape for parts in (1, 2, 3) for shape in factorizations(cells, parts)]
    return draw(st.sampled_from(choices))


@st.composite
def small_domains(draw: st.DrawFn, max_cells: int = MAX_SIDE) -> tuple[int, ...]:
    """A domain shape of 1–4 attributes (size-1 attributes included) with few cells."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    shape: list[int] = []
    for size in sizes:
        if math.prod(shape) * size <= max_cells:
            shape.append(size)
    return tuple(shape)


@st.composite
def attribute_sets(draw: st.DrawFn, dims: int) -> tuple[int, ...]:
    members = draw(st.lists(st.booleans(), min_size=dims, max_size=dims))
    return tuple(i for i, member in enumerate(members) if member)


@st.composite
def marginals(draw: st.DrawFn, shape: tuple[int, ...], max_rows: int = MAX_SIDE) -> Marginals:
    """A weighted union of distinct marginals within ``max_rows`` rows (some weights negative)."""
    sets = draw(st.lists(attribute_sets(len(shape)), min_size=1, max_size=4, unique=True))
    weights: dict[tuple[int, ...], float] = {}
    rows = 0
    for attrs in sets:
        size = math.prod(shape[i] for i in attrs)
        if rows + size > max_rows and weights:
            continue
        weights[attrs] = draw(WEIGHTS)
        rows += size
    return Marginals(shape, weights)


@st.composite
def marginals_grams(draw: st.DrawFn, shape: tuple[int, ...]) -> MarginalsGram:
    """A marginal-algebra element: a Gram, its pinv, a product, or one built from eigenvalues."""
    kind = draw(st.sampled_from(["gram", "pinv", "product", "eigen"]))
    gram = draw(marginals(shape, max_rows=10**6)).gram()
    if kind == "gram":
        return gram
    if kind == "pinv":
        return gram.pinv()
    if kind == "product":
        other = draw(marginals_grams(shape))
        return gram @ other
    masks = draw(st.lists(st.integers(0, 2 ** len(shape) - 1), min_size=1, max_size=4))
    values = {mask: draw(st.sampled_from([-2.0, 0.0, 0.5, 1.0, 4.0])) for mask in masks}
    return MarginalsGram.from_eigenvalues(shape, values)


def _leaf_kinds(n: int, max_rows: int) -> list[str]:
    kinds = ["ones", "ranges", "dense", "sparse"]
    if n <= max_rows:
        kinds += ["identity", "prefix", "marginal", "marginals_gram"]
    if n * (n + 1) // 2 <= max_rows:
        kinds.append("allrange")
    if 2 * n <= max_rows:
        kinds += ["haar", "hierarchical", "marginals"]
    return kinds


@st.composite
def leaves(draw: st.DrawFn, n: int, max_rows: int = MAX_SIDE) -> Matrix:
    """One elementary, tree, explicit or marginal matrix with ``n`` columns."""
    kind = draw(st.sampled_from(_leaf_kinds(n, max_rows)))
    if kind == "identity":
        return Identity(n)
    if kind == "ones":
        return Ones(draw(st.integers(1, min(4, max_rows))), n)
    if kind == "prefix":
        return Prefix(n)
    if kind == "allrange":
        return AllRange(n)
    if kind == "ranges":
        count = draw(st.integers(1, min(12, max_rows)))
        return RangeQueries(n, draw(interval_lists(n, count)))
    if kind == "haar":
        return Haar(n)
    if kind == "hierarchical":
        return Hierarchical(n, draw(st.integers(2, 5)))
    if kind == "dense":
        rows = draw(st.integers(1, min(10, max_rows)))
        rank = draw(st.integers(0, min(rows, n)))
        return Dense(well_conditioned(rows, n, rank, draw(SEEDS)))
    if kind == "sparse":
        rows = draw(st.integers(1, min(10, max_rows)))
        return Sparse(sparse_array(rows, n, draw(SEEDS)))
    shape = draw(domain_shapes(n))
    if kind == "marginal":
        return Marginal(shape, draw(attribute_sets(len(shape))))
    if kind == "marginals":
        return draw(marginals(shape, max_rows))
    return draw(marginals_grams(shape))


# -- composites with a given number of columns ----------------------------------------------
@st.composite
def with_shape(draw: st.DrawFn, rows: int, cols: int) -> Matrix:
    """A matrix of exactly ``rows × cols``: explicit, ones, or a square structured type."""
    options: list[Callable[[], Matrix]] = [
        lambda: Dense(well_conditioned(rows, cols, draw(st.integers(0, 4)), draw(SEEDS))),
        lambda: Sparse(sparse_array(rows, cols, draw(SEEDS))),
        lambda: Ones(rows, cols),
    ]
    if rows == cols:
        options += [lambda: Identity(cols), lambda: Prefix(cols), lambda: Prefix(cols).T]
        options.append(lambda: draw(marginals_grams(draw(domain_shapes(cols)))))
    if rows == cols * (cols + 1) // 2:
        options.append(lambda: AllRange(cols))
    matrix = draw(st.sampled_from(options))()
    if draw(st.booleans()):
        matrix = Weighted(draw(WEIGHTS), matrix)
    return matrix


@st.composite
def with_cols(draw: st.DrawFn, n: int, max_rows: int = MAX_SIDE, depth: int = 1) -> Matrix:
    """Any matrix type with ``n`` columns and at most ``max_rows`` rows, nested ``depth`` deep."""
    kinds = ["leaf", "leaf", "leaf", "leaf", "transposed"]
    if depth > 0:
        kinds += ["kron", "vstack", "hstack", "product", "sum", "weighted"]
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(leaves(n, max_rows))
    if kind == "transposed":
        # Types without a closed-form transpose come back as Transposed.
        rows = draw(st.integers(1, min(12, max_rows)))
        return draw(
            st.sampled_from(
                [
                    lambda: Prefix(n).T if n <= max_rows else Ones(rows, n),
                    lambda: RangeQueries(rows, draw(interval_lists(rows, n))).T,
                    lambda: draw(with_shape(n, rows)).T,
                ]
            )
        )()
    inner = depth - 1
    if kind == "weighted":
        return Weighted(draw(WEIGHTS), draw(with_cols(n, max_rows, inner)))
    if kind == "kron":
        parts = draw(st.sampled_from([2, 3]))
        sizes = draw(st.sampled_from(factorizations(n, parts)))
        row_bound = max(1, math.floor(max_rows ** (1 / parts)))
        return Kron([draw(with_cols(size, row_bound, inner)) for size in sizes])
    if kind == "vstack":
        count = draw(st.integers(2, 3))
        return VStack([draw(with_cols(n, max(1, max_rows // count), inner)) for _ in range(count)])
    if kind == "hstack":
        if n < 2:
            return draw(leaves(n, max_rows))
        left_cols = draw(st.integers(1, n - 1))
        left = draw(with_cols(left_cols, max_rows, inner))
        right = draw(with_shape(left.shape[0], n - left_cols))
        return HStack([left, right])
    if kind == "product":
        right = draw(with_cols(n, min(16, max_rows), inner))
        left = draw(with_cols(right.shape[0], max_rows, inner))
        return Product([left, right])
    first = draw(with_cols(n, max_rows, inner))
    second = draw(with_shape(*first.shape))
    return Sum([first, second])


@st.composite
def matrices(draw: st.DrawFn, max_cols: int = 40, depth: int = 2) -> Matrix:
    """Any matrix of any type, at most ``MAX_SIDE`` on each side."""
    n = draw(st.integers(1, max_cols))
    return draw(with_cols(n, MAX_SIDE, depth))


@st.composite
def krons(draw: st.DrawFn) -> Kron:
    """A Kronecker product of 2–3 factors of mixed (possibly nested) types."""
    parts = draw(st.sampled_from([2, 3]))
    bound = {2: 7, 3: 4}[parts]
    sizes = draw(st.lists(st.integers(1, bound), min_size=parts, max_size=parts))
    return Kron([draw(with_cols(size, bound, depth=1)) for size in sizes])


@st.composite
def square_matrices(draw: st.DrawFn) -> Matrix:
    """Square matrices: Grams, explicit squares, Krons of (possibly non-square) factors, sums."""
    kind = draw(st.sampled_from(["gram", "shape", "kron", "sum", "marginals_gram"]))
    if kind == "gram":
        return draw(matrices()).gram()
    n = draw(st.integers(1, 30))
    if kind == "shape":
        return draw(with_shape(n, n))
    if kind == "marginals_gram":
        return draw(marginals_grams(draw(domain_shapes(n))))
    if kind == "kron":
        # Factors of shapes (a × b) and (b × a) give a square product of non-square factors.
        a, b = draw(st.integers(1, 6)), draw(st.integers(1, 6))
        return Kron([draw(with_shape(a, b)), draw(with_shape(b, a))])
    first = draw(with_shape(n, n))
    return Sum([first, draw(with_shape(n, n))])


@st.composite
def symmetric_matrices(draw: st.DrawFn) -> Matrix:
    """Symmetric matrices: Grams, scaled Grams (negative too), Krons and sums of Grams."""
    kind = draw(st.sampled_from(["gram", "weighted", "kron", "marginals_gram", "sum"]))
    if kind == "gram":
        return draw(matrices()).gram()
    if kind == "weighted":
        return Weighted(draw(WEIGHTS), draw(matrices()).gram())
    if kind == "kron":
        return Kron([draw(matrices(max_cols=6, depth=1)).gram() for _ in range(2)])
    if kind == "marginals_gram":
        return draw(marginals_grams(draw(small_domains())))
    n = draw(st.integers(1, 30))
    return Sum([draw(with_cols(n, depth=1)).gram(), draw(with_cols(n, depth=1)).gram()])


@st.composite
def compatible_pairs(draw: st.DrawFn) -> tuple[Matrix, Matrix]:
    """``(A, B)`` with ``A @ B`` defined."""
    right = draw(matrices(max_cols=30, depth=1))
    left = draw(with_cols(right.shape[0], MAX_SIDE, depth=1))
    return left, right


@st.composite
def same_shape_pairs(draw: st.DrawFn) -> tuple[Matrix, Matrix]:
    """``(A, B)`` of one shape, for sums and differences."""
    first = draw(matrices(depth=1))
    return first, draw(with_shape(*first.shape))


# -- a fixed catalogue: every type, every run ------------------------------------------------
def _catalogue() -> dict[str, Callable[[], Matrix]]:
    g = Marginals((2, 3, 4), {(0,): 1.0, (1, 2): 2.0, (): -1.5}).gram()
    return {
        "identity": lambda: Identity(5),
        "total": lambda: Ones(1, 7),
        "ones": lambda: Ones(3, 5),
        "prefix": lambda: Prefix(9),
        "allrange": lambda: AllRange(6),
        "ranges": lambda: RangeQueries(8, [(0, 3), (2, 2), (5, 7), (0, 7), (2, 2)]),
        "haar-8": lambda: Haar(8),
        "haar-11": lambda: Haar(11),
        "hierarchical-2": lambda: Hierarchical(13, 2),
        "hierarchical-3": lambda: Hierarchical(17, 3),
        "hierarchical-5": lambda: Hierarchical(11, 5),
        "dense": lambda: Dense(well_conditioned(6, 4, 4, 7)),
        "dense-low-rank": lambda: Dense(well_conditioned(5, 6, 2, 8)),
        "sparse": lambda: Sparse(sparse_array(7, 5, 9)),
        "weighted-negative": lambda: Weighted(-2.0, Prefix(5)),
        "weighted-zero": lambda: Weighted(0.0, AllRange(3)),
        "kron-2": lambda: Kron([Prefix(4), AllRange(3)]),
        "kron-3-mixed": lambda: Kron([Identity(2), Hierarchical(5, 2), Ones(1, 3)]),
        "kron-nested": lambda: Kron(
            [VStack([Identity(3), Prefix(3)]), Weighted(-1.5, Haar(3)), Prefix(2).T]
        ),
        "kron-of-kron": lambda: Kron(
            [Kron([Prefix(2), Ones(2, 3)]), Product([Prefix(4), Haar(3)])]
        ),
        "kron-nonsquare-factors": lambda: Kron([Ones(2, 3), Dense(well_conditioned(3, 2, 2, 4))]),
        "vstack": lambda: VStack([Identity(6), Ones(1, 6), Prefix(6)]),
        "vstack-of-krons": lambda: VStack(
            [Kron([Prefix(3), Identity(4)]), Kron([Ones(1, 3), AllRange(4)])]
        ),
        "hstack": lambda: HStack([Prefix(4), Ones(4, 2), Sparse(sparse_array(4, 3, 2))]),
        "product": lambda: Product([AllRange(4), Prefix(4), Dense(well_conditioned(4, 5, 3, 3))]),
        "sum": lambda: Sum([Prefix(5), Identity(5), Weighted(-0.5, Ones(5, 5))]),
        "difference": lambda: Prefix(6) - Weighted(2.0, Prefix(6).T),
        "transposed-prefix": lambda: Prefix(7).T,
        "transposed-allrange": lambda: AllRange(5).T,
        "transposed-ranges": lambda: RangeQueries(6, [(0, 2), (1, 5), (4, 4)]).T,
        "marginal": lambda: Marginal((3, 4, 2), [0, 2]),
        "marginal-total": lambda: Marginal((3, 4), []),
        "marginals": lambda: Marginals((3, 2, 4), {(0, 1): 1.0, (2,): -2.0, (): 0.5}),
        "marginals-gram": lambda: g,
        "marginals-gram-pinv": lambda: g.pinv(),
        "marginals-gram-product": lambda: g @ Marginals((2, 3, 4), {(0, 2): 1.0}).gram(),
        "marginals-gram-eigen": lambda: MarginalsGram.from_eigenvalues(
            (3, 4), {0b00: 2.0, 0b01: -1.0, 0b11: 0.5}
        ),
    }


CATALOGUE = _catalogue()
ALL_KINDS = sorted(CATALOGUE)
