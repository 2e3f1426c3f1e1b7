"""Random small instances of every implicit matrix type, and the dense oracle helpers.

Every strategy returns a :class:`dpmm.linalg.Matrix` whose dense form has at
most ``MAX_SIDE`` rows and columns, so a test can compare any operation with
numpy on ``M.dense()``. Explicit arrays are drawn from a seed (not entry by
entry) and are well conditioned on their row space, so a pseudo-inverse
computed two ways agrees to a tight tolerance; exact rank deficiency (low-rank
``Dense``, ``Ones``, marginals, short interval lists) is kept on purpose.

The catalogue also holds every type a strategy method returns (taken from the optimizers
on small workloads where they draw nothing at random, else from a fixed seed), with the
quantized forms that are measured and reconstructed from.
"""

from __future__ import annotations

import functools
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
from dpmm.linalg.eigen_strategy import EigenStrategy
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.measure.quantize import quantize
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.strategy import optimize
from dpmm.strategy.low_rank_matrix import LowRankStrategy
from dpmm.strategy.lrm import lrm_strategy
from dpmm.strategy.pidentity import optimize_pidentity
from dpmm.strategy.weighted_marginals import optimize_marginal_weights

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


def orthonormal(n: int, seed: int) -> np.ndarray:
    """A random ``n × n`` orthonormal basis."""
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))[0]


def residual_rank(shape: tuple[int, ...], mask: int) -> int:
    """``Π_{i∈S}(n_i − 1)``: the columns of a residual block of set S."""
    return math.prod(shape[i] - 1 for i in range(len(shape)) if mask >> i & 1)


#: Eigen weights: zero (a direction not measured) or well away from it.
EIGEN_WEIGHTS = np.array([0.0, 0.5, 1.0, 2.0, 4.0])


@st.composite
def eigen_strategies(draw: st.DrawFn, n: int) -> EigenStrategy:
    """``diag(√u) (⊗Q_i)ᵀ`` over a random domain of n cells, Kron or per-cell weights."""
    shape = draw(domain_shapes(n))
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    bases = [orthonormal(size, seed + i) for i, size in enumerate(shape)]
    if draw(st.booleans()):
        return EigenStrategy(bases, [rng.choice(EIGEN_WEIGHTS, size=size) for size in shape])
    return EigenStrategy(bases, rng.choice(EIGEN_WEIGHTS, size=n))


@st.composite
def pidentities(draw: st.DrawFn, n: int, max_rows: int) -> PIdentity:
    """``[I; Θ] D`` with ``p`` extra rows (some entries of Θ zero), L1 or L2 columns."""
    p = draw(st.integers(1, max(1, min(3, max_rows - n))))
    rng = np.random.default_rng(draw(SEEDS))
    theta = rng.uniform(size=(p, n)) * (rng.random((p, n)) < 0.7)
    return PIdentity(theta, draw(st.sampled_from([1, 2])))


@st.composite
def residual_strategies(draw: st.DrawFn, n: int) -> ResidualBlockStrategy:
    """Weighted residuals ``[w_S R_S]`` (scalar blocks) on some of the sets of a domain of n
    cells (sets with rows only: a matrix without rows would end the composite generators)."""
    shape = draw(domain_shapes(n))
    masks = [mask for mask in range(2 ** len(shape)) if residual_rank(shape, mask)]
    sets = draw(st.lists(st.sampled_from(masks), min_size=1, max_size=len(masks), unique=True))
    return ResidualBlockStrategy(shape, {mask: draw(WEIGHTS) for mask in sets})


@st.composite
def residual_block_strategies(draw: st.DrawFn, n: int, max_rows: int) -> ResidualBlockStrategy:
    """Blocks ``L_S R_S``: scalars, diagonals (some entries zero) and dense blocks that are
    square or wide of full row rank, on some of the sets of a domain of n cells."""
    shape = draw(domain_shapes(n))
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    blocks: dict[int, float | np.ndarray] = {}
    rows = 0
    for mask in draw(st.permutations(range(2 ** len(shape)))):
        rank = residual_rank(shape, mask)
        kind = draw(st.sampled_from(["none", "scalar", "diagonal", "dense"]))
        height = draw(st.integers(1, rank)) if kind == "dense" and rank else rank
        if kind == "none" or not rank or rows + height > max_rows:
            continue
        if kind == "scalar":
            blocks[mask] = draw(WEIGHTS)
        elif kind == "diagonal":
            blocks[mask] = rng.choice([0.0, -1.5, 0.5, 1.0, 2.0], size=rank)
        else:
            blocks[mask] = well_conditioned(height, rank, height, seed + mask)
        rows += height
    return ResidualBlockStrategy(shape, blocks or {0: draw(WEIGHTS)})


