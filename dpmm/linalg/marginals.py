"""Marginal queries and the marginal algebra (HDMM's OPT_M structure, in closed form).

Over a domain with attribute sizes ``n_1 … n_d``, the marginal on a set of
attributes ``a`` is ``M_a = ⊗_i (I if i ∈ a else 1ᵀ)`` and its Gram matrix is
``C(a) = ⊗_i (I if i ∈ a else J)`` with ``J = 1 1ᵀ``. Weighted sums
``Σ_a u_a C(a)`` form an algebra closed under product and pseudo-inverse:

* ``C(a) C(b) = (Π_{i ∉ a ∪ b} n_i) C(a ∩ b)``;
* with ``P_i = J/n_i`` and ``Q_i = I − P_i``, the projections
  ``E_b = ⊗_{i∈b} Q_i ⊗_{i∉b} P_i`` are orthogonal, sum to I, and
  ``C(a) = Σ_{b ⊆ a} (Π_{i∉a} n_i) E_b`` — so ``Σ_a u_a C(a)`` has eigenvalue
  ``λ_b = Σ_{a ⊇ b} u_a Π_{i∉a} n_i`` on ``E_b``, of multiplicity
  ``Π_{i∈b}(n_i − 1)``;
* ``E_b = Σ_{a ⊆ b} (−1)^{|b∖a|} (Π_{i∉a} 1/n_i) C(a)`` maps back.

Attribute sets are bit masks (bit i is attribute i). Everything lives on the
down-closure of the support, so the cost is O(|support| · 2^k) for k-way sets,
independent of the domain size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from dpmm.domain import Domain
from dpmm.errors import TooLargeError
from dpmm.linalg.base import (
    IntegerNorms,
    Matrix,
    Symmetric,
    _check_norm,
    _computed_once,
    _guard_integer,
    _integer_weight,
)
from dpmm.linalg.combinators import Product, Sum, VStack, Weighted
from dpmm.linalg.elementary import Identity, Ones
from dpmm.linalg.kron import Kron

__all__ = [
    "DomainSizes",
    "Marginal",
    "Marginals",
    "MarginalsGram",
    "attribute_mask",
    "cell_sums",
    "mask_members",
    "members_mask",
]

#: Relative size below which an eigenvalue of the algebra counts as zero.
EIGEN_TOLERANCE = 1e-10
#: Above this many cells a union of marginals gives its (equal) integer column norms as one
#: value, not one per column.
NORMS_PER_COLUMN_LIMIT = 2**27
#: Most subset terms one marginals-algebra step sums (about 2 s): 3^14 for a full table
#: of 14 attributes fits, 3^15 does not.
SUBSET_WORK_LIMIT = 2**23


def _shape_of(domain: Domain | Sequence[int]) -> tuple[int, ...]:
    if isinstance(domain, Domain):
        return domain.shape
    shape = tuple(int(size) for size in domain)
    if not shape or any(size < 1 for size in shape):
        raise ValueError(f"A domain shape needs positive sizes, got {tuple(domain)}")
    return shape


def attribute_mask(domain: Domain | Sequence[int], attrs: Sequence[str | int]) -> int:
    """The bit mask of a set of attributes, given by name (with a Domain) or position."""
    return _mask_and_rows(domain, _shape_of(domain), attrs)[0]


def _mask_and_rows(
    domain: Domain | Sequence[int], shape: tuple[int, ...], attrs: Sequence[str | int]
) -> tuple[int, int]:
    """The bit mask of ``attrs`` and its table's cell count ``Π_{i∈attrs} n_i``.

    O(|attrs|) with the domain's shape given, not O(d): a union of 10⁵ marginals
    over 100 attributes calls this once per marginal.
    """
    mask, rows = 0, 1
    for attr in attrs:
        if isinstance(attr, str):
            if not isinstance(domain, Domain):
                raise ValueError(f"Attribute '{attr}' given by name needs a Domain")
            position = domain.index(attr)
        else:
            position = int(attr)
            if not 0 <= position < len(shape):
                raise ValueError(f"Attribute position {position} is outside 0..{len(shape) - 1}")
        bit = 1 << position
        if not mask & bit:
            mask |= bit
            rows *= shape[position]
    return mask, rows


def mask_members(mask: int) -> list[int]:
    """The attribute positions in a bit mask, ascending, in O(|mask|) (not O(d)).

    Example:
        >>> mask_members(0b1010)
        [1, 3]
    """
    members = []
    while mask:
        low = mask & -mask
        members.append(low.bit_length() - 1)
        mask ^= low
    return members


def members_mask(members: Iterable[int]) -> int:
    """The bit mask of attribute positions (a repeat counts once): the inverse of
    :func:`mask_members`.

    Example:
        >>> members_mask([3, 1])
        10
    """
    mask = 0
    for i in members:
        mask |= 1 << int(i)
    return mask


class DomainSizes:
    """Products of attribute sizes over a set's members, exact and memoized.

    Each distinct set costs O(1) once its set minus one member is known, so a sweep
    over the submasks of a workload never pays O(d) per set.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)
        self.cells = math.prod(self.shape)
        self.full = (1 << len(self.shape)) - 1
        self._inside: dict[int, int] = {0: 1}
        self._multiplicity: dict[int, int] = {0: 1}
        self._column_norm: dict[int, float] = {}

    def _memo(self, store: dict[int, int], mask: int, offset: int) -> int:
        value = store.get(mask)
        if value is None:
            low = mask & -mask
            value = self._memo(store, mask ^ low, offset) * (
                self.shape[low.bit_length() - 1] - offset
            )
            store[mask] = value
        return value

    def inside(self, mask: int) -> int:
        """``Π_{i∈mask} n_i``."""
        return self._memo(self._inside, mask, 0)

    def outside(self, mask: int) -> int:
        """``Π_{i∉mask} n_i``."""
        return self.cells // self.inside(mask)

    def multiplicity(self, mask: int) -> int:
        """``Π_{i∈mask} (n_i − 1)``: the rank of ``E_mask`` and the rows of ``R_mask``."""
        return self._memo(self._multiplicity, mask, 1)

    def column_norm_squared(self, mask: int) -> float:
        """``Π_{i∈mask} (1 − 1/n_i)``: every column's squared L2 norm in ``R_mask``."""
        value = self._column_norm.get(mask)
        if value is None:
            value = self._column_norm[mask] = self.multiplicity(mask) / self.inside(mask)
        return value


