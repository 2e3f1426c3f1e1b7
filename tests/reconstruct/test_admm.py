"""ADMM for Kronecker Hessians against scipy.optimize.nnls and projected gradient, in memory
and on Dask blocks (the default scheduler and a LocalCluster of worker processes)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmm.linalg import AllRange, Dense, Hierarchical, Identity, Kron, Matrix, Prefix, Weighted
from dpmm.reconstruct import admm, chunked_loop, nnls
from dpmm.reconstruct.admm import kron_spectrum, rebalanced_rho
from dpmm.reconstruct.gram import largest_gram_eigenvalue
from dpmm.reconstruct.nnls import nnls_setup
from dpmm.reconstruct.projected_gradient import minimize_nonnegative_quadratic

CASES = [
    lambda: Kron([AllRange(6), Prefix(5)]),
    lambda: Kron([Hierarchical(8, 2), Prefix(4), AllRange(3)]),
    lambda: Kron([Identity(4), Prefix(6)]),
    lambda: Kron([Prefix(5), Dense(np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0], [3.0, 0.0, 1.0]]))]),
]


def _measured(A: Matrix, rng: np.random.Generator, noise: float = 2.0) -> np.ndarray:
    n = A.shape[1]
    truth = rng.poisson(3, n) * (rng.random(n) < 0.3)
    return A @ truth + rng.laplace(0, noise, A.shape[0])


def _objective(A: Matrix, y: np.ndarray, x: np.ndarray) -> float:
    return 0.5 * float(np.sum((A @ x - y) ** 2))


def _projected_gradient(A: Matrix, y: np.ndarray, total: float | None) -> np.ndarray:
    gram = A.gram()
    solution = minimize_nonnegative_quadratic(
        lambda v: gram @ v,
        A.T @ y,
        np.zeros(A.shape[1]),
        largest_gram_eigenvalue(A),
        total=total,
        tolerance=1e-11,
        max_iterations=200_000,
    )
    assert solution.converged
    return solution.x


@pytest.mark.parametrize("case", range(len(CASES)))
def test_admm_reaches_the_optimum_of_scipy_and_projected_gradient(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    A = CASES[case]()
    y = _measured(A, rng)
    assert nnls_setup(A).spectrum is not None  # this strategy is solved by ADMM
    estimate = nnls(A, y, tolerance=1e-11)
    assert estimate.converged and estimate.x.min() >= 0
    reference = scipy.optimize.nnls(A.dense(), y, maxiter=10_000)[0]
    best = _objective(A, y, reference)
    assert abs(_objective(A, y, estimate.x) - best) <= 1e-9 * best
    total = float(max(np.floor(reference.sum() * 0.8), 1.0))
    constrained = nnls(A, y, total=total, tolerance=1e-11)
    assert constrained.converged and constrained.x.min() >= 0
    assert constrained.x.sum() == pytest.approx(total, rel=1e-12)
    best = _objective(A, y, _projected_gradient(A, y, total))
    assert abs(_objective(A, y, constrained.x) - best) <= 1e-9 * best


_FACTORS = [
    lambda n: Prefix(n),
    lambda n: AllRange(n),
    lambda n: Identity(n),
    lambda n: Hierarchical(n, 2),
]


@settings(max_examples=25, deadline=None)
@given(
    kinds=st.lists(st.integers(0, len(_FACTORS) - 1), min_size=1, max_size=3),
    sizes=st.lists(st.integers(2, 6), min_size=3, max_size=3),
    seed=st.integers(0, 2**16),
    with_total=st.booleans(),
)
def test_admm_on_random_kronecker_shapes(
    kinds: list[int], sizes: list[int], seed: int, with_total: bool
) -> None:
    A = Kron([_FACTORS[k](n) for k, n in zip(kinds, sizes, strict=False)])
    rng = np.random.default_rng(seed)
    y = _measured(A, rng)
    if with_total:
        total = float(rng.integers(1, 60))
        estimate = nnls(A, y, total=total, tolerance=1e-11)
        reference = _projected_gradient(A, y, total)
    else:
        estimate = nnls(A, y, tolerance=1e-11)
        reference = scipy.optimize.nnls(A.dense(), y, maxiter=10_000)[0]
    assert estimate.converged and estimate.x.min() >= 0
    best = _objective(A, y, reference)
    assert abs(_objective(A, y, estimate.x) - best) <= 1e-9 * max(best, 1e-6)


def test_other_strategies_keep_projected_gradient(monkeypatch) -> None:
    assert nnls_setup(Hierarchical(16, 2)).spectrum is None
    assert nnls_setup(Kron([Prefix(4), Prefix(3)]), np.arange(1.0, 13.0)).spectrum is None
    monkeypatch.setattr(admm, "EIGEN_FACTOR_LIMIT", 4)
    assert nnls_setup(Kron([Prefix(5), Prefix(3)])).spectrum is None
    assert nnls_setup(Kron([Prefix(4), Prefix(3)])).spectrum is not None


def test_spectrum_of_a_weighted_kron_is_its_hessian() -> None:
    rng = np.random.default_rng(7)
    gram = Weighted(0.25, Kron([AllRange(4), Hierarchical(4, 2)]).gram())
    spectrum = kron_spectrum(gram)
    v = rng.normal(size=16)
    np.testing.assert_allclose(spectrum.hessian(v), gram.dense() @ v, atol=1e-12)
    assert spectrum.initial_rho() > 0


def test_iteration_limit_returns_a_feasible_point_and_its_residual() -> None:
    rng = np.random.default_rng(8)
    A = Kron([AllRange(6), Prefix(5)])
    y = _measured(A, rng)
    estimate = nnls(A, y, total=20.0, tolerance=1e-14, max_iterations=7)
    assert estimate.iterations == 7 and not estimate.converged
    assert estimate.x.min() >= 0 and estimate.x.sum() == pytest.approx(20.0, rel=1e-12)
    # The residual reported is that of the point returned: a restart from it reports it.
    again = nnls(A, y, total=20.0, tolerance=1e-14, max_iterations=0)
    assert np.isfinite(estimate.residual) and again.iterations == 0


def test_rho_changes_only_by_more_than_the_factor() -> None:
    assert rebalanced_rho(2.0, 1.0, 1.0, 1.0, 1.0) == 2.0
    assert rebalanced_rho(2.0, 1.0, 1.0, 100.0, 1.0) == pytest.approx(0.2)
    assert rebalanced_rho(2.0, 0.0, 1.0, 1.0, 1.0) == 2.0  # nothing to balance


@pytest.mark.parametrize("total", [None, "estimated"])
def test_blocks_follow_the_in_memory_iterates_whatever_the_batch(monkeypatch, total) -> None:
    rng = np.random.default_rng(9)
    A = Kron([AllRange(7), Prefix(4), Prefix(3)])
    y = _measured(A, rng, noise=4.0)
    # A limit below convergence: every check rebalances ρ, and the iterates still agree.
    memory = nnls(A, y, total=total, tolerance=1e-14, max_iterations=60)
    tensor = da.from_array(y.reshape(28, 4, 3), chunks=(10, 4, 3))
    runs = []
    for batch in (10, 30):
        monkeypatch.setattr(chunked_loop, "BATCH_ITERATIONS", batch)
        runs.append(nnls(A, tensor, total=total, tolerance=1e-14, max_iterations=60))
    assert runs[0].iterations == runs[1].iterations == memory.iterations == 60
    assert runs[0].residual == pytest.approx(memory.residual, rel=1e-6)
    first, second = (np.asarray(run.x.compute()).reshape(-1) for run in runs)
    np.testing.assert_array_equal(first, second)
    scale = max(float(memory.x.max()), 1.0)
    np.testing.assert_allclose(first, memory.x, rtol=0, atol=1e-8 * scale)


@pytest.mark.slow
@pytest.mark.parametrize("total", [None, "estimated"])
def test_admm_on_a_local_cluster_matches_in_memory(monkeypatch, total) -> None:
    """Two worker processes: the estimate is the in-memory one, and the driver persists
    once per batch of iterations, not once per iteration."""
    from dask.distributed import Client, LocalCluster

    rng = np.random.default_rng(10)
    A = Kron([Hierarchical(8, 2), Prefix(6), Identity(5)])  # converges in about 210 steps
    y = _measured(A, rng, noise=3.0)
    memory = nnls(A, y, total=total, tolerance=1e-10)
    persists = []
    original = chunked_loop._Tasks.persist
    monkeypatch.setattr(
        chunked_loop._Tasks, "persist", lambda *a: persists.append(1) or original(*a)
    )
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster),
    ):
        tensor = da.from_array(y.reshape(15, 6, 5), chunks=(5, 6, 5))
        chunked = nnls(A, tensor, total=total, tolerance=1e-10)
        (x,) = dask.compute(chunked.x)
    assert chunked.converged and chunked.iterations == memory.iterations
    scale = max(float(memory.x.max()), 1.0)
    np.testing.assert_allclose(np.asarray(x).reshape(-1), memory.x, rtol=0, atol=1e-8 * scale)
    batches = -(-chunked.iterations // chunked_loop.BATCH_ITERATIONS)
    assert chunked.iterations > 2 * chunked_loop.BATCH_ITERATIONS  # several batches ran
    assert len(persists) <= 2 + batches + 1  # constants, first check, batches, one ahead
