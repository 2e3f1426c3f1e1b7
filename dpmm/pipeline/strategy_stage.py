"""Select a release's strategy from its config alone, reusing a cached one when identical.

Selection reads no data and spends nothing. Its result is keyed by everything it depends
on (the domain's attributes and sizes, the workload groups' specs, the noise norm, the
method and dpmm's version), so a scheduled release with an unchanged workload reuses the
strategy instead of optimizing again. A run keeps its own copy: a resumed run measures
exactly the strategy it selected, even if the cache changed since.

What is stored is the quantized strategy, the integer matrix that is measured and its
power-of-two scale, never the real-valued one: every later use (cache, resume, re-run)
measures and reconstructs with exactly the grid that was chosen when it was selected,
instead of deriving a grid again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from dpmm import __version__
from dpmm.config import ReleaseConfig
from dpmm.linalg import Marginals, Matrix
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.residuals import ResidualStrategy
from dpmm.linalg.serialize import SerializationError, load_matrix, save_matrix
from dpmm.measure.exact import MeasurementError, analyze_strategy
from dpmm.measure.quantize import QuantizedStrategy, quantize
from dpmm.privacy.params import PrivacyParameter, PureDP
from dpmm.strategy import AUTO_CANDIDATES, METHODS, select_strategy
from dpmm.strategy.selection import Candidate, Progress, Selection, select
from dpmm.workload import stack

__all__ = [
    "TABLE_METHODS",
    "VECTOR_LIMIT",
    "ChosenStrategy",
    "choose_strategy",
    "save_decision",
    "select_releasable",
    "strategy_key",
]

CACHE_FOLDER = ".strategy-cache"
#: Largest domain whose full count vector is built (cells; int64, 2 GiB).
VECTOR_LIMIT = 2**28
#: What ``auto`` falls back to above :data:`VECTOR_LIMIT` when none of its candidates is
#: measured from marginal tables (the first must apply; the others may beat it).
TABLE_METHODS = ("marginals", "hdmm_marginals", "marginal_optimal", "residual")


@dataclass(frozen=True, eq=False)
class ChosenStrategy:
    """The selected strategy on its integer grid.

    Attributes:
        quantized: ``quantized.integer`` is measured and ``quantized.matrix`` reconstructs.
        method: The config's method (``auto``, ``hdmm``, ...).
        selected: The candidate that was chosen (the method itself unless ``auto``).
        seconds: Selection time (0 for a cached or resumed strategy).
        source: ``selected``, ``cache``, ``run`` or ``release``.
    """

    quantized: QuantizedStrategy
    method: str
    selected: str
    seconds: float
    source: str


def strategy_key(config: ReleaseConfig) -> str:
    """The cache key of a config's strategy: a hash of what selection depends on."""
    facts = {
        "domain": [[a.name, a.size] for a in config.domain.attrs],
        "workload": [group.spec for group in config.workload],
        "norm": "l1" if isinstance(config.privacy, PureDP) else "l2",
        "method": config.strategy_method,
        "dpmm": __version__,
    }
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _write_json(path: Path, data: dict) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    temporary.write_text(json.dumps(data, sort_keys=True))
    os.replace(temporary, path)


#: Quantization grids tried in turn: the finest whose integer strategy can be measured
#: exactly (a product of several fitted factors needs coarser grids per factor).
QUANTIZATION_BITS = (13, 10, 8, 6)


def measurable(matrix: Matrix) -> QuantizedStrategy:
    """The finest quantization of ``matrix`` whose integer form has exact column norms.

    Raises:
        MeasurementError: Even the coarsest grid gives norms too large to hold exactly.
    """
    for bits in QUANTIZATION_BITS:
        quantized = quantize(matrix, bits=bits)
        try:
            analyze_strategy(quantized.integer)
        except MeasurementError as error:
            if bits == QUANTIZATION_BITS[-1]:
                raise MeasurementError(
                    f"strategy {matrix!r:.120} cannot be quantized to an integer strategy with "
                    f"exact norms ({error})"
                ) from None
            continue
        return quantized
    raise AssertionError("unreachable")  # pragma: no cover


def _load(folder: Path, stem: str, config: ReleaseConfig, source: str) -> ChosenStrategy | None:
    matrix_file, facts_file = folder / f"{stem}.npz", folder / f"{stem}.json"
    if not (matrix_file.is_file() and facts_file.is_file()):
        return None
    try:
        integer = load_matrix(matrix_file)
        facts = json.loads(facts_file.read_text())
        quantized = QuantizedStrategy(integer, facts["quantization_scale"])
    except (SerializationError, MeasurementError, ValueError, KeyError, TypeError, OSError):
        return None  # a damaged (or older) entry is selected again, never trusted
    if integer.shape[1] != config.domain.size:
        return None
    return ChosenStrategy(quantized, config.strategy_method, facts["selected"], 0.0, source)


def _store(folder: Path, stem: str, chosen: ChosenStrategy) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_matrix(chosen.quantized.integer, folder / f"{stem}.npz")
    facts = {
        "selected": chosen.selected,
        "seconds": chosen.seconds,
        "quantization_scale": chosen.quantized.scale,
    }
    _write_json(folder / f"{stem}.json", facts)


