"""The anchor rows (../shared/anchors: hdmm.md, residualplanner.md) as workloads and figures.

Each row names a workload builder, the privacy convention of its anchor, and
the anchor's measured error and selection time, so benchmarks compare dpmm
with the anchors under the anchors' own conventions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from dpmm.linalg import AllRange, Identity, Kron, Marginals, Matrix, Prefix
from dpmm.privacy import ZCDP, PureDP
from dpmm.workload import census_sf1, census_w1

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
ADULT_DOMAIN = SHARED / "data" / "adult" / "adult-domain.json"


@dataclass(frozen=True)
class AnchorRow:
    """One anchor row: the workload, the convention, the anchor's error and time."""

    name: str
    build: Callable[[], Matrix]
    privacy: PureDP | ZCDP
    anchor: str
    anchor_error: float
    anchor_seconds: float
    svd_floor_target: float | None = None  # Gaussian rows: within this factor of the SVD bound


def marginal_workload(sizes: list[int], ways: tuple[int, ...]) -> Marginals:
    """Every marginal on exactly k attributes, for each k in ``ways``, with unit weight."""
    sets = {s: 1.0 for k in ways for s in combinations(range(len(sizes)), k)}
    return Marginals(sizes, sets)


def adult_sizes() -> list[int]:
    """The 14 Adult attribute sizes (private-pgm's discretization)."""
    return list(json.loads(ADULT_DOMAIN.read_text()).values())


ADULTLIKE = [9, 16, 7, 15, 6, 5, 2, 2, 42, 41]
LAPLACE = PureDP(1)
GAUSSIAN = ZCDP(1)

HDMM_ROWS = [
    AnchorRow("allrange_256", lambda: AllRange(256), LAPLACE, "HDMM OPT_0", 2.15102e06, 0.52),
    AnchorRow("allrange_1024", lambda: AllRange(1024), LAPLACE, "HDMM OPT_0", 6.47459e07, 18.53),
    AnchorRow("allrange_4096", lambda: AllRange(4096), LAPLACE, "HDMM OPT_0", 1.735e09, 1027.5),
    AnchorRow("prefix_1024", lambda: Prefix(1024), LAPLACE, "HDMM OPT_0", 94977.5, 18.88),
    AnchorRow(
        "range2d_64", lambda: Kron([AllRange(64)] * 2), LAPLACE, "HDMM OPT_kron", 2.05808e09, 0.05
    ),
    AnchorRow(
        "range2d_256", lambda: Kron([AllRange(256)] * 2), LAPLACE, "HDMM OPT_kron", 2.31886e12, 0.43
    ),
    AnchorRow(
        "prefix_x_identity_256",
        lambda: Kron([Prefix(256), Identity(256)]),
        LAPLACE,
        "HDMM OPT_kron",
        3.57342e06,
        0.27,
    ),
    AnchorRow(
        "marg2_ten8",
        lambda: marginal_workload([10] * 8, (2,)),
        LAPLACE,
        "HDMM OPT_M",
        3.72015e06,
        0.38,
    ),
    AnchorRow(
        "marg3_ten8",
        lambda: marginal_workload([10] * 8, (3,)),
        LAPLACE,
        "HDMM OPT_M",
        2.40412e08,
        0.83,
    ),
    AnchorRow(
        "marg2_adultlike",
        lambda: marginal_workload(ADULTLIKE, (2,)),
        LAPLACE,
        "HDMM OPT_M",
        1.38106e07,
        5.97,
    ),
    AnchorRow(
        "marg2_bin15",
        lambda: marginal_workload([2] * 15, (2,)),
        LAPLACE,
        "HDMM OPT_M",
        2.01516e06,
        1549.97,
    ),
    AnchorRow("sf1", census_sf1, LAPLACE, "HDMM OPT_kron", 223382, 0.62),
    AnchorRow("census_w1", census_w1, LAPLACE, "HDMM OPT_kron", 225003, 0.51),
]

#: The hdmm.md 1-D and Kron workloads, under Gaussian noise: within 1.05× of the SVD bound.
GAUSSIAN_ROWS = [
    AnchorRow(f"{row.name} (ρ=1)", row.build, GAUSSIAN, "SVD bound", 0.0, 0.0, 1.05)
    for row in HDMM_ROWS
    if row.name
    in (
        "allrange_256",
        "allrange_1024",
        "allrange_4096",
        "prefix_1024",
        "range2d_64",
        "range2d_256",
        "prefix_x_identity_256",
    )
]

RP_ROWS = [
    AnchorRow(
        "[10]x8 2-way", lambda: marginal_workload([10] * 8, (2,)), GAUSSIAN, "RP", 30351.2, 0.02
    ),
    AnchorRow(
        "[10]x8 3-way", lambda: marginal_workload([10] * 8, (3,)), GAUSSIAN, "RP", 1091233, 0.05
    ),
    AnchorRow(
        "[2]x15 2-way", lambda: marginal_workload([2] * 15, (2,)), GAUSSIAN, "RP", 3671.04, 0.03
    ),
    AnchorRow(
        "[2]x15 3-way", lambda: marginal_workload([2] * 15, (3,)), GAUSSIAN, "RP", 62250.8, 0.35
    ),
    AnchorRow(
        "Adult 2-way", lambda: marginal_workload(adult_sizes(), (2,)), GAUSSIAN, "RP", 2994835, 0.04
    ),
    AnchorRow(
        "Adult 3-way",
        lambda: marginal_workload(adult_sizes(), (3,)),
        GAUSSIAN,
        "RP",
        1.15516e9,
        0.32,
    ),
    AnchorRow(
        "[10]x20 <=3-way",
        lambda: marginal_workload([10] * 20, (0, 1, 2, 3)),
        GAUSSIAN,
        "RP",
        4.19930e8,
        0.55,
    ),
    AnchorRow(
        "[10]x50 <=3-way",
        lambda: marginal_workload([10] * 50, (0, 1, 2, 3)),
        GAUSSIAN,
        "RP",
        1.13450e11,
        9.2,
    ),
    AnchorRow(
        "[10]x100 <=3-way",
        lambda: marginal_workload([10] * 100, (0, 1, 2, 3)),
        GAUSSIAN,
        "RP",
        7.45615e12,
        84,
    ),
]
