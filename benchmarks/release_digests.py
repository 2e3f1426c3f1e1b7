"""Hashing a release's files for its manifest and its audit: one thread against one per core.

A release of a large domain is written as many Parquet parts; ``write_release`` records
each file's sha256 and ``dpmm audit`` recomputes them all. This writes ``--parts`` files of
``--megabytes`` in all (random bytes, so nothing is cached by compression) in a temporary
folder and times, in the same run, median of ``--repeat`` runs each:

* the files hashed one after another in this process (what the manifest did before);
* :func:`dpmm.release.file_digests`, which hashes them side by side, a thread per core
  this process owns.

Both must give the same table. The files are read once before timing, so both read from
the page cache and the table compares the hashing. Run:
``.venv/bin/python benchmarks/release_digests.py [--parts 64 --megabytes 2048]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dpmm.blas_threads import owned_cores
from dpmm.release import file_digests


def one_after_another(folder: Path) -> dict[str, dict[str, object]]:
    """Every file's sha256 and size, hashed in one thread."""
    digests: dict[str, dict[str, object]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as stream:
                digest = hashlib.file_digest(stream, "sha256").hexdigest()
                digests[path.relative_to(folder).as_posix()] = {
                    "sha256": digest,
                    "bytes": stream.tell(),
                }
    return digests


def timed(run: Callable[[Path], dict], folder: Path, repeat: int) -> tuple[float, dict]:
    """The median wall seconds of ``repeat`` runs, and the last run's table."""
    seconds, table = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        table = run(folder)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=64)
    parser.add_argument("--megabytes", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = args.megabytes * 2**20 // args.parts
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "answers"
        folder.mkdir()
        for part in range(args.parts):
            (folder / f"part-{part:05d}.parquet").write_bytes(os.urandom(size))
        one_after_another(folder)  # into the page cache
        serial, expected = timed(one_after_another, folder, args.repeat)
        threaded, table = timed(file_digests, folder, args.repeat)
    if table != expected:
        raise SystemExit("file_digests disagrees with the one-thread hashes")
    print(f"{args.parts} files, {args.megabytes} MiB in all; {owned_cores()} cores owned")
    print(f"{'hashing':<28} {'median s':>9} {'MiB/s':>8}")
    for name, seconds in (("one thread", serial), ("file_digests (threads)", threaded)):
        print(f"{name:<28} {seconds:>9.3f} {args.megabytes / seconds:>8.0f}")
    print(f"ratio one thread / threads: {serial / threaded:.2f}")


if __name__ == "__main__":
    main()
