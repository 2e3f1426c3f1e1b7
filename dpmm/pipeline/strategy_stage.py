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
from dataclasses import dataclass
from pathlib import Path

from dpmm import __version__
from dpmm.config import ReleaseConfig
from dpmm.linalg import Marginals, Matrix
from dpmm.linalg.serialize import SerializationError, load_matrix, save_matrix
from dpmm.measure.exact import MeasurementError, analyze_strategy
from dpmm.measure.quantize import QuantizedStrategy, quantize
from dpmm.privacy.params import PureDP
from dpmm.strategy import METHODS, select_strategy
from dpmm.strategy.selection import Candidate, Progress, Selection, select
from dpmm.workload import stack

__all__ = ["TABLE_METHODS", "VECTOR_LIMIT", "ChosenStrategy", "choose_strategy", "strategy_key"]

CACHE_FOLDER = ".strategy-cache"
#: Largest domain whose full count vector is built (cells; int64, 2 GiB).
VECTOR_LIMIT = 2**28
#: What ``auto`` falls back to above :data:`VECTOR_LIMIT` when none of its candidates is a
#: union of marginals (the first must apply; OPT_M may beat it).
TABLE_METHODS = ("marginals", "hdmm_marginals")


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


def _countable(config: ReleaseConfig, candidate: Candidate) -> bool:
    # Above the vector limit the input is counted as marginal tables, which measure only a
    # union of marginals (a residual strategy's tables path is not wired into releases).
    return config.domain.size <= VECTOR_LIMIT or isinstance(candidate.strategy, Marginals)


def _select(config: ReleaseConfig, progress: Progress | None) -> ChosenStrategy:
    """The least-error candidate that can be counted and measured exactly.

    ``auto`` may pass over candidates; on a domain counted as marginal tables, when every
    candidate it tried (e.g. only the proven optimum, a residual strategy) needs the data
    vector, the union-of-marginals methods are tried as well.
    """
    started = time.perf_counter()
    workload = stack(config.workload)
    selection = select_strategy(workload, config.strategy_method, config.privacy, progress=progress)
    candidates = [c for c in selection.candidates if c.strategy is not None]
    if config.strategy_method == "auto" and not any(_countable(config, c) for c in candidates):
        tables = select(workload, config.privacy, METHODS, TABLE_METHODS, progress=progress)
        selection = Selection(tables.chosen, (*selection.candidates, *tables.candidates))
        candidates = [c for c in selection.candidates if c.strategy is not None]
    ranked = sorted(
        (c for c in candidates if _countable(config, c)),
        key=lambda c: (c is not selection.chosen, c.error),
    )
    problem: MeasurementError | None = None
    for candidate in ranked:
        try:
            quantized = measurable(candidate.strategy)
        except MeasurementError as error:
            problem = problem or error
            continue
        seconds = time.perf_counter() - started
        return ChosenStrategy(
            quantized,
            config.strategy_method,
            candidate.method,
            seconds,
            "selected",
        )
    raise problem or MeasurementError(f"{config.path}: no strategy was selected")


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
