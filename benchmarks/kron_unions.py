"""dpmm's own workload family: random unions of 1- to 3-way Kronecker products.

Each workload has 3–15 attributes and a domain of 10⁴–10¹⁸ cells: the domain's
number of decades is drawn uniformly (up to what the attributes can hold), then
split between the attributes (each of 2–1,000 cells). Each of its 1–8 distinct
products reads 1–3 attributes (every other factor is the total ``Ones(1, n)``)
with a factor drawn from Identity, ``[Identity; Total]``, Prefix and AllRange;
every third workload (ids 0, 3, 6, …) is a union of marginals (Identity factors
only). The draw uses a seeded numpy Generator (a benchmark, not a release), so
``--seed`` reproduces a family.

Run it with ``python benchmarks/strategies.py --family`` (see
:mod:`family_table` for what is measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpmm.linalg import AllRange, Identity, Kron, Matrix, Ones, Prefix, VStack

#: Attributes per workload.
MIN_ATTRIBUTES, MAX_ATTRIBUTES = 3, 15

#: Cells of the domain.
MIN_CELLS, MAX_CELLS = 10**4, 10**18

#: Cells per attribute.
MIN_SIZE, MAX_SIZE = 2, 1000

#: Products per union.
MAX_PRODUCTS = 8

#: Probability of a product reading 1, 2 or 3 attributes.
WAYS_PROBABILITY = (0.4, 0.4, 0.2)

#: Factor kinds on an attribute a product reads (every other attribute is totalled).
READ_KINDS = ("I", "IT", "P", "R")

#: Every ``MARGINALS_EVERY``-th workload reads its attributes through Identity factors only.
MARGINALS_EVERY = 3


def factor(kind: str, n: int) -> Matrix:
    """The factor of ``kind`` on an attribute of ``n`` cells.

    Example:
        >>> factor("IT", 3).shape, factor("R", 4).shape
        ((4, 3), (10, 4))
    """
    if kind == "I":
        return Identity(n)
    if kind == "T":
        return Ones(1, n)
    if kind == "IT":
        return VStack([Identity(n), Ones(1, n)])
    if kind == "P":
        return Prefix(n)
    if kind == "R":
        return AllRange(n)
    raise ValueError(f"Unknown factor kind {kind!r} (expected I, T, IT, P or R)")


def _rows(kind: str, n: int) -> int:
    return {"I": n, "T": 1, "IT": n + 1, "P": n, "R": n * (n + 1) // 2}[kind]


@dataclass(frozen=True)
class KronUnion:
    """One workload of the family: attribute sizes and, per product, its read factors.

    ``products[k]`` maps each attribute product k reads to its factor kind; every other
    attribute of the product is the total.
    """

    index: int
    sizes: tuple[int, ...]
    products: tuple[tuple[tuple[int, str], ...], ...]

    @property
    def cells(self) -> int:
        """Cells of the domain."""
        return math.prod(self.sizes)

    @property
    def queries(self) -> int:
        """Rows of the workload (exact, as a Python int)."""
        total = 0
        for product in self.products:
            kinds = dict(product)
            total += math.prod(_rows(kinds.get(i, "T"), n) for i, n in enumerate(self.sizes))
        return total

    @property
    def marginals_only(self) -> bool:
        """Whether every product is a marginal (Identity and Total factors only)."""
        return all(kind == "I" for product in self.products for _, kind in product)

    def build(self) -> Matrix:
        """The workload as a VStack of Kron products of dpmm's own matrices."""
        products = []
        for product in self.products:
            kinds = dict(product)
            products.append(Kron([factor(kinds.get(i, "T"), n) for i, n in enumerate(self.sizes)]))
        return VStack(products)

    def describe(self) -> str:
        """A one-line description: sizes, then each product's read factors (kind+attribute)."""
        products = ", ".join("·".join(f"{kind}{i}" for i, kind in p) for p in self.products)
        return f"w{self.index}: sizes {list(self.sizes)}; products {products}"


def _split_decades(decades: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` log10 sizes in [log10 MIN_SIZE, log10 MAX_SIZE] summing to ``decades``."""
    low, high = math.log10(MIN_SIZE), math.log10(MAX_SIZE)
    shares = rng.dirichlet(np.full(count, 2.0)) * decades
    for _ in range(100):  # clip, then spread what clipping moved over the unclipped ones
        shares = np.clip(shares, low, high)
        gap = decades - shares.sum()
        if abs(gap) < 1e-9:
            break
        free = shares < high if gap > 0 else shares > low
        shares[free] += gap / free.sum()
    return shares


def draw_sizes(rng: np.random.Generator) -> tuple[int, ...]:
    """Attribute sizes: 3–15 attributes, 10⁴–10¹⁸ cells (decades uniform where they fit)."""
    count = int(rng.integers(MIN_ATTRIBUTES, MAX_ATTRIBUTES + 1))
    low = max(math.log10(MIN_CELLS), count * math.log10(MIN_SIZE))
    high = min(math.log10(MAX_CELLS), count * math.log10(MAX_SIZE))
    shares = _split_decades(float(rng.uniform(low, high)), count, rng)
    sizes = [int(max(MIN_SIZE, round(10**share))) for share in shares]
    # Rounding moves the domain a little: bring it back into 10⁴–10¹⁸ one cell at a time.
    while math.prod(sizes) < MIN_CELLS:
        sizes[sizes.index(min(sizes))] += 1
    while math.prod(sizes) > MAX_CELLS:
        sizes[sizes.index(max(sizes))] -= 1
    return tuple(sizes)


def draw_workload(index: int, rng: np.random.Generator) -> KronUnion:
    """Workload ``index`` of the family, drawn from ``rng``."""
    sizes = draw_sizes(rng)
    kinds = ("I",) if index % MARGINALS_EVERY == 0 else READ_KINDS
    count = int(rng.integers(1, MAX_PRODUCTS + 1))
    products: dict[tuple[tuple[int, str], ...], None] = {}  # distinct, in drawing order
    for _ in range(count):
        ways = min(len(sizes), int(rng.choice([1, 2, 3], p=WAYS_PROBABILITY)))
        read = sorted(int(i) for i in rng.choice(len(sizes), size=ways, replace=False))
        products[tuple((i, str(rng.choice(kinds))) for i in read)] = None
    return KronUnion(index, sizes, tuple(products))


def draw_family(seed: int, count: int) -> list[KronUnion]:
    """``count`` workloads from one Generator seeded with ``seed``.

    Example:
        >>> family = draw_family(seed=1, count=3)
        >>> all(MIN_CELLS <= w.cells <= MAX_CELLS and 3 <= len(w.sizes) <= 15 for w in family)
        True
        >>> family[0].marginals_only
        True
    """
    rng = np.random.default_rng(seed)
    return [draw_workload(index, rng) for index in range(count)]
