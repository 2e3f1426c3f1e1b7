"""Ingest: read Parquet or CSV partitions and count them into a histogram or marginal tables.

Example:
    >>> import pathlib, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from dpmm.domain import Domain
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> pq.write_table(pa.table({"sex": [0, 1, 1]}), folder / "part-0.parquet")
    >>> histogram(str(folder), Domain.from_dict({"sex": 2})).counts.tolist()
    [1, 2]
"""

from dpmm.data.errors import DataError
from dpmm.data.histogram import (
    Histogram,
    IngestReport,
    MarginalTables,
    histogram,
    marginal_tables,
)
from dpmm.data.reader import Partition, Source, open_source
from dpmm.data.spec import DataSpec, data_spec_from_config

__all__ = [
    "DataError",
    "DataSpec",
    "Histogram",
    "IngestReport",
    "MarginalTables",
    "Partition",
    "Source",
    "data_spec_from_config",
    "histogram",
    "marginal_tables",
    "open_source",
]