#: Strategies measured from marginal tables, on any domain: never the data vector.
TABLE_STRATEGIES = (Marginals, ResidualStrategy, ResidualBlockStrategy)


def _unreleasable(candidate: Candidate, cells: int) -> str | None:
    """Why a tried candidate cannot be released on a domain of ``cells`` cells, or None."""
    # Above the vector limit the input is counted as marginal tables: a union of marginals
    # or a residual strategy (its integer blocks are read from the tables).
    if cells > VECTOR_LIMIT and not isinstance(candidate.strategy, TABLE_STRATEGIES):
        return (
            f"not releasable: it needs the data vector, and {cells:,} cells are more than "
            f"the {VECTOR_LIMIT:,} a release counts as a vector"
        )
    return None


def _first_releasable(
    selection: Selection, cells: int
) -> tuple[Candidate | None, QuantizedStrategy | None, dict[int, str], MeasurementError | None]:
    """The least-error candidate a release can count and quantize exactly (the selection's
    own choice first) with its grid, and why each candidate ranked above it cannot be."""
    reasons: dict[int, str] = {}
    problem: MeasurementError | None = None
    ranked = sorted(
        (c for c in selection.candidates if c.strategy is not None),
        key=lambda c: (c is not selection.chosen, c.error),
    )
    for candidate in ranked:
        reason = _unreleasable(candidate, cells)
        if reason is None:
            try:
                return candidate, measurable(candidate.strategy), reasons, problem
            except MeasurementError as error:
                problem = problem or error
                reason = f"not releasable: {error}"
        reasons[id(candidate)] = reason
    return None, None, reasons, problem


def select_releasable(
    workload: Matrix,
    method: str,
    privacy: PrivacyParameter,
    cells: int,
    *,
    progress: Progress | None = None,
) -> tuple[ChosenStrategy, Selection]:
    """The least-error candidate a release can count and measure exactly, quantized.

    The one selection rule of ``dpmm plan`` and ``dpmm release``: the candidates that
    ``method`` tries are ranked by exact expected error, the method's own choice first;
    those that a release cannot count on this domain or quantize to an exactly measurable
    integer strategy are passed over and marked with the reason in the returned
    selection's candidates. When ``auto`` stopped at a proven optimum that cannot be
    released, every other candidate is tried (on a domain counted as marginal tables, the
    union-of-marginals methods).

    Raises:
        MeasurementError: no candidate can be measured exactly.
    """
    started = time.perf_counter()
    selection = select_strategy(workload, method, privacy, progress=progress)
    found = _first_releasable(selection, cells)
    if method == "auto" and found[0] is not selection.chosen:
        order = TABLE_METHODS if cells > VECTOR_LIMIT else AUTO_CANDIDATES
        wider = select(workload, privacy, METHODS, order, progress=progress)
        tried = {c.method for c in wider.candidates}
        earlier = tuple(c for c in selection.candidates if c.method not in tried)
        selection = Selection(wider.chosen, (*earlier, *wider.candidates))
        found = _first_releasable(selection, cells)
    best, quantized, reasons, problem = found
    if best is None or quantized is None:
        raise problem or MeasurementError(
            f"none of the strategies '{method}' tried can be released on this domain"
        )
    seconds = time.perf_counter() - started
    chosen = ChosenStrategy(quantized, method, best.method, seconds, "selected")
    candidates = tuple(
        replace(c, skipped=reasons[id(c)]) if id(c) in reasons else c for c in selection.candidates
    )
    return chosen, Selection(best, candidates)


def _select(config: ReleaseConfig, progress: Progress | None) -> ChosenStrategy:
    chosen, _ = select_releasable(
        stack(config.workload),
        config.strategy_method,
        config.privacy,
        config.domain.size,
        progress=progress,
    )
    return chosen


def save_decision(config: ReleaseConfig, chosen: ChosenStrategy) -> None:
    """Keep ``chosen`` as the strategy of every later release of this config (until its
    domain, workload, noise, method or dpmm's version changes): ``dpmm plan`` calls this.

    Raises:
        OSError: the release root cannot be written.
    """
    _store(config.release.root / CACHE_FOLDER, strategy_key(config), chosen)


def choose_strategy(
    config: ReleaseConfig,
    *,
    run_folder: Path | None = None,
    progress: Progress | None = None,
) -> ChosenStrategy:
    """The run's strategy if it has one, else a cached one, else a freshly selected one.

    The result is stored in the run folder (when given) and in the cache under the
    release root. ``progress`` follows the candidates tried (see
    :func:`dpmm.strategy.select_strategy`).
    """
    if run_folder is not None:
        kept = _load(run_folder, "strategy", config, "run")
        if kept is not None:
            return kept
    cache = config.release.root / CACHE_FOLDER
    key = strategy_key(config)
    chosen = _load(cache, key, config, "cache")
    if chosen is None:
        chosen = _select(config, progress)
        _store(cache, key, chosen)
    if run_folder is not None:
        _store(run_folder, "strategy", chosen)
    return chosen