@st.composite
def helmert_blocks(draw: st.DrawFn, n: int, max_rows: int) -> HelmertBlocks:
    """Integer blocks ``Q_S H_S``: diagonal vectors, or square or wide well-conditioned
    integer matrices (a dominant diagonal), on some of the sets of a domain of n cells."""
    shape = draw(domain_shapes(n))
    rng = np.random.default_rng(draw(SEEDS))
    integers: dict[int, np.ndarray] = {}
    rows = 0
    for mask in draw(st.permutations(range(2 ** len(shape)))):
        rank = residual_rank(shape, mask)
        kind = draw(st.sampled_from(["none", "diagonal", "dense"]))
        height = draw(st.integers(1, rank)) if kind == "dense" and rank else rank
        if kind == "none" or not rank or rows + height > max_rows:
            continue
        if kind == "diagonal":
            integers[mask] = rng.choice([-3, -1, 1, 2, 5], size=rank).astype(np.int64)
        else:
            block = rng.integers(-2, 3, size=(height, rank))
            block[np.arange(height), np.arange(height)] = 3 * rank + 1
            integers[mask] = block.astype(np.int64)
        rows += height
    if not integers:
        integers[0] = np.ones(1, dtype=np.int64)
    return HelmertBlocks(shape, integers)


def _leaf_kinds(n: int, max_rows: int) -> list[str]:
    kinds = ["ones", "ranges", "dense", "sparse", "low_rank"]
    if n <= max_rows:
        kinds += ["identity", "prefix", "marginal", "marginals_gram"]
        kinds += ["eigen", "residual", "residual_blocks", "helmert_blocks"]
    if n < max_rows:
        kinds.append("pidentity")
    if n * (n + 1) // 2 <= max_rows:
        kinds.append("allrange")
    if 2 * n <= max_rows:
        kinds += ["haar", "hierarchical", "marginals"]
    return kinds


@st.composite
def leaves(draw: st.DrawFn, n: int, max_rows: int = MAX_SIDE) -> Matrix:
    """One elementary, tree, explicit, marginal or residual matrix, or a strategy type an
    optimizer returns, with ``n`` columns."""
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
    if kind == "low_rank":
        rows = draw(st.integers(1, min(10, max_rows)))
        rank = draw(st.integers(0, min(rows, n)))
        return LowRankStrategy(well_conditioned(rows, n, rank, draw(SEEDS)))
    if kind == "eigen":
        return draw(eigen_strategies(n))
    if kind == "pidentity":
        return draw(pidentities(n, max_rows))
    if kind == "residual":
        return draw(residual_strategies(n))
    if kind == "residual_blocks":
        return draw(residual_block_strategies(n, max_rows))
    if kind == "helmert_blocks":
        return draw(helmert_blocks(n, max_rows))
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


# -- what the strategy optimizers return, on small workloads ---------------------------------
#: Small workloads of every kind the optimizers distinguish.
OPTIMIZER_WORKLOADS: dict[str, Callable[[], Matrix]] = {
    "prefix": lambda: Prefix(8),
    "ranges": lambda: RangeQueries(8, [(0, 3), (2, 5), (4, 7), (1, 1)]),
    "kron": lambda: Kron([Prefix(4), AllRange(3)]),
    "identity-x-prefix": lambda: Kron([Identity(3), Prefix(4)]),
    "marginals": lambda: Marginals((2, 3, 4), {(0,): 1.0, (1, 2): 1.0, (0, 1): 1.0}),
    "marginals-x-prefix": lambda: VStack(
        [
            Kron([Identity(3), Prefix(4)]),
            Kron([Ones(1, 3), Prefix(4)]),
            Kron([Identity(3), Ones(1, 4)]),
        ]
    ),
    "weighted-union": lambda: VStack(
        [
            Weighted(2.0, Kron([Prefix(4), Ones(1, 3)])),
            Weighted(0.5, Kron([Ones(1, 4), AllRange(3)])),
        ]
    ),
}
PRIVACY = {"laplace": PureDP(1), "gaussian": ZCDP("1/2")}


@functools.cache
def optimized(workload: str, method: str, privacy: str) -> Matrix:
    """``optimize`` on one of :data:`OPTIMIZER_WORKLOADS`, computed once per run.

    The catalogue takes only methods without random restarts from here (eigen, residual,
    marginal_optimal, and HDMM's templates under Gaussian noise, solved in closed form), so
    every run checks the same matrices.
    """
    return optimize(OPTIMIZER_WORKLOADS[workload](), method, PRIVACY[privacy])


def _pidentity() -> PIdentity:
    """HDMM's OPT_0 on four ranges under Laplace noise, from a fixed random start."""
    W = OPTIMIZER_WORKLOADS["ranges"]()
    return optimize_pidentity(W.gram(), norm=1, p=2, restarts=1, rng=np.random.default_rng(3))[0]


