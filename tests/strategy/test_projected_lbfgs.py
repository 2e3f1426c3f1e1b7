"""The projected L-BFGS: exact on a bounded quadratic, as good as SciPy's L-BFGS-B on OPT_0."""

import numpy as np
import pytest
import scipy.optimize

from dpmm.linalg import Prefix
from dpmm.strategy.pidentity import PIdentityTemplate
from dpmm.strategy.projected_lbfgs import minimize_bounded
from dpmm.strategy.time_budget import OutOfTimeError, time_budget


def _bounded_quadratic(seed):
    """``½ xᵀHx − bᵀx`` on [0, 1]ⁿ with a known minimizer: a third of it on each bound."""
    rng = np.random.default_rng(seed)
    n = 60
    basis = rng.normal(size=(n, n))
    hessian = basis @ basis.T / n + 0.1 * np.eye(n)
    optimum = rng.uniform(0.2, 0.8, size=n)
    optimum[:20], optimum[20:40] = 0.0, 1.0
    # The gradient at the optimum pushes out of the box on the bounds, vanishes inside.
    gradient = np.concatenate([rng.uniform(0.1, 1, 20), -rng.uniform(0.1, 1, 20), np.zeros(20)])
    linear = hessian @ optimum - gradient

    def loss_and_grad(x):
        return float(x @ hessian @ x / 2 - linear @ x), hessian @ x - linear

    return loss_and_grad, optimum


@pytest.mark.parametrize("seed", range(3))
def test_it_finds_a_bounded_quadratics_minimizer_with_active_bounds(seed):
    loss_and_grad, optimum = _bounded_quadratic(seed)
    start = np.random.default_rng(seed + 10).uniform(size=optimum.size)
    x, loss = minimize_bounded(
        loss_and_grad,
        start,
        np.zeros(optimum.size),
        np.ones(optimum.size),
        max_iterations=500,
        relative_tolerance=1e-15,
    )
    np.testing.assert_allclose(x, optimum, atol=1e-6)
    assert loss == pytest.approx(loss_and_grad(optimum)[0], rel=1e-12, abs=1e-12)
    assert np.all(x[:20] == 0.0) and np.all(x[20:40] == 1.0)  # exactly on the bounds


@pytest.mark.parametrize("seed", range(4))
def test_it_reaches_scipys_loss_on_a_small_pidentity_fit(seed):
    # Prefix(32) with p = 2: every start tried ends in one optimum (nonconvex elsewhere).
    gram = Prefix(32).gram().dense()
    template = PIdentityTemplate(gram / np.trace(gram), p=2, norm=1)
    start = template.initial(np.random.default_rng(seed))
    bounds = template.bounds()
    reference = scipy.optimize.minimize(
        template.loss_and_grad,
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 5000, "maxfun": 10000, "ftol": 1e-14, "gtol": 0.0},
    )
    _, loss = minimize_bounded(
        template.loss_and_grad,
        start,
        bounds.lb,
        bounds.ub,
        max_iterations=5000,
        relative_tolerance=1e-14,
    )
    assert reference.nit > 10  # SciPy did converge, not stop at its first step
    assert loss == pytest.approx(reference.fun, rel=1e-6)


def test_it_stops_inside_a_spent_time_budget():
    loss_and_grad, optimum = _bounded_quadratic(0)
    calls = []

    def counted(x):
        calls.append(1)
        return loss_and_grad(x)

    with time_budget(0), pytest.raises(OutOfTimeError):
        minimize_bounded(
            counted,
            np.full(optimum.size, 0.5),
            np.zeros(optimum.size),
            np.ones(optimum.size),
            max_iterations=500,
            relative_tolerance=1e-15,
        )
    assert len(calls) <= 1  # the start's evaluation at most, no iteration
