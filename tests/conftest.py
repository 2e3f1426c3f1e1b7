"""What the tests of the whole package share: paths, the plan's JSON keys, sample strategies."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    Identity,
    Kron,
    Marginal,
    Marginals,
    Ones,
    Prefix,
    RangeQueries,
    Sparse,
    VStack,
    Weighted,
)
from dpmm.privacy.ledger import Ledger, Reservation
from dpmm.privacy.params import ZCDP, PureDP

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))
#: Where planning an example in place would write (its release root, relative to it).
_EXAMPLE_RELEASES = [ROOT / "config" / "examples" / "releases", ROOT / "deploy" / "releases"]


#: Each worker's memory limit in :func:`scheduler`: far below what Dask's defaults give, so
#: its arrays spill rather than grow.
WORKER_MEMORY = 600 * 2**20


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """The address of a LocalCluster of two 1-thread worker processes (one per test module)."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        memory_limit=WORKER_MEMORY,
        dashboard_address=":0",
    ) as cluster:
        yield cluster.scheduler_address


def example_copy(name: str, folder: Path) -> Path:
    """Example config ``name`` copied with the files beside it into ``folder``: a plan saves
    its decision under the config's release root, which must not be the repository."""
    shutil.copytree(ROOT / "config" / "examples", folder / "examples", dirs_exist_ok=True)
    return folder / "examples" / name


def pytest_configure(config: pytest.Config) -> None:
    """Release runs report to a local Prefect server of the test session's own (its own
    home and a free port), which the first of them starts: never the user's server or
    Prefect home. Set before anything imports Prefect, which reads its settings then."""
    home = Path(tempfile.mkdtemp(prefix="dpmm-tests-prefect-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_SERVER_API_PORT"] = str(port)
    os.environ.pop("PREFECT_API_URL", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's Prefect server, as an operator would, and remove its home."""
    home = Path(os.environ["PREFECT_HOME"])
    if (home / "server.pid").exists():  # a release started one
        stop = [sys.executable, "-m", "prefect", "server", "stop"]
        subprocess.run(stop, env=os.environ, capture_output=True, timeout=120)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _repository_stays_clean() -> Iterator[None]:
    """No test writes a release root into the repository's example folders."""
    before = [path.exists() for path in _EXAMPLE_RELEASES]
    yield
    written = [p for p, was in zip(_EXAMPLE_RELEASES, before, strict=True) if p.exists() > was]
    assert not written, f"tests wrote into the repository: {written}"


#: Keys every ``dpmm plan --json`` object (``PlanReport.to_dict()``) has at its top level.
PLAN_KEYS = {
    "strategy",
    "method",
    "total_squared_error",
    "rmse",
    "svd_bound",
    "identity_error",
    "identity_rmse",
    "queries",
    "domain_size",
    "seconds",
    "privacy",
    "config_sha256",
    "groups",
}
#: Keys every entry of its ``groups`` list has.
PLAN_GROUP_KEYS = {
    "name",
    "kind",
    "queries",
    "total_squared_error",
    "rmse",
    "svd_bound",
    "identity_error",
    "identity_rmse",
    "seconds",
}


def assert_plan_keys(data: dict[str, Any]) -> None:
    """A plan's JSON object has every documented key, and so has each of its groups."""
    assert set(data) >= PLAN_KEYS, f"missing {sorted(PLAN_KEYS - set(data))}"
    for group in data["groups"]:
        assert set(group) >= PLAN_GROUP_KEYS, f"missing {sorted(PLAN_GROUP_KEYS - set(group))}"


#: Strategies with integer entries, one of every kind ``dpmm.measure`` measures exactly.
INTEGER_STRATEGIES = [
    Identity(5),
    Ones(3, 4),
    Prefix(6),
    AllRange(5),
    RangeQueries(6, [(0, 2), (1, 5), (3, 3)]),
    Hierarchical(9, branching=3),
    Haar(7),
    Marginal((3, 4), [1]),
    Marginals((2, 3, 4), {(0,): 1, (0, 1): 2, (1, 2): 3, (): 1}),
    Kron([Hierarchical(4), Prefix(3)]),
    VStack([Identity(6), Weighted(3.0, Ones(1, 6)), Haar(6)]),
    Weighted(-2.0, Kron([AllRange(3), Identity(2)])),
    Dense([[1, -2, 0], [3, 0, 1]]),
    Sparse(np.array([[0.0, 4.0], [2.0, -1.0]])),
]


@pytest.fixture(scope="module")
def restore_logging() -> Iterator[None]:
    """Prefect configures logging (root handlers included) when a flow first runs; undo it
    after the module, so later tests' log records do not reach handlers bound to its
    captured streams."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("prefect"):
            logging.getLogger(name).handlers.clear()


def helmert_integer(n: int) -> np.ndarray:
    """The integer Helmert rows from their definition: row k (1 ≤ k < n) is k ones, then
    −k, then zeros (the oracle the integer residual blocks are checked against)."""
    H = np.zeros((n - 1, n), dtype=np.int64)
    for k in range(1, n):
        H[k - 1, :k] = 1
        H[k - 1, k] = -k
    return H


#: The datasets the measurement tests' ledger funds: pure ε, and ρ-zCDP.
MEASURED_PURE, MEASURED_ZCDP = "survey", "zcdp-data"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A ledger funding :data:`MEASURED_PURE` and :data:`MEASURED_ZCDP` (modules that
    need another define their own)."""
    with Ledger.init(tmp_path / "ledger.sqlite") as opened:
        opened.grant(MEASURED_PURE, PureDP(1000))
        opened.grant(MEASURED_ZCDP, ZCDP(1000))
        yield opened


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An empty measurement store."""
    folder = tmp_path / "measurements"
    folder.mkdir()
    return folder


def reserve(ledger: Ledger, privacy: PureDP | ZCDP, release: str = "r1") -> Reservation:
    """A reservation of ``privacy`` on the :func:`ledger` fixture's dataset for its kind."""
    dataset = MEASURED_PURE if isinstance(privacy, PureDP) else MEASURED_ZCDP
    return ledger.reserve(dataset, privacy, release_id=release)
