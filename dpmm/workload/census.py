"""The Census SF1 person-table workload (as used by HDMM) and its domain.

The domain is sex (2) × hispanic (2) × race (64) × relationship (17) × age (115)
= 500,480 cells. Race is six yes/no race flags in binary: cell ``r`` has flag
``i`` iff bit ``i`` of ``r`` is set, so cell 1 is "white alone". The workload is
a union of 33 Kronecker products of small per-attribute factors (4,151
queries); ``census_w1`` is the same union with the relationship attribute
dropped (29,440 cells).

Example:
    >>> W = census_sf1()
    >>> W.shape, len(W.blocks)
    ((4151, 500480), 33)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpmm.domain import Domain
from dpmm.linalg import Dense, Identity, Kron, Matrix, Ones, VStack

__all__ = ["census_domain", "census_factors", "census_sf1", "census_w1"]

SEX, HISPANIC, RACE, RELATIONSHIP, AGE = 2, 2, 64, 17, 115

#: The six race flags, bit 0 first.
RACE_FLAGS = ("white", "black", "aian", "asian", "nhpi", "other")

#: The 2010 census relationship-to-householder categories (the workload only totals them).
RELATIONSHIPS = (
    "householder",
    "spouse",
    "biological child",
    "adopted child",
    "stepchild",
    "sibling",
    "parent",
    "grandchild",
    "parent-in-law",
    "child-in-law",
    "other relative",
    "roomer or boarder",
    "housemate or roommate",
    "unmarried partner",
    "other nonrelative",
    "institutional group quarters",
    "noninstitutional group quarters",
)

#: Boundaries of the 23 age groups of table P12 (each group is [b_i, b_{i+1} - 1]).
AGE1_BOUNDARIES = (0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70)
AGE1_BOUNDARIES += (75, 80, 85, 115)

#: The 33 products as (sex, hispanic, race, relationship, age) factor names, in table order.
SF1_PRODUCTS: tuple[tuple[str, str, str, str, str], ...] = (
    ("T", "T", "T", "T", "T"),  # P1
    ("T", "T", "race1", "T", "T"),  # P3
    ("T", "T", "T", "T", "T"),  # P1
    ("T", "I", "T", "T", "T"),  # P4
    ("T", "T", "T", "T", "T"),  # P1
    ("T", "I", "race1", "T", "T"),  # P5
    ("T", "IT", "T", "T", "T"),
    ("T", "T", "race2", "T", "T"),  # P8
    ("T", "T", "T", "T", "T"),  # P1
    ("T", "I", "T", "T", "T"),  # P9
    ("T", "nothisp", "race2", "T", "T"),
    ("T", "T", "T", "T", "T"),  # P1
    ("T", "T", "race2", "T", "adult"),  # P10
    ("T", "T", "T", "T", "adult"),
    ("T", "I", "T", "T", "adult"),  # P11
    ("T", "nothisp", "race2", "T", "adult"),
    ("T", "T", "T", "T", "adult"),
    ("I", "T", "T", "T", "age1"),  # P12
    ("IT", "T", "T", "T", "T"),
    ("I", "T", "race1", "T", "age1"),  # P12A–I
    ("IT", "T", "race1", "T", "T"),
    ("I", "hisp", "T", "T", "age1"),
    ("IT", "hisp", "T", "T", "T"),
    ("I", "nothisp", "white", "T", "age1"),
    ("IT", "nothisp", "white", "T", "T"),
    ("I", "T", "T", "T", "age3"),  # PCT12
    ("IT", "T", "T", "T", "T"),
    ("I", "T", "race1", "T", "age3"),  # PCT12A–O
    ("IT", "T", "race1", "T", "T"),
    ("I", "hisp", "T", "T", "age3"),
    ("IT", "hisp", "T", "T", "T"),
    ("I", "nothisp", "race1", "T", "age3"),
    ("IT", "nothisp", "race1", "T", "T"),
)


def _race_label(cell: int) -> str:
    flags = [flag for bit, flag in enumerate(RACE_FLAGS) if cell >> bit & 1]
    return "+".join(flags) if flags else "none"


def census_domain() -> Domain:
    """The SF1 person domain: sex, hispanic, race, relationship, age, with value labels.

    Race labels join the names of the flags that are set (``"white+asian"``;
    cell 0, no flag, is ``"none"``).

    Example:
        >>> domain = census_domain()
        >>> domain.attributes, domain.size
        (('sex', 'hispanic', 'race', 'relationship', 'age'), 500480)
        >>> domain["race"].labels[5]
        'white+aian'
    """
    return Domain.from_dict(
        [
            {"name": "sex", "size": SEX, "labels": ["male", "female"]},
            {"name": "hispanic", "size": HISPANIC, "labels": ["hispanic", "not hispanic"]},
            {"name": "race", "size": RACE, "labels": [_race_label(r) for r in range(RACE)]},
            {"name": "relationship", "size": RELATIONSHIP, "labels": list(RELATIONSHIPS)},
            {"name": "age", "size": AGE, "labels": [str(age) for age in range(AGE)]},
        ]
    )


def _intervals_matrix(n: int, intervals: Sequence[tuple[int, int]]) -> np.ndarray:
    rows = np.zeros((len(intervals), n))
    for row, (low, high) in enumerate(intervals):
        rows[row, low : high + 1] = 1.0
    return rows


def _race1() -> np.ndarray:
    """Rows 0..5: each race alone (cell 2ⁱ); row 6: every other cell, cell 0 included."""
    alone = [1 << bit for bit in range(len(RACE_FLAGS))]
    rows = np.zeros((len(alone) + 1, RACE))
    rows[np.arange(len(alone)), alone] = 1.0
    rows[-1] = 1.0
    rows[-1, alone] = 0.0
    return rows


def _race2() -> np.ndarray:
    """Rows 0..62: cells 1..63; rows 63..68: exactly k = 1..6 flags; row 69: two or more."""
    flag_counts = np.array([cell.bit_count() for cell in range(RACE)])
    single_cells = np.eye(RACE)[1:]
    exactly = np.stack([flag_counts == k for k in range(1, len(RACE_FLAGS) + 1)])
    two_or_more = (flag_counts >= 2)[None, :]
    return np.vstack([single_cells, exactly, two_or_more]).astype(np.float64)


def census_factors() -> dict[str, dict[str, Matrix]]:
    """The named factors of the SF1 products, per attribute.

    Returns ``{attribute: {factor name: matrix}}``; every attribute has ``T``
    (total) and ``I`` (identity), sex and hispanic also ``IT`` (I stacked on T),
    hispanic ``hisp`` and ``nothisp``, race ``race1``, ``race2`` and ``white``,
    age ``adult``, ``age1`` and ``age3``.

    Example:
        >>> factors = census_factors()
        >>> factors["race"]["race2"].shape, factors["age"]["age3"].shape
        ((70, 64), (103, 115))
    """
    sizes = {"sex": SEX, "hispanic": HISPANIC, "race": RACE, "relationship": RELATIONSHIP}
    sizes["age"] = AGE
    factors: dict[str, dict[str, Matrix]] = {
        name: {"T": Ones(1, n), "I": Identity(n)} for name, n in sizes.items()
    }
    for name in ("sex", "hispanic"):
        factors[name]["IT"] = Dense(np.vstack([np.eye(2), np.ones((1, 2))]))
    factors["hispanic"]["hisp"] = Dense([[1.0, 0.0]])
    factors["hispanic"]["nothisp"] = Dense([[0.0, 1.0]])
    factors["race"]["race1"] = Dense(_race1())
    factors["race"]["race2"] = Dense(_race2())
    factors["race"]["white"] = Dense(np.eye(RACE)[[1]])
    age1 = list(zip(AGE1_BOUNDARIES[:-1], (b - 1 for b in AGE1_BOUNDARIES[1:]), strict=True))
    age3 = [(age, age) for age in range(100)] + [(100, 104), (105, 109), (110, 114)]
    factors["age"]["adult"] = Dense(_intervals_matrix(AGE, [(18, AGE - 1)]))
    factors["age"]["age1"] = Dense(_intervals_matrix(AGE, age1))
    factors["age"]["age3"] = Dense(_intervals_matrix(AGE, age3))
    return factors


def _products(attributes: Sequence[str]) -> VStack:
    factors = census_factors()
    all_attributes = ("sex", "hispanic", "race", "relationship", "age")
    terms = []
    for product in SF1_PRODUCTS:
        names = dict(zip(all_attributes, product, strict=True))
        terms.append(Kron([factors[attr][names[attr]] for attr in attributes]))
    return VStack(terms)


def census_sf1() -> VStack:
    """The SF1 person-table workload over :func:`census_domain` (4,151 × 500,480).

    Example:
        >>> round(census_sf1().gram().trace())  # ‖W‖_F²
        18998554
    """
    return _products(("sex", "hispanic", "race", "relationship", "age"))


def census_w1() -> VStack:
    """The SF1 products without the relationship attribute (4,151 × 29,440).

    Its domain is ``census_domain()`` without ``relationship``.

    Example:
        >>> census_w1().shape
        (4151, 29440)
    """
    return _products(("sex", "hispanic", "race", "age"))
