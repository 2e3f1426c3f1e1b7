"""A release's answers on the Dask cluster, from a measurement drawn there (the ``chunked`` plan).

Nothing proportional to the domain comes to the flow's process: the estimate, each
group's answers and their standard errors are Dask arrays, computed block by block where
they are written. The strategy ``A_q = B / D`` is a Kronecker product over the domain's
attributes, and so is every workload group, each factor acting on one attribute:

* least squares is ``⊗_i (B_iᵀB_i)⁺B_iᵀ y`` on the integer answers (the scale cancels),
  applied factor by factor (:func:`~dpmm.reconstruct.chunked.chunked_least_squares`);
* NNLS iterates on the cluster (:func:`~dpmm.reconstruct.nnls`, chunked), constrained
  to the least-squares total;
* the answers ``W x̂`` are applied factor by factor too, and the standard errors of least
  squares are exact: ``σ² ⊗_i diag(W_i (B_iᵀB_i)⁺ W_iᵀ)`` with σ² the noise variance in
  integer units, a Kronecker product of per-factor diagonals made block by block.

NNLS's own standard errors would need a bootstrap of repeated cluster-wide solves; a
release made with it states least squares' (``reconstruction.standard_errors`` says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpmm.domain import Domain
from dpmm.errors import ConfigError
from dpmm.linalg import Kron, Matrix, query_variances
from dpmm.linalg.chunked_kron import ChunkedKron, axis_factors
from dpmm.linalg.kron import SMALL_FACTOR, factor_gram_pinv
from dpmm.measure.record import MeasurementRecord
from dpmm.reconstruct import nnls
from dpmm.reconstruct.choice import EXACT
from dpmm.reconstruct.chunked import chunked_least_squares
from dpmm.workload import WorkloadGroup

__all__ = ["STATED_LEAST_SQUARES", "ClusterAnswers", "check_on_cluster"]

#: ``reconstruction.standard_errors`` of an NNLS release on the cluster.
STATED_LEAST_SQUARES = "least-squares standard errors (no bootstrap)"


def check_on_cluster(
    strategy: Matrix, groups: Sequence[WorkloadGroup], domain: Domain, where: str
) -> None:
    """Fail in the plan, before anything is spent, if the answers cannot be had on the
    cluster.

    Raises:
        ConfigError: a strategy factor has no Gram pseudo-inverse (structured, or dense
            while small), or a group
            is not a Kronecker product over the domain's attributes.
    """
    shape = tuple(domain.shape)
    factors = axis_factors(strategy, shape) or []
    for factor in factors:
        if factor_gram_pinv(factor) is None:
            raise ConfigError(
                f"{where}: the strategy's factor {factor!r:.60} has no structured Gram "
                f"pseudo-inverse and more than {SMALL_FACTOR:,} columns, which least squares "
                "on the workers needs"
            )
    for group in groups:
        if axis_factors(group.matrix, shape) is None:
            raise ConfigError(
                f"{where}: workload group {group.name!r} is not a Kronecker product over the "
                "domain's attributes, which answers on the workers need; use cluster.arrays: "
                "flow on a domain whose vector fits the flow's process"
            )


class ClusterAnswers:
    """The estimate on the cluster by ``method`` (``least_squares`` or ``nnls``) and, per
    group, its answers and standard errors."""

    def __init__(
        self,
        strategy: Matrix,
        record: MeasurementRecord,
        domain: Domain,
        method: str,
        *,
        dry_run: bool = False,
    ) -> None:
        """``dry_run``: the plan's post-processing of a planned record, which only states
        the standard errors: the estimate is left a recipe, never computed."""
        self.shape = tuple(domain.shape)
        self.factors = axis_factors(strategy, self.shape)
        assert self.factors is not None  # checked by the plan
        rows = tuple(int(f.shape[0]) for f in self.factors)
        self._answers = record.values.astype(np.float64).reshape(rows)
        self._kron = Kron(self.factors) if len(self.factors) > 1 else self.factors[0]
        self.noise_variance = record.noise_variance()
        if dry_run:
            self.estimate = chunked_least_squares(self._kron, self._answers)
        elif method == "nnls":
            self.estimate = self._nnls("estimated", None)
        else:  # computed once, kept on the workers for every group's answers
            self.estimate = chunked_least_squares(self._kron, self._answers).persist()
        self.method = method
        self.errors = EXACT if method == "least_squares" else STATED_LEAST_SQUARES
        self._pinvs = [factor_gram_pinv(f) for f in self.factors]

    def _nnls(self, total: float | str, iterations: int | None) -> Any:
        std = math.sqrt(self.noise_variance)
        fit = nnls(self._kron, self._answers, noise_std=std, total=total, max_iterations=iterations)
        return fit.x.persist()

    def nonnegative(self, total: int | None, max_iterations: int | None) -> Any:
        """The non-negative estimate integer output rounds (as
        :func:`~dpmm.pipeline.reconstruct_stage.reconstruct` chooses it for a vector in
        memory): the release's own NNLS when it solved NNLS and no ``total`` is declared,
        else NNLS constrained to ``total`` (or to least squares' total), stopped after
        ``max_iterations`` (None: at the release's tolerance), from least squares."""
        if self.method == "nnls" and total is None:
            return self.estimate
        return self._nnls("estimated" if total is None else float(total), max_iterations)

    def answers(self, group: WorkloadGroup, estimate: Any) -> Any:
        """The group's answers from ``estimate`` (a Dask array shaped as the domain), a flat
        Dask array in row order."""
        factors = axis_factors(group.matrix, self.shape)
        assert factors is not None  # checked by the plan
        return ChunkedKron(Kron(factors)).apply(estimate).reshape(-1)

    def group(self, group: WorkloadGroup) -> tuple[Any, Any, float]:
        """The group's answers and their standard errors (flat Dask arrays, in row order)
        and least squares' expected RMSE over them (data-free)."""
        factors = axis_factors(group.matrix, self.shape)
        assert factors is not None  # checked by the plan
        values = self.answers(group, self.estimate)
        diagonals = [
            np.maximum(query_variances(W, P), 0.0)
            for W, P in zip(factors, self._pinvs, strict=True)
        ]
        rmse = math.sqrt(self.noise_variance * math.prod(float(d.mean()) for d in diagonals))
        return values, _kron_sqrt(diagonals, self.noise_variance, values.chunks[0]), rmse


def _kron_sqrt(diagonals: list[np.ndarray], scale: float, chunks: tuple[int, ...]) -> Any:
    """``sqrt(scale · ⊗ diagonals)`` as a flat Dask array in ``chunks``, each block made
    from the small per-factor diagonals where it is computed."""
    import dask.array as da

    sizes = [d.size for d in diagonals]
    total = math.prod(sizes)

    def block(block_info: Any = None) -> np.ndarray:
        lo, hi = block_info[None]["array-location"][0]
        index = np.arange(lo, hi, dtype=np.int64)
        product = np.full(hi - lo, scale)
        for position, diagonal in zip(np.unravel_index(index, sizes), diagonals, strict=True):
            product *= diagonal[position]
        return np.sqrt(product)

    if not total:
        return da.zeros(0)
    return da.map_blocks(block, chunks=(chunks,), dtype=np.float64, meta=np.array(()))