def cell_sums(
    shape: tuple[int, ...], tables: Iterable[tuple[int, np.ndarray]], dtype: type = np.float64
) -> np.ndarray:
    """``Σ_S t_S[x_S]`` for every cell x: each set's table broadcast over the other attributes."""
    total = np.zeros(shape, dtype=dtype)
    for mask, table in tables:
        total = total + table.reshape([n if mask >> i & 1 else 1 for i, n in enumerate(shape)])
    return total.reshape(-1)


def _check_subset_work(masks: Iterable[int], what: str) -> None:
    """Refuse, before it runs, a sum over the subsets of every mask that would take minutes:
    ``Σ 2^|mask|`` terms (3^d for the full table of d attributes)."""
    terms = sum(1 << mask.bit_count() for mask in masks)
    if terms > SUBSET_WORK_LIMIT:
        raise TooLargeError(
            f"Refusing to compute {what}: it sums {terms:.3g} terms over subsets of "
            f"attributes, more than the limit of {SUBSET_WORK_LIMIT:,} (tables of too many "
            "attributes; split the workload or use another strategy)"
        )


def _submasks(mask: int) -> Iterator[int]:
    sub = mask
    while True:
        yield sub
        if sub == 0:
            return
        sub = (sub - 1) & mask


@functools.cache
def _shared_factor(kept: bool, n: int) -> Matrix:
    """One Identity(n) and one Total(n) for every marginal: matrices are immutable, and a
    union of 10⁵ marginals over 100 attributes would otherwise build 10⁷ factor objects."""
    return Identity(n) if kept else Ones(1, n)