def _marginal_weights() -> Marginals:
    """HDMM's OPT_M (real weights on marginal tables) from fixed random starts."""
    W = OPTIMIZER_WORKLOADS["marginals"]()
    return optimize_marginal_weights(W, norm=2, rng=np.random.default_rng(4))[0]


def _low_rank() -> LowRankStrategy:
    """The Low-Rank Mechanism's strategy for a rank-2 workload, from a fixed start."""
    W = Dense([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    return lrm_strategy(W, PureDP(1), rng=np.random.default_rng(5))


def _eigen_with_zero_weights() -> EigenStrategy:
    """An eigen-design that leaves two basis vectors unmeasured (rank-deficient)."""
    return EigenStrategy(
        [orthonormal(3, 1), orthonormal(2, 2)], [np.array([1.0, 0.0, 0.5]), np.array([2.0, 1.0])]
    )


def _optimizer_catalogue() -> dict[str, Callable[[], Matrix]]:
    """Every matrix type a strategy method returns, and its quantized forms."""
    residual_blocks = functools.partial(optimized, "kron", "residual", "gaussian")
    residual_wide = functools.partial(optimized, "ranges", "residual", "gaussian")
    residuals = functools.partial(optimized, "marginals", "marginal_optimal", "gaussian")
    pidentity_l2 = PIdentity(np.random.default_rng(6).uniform(size=(2, 6)), norm=2)
    return {
        # eigen: Kron weights for one product, per-cell weights for a union; under Laplace
        # noise a Kron of an eigen factor and a dense factor of lower 1-norm.
        "eigen-1d": functools.partial(optimized, "prefix", "eigen", "gaussian"),
        "eigen-kron": functools.partial(optimized, "kron", "eigen", "gaussian"),
        "eigen-full-weights": functools.partial(optimized, "marginals", "eigen", "gaussian"),
        "eigen-zero-weights": _eigen_with_zero_weights,
        "eigen-l1-reduced": functools.partial(optimized, "identity-x-prefix", "eigen", "laplace"),
        "eigen-gram": lambda: _eigen_with_zero_weights().gram(),
        "eigen-gram-pinv": lambda: optimized("marginals", "eigen", "gaussian").gram().pinv(),
        # hdmm: OPT_0 (p-Identity), OPT_⊗ (a Kron of fitted factors), OPT_M, OPT_+.
        "pidentity-l1": _pidentity,
        "pidentity-l2": lambda: pidentity_l2,
        "pidentity-gram": lambda: pidentity_l2.gram(),
        "pidentity-gram-inverse": lambda: pidentity_l2.gram().pinv(),
        "kron-of-pidentity": lambda: Kron([Identity(2), _pidentity()]),
        "hdmm-kron-fitted": functools.partial(optimized, "kron", "hdmm_kron", "gaussian"),
        "hdmm-kron-stacks": functools.partial(optimized, "marginals", "hdmm_kron", "gaussian"),
        "hdmm-marginal-weights": _marginal_weights,
        "hdmm-union": functools.partial(optimized, "marginals-x-prefix", "hdmm_union", "gaussian"),
        # lrm: returned as Dense; its own low-rank form too.
        "lrm-dense": lambda: Dense(_low_rank().array),
        "low-rank": _low_rank,
        "low-rank-gram": lambda: _low_rank().gram(),
        # marginal_optimal and residual: scalar, dense and wide blocks on residual subspaces.
        "residuals": residuals,
        "residuals-some-sets": lambda: ResidualBlockStrategy((3, 2, 2), {0b001: 2.0, 0b110: -0.5}),
        # The residual of an attribute of size 1 has no rows.
        "residuals-no-rows": lambda: ResidualBlockStrategy((1, 2), {0b01: 1.0}),
        "residual-gram": lambda: residuals().gram(),
        "residual-blocks-scalar": functools.partial(optimized, "marginals", "residual", "gaussian"),
        "residual-blocks-dense": residual_blocks,
        "residual-blocks-wide": residual_wide,
        "residual-block-gram": lambda: residual_wide().gram(),
        # Quantized: integer blocks on Helmert rows (A_q's blocks are then diagonal), and a
        # scaled Kron of integer factors.
        "residual-blocks-diagonal": lambda: quantize(residuals()).matrix,
        "helmert-blocks-diagonal": lambda: quantize(residuals()).integer,
        "helmert-blocks-dense": lambda: quantize(residual_blocks()).integer,
        "helmert-blocks-wide": lambda: quantize(residual_wide()).integer,
        "quantized-kron": lambda: quantize(optimized("kron", "hdmm_kron", "gaussian")).matrix,
    }


# -- a fixed catalogue: every type, every run ------------------------------------------------
def _catalogue() -> dict[str, Callable[[], Matrix]]:
    g = Marginals((2, 3, 4), {(0,): 1.0, (1, 2): 2.0, (): -1.5}).gram()
    return {
        **_optimizer_catalogue(),
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
