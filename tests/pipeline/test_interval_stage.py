"""Each group's coefficient multisets, as the release and the plan find them: through the
Kronecker factors when the rows are too many to form, the same as from the rows."""

from __future__ import annotations

import numpy as np
import pytest

from dpmm.linalg import AllRange, Hierarchical, Identity, Kron, Ones, Prefix, VStack, Weighted
from dpmm.measure import quantize
from dpmm.pipeline.interval_stage import _kron_multisets
from dpmm.reconstruct.intervals import Multisets, coefficient_rows

SHAPE = (3, 4, 5)


@pytest.mark.parametrize(
    "strategy",
    [
        Kron([Identity(3), Hierarchical(4), Weighted(0.7, Prefix(5))]),
        Kron([Identity(3), Identity(4), Identity(5)]),
    ],
    ids=["quantized tree", "identity"],
)
def test_kronecker_multisets_are_the_rows_multisets(strategy) -> None:
    quantized = quantize(strategy)
    workload = VStack(
        [
            Kron([Ones(1, 3), Prefix(4), Identity(5)]),
            Weighted(2.0, Kron([Identity(3), Ones(1, 4), AllRange(5)])),
        ]
    )
    rows = Multisets.of_rows(coefficient_rows(workload, quantized.matrix, quantized.scale))
    kron = _kron_multisets(workload, quantized.matrix, SHAPE, quantized.scale)
    assert kron is not None and kron.index.size == workload.shape[0]
    for query in range(workload.shape[0]):
        expected = np.sort(np.repeat(*rows.distinct[rows.index[query]]))
        found = np.sort(np.repeat(*kron.distinct[kron.index[query]]))
        np.testing.assert_allclose(found, expected, rtol=1e-12, atol=1e-15 * expected.max())


def test_a_workload_that_is_no_kronecker_product_has_none() -> None:
    quantized = quantize(Kron([Identity(3), Identity(4), Identity(5)]))
    assert _kron_multisets(Prefix(60), quantized.matrix, SHAPE, quantized.scale) is None
