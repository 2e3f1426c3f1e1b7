"""Which solver ``auto`` reconstruction uses, judged on the requested answers.

NNLS (constrained to the least-squares total) helps where the data are sparse and the
strategy aggregates cells, and hurts elsewhere: clipping biases small answers up and, through
the total, the long ones down. The share of negative cells in the least-squares estimate
does not tell the two apart (it is near one half on 2-D grids whatever the data, where
NNLS made prefix answers up to 4× worse). What matters is the error of the answers the
workload asks for, and both sides of that comparison are post-processing:

* least squares: its exact expected squared error, the sum of the answers' variances;
* NNLS: the parametric bootstrap's mean squared deviation of the same answers, bias
  included, around NNLS's own estimate: the half of the replicates that measure its bias
  (:func:`~dpmm.reconstruct.answers.bootstrap_errors`). The other half give the errors a
  release reports, so the draws that decide do not also size the error bars.

Centred on NNLS's own estimate (sparser than the truth), the bootstrap flatters NNLS: it
found NNLS 0.6–1.0× least squares in trials where NNLS was 0.3–1.2× on average. So NNLS is
taken only when the bootstrap finds it clearly better, at most :data:`NNLS_MARGIN` of least
squares' error. Judged by the bias-corrected errors instead, which are honest but larger,
``auto`` took NNLS in 60 % of the releases of sparse all-range histograms where NNLS+T was
0.6× least squares, and kept 0.86–0.88× instead of 0.53–0.73×.

:func:`solve_answers` is what a release runs on the full vector: least squares, then (for
``nnls``, or ``auto`` when least squares left a negative cell) NNLS with its bootstrap.

Example:
    >>> prefers_nnls(bootstrap_squared_error=40.0, least_squares_variance=100.0)
    True
    >>> prefers_nnls(bootstrap_squared_error=90.0, least_squares_variance=100.0)
    False
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.linalg import Matrix
from dpmm.reconstruct.answers import REPLICATES, bootstrap_errors, workload_answers
from dpmm.reconstruct.least_squares import least_squares
from dpmm.reconstruct.nnls import nnls_setup
from dpmm.reconstruct.protocol import DEFAULT_TOLERANCE

__all__ = [
    "EXACT",
    "NNLS_MARGIN",
    "SolvedAnswers",
    "auto_choice",
    "prefers_nnls",
    "solve_answers",
]

#: How least squares' standard errors are had.
EXACT = "exact"
#: The bootstrap's replicates stop at this relative KKT residual: on 1,024 bins it moved
#: their prefix answers by 1.5 (RMS) against a bootstrap spread of 107, in 60 % of the
#: iterations of the release's own 1e-6.
REPLICATE_TOLERANCE = 1e-5

#: NNLS replaces least squares when its bootstrap error is at most this share of least
#: squares' exact error on the requested answers.
NNLS_MARGIN = 0.75


def prefers_nnls(bootstrap_squared_error: float, least_squares_variance: float) -> bool:
    """Whether NNLS should replace least squares for the requested answers.

    Args:
        bootstrap_squared_error: NNLS's total squared error on the workload's answers, by
            the parametric bootstrap.
        least_squares_variance: Least squares' exact expected total squared error on them.
    """
    return bootstrap_squared_error <= NNLS_MARGIN * least_squares_variance


@dataclass(frozen=True, eq=False)
class SolvedAnswers:
    """The answers of each workload, from the solver that was used.

    Attributes:
        method: ``least_squares`` or ``nnls``.
        estimate: The data-vector estimate.
        values: Per workload, its answers.
        standard_errors: Per workload, its answers' standard errors (see ``errors``).
        least_squares_errors: Per workload, least squares' exact standard errors: the
            strategy's expected error, whichever solver answered.
        errors: How ``standard_errors`` were had: :data:`EXACT`, or the bootstrap's.
        errors_at_estimate: NNLS's bootstrap errors around its own estimate (from the
            replicates that measured its bias), which ``auto`` compares with least squares;
            None where they are ``standard_errors``.
    """

    method: str
    estimate: np.ndarray
    values: list[np.ndarray]
    standard_errors: list[np.ndarray]
    least_squares_errors: list[np.ndarray]
    errors: str
    errors_at_estimate: list[np.ndarray] | None = None

    @property
    def judged_errors(self) -> list[np.ndarray]:
        """The errors ``auto`` judges these answers by."""
        return self.standard_errors if self.errors_at_estimate is None else self.errors_at_estimate


def _squared(errors: Sequence[np.ndarray]) -> float:
    return sum(float(np.sum(np.square(e))) for e in errors)


def solve_answers(
    A: Matrix,
    y: np.ndarray,
    noise_std: float,
    workloads: Sequence[Matrix],
    method: str,
    simulate: Callable[[np.ndarray], np.ndarray],
    *,
    replicates: int = REPLICATES,
    progress: Callable[[int, int, str], None] | None = None,
) -> SolvedAnswers:
    """The workloads' answers from ``y = A x + noise`` by ``method``, with standard errors.

    Least squares' standard errors are exact. NNLS is constrained to the least-squares
    total (without it, clipping the empty cells of sparse data biases every long range
    upwards) and gets its standard errors from a parametric bootstrap of ``replicates``
    simulated measurements; with none (a dry run, whose answers mean nothing) it reports
    least squares' as a stand-in. ``auto`` keeps least squares unless the bootstrap finds
    NNLS clearly better (:func:`prefers_nnls`) on these answers.

    Args:
        A: The measured strategy; ``y`` its noisy answers, ``noise_std`` their noise's.
        workloads: The query matrices to answer.
        method: ``least_squares``, ``nnls`` or ``auto``.
        simulate: A simulated measurement around an estimate (fresh noise each call).
        replicates: Bootstrap replicates.
        progress: Called with ``(steps done, steps, what runs next)``.
    """
    report = progress or (lambda done, total, what: None)
    steps = 1 + (replicates if method != "least_squares" else 0)
    report(0, steps, "least squares")
    least = least_squares(A, y, noise_std=noise_std)
    linear = [workload_answers(W, A, least) for W in workloads]
    linear_values = [answers.values for answers in linear]
    linear_errors = [answers.standard_errors for answers in linear]
    plain = SolvedAnswers(
        "least_squares",
        np.asarray(least.x, np.float64),
        linear_values,
        linear_errors,
        linear_errors,
        EXACT,
    )
    if method == "least_squares" or (method == "auto" and not _clips(plain)):
        report(steps, steps, "")
        return plain

    setup = nnls_setup(A, noise_std)  # once for the estimate and every replicate

    def solve(answers: np.ndarray, tolerance: float = DEFAULT_TOLERANCE) -> np.ndarray:
        return np.asarray(setup.solve(answers, total="estimated", tolerance=tolerance).x)

    report(1, steps, "NNLS")
    estimate = solve(y)
    values = [np.asarray(W @ estimate, dtype=np.float64).reshape(-1) for W in workloads]
    if replicates == 0:
        stand_in = "least-squares standard errors (no bootstrap)"
        return SolvedAnswers("nnls", estimate, values, linear_errors, linear_errors, stand_in)
    errors = bootstrap_errors(
        lambda answers: solve(answers, REPLICATE_TOLERANCE),
        simulate,
        estimate,
        workloads,
        replicates=replicates,
        progress=lambda done, total: report(1 + done, steps, f"bootstrap {done}/{total}"),
    )
    described = f"bias-corrected parametric bootstrap, {replicates} replicates"
    clipped = SolvedAnswers(
        "nnls", estimate, values, errors.corrected, linear_errors, described, errors.at_estimate
    )
    return auto_choice(plain, clipped) if method == "auto" else clipped


def _clips(least: SolvedAnswers) -> bool:
    """Whether NNLS differs from least squares: with no negative cell the least-squares
    estimate is also NNLS's (with the same total)."""
    return bool(least.estimate.size) and float(np.min(least.estimate)) < 0


def auto_choice(least: SolvedAnswers, clipped: SolvedAnswers) -> SolvedAnswers:
    """What ``auto`` keeps of least squares' answers and NNLS's (with bootstrap errors)."""
    if not _clips(least):
        return least
    bootstrap, exact = _squared(clipped.judged_errors), _squared(least.standard_errors)
    return clipped if prefers_nnls(bootstrap, exact) else least
