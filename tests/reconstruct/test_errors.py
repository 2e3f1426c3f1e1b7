"""Bad inputs raise one clear sentence of dpmm's own error types."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.errors import DpmmError
from dpmm.linalg import Hierarchical, Identity, Prefix
from dpmm.reconstruct import (
    Estimate,
    least_squares,
    nnls,
    workload_answers,
    workload_nnls,
)

SOLVERS = [least_squares, nnls]


@pytest.mark.parametrize("solve", SOLVERS)
@pytest.mark.parametrize(
    ("y", "kwargs", "message"),
    [
        (np.zeros(5), {}, r"shape \(5,\) but strategy .* has 7 rows"),
        (np.array([1, np.nan, 2, 3, 4, 5, 6.0]), {}, "1 NaN or infinite"),
        (np.zeros(7), {"noise_std": -1.0}, "positive finite"),
        (np.zeros(7), {"noise_std": np.ones(3)}, "3 entries but there are 7"),
        (np.zeros(7), {"total": -2.0}, "non-negative finite"),
        (np.zeros(7), {"total": "least"}, "a number or 'estimated'"),
    ],
)
def test_bad_measurements(solve, y, kwargs, message) -> None:
    with pytest.raises(DpmmError, match=message) as raised:
        solve(Hierarchical(4, 2), y, **kwargs)
    assert str(raised.value).count(". ") == 0  # one sentence


def test_non_matrix_strategy() -> None:
    with pytest.raises(DpmmError, match="dpmm matrix"):
        least_squares(np.eye(3), np.zeros(3))


def test_workload_mismatch_and_missing_noise() -> None:
    with pytest.raises(DpmmError, match="same cells"):
        workload_nnls(Prefix(3), Identity(4), np.zeros(4))
    estimate = least_squares(Identity(3), np.zeros(3))
    with pytest.raises(DpmmError, match="pass noise_std"):
        workload_answers(Prefix(3), Identity(3), estimate)
    with pytest.raises(DpmmError, match="same cells"):
        workload_answers(Prefix(4), Identity(3), estimate)


def test_solvers_share_the_protocol_signature() -> None:
    import inspect

    names = [
        [p.name for p in inspect.signature(s).parameters.values() if p.kind == p.KEYWORD_ONLY]
        for s in (least_squares, nnls)
    ]
    assert names[0] == names[1] == ["noise_std", "total", "tolerance", "max_iterations"]
    assert isinstance(least_squares(Identity(2), np.ones(2)), Estimate)
