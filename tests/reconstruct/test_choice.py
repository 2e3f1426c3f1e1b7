"""The auto reconstruction rule: NNLS only when the bootstrap finds it clearly better."""

from __future__ import annotations

from dpmm.reconstruct.choice import NNLS_MARGIN, prefers_nnls


def test_nnls_needs_to_be_clearly_better_than_least_squares() -> None:
    assert prefers_nnls(NNLS_MARGIN * 100.0, 100.0)
    assert not prefers_nnls(NNLS_MARGIN * 100.0 + 1e-9, 100.0)
    assert not prefers_nnls(100.0, 100.0)  # a tie keeps the unbiased, exact one
