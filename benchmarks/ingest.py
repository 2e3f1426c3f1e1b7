"""Histogram ingest throughput: dpmm against DuckDB ``GROUP BY`` and pandas ``groupby``.

Generates partitioned Parquet once (default 10⁷ rows, 5 int32 attributes of
sizes 2×116×7×2×52, zipf-skewed, 20 files) in a temporary folder, then times in
the same run, median of ``--repeat`` runs each:

* dpmm ``histogram`` on the local threaded scheduler (one process);
* dpmm ``histogram`` on a 2-worker ``LocalCluster`` (cluster start not timed);
* DuckDB ``SELECT ..., count(*) GROUP BY ALL`` over the same files;
* pandas ``read_parquet`` + ``groupby().size()``.

Each result is checked against dpmm's counts. Run:
``.venv/bin/python benchmarks/ingest.py [--rows 1000000]``.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.data import histogram
from dpmm.domain import Domain

SHAPE = {"sex": 2, "age": 116, "race": 7, "hispanic": 2, "state": 52}


def generate(folder: Path, rows: int, files: int, seed: int) -> None:
    """Zipf-skewed codes (rank r drawn with weight 1/r^1.1), in shuffled value order."""
    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    weights = {}
    for name, size in SHAPE.items():
        w = 1.0 / np.arange(1, size + 1) ** 1.1
        weights[name] = (rng.permutation(size), w / w.sum())
    for i in range(files):
        n = int(bounds[i + 1] - bounds[i])
        columns = {
            name: pa.array(order[rng.choice(len(order), n, p=p)].astype(np.int32))
            for name, (order, p) in weights.items()
        }
        pq.write_table(pa.table(columns), folder / f"part-{i:04d}.parquet")


def timed(run: Callable[[], np.ndarray], repeat: int) -> tuple[float, np.ndarray]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def to_vector(codes: dict[str, np.ndarray], counts: np.ndarray) -> np.ndarray:
    index = np.ravel_multi_index([codes[n] for n in SHAPE], tuple(SHAPE.values()))
    out = np.zeros(math.prod(SHAPE.values()), np.int64)
    out[index] = counts
    return out


def duckdb_counts(folder: Path) -> np.ndarray:
    import duckdb

    names = ", ".join(f'"{n}"' for n in SHAPE)
    with duckdb.connect() as con:
        table = con.sql(
            f"SELECT {names}, count(*) AS n FROM read_parquet('{folder}/*.parquet') GROUP BY ALL"
        ).to_arrow_table()
    return to_vector({n: table.column(n).to_numpy() for n in SHAPE}, table.column("n").to_numpy())


def pandas_counts(folder: Path) -> np.ndarray:
    import pandas as pd

    sizes = pd.read_parquet(folder).groupby(list(SHAPE)).size()
    codes = {n: sizes.index.get_level_values(n).to_numpy() for n in SHAPE}
    return to_vector(codes, sizes.to_numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    domain = Domain.from_dict(SHAPE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        generate(folder, args.rows, args.files, args.seed)
        print(
            f"generated {args.rows:,} rows in {args.files} files in "
            f"{time.perf_counter() - start:.1f} s\n"
        )
        rows: list[tuple[str, float, bool]] = []
        seconds, reference = timed(lambda: histogram(str(folder), domain).counts, args.repeat)
        rows.append(("dpmm histogram, 1 process (threaded scheduler)", seconds, True))

        from distributed import Client, LocalCluster

        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            histogram(str(folder), domain, client=client)  # warm the workers' imports
            seconds, counts = timed(
                lambda: histogram(str(folder), domain, client=client).counts, args.repeat
            )
        rows.append(
            ("dpmm histogram, 2-worker LocalCluster", seconds, np.array_equal(counts, reference))
        )
        seconds, counts = timed(lambda: duckdb_counts(folder), args.repeat)
        rows.append(("DuckDB GROUP BY ALL count", seconds, np.array_equal(counts, reference)))
        seconds, counts = timed(lambda: pandas_counts(folder), args.repeat)
        rows.append(
            ("pandas read_parquet + groupby().size()", seconds, np.array_equal(counts, reference))
        )
    duck = rows[2][1]
    header = f"method ({args.rows:,} rows, median of {args.repeat})"
    print(f"| {header} | time | rows/s | vs DuckDB | same counts |")
    print("|---|---|---|---|---|")
    for name, seconds, same in rows:
        print(
            f"| {name} | {seconds:.3f} s | {args.rows / seconds / 1e6:.1f} M | "
            f"{duck / seconds:.2f}x | {'yes' if same else 'NO'} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\npeak RSS of this process: {peak:.2f} GiB")


if __name__ == "__main__":
    main()
