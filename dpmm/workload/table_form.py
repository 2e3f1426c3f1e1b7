"""Workloads that read the data only through marginal tables.

On a huge domain the data vector ``x`` cannot be formed, but the marginal
tables of a few attribute sets can. A workload is in *table form* when its rows
split into blocks, each a small matrix applied to one marginal table:

    ``W[rows] @ x == local @ (M_attrs @ x)``,

where ``M_attrs = Marginal(domain_shape, attrs)`` yields the table over
``attrs`` flattened in C order. A Kronecker product whose factors are totals
(``Ones(1, n)``) outside ``attrs`` has ``local`` = the Kron of the other
factors; marginals, weights, stacks and products that end in such a matrix
carry through. Nothing is densified: the analysis reads only the matrices'
structure, so it works on domains of 10¹⁵ cells.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Identity, Kron, Ones, Prefix
    >>> W = Kron([Ones(1, 2), Prefix(3)])  # a CDF of attribute 1, attribute 0 totalled
    >>> blocks = table_form(W, (2, 3))
    >>> [(block.rows, block.attrs) for block in blocks], needed_tables(blocks)
    ([(slice(0, 3, None), (1,))], [(1,)])
    >>> answer_from_tables(blocks, {(1,): np.array([4.0, 5.0, 6.0])})
    array([ 4.,  9., 15.])
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.errors import DpmmError
from dpmm.linalg import (
    Identity,
    Kron,
    Marginal,
    Matrix,
    Ones,
    Product,
    Sum,
    VStack,
    Weighted,
)

__all__ = ["TableBlock", "answer_from_tables", "needed_tables", "table_form"]


@dataclass(frozen=True)
class TableBlock:
    """Rows ``rows`` of a workload, answered as ``local @`` (the table over ``attrs``).

    ``attrs`` are sorted attribute positions; ``local`` has one column per cell of
    the table, cells in C order over ``attrs``.
    """

    rows: slice
    attrs: tuple[int, ...]
    local: Matrix


#: A row block before its offset is known: (row count, attrs, local matrix).
_Part = tuple[int, tuple[int, ...], Matrix]


def _total_local(factor: Matrix) -> Matrix | None:
    """``G`` with ``factor == G @ 1ᵀ`` when the factor only reads the total, else None."""
    if isinstance(factor, Ones):
        return Ones(factor.shape[0], 1)
    if isinstance(factor, Weighted):
        base = _total_local(factor.base)
        return None if base is None else Weighted(factor.weight, base)
    if isinstance(factor, Kron):
        locals_ = [_total_local(f) for f in factor.factors]
        return None if any(f is None for f in locals_) else Kron(locals_)
    return None


def _segments(factors: Sequence[Matrix], shape: Sequence[int]) -> list[tuple[list, list]]:
    """Group Kron factors and attributes into runs that cover the same cells.

    Factors usually map one-to-one onto attributes; a factor may also span several
    attributes, or several factors one attribute. A run ends wherever a factor
    boundary and an attribute boundary meet (sizes of one join any neighbour).
    """
    factor_ends = list(itertools.accumulate((f.shape[1] for f in factors), operator.mul))
    attr_ends = list(itertools.accumulate(shape, operator.mul))
    common = sorted(set(factor_ends) & set(attr_ends) - {1})
    if not common:  # every size is one
        return [(list(factors), list(range(len(shape))))]
    runs: list[tuple[list, list]] = [([], []) for _ in common]
    for factor, end in zip(factors, factor_ends, strict=True):
        runs[min(bisect.bisect_left(common, end), len(common) - 1)][0].append(factor)
    for position, end in enumerate(attr_ends):
        runs[min(bisect.bisect_left(common, end), len(common) - 1)][1].append(position)
    return runs


def _kron_part(W: Kron, shape: Sequence[int]) -> _Part | None:
    attrs: list[int] = []
    local: list[Matrix] = []
    for factors, positions in _segments(W.factors, shape):
        totals = [_total_local(f) for f in factors]
        if all(t is not None for t in totals):
            # The segment reads only its total: keep what it does with it (repeats, weights);
            # a plain 1 × 1 ones factor changes nothing.
            local.extend(t for t in totals if not (isinstance(t, Ones) and t.shape == (1, 1)))
            continue
        wide = [p for p in positions if shape[p] > 1]
        # One opaque factor over several attributes is a full table, not a marginal one;
        # only identities split into identities per attribute.
        if len(wide) > 1 and not all(isinstance(f, Identity) for f in factors):
            return None
        attrs.extend(positions)
        local.extend(factors)
    if not local:
        local = [Identity(1)]
    matrix = local[0] if len(local) == 1 else Kron(local)
    return W.shape[0], tuple(attrs), matrix


def _parts(W: Matrix, shape: tuple[int, ...]) -> list[_Part] | None:
    if isinstance(W, Marginal) and W.domain_shape == shape:
        attrs = tuple(i for i in range(len(shape)) if W.mask >> i & 1)
        return [(W.shape[0], attrs, Identity(W.shape[0]))]
    if isinstance(W, Kron):
        part = _kron_part(W, shape)
        return None if part is None else [part]
    if isinstance(W, VStack):  # Marginals included: weighted marginals stacked
        parts: list[_Part] = []
        for block in W.blocks:
            inner = _parts(block, shape)
            if inner is None:
                return None
            parts.extend(inner)
        return parts
    if isinstance(W, Weighted):
        inner = _parts(W.base, shape)
        if inner is None:
            return None
        return [(rows, attrs, Weighted(W.weight, local)) for rows, attrs, local in inner]
    if isinstance(W, Product):
        # L @ R is in table form when R is one block: L mixes R's rows, so R needs one table.
        inner = _parts(W.factors[-1], shape)
        if inner is None or len(inner) != 1:
            return None
        _, attrs, local = inner[0]
        return [(W.shape[0], attrs, Product([*W.factors[:-1], local]))]
    if isinstance(W, Sum):
        inner_terms = [_parts(term, shape) for term in W.terms]
        if any(p is None or len(p) != 1 for p in inner_terms):
            return None
        attr_sets = {p[0][1] for p in inner_terms}
        if len(attr_sets) != 1:
            return None
        return [(W.shape[0], attr_sets.pop(), Sum([p[0][2] for p in inner_terms]))]
    # Any other matrix is one Kron factor over all the cells: a total or an identity splits
    # over the attributes, anything else reads a table only when one attribute is not size 1.
    part = _kron_part(Kron([W]), shape)
    return None if part is None else [part]


def table_form(W: Matrix, domain_shape: Sequence[int]) -> list[TableBlock] | None:
    """Split ``W`` into row blocks that each read one marginal table, or None if it cannot.

    Args:
        W: A workload over the domain's cells (``domain_shape``'s product of columns).
        domain_shape: The attribute sizes.

    Returns:
        Blocks in row order covering every row once, or None when some rows need
        more than a marginal table can tell (the full vector ``x``).

    Raises:
        DpmmError: ``W``'s column count is not the domain's number of cells.
    """
    shape = tuple(int(n) for n in domain_shape)
    if not shape or any(n < 1 for n in shape):
        raise DpmmError(f"A domain shape needs positive attribute sizes, got {shape}")
    if W.shape[1] != math.prod(shape):
        raise DpmmError(
            f"The workload has {W.shape[1]:,} columns but the domain {shape} has "
            f"{math.prod(shape):,} cells"
        )
    parts = _parts(W, shape)
    if parts is None:
        return None
    blocks = []
    start = 0
    for rows, attrs, local in parts:
        blocks.append(TableBlock(slice(start, start + rows), attrs, local))
        start += rows
    return blocks


def needed_tables(blocks: Sequence[TableBlock]) -> list[tuple[int, ...]]:
    """The distinct attribute sets the blocks read, in order of first use.

    Example:
        >>> from dpmm.linalg import Marginals
        >>> needed_tables(table_form(Marginals((2, 3, 4), {(0, 2): 1.0, (1,): 2.0}), (2, 3, 4)))
        [(0, 2), (1,)]
    """
    return list(dict.fromkeys(block.attrs for block in blocks))


def answer_from_tables(
    blocks: Sequence[TableBlock], tables: Mapping[tuple[int, ...], np.ndarray]
) -> np.ndarray:
    """The workload's answers, ``local @ table`` for each block, stacked in row order.

    Args:
        blocks: From :func:`table_form`.
        tables: The marginal table for every set in :func:`needed_tables`, as an array
            of the attributes' sizes (or flattened in C order).

    Raises:
        DpmmError: A table is missing or has the wrong number of cells.
    """
    answers = []
    for block in blocks:
        if block.attrs not in tables:
            raise DpmmError(f"No marginal table was given for the attributes {block.attrs}")
        table = np.asarray(tables[block.attrs], dtype=np.float64).reshape(-1)
        if table.size != block.local.shape[1]:
            raise DpmmError(
                f"The marginal table for the attributes {block.attrs} has {table.size} cells, "
                f"expected {block.local.shape[1]}"
            )
        answers.append(block.local @ table)
    if not answers:
        return np.zeros(0)
    return np.concatenate(answers)