class Marginal(Kron):
    """The marginal table of ``attrs``: ``⊗_i (I if i ∈ attrs else 1ᵀ)``.

    Its factors are made on first use: a union of 10⁵ marginals over 100 attributes
    would otherwise spend O(d) per marginal listing factors nothing may read.

    Example:
        >>> import numpy as np
        >>> M = Marginal((2, 3), [1])
        >>> M @ np.arange(6.0)
        array([3., 5., 7.])
    """

    def __init__(self, domain: Domain | Sequence[int], attrs: Sequence[str | int]) -> None:
        shape = _shape_of(domain)
        mask, rows = _mask_and_rows(domain, shape, attrs)
        self._set_mask(shape, mask, rows, math.prod(shape))

    @classmethod
    def _of_mask(cls, shape: tuple[int, ...], mask: int, rows: int, cells: int) -> Marginal:
        """The marginal on a checked bit mask over ``shape`` (``rows × cells``), in O(1)."""
        marginal = cls.__new__(cls)
        marginal._set_mask(shape, mask, rows, cells)
        return marginal

    def _set_mask(self, shape: tuple[int, ...], mask: int, rows: int, cells: int) -> None:
        self.domain_shape = shape
        self.mask = mask
        # Kron.__init__ would list the factors; the shape follows from the mask alone.
        Matrix.__init__(self, (rows, cells))

    @functools.cached_property
    def factors(self) -> list[Matrix]:  # type: ignore[override]
        return [
            _shared_factor(bool(self.mask >> i & 1), n) for i, n in enumerate(self.domain_shape)
        ]

    def gram(self) -> MarginalsGram:
        return MarginalsGram(self.domain_shape, {self.mask: 1.0})

    def gram_pinv(self) -> MarginalsGram:
        return self.gram().pinv()

    def __repr__(self) -> str:
        return f"Marginal({mask_members(self.mask)})"


class Marginals(VStack):
    """A weighted union of marginals: rows ``w_a · M_a`` stacked in the order given.

    The blocks (one :class:`Marginal` each, weighted unless the weight is 1) are made on
    first use: the algebra (Gram, norms, pseudo-inverse) reads only ``weights``, so a
    union of 166,751 marginals over 100 attributes is built in O(Σ_a |a|).
    """

    def __init__(
        self, domain: Domain | Sequence[int], weights: Mapping[tuple[str | int, ...], float]
    ) -> None:
        if not weights:
            raise ValueError("Marginals needs at least one attribute set")
        self.domain_shape = _shape_of(domain)
        self.weights: dict[int, float] = {}
        self._rows: dict[int, int] = {}  # each marginal table's cell count
        self._unit: set[int] = set()  # weight == 1 as given: such a block is not Weighted
        for attrs, weight in weights.items():
            mask, rows = _mask_and_rows(domain, self.domain_shape, attrs)
            if mask in self.weights:
                raise ValueError(f"Marginals lists the attribute set {attrs!r} twice")
            self.weights[mask] = float(weight)
            self._rows[mask] = rows
            if weight == 1:
                self._unit.add(mask)
        Matrix.__init__(self, (sum(self._rows.values()), math.prod(self.domain_shape)))

    @functools.cached_property
    def blocks(self) -> list[Matrix]:  # type: ignore[override]
        cells = self.shape[1]
        blocks: list[Matrix] = []
        for mask, weight in self.weights.items():
            marginal = Marginal._of_mask(self.domain_shape, mask, self._rows[mask], cells)
            blocks.append(marginal if mask in self._unit else Weighted(weight, marginal))
        return blocks

    @functools.cached_property
    def offsets(self) -> np.ndarray:  # type: ignore[override]
        return np.cumsum([0, *self._rows.values()])

    def gram(self) -> MarginalsGram:
        return MarginalsGram(self.domain_shape, {a: w * w for a, w in self.weights.items()})

    def gram_pinv(self) -> MarginalsGram:
        return self.gram().pinv()

    def _integer_column_norms(self) -> IntegerNorms:
        # Every column meets exactly one row of each table, with entry w_a: the norms are
        # the same for every column, kept as one value on astronomical domains.
        weights = [abs(_integer_weight(w, self)) for w in self.weights.values()]
        l1 = _guard_integer(sum(weights), self)
        l2_squared = _guard_integer(sum(w * w for w in weights), self)
        size = self.shape[1] if self.shape[1] <= NORMS_PER_COLUMN_LIMIT else 1
        return np.full(size, l1, np.int64), np.full(size, l2_squared, np.int64), max(weights)

    def uniform_column_norm(self, p: float = 1) -> float | None:
        p = _check_norm(p)
        magnitudes = np.abs(list(self.weights.values()))
        if p == np.inf:
            return float(magnitudes.max())
        return float((magnitudes**p).sum() ** (1.0 / p))

    def pinv(self) -> Matrix:
        return Product([self.gram().pinv(), self.T])

    def nuclear_norm(self) -> float:
        return self.gram().eigen_sum(np.sqrt)

    def __repr__(self) -> str:
        sets = ", ".join(str(mask_members(mask)) for mask in self.weights)
        return f"Marginals({sets})"


