"""Workload builders: one-dimensional query sets and the combinators that join them.

Every builder validates its inputs, raises :class:`ValueError` (or
:class:`~dpmm.errors.DomainError` for an unknown attribute) with one sentence
naming the bad argument, and returns an implicit :class:`~dpmm.linalg.Matrix`;
nothing dense is built.

Example:
    >>> from dpmm.domain import Domain
    >>> domain = Domain.from_dict({"sex": 2, "age": 4})
    >>> W = kron([identity(2), prefix(4)])
    >>> W.shape, marginals(domain, k=1).shape
    ((8, 8), (6, 8))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from numbers import Integral, Real

from dpmm.domain import Domain
from dpmm.linalg import (
    AllRange,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Matrix,
    Ones,
    Prefix,
    RangeQueries,
    VStack,
    Weighted,
)

__all__ = [
    "all_range",
    "identity",
    "kron",
    "marginal",
    "marginals",
    "prefix",
    "ranges",
    "total",
    "vstack",
    "weighted",
]


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _check_size(n: object, builder: str) -> int:
    if not _is_int(n) or int(n) < 1:
        raise ValueError(f"{builder} needs a positive integer size, got {n!r}")
    return int(n)


def identity(n: int) -> Identity:
    """One query per value: the ``n × n`` identity.

    Example:
        >>> identity(3).dense()[1]
        array([0., 1., 0.])
    """
    return Identity(_check_size(n, "identity"))


def total(n: int) -> Ones:
    """The single query that sums all ``n`` values (the ``1 × n`` row of ones).

    Example:
        >>> total(3).dense()
        array([[1., 1., 1.]])
    """
    return Ones(1, _check_size(n, "total"))


def prefix(n: int) -> Prefix:
    """The ``n`` prefix queries ``[0, i]`` (a CDF).

    Example:
        >>> prefix(3).dense()[1]
        array([1., 1., 0.])
    """
    return Prefix(_check_size(n, "prefix"))


def all_range(n: int) -> AllRange:
    """All ``n(n+1)/2`` interval queries ``[low, high]``, ordered by low then high.

    Example:
        >>> all_range(3).shape
        (6, 3)
    """
    return AllRange(_check_size(n, "all_range"))


def ranges(n: int, intervals: Sequence[Sequence[int]]) -> RangeQueries:
    """The listed inclusive intervals ``[low, high]`` over values ``0 … n-1``.

    Example:
        >>> ranges(4, [[1, 2], [0, 3]]).dense()
        array([[0., 1., 1., 0.],
               [1., 1., 1., 1.]])
    """
    n = _check_size(n, "ranges")
    if not _is_list(intervals) or not intervals:
        raise ValueError(f"ranges needs a non-empty list of [low, high] pairs, got {intervals!r}")
    for index, pair in enumerate(intervals):
        if not _is_list(pair) or len(pair) != 2 or not all(_is_int(bound) for bound in pair):
            raise ValueError(f"Interval {index} must be a pair of integers, got {pair!r}")
        low, high = int(pair[0]), int(pair[1])
        if not 0 <= low <= high < n:
            raise ValueError(
                f"Interval {index} = [{low}, {high}] must satisfy 0 ≤ low ≤ high ≤ {n - 1}"
            )
    return RangeQueries(n, [(int(low), int(high)) for low, high in intervals])


def _check_matrices(matrices: Sequence[Matrix], builder: str) -> list[Matrix]:
    if isinstance(matrices, Matrix) or not isinstance(matrices, Sequence) or not matrices:
        raise ValueError(f"{builder} needs a non-empty list of matrices")
    for index, matrix in enumerate(matrices):
        if not isinstance(matrix, Matrix):
            raise ValueError(
                f"{builder} item {index} must be a dpmm matrix, got {type(matrix).__name__}"
            )
    return list(matrices)


def kron(matrices: Sequence[Matrix]) -> Kron:
    """The Kronecker product, one factor per attribute; the first factor varies slowest.

    Example:
        >>> kron([total(2), identity(3)]).shape
        (3, 6)
    """
    return Kron(_check_matrices(matrices, "kron"))


def vstack(matrices: Sequence[Matrix]) -> VStack:
    """The union of several query sets over the same cells, stacked in order.

    Example:
        >>> vstack([total(4), prefix(4)]).shape
        (5, 4)
    """
    blocks = _check_matrices(matrices, "vstack")
    widths = [block.shape[1] for block in blocks]
    if len(set(widths)) != 1:
        raise ValueError(f"vstack needs matrices with one column count, got {widths}")
    return VStack(blocks)


def _check_weight(c: object, what: str) -> float:
    if isinstance(c, bool) or not isinstance(c, Real) or not math.isfinite(c) or c <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {c!r}")
    return float(c)


def weighted(c: float, W: Matrix) -> Weighted:
    """The workload ``W`` with every query scaled by the positive weight ``c``.

    Example:
        >>> weighted(2, total(3)).dense()
        array([[2., 2., 2.]])
    """
    if not isinstance(W, Matrix):
        raise ValueError(f"weighted needs a dpmm matrix, got {type(W).__name__}")
    return Weighted(_check_weight(c, "A workload weight"), W)


def _check_domain(domain: object, builder: str) -> Domain:
    if not isinstance(domain, Domain):
        raise ValueError(f"{builder} needs a Domain, got {type(domain).__name__}")
    return domain


def _attribute_set(domain: Domain, attrs: object, what: str) -> tuple[str, ...]:
    """Validate a list of attribute names; return them in domain order."""
    if not _is_list(attrs) or not attrs:
        raise ValueError(f"{what} must be a non-empty list of attribute names, got {attrs!r}")
    positions = domain.indices(attrs)  # DomainError names an unknown attribute
    if len(set(positions)) != len(positions):
        raise ValueError(f"{what} lists an attribute twice: {list(attrs)}")
    return tuple(domain.attributes[i] for i in sorted(positions))


def marginal(domain: Domain, attrs: Sequence[str]) -> Marginal:
    """The contingency table of ``attrs``, summed over every other attribute.

    Example:
        >>> from dpmm.domain import Domain
        >>> marginal(Domain.from_dict({"sex": 2, "age": 3}), ["age"]).dense()
        array([[1., 0., 0., 1., 0., 0.],
               [0., 1., 0., 0., 1., 0.],
               [0., 0., 1., 0., 0., 1.]])
    """
    domain = _check_domain(domain, "marginal")
    return Marginal(domain, _attribute_set(domain, attrs, "The marginal's attributes"))


def marginals(
    domain: Domain,
    k: int | None = None,
    sets: Sequence[Sequence[str]] | None = None,
    attributes: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
) -> Marginals:
    """A union of marginal tables: all exactly ``k``-way ones, or the listed ``sets``.

    Args:
        domain: The domain the tables are taken over.
        k: Build all ``C(d, k)`` tables on exactly ``k`` of the ``d`` attributes,
            ordered lexicographically by attribute position.
        sets: Explicit attribute sets, kept in the order given.
        attributes: Restrict to these attributes (``k`` combines only them; every
            set must lie within them). Default: all attributes of the domain.
        weights: One positive weight per table (default 1 each).

    Example:
        >>> from dpmm.domain import Domain
        >>> domain = Domain.from_dict({"a": 2, "b": 3, "c": 4})
        >>> marginals(domain, k=2).shape  # a×b, a×c, b×c tables
        (26, 24)
        >>> marginals(domain, sets=[["c"], ["a", "b"]], weights=[1, 2]).weights
        {4: 1.0, 3: 2.0}
    """
    domain = _check_domain(domain, "marginals")
    if (k is None) == (sets is None):
        raise ValueError("marginals needs exactly one of k and sets")
    scope = (
        domain.attributes
        if attributes is None
        else _attribute_set(domain, attributes, "marginals' attributes")
    )
    if k is not None:
        if not _is_int(k) or not 1 <= int(k) <= len(scope):
            raise ValueError(f"marginals' k must be an integer in 1..{len(scope)}, got {k!r}")
        chosen = list(itertools.combinations(scope, int(k)))
    else:
        if not _is_list(sets) or not sets:
            raise ValueError(f"marginals' sets must be a non-empty list of lists, got {sets!r}")
        chosen = [_attribute_set(domain, s, f"marginals' set {i}") for i, s in enumerate(sets)]
        seen: dict[tuple[str, ...], int] = {}
        for index, attrs in enumerate(chosen):
            outside = [name for name in attrs if name not in scope]
            if outside:
                raise ValueError(
                    f"marginals' set {index} uses '{outside[0]}', which is not among "
                    f"the attributes {list(scope)}"
                )
            if attrs in seen:
                raise ValueError(f"marginals' sets {seen[attrs]} and {index} are the same set")
            seen[attrs] = index
    if weights is None:
        table_weights = [1.0] * len(chosen)
    else:
        if not _is_list(weights):
            raise ValueError(f"marginals' weights must be a list of numbers, got {weights!r}")
        if len(weights) != len(chosen):
            raise ValueError(
                f"marginals has {len(chosen)} tables but {len(weights)} weights were given"
            )
        table_weights = [_check_weight(w, f"marginals' weight {i}") for i, w in enumerate(weights)]
    return Marginals(domain, dict(zip(chosen, table_weights, strict=True)))
