"""Build real releases by hand: a real strategy, ledger, measurement and least-squares answers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpmm.linalg import Hierarchical, Identity, Kron, Matrix
from dpmm.linalg.serialize import matrix_digest, save_matrix
from dpmm.measure import MeasurementRecord, analyze_strategy, measure
from dpmm.pipeline.reconstruction import EXACT_INTERVALS
from dpmm.privacy.ledger import Ledger
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.reconstruct.intervals import Intervals, NoiseLaw
from dpmm.release import AnswerColumns, write_answers, write_histogram, write_measurements
from dpmm.release.manifest import measurement_sections
from dpmm.release.writer import write_release

DATASET = "survey"


@dataclass(frozen=True)
class Built:
    """A release written by :func:`build_release` and what went into it."""

    folder: Path
    manifest: dict[str, object]
    record: MeasurementRecord
    answers: list[AnswerColumns]
    reservation_id: str


def strategy() -> Matrix:
    """The strategy every test release measures: a tree over 8 values times 2 values."""
    return Kron([Hierarchical(8), Identity(2)])


def counts(seed: int = 1) -> np.ndarray:
    """A small data vector over the 16 cells."""
    return np.random.default_rng(seed).integers(0, 40, size=16)


def workload() -> dict[str, np.ndarray]:
    """Two query groups, as dense matrices over the 16 cells."""
    cells = np.eye(16)
    by_second = np.kron(np.ones((1, 8)), np.eye(2))
    return {"cells": cells, "by_second": by_second}


#: The workload groups as a config states them (the matrices of :func:`workload`).
CONFIG_GROUPS = {
    "cells": {"name": "cells", "kind": "identity"},
    "by_second": {"name": "by_second", "kind": "marginal", "attributes": ["sex"]},
}


def build_release(
    root: Path,
    ledger_path: Path,
    *,
    name: str = "survey",
    privacy: PureDP | ZCDP | None = None,
    seed: int = 0,
    groups: tuple[str, ...] = ("cells", "by_second"),
) -> Built:
    """Reserve, measure, reconstruct and write one release version; returns what was written."""
    privacy = privacy if privacy is not None else PureDP("1/2")
    A = strategy()
    ledger = Ledger.open(ledger_path) if ledger_path.exists() else _new_ledger(ledger_path, privacy)
    release_id = f"{name}-{seed}"
    try:
        reservation = ledger.reserve(DATASET, privacy, release_id=release_id)
        store = root.parent / "store"
        store.mkdir(parents=True, exist_ok=True)
        record = measure(
            A,
            counts(),
            privacy,
            store=store,
            measurement_id=f"{name}-{seed}-{reservation.id[:8]}",
            ledger=ledger,
            reservation=reservation,
            rng=np.random.default_rng(seed),
        )
        spend = ledger.spend_entry(reservation)
    finally:
        ledger.close()
    dense = A.dense()
    x_hat = np.linalg.lstsq(dense, record.values.astype(float), rcond=None)[0]
    variance = record.noise_variance()  # of the discrete noise drawn
    inverse_gram = np.linalg.pinv(dense.T @ dense)
    intervals = Intervals(NoiseLaw.of(record), 0.95)
    parts, errors = [], []
    for group in groups:
        W = workload()[group]
        se = np.sqrt(variance * np.einsum("ij,jk,ik->i", W, inverse_gram, W))
        # Each answer's error is (W A⁺) z on the integer noise z: its interval, exactly.
        widths, exact_widths = intervals.from_rows(W @ np.linalg.pinv(dense))
        parts.append(
            AnswerColumns.for_group(
                group, W @ x_hat, se, exact=True, half_width=widths, exact_interval=exact_widths
            )
        )
        errors.append(
            {
                "name": group,
                "queries": W.shape[0],
                "expected_rmse": float(np.sqrt(np.mean(se**2))),
                "mean_standard_error": float(se.mean()),
                "exact": True,
            }
        )
    answers = parts
    exact = analyze_strategy(A)
    manifest = {
        "format": "dpmm-release/1",
        "name": name,
        "release_id": release_id,
        "created": datetime.now(UTC).isoformat(),
        "config": {
            "file": "survey.yaml",
            "sha256": hashlib.sha256(b"cfg").hexdigest(),
            "document": {  # the config whose post-processing gives these answers
                "name": name,
                "domain": {"age": 8, "sex": 2},
                "privacy": privacy.to_dict(),
                "workload": [CONFIG_GROUPS[group] for group in groups],
                "strategy": {"method": "hierarchical"},
                "release": {"reconstruction": "least_squares"},
            },
        },
        "domain": {
            "attributes": [{"name": "age", "size": 8}, {"name": "sex", "size": 2}],
            "cells": 16,
        },
        "workload": {
            "sha256": hashlib.sha256(",".join(groups).encode()).hexdigest(),
            "groups": [
                {"name": group, "kind": "explicit", "queries": workload()[group].shape[0]}
                for group in groups
            ],
        },
        "strategy": {
            "method": "hierarchical",
            "selected": "hierarchical",
            "description": repr(A),
            "file": "strategy.npz",
            "digest": matrix_digest(A),
            "fingerprint": exact.fingerprint(),
            "shape": list(A.shape),
            "quantization_scale": 1,
        },
        **measurement_sections(record),
        "ledger": {
            "location": str(ledger_path),
            "dataset": DATASET,
            "reservation_id": reservation.id,
            "release_id": release_id,
            "reused_from": None,
            "spend": {"seq": spend.seq, "hash": spend.hash},
        },
        "reconstruction": {"method": "least_squares", "standard_errors": "exact", "seconds": 0.01},
        "intervals": {"level": 0.95, "method": EXACT_INTERVALS, "exact_share": 1.0},
        "error": {"groups": errors},
        "input": {"fingerprint": "test", "partitions": 1},
        "software": {
            "python": "3",
            "dpmm": "0",
            "numpy": np.__version__,
            "scipy": "?",
            "pyarrow": "?",
            "dask": "?",
        },
    }

    def write_files(folder: Path) -> None:
        write_answers(folder / "answers.parquet", answers)
        write_measurements(folder / "measurements.parquet", record)
        save_matrix(A, folder / "strategy.npz")
        write_histogram(folder / "histogram.parquet", x_hat)

    with Ledger.open(ledger_path) as ledger:
        folder = write_release(
            root, name, manifest, write_files, lambda digest: ledger.publish(reservation, digest)
        )
    return Built(folder, manifest, record, answers, reservation.id)


def _new_ledger(path: Path, privacy: PureDP | ZCDP) -> Ledger:
    ledger = Ledger.init(path)
    grant = PureDP(100) if isinstance(privacy, PureDP) else ZCDP(100)
    ledger.grant(DATASET, grant)
    return ledger


__all__ = ["DATASET", "Built", "Fraction", "build_release", "counts", "strategy", "workload"]