def _nonzero_eigenvalues(values: Mapping[int, float], sizes: DomainSizes) -> dict[int, float]:
    """The eigenvalues ``{b: λ_b}`` relatively above :data:`EIGEN_TOLERANCE`."""
    # E_b = 0 when b holds an attribute of size one: such a b has no eigenvalue, and
    # must not set the scale below which the true eigenvalues count as zero.
    values = {b: v for b, v in values.items() if sizes.multiplicity(b)}
    scale = max((abs(v) for v in values.values()), default=0.0)
    return {b: v for b, v in values.items() if abs(v) > EIGEN_TOLERANCE * scale}


def collapse_marginal_grams(grams: Sequence[Matrix]) -> list[Matrix]:
    """Merge the marginal-algebra terms of a sum (incl. weighted ones) into one element."""
    merged: dict[tuple[int, ...], dict[int, float]] = {}
    rest: list[Matrix] = []
    for gram in grams:
        weight, base = (gram.weight, gram.base) if isinstance(gram, Weighted) else (1.0, gram)
        if isinstance(base, MarginalsGram):
            into = merged.setdefault(base.domain_shape, {})
            for mask, coefficient in base.coefficients.items():
                into[mask] = into.get(mask, 0.0) + weight * coefficient
        else:
            rest.append(gram)
    return [MarginalsGram(shape, coefficients) for shape, coefficients in merged.items()] + rest


