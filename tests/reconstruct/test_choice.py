"""The auto reconstruction rule: NNLS only when the bootstrap finds it clearly better."""

from __future__ import annotations

import numpy as np

from dpmm.reconstruct.choice import NNLS_MARGIN, SolvedAnswers, auto_choice, prefers_nnls


def test_nnls_needs_to_be_clearly_better_than_least_squares() -> None:
    assert prefers_nnls(NNLS_MARGIN * 100.0, 100.0)
    assert not prefers_nnls(NNLS_MARGIN * 100.0 + 1e-9, 100.0)
    assert not prefers_nnls(100.0, 100.0)  # a tie keeps the unbiased, exact one


def _solved(method: str, errors: float, judged: float | None = None) -> SolvedAnswers:
    estimate = np.array([-1.0, 3.0]) if method == "least_squares" else np.array([0.0, 2.0])
    at_estimate = None if judged is None else [np.full(2, judged)]
    return SolvedAnswers(
        method, estimate, [estimate], [np.full(2, errors)], [np.full(2, 1.0)], "", at_estimate
    )


def test_auto_judges_nnls_by_the_bootstrap_half_around_its_own_estimate() -> None:
    least = _solved("least_squares", 1.0)
    # Reported (bias-corrected) errors above least squares', judged ones well below: NNLS,
    # reporting the corrected errors.
    chosen = auto_choice(least, _solved("nnls", 1.2, judged=0.5))
    assert chosen.method == "nnls" and chosen.standard_errors[0].tolist() == [1.2, 1.2]
    assert auto_choice(least, _solved("nnls", 0.5, judged=0.9)).method == "least_squares"
