"""dpmm: differentially private releases of linear queries with the matrix mechanism.

The top level is the research loop: build a workload ``W``, :func:`optimize` a strategy
``A``, measure it on a data vector ``x`` in memory (:func:`measure_strategy`), reconstruct
with :func:`least_squares` or :func:`nnls`, and compare with :func:`expected_error` or
:func:`rmse`. The release pipeline (config, ledger, stores) lives in the subpackages.

The names are imported on first use (PEP 562), so ``import dpmm``, which every ``dpmm``
command runs, loads neither numpy nor scipy. The measurement function is called
``measure_strategy``, not ``measure``: ``dpmm.measure`` is the measurement subpackage, which
the import system binds on ``dpmm`` whenever any code imports it, so a top-level function of
that name would be shadowed depending on import order.

Example:
    >>> import numpy as np, dpmm
    >>> W, privacy = dpmm.prefix(16), dpmm.ZCDP(1)
    >>> A = dpmm.optimize(W, "hierarchical", privacy)
    >>> y = dpmm.measure_strategy(A, np.arange(16), privacy)
    >>> x_hat = dpmm.least_squares(y.strategy, y.answers, noise_std=y.noise_std).x
    >>> A, x_hat.shape, round(dpmm.rmse(W, A, privacy), 3)
    (Hierarchical(16, b=2), (16,), 1.37)
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("dpmm")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

if TYPE_CHECKING:
    from dpmm.domain import Domain
    from dpmm.error import expected_error, rmse
    from dpmm.measure.measurement import Measurement, measure_strategy
    from dpmm.privacy.params import ZCDP, PureDP
    from dpmm.reconstruct.least_squares import least_squares
    from dpmm.reconstruct.nnls import nnls
    from dpmm.strategy import optimize
    from dpmm.workload.builders import (
        all_range,
        identity,
        kron,
        marginal,
        marginals,
        prefix,
        ranges,
        total,
        vstack,
        weighted,
    )

#: Each public name and the module it is imported from on first use.
_LAZY = {
    "Domain": "dpmm.domain",
    "PureDP": "dpmm.privacy.params",
    "ZCDP": "dpmm.privacy.params",
    "all_range": "dpmm.workload.builders",
    "identity": "dpmm.workload.builders",
    "kron": "dpmm.workload.builders",
    "marginal": "dpmm.workload.builders",
    "marginals": "dpmm.workload.builders",
    "prefix": "dpmm.workload.builders",
    "ranges": "dpmm.workload.builders",
    "total": "dpmm.workload.builders",
    "vstack": "dpmm.workload.builders",
    "weighted": "dpmm.workload.builders",
    "optimize": "dpmm.strategy",
    "Measurement": "dpmm.measure.measurement",
    "measure_strategy": "dpmm.measure.measurement",
    "least_squares": "dpmm.reconstruct.least_squares",
    "nnls": "dpmm.reconstruct.nnls",
    "expected_error": "dpmm.error",
    "rmse": "dpmm.error",
}

__all__ = [
    "ZCDP",
    "Domain",
    "Measurement",
    "PureDP",
    "__version__",
    "all_range",
    "expected_error",
    "identity",
    "kron",
    "least_squares",
    "marginal",
    "marginals",
    "measure_strategy",
    "nnls",
    "optimize",
    "prefix",
    "ranges",
    "rmse",
    "total",
    "vstack",
    "weighted",
]


def __getattr__(name: str) -> Any:
    """Import a public name of :data:`__all__` on first use and keep it in the module."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dpmm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