class MarginalsGram(Symmetric, Matrix):
    """``Σ_a u_a C(a)``: an element of the marginal algebra over a domain shape."""

    def __init__(self, shape: Sequence[int], coefficients: Mapping[int, float]) -> None:
        self.domain_shape = _shape_of(shape)
        self._sizes = DomainSizes(self.domain_shape)
        self.coefficients = {int(a): float(u) for a, u in coefficients.items() if u != 0}
        if any(a & ~self._sizes.full for a in self.coefficients):
            raise ValueError("MarginalsGram has an attribute set outside the domain")
        super().__init__((self._sizes.cells, self._sizes.cells))

    @functools.cached_property
    def membership(self) -> np.ndarray:
        """Which attributes each set a holds: one boolean row per coefficient, in the
        order of ``coefficients`` (for sums over every a at once)."""
        dims = len(self.domain_shape)
        rows = [[a >> i & 1 for i in range(dims)] for a in self.coefficients]
        return np.array(rows, dtype=bool).reshape(len(rows), dims)

    # O(k · N · |support|): sum out the attributes outside a, broadcast back.
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        columns = X.shape[1]
        tensor = X.reshape([*self.domain_shape, columns])
        result = np.zeros_like(tensor, dtype=np.float64)
        dims = len(self.domain_shape)
        for mask, coefficient in self.coefficients.items():
            axes = tuple(i for i in range(dims) if not mask >> i & 1)
            result += coefficient * tensor.sum(axis=axes, keepdims=True)
        return result.reshape(self._sizes.cells, columns)  # also for 0 columns

    def as_kron_sum(self) -> Matrix:
        """The same matrix as a Sum of weighted Kron products of I and J."""
        terms = [
            Weighted(
                u,
                Kron(
                    [
                        Identity(n) if a >> i & 1 else Ones(n, n)
                        for i, n in enumerate(self.domain_shape)
                    ]
                ),
            )
            for a, u in self.coefficients.items()
        ]
        return Sum(terms) if terms else Weighted(0.0, Identity(self.shape[0]))

    def _dense(self) -> np.ndarray:
        return self.as_kron_sum().dense()

    def gram(self) -> MarginalsGram:
        return self.dot_algebra(self)

    def dot_algebra(self, other: MarginalsGram) -> MarginalsGram:
        """The product ``self @ other``, kept in the algebra."""
        if other.domain_shape != self.domain_shape:
            raise ValueError(
                f"Marginal algebra elements over {self.domain_shape} and {other.domain_shape} "
                "cannot be multiplied: their domain shapes differ"
            )
        product: dict[int, float] = {}
        for a, u in self.coefficients.items():
            for b, v in other.coefficients.items():
                key = a & b
                product[key] = product.get(key, 0.0) + u * v * self._sizes.outside(a | b)
        return MarginalsGram(self.domain_shape, product)

    def dot(self, x: object) -> object:
        # Over another factorization of the same cells there is no shared algebra: stay lazy.
        if isinstance(x, MarginalsGram) and x.domain_shape == self.domain_shape:
            return self.dot_algebra(x)
        return super().dot(x)

    @_computed_once
    def eigenvalues(self) -> dict[int, float]:
        """``{b: λ_b}`` on the down-closure of the support; every other E_b has eigenvalue 0.

        Computed once per instance (the coefficients never change); callers must not
        modify the returned mapping.
        """
        _check_subset_work(self.coefficients, "the eigenvalues of a marginals Gram")
        values: dict[int, float] = {}
        for a, u in self.coefficients.items():
            weight = u * self._sizes.outside(a)
            for b in _submasks(a):
                values[b] = values.get(b, 0.0) + weight
        return _nonzero_eigenvalues(values, self._sizes)

    def multiplicity(self, mask: int) -> int:
        """The rank of ``E_b``: ``Π_{i∈b} (n_i − 1)``."""
        return self._sizes.multiplicity(mask)

    def eigen_sum(self, function: Callable[[float], float] | None = None) -> float:
        """``Σ_b multiplicity(b) · f(λ_b)`` over the non-zero eigenvalues (f: identity)."""
        apply = (lambda v: v) if function is None else function
        return float(sum(self.multiplicity(b) * apply(v) for b, v in self.eigenvalues().items()))

    @classmethod
    def from_eigenvalues(cls, shape: Sequence[int], values: Mapping[int, float]) -> MarginalsGram:
        """``Σ_b λ_b E_b`` written back in the ``C(a)`` basis (the Möbius inversion)."""
        domain_shape = _shape_of(shape)
        _check_subset_work(values, "a marginals Gram from its eigenvalues")
        sizes = DomainSizes(domain_shape)
        coefficients: dict[int, float] = {}
        for b, value in values.items():
            if not sizes.multiplicity(b):
                continue  # E_b = 0: its terms would only cancel, with rounding error
            for a in _submasks(b):
                sign = -1.0 if (b & ~a).bit_count() % 2 else 1.0
                coefficients[a] = coefficients.get(a, 0.0) + sign * value / sizes.outside(a)
        return cls(domain_shape, coefficients)

    def pinv(self) -> MarginalsGram:
        inverse = {b: 1.0 / v for b, v in self.eigenvalues().items()}
        return MarginalsGram.from_eigenvalues(self.domain_shape, inverse)

    def diagonal(self) -> np.ndarray:
        return np.full(self.shape[0], sum(self.coefficients.values()))

    def trace(self) -> float:
        return float(self.shape[0] * sum(self.coefficients.values()))

    def nuclear_norm(self) -> float:
        return self.eigen_sum(abs)

    def _trace_dot(self, other: Matrix) -> float | object:
        if isinstance(other, MarginalsGram) and other.domain_shape == self.domain_shape:
            mine, theirs = self.eigenvalues(), other.eigenvalues()
            return sum(self.multiplicity(b) * v * theirs[b] for b, v in mine.items() if b in theirs)
        if isinstance(other, Kron) and other.is_square_over(self.domain_shape):
            # trace(C(a) ⊗_i Y_i) = Π_{i∈a} trace(Y_i) · Π_{i∉a} 1ᵀ Y_i 1.
            traces = [factor.trace() for factor in other.factors]
            sums = [factor.entry_sum() for factor in other.factors]
            if all(sums):  # Π_{i∉a} s_i = Π_i s_i / Π_{i∈a} s_i: O(|a|) per set, not O(d)
                everything = math.prod(sums)
                return sum(
                    u * everything * math.prod(traces[i] / sums[i] for i in mask_members(a))
                    for a, u in self.coefficients.items()
                )
            return sum(
                u * math.prod(traces[i] if a >> i & 1 else sums[i] for i in range(len(traces)))
                for a, u in self.coefficients.items()
            )
        return NotImplemented

    def __repr__(self) -> str:
        return f"MarginalsGram({len(self.coefficients)} terms over {self.domain_shape})"
