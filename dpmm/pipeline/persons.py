"""Person-level contribution bounding: a person's rows become one record before counting.

With ``data: {person: zper}`` the unit of privacy is the person, not the row. Ingest then
runs a first pass that groups every partition's rows by person (pyarrow ``group_by``) and
merges those partial groups across partitions as a tree — a person's rows may lie in
several files — before anything is encoded or counted:

* each ``prefix_sum`` attribute is **summed** over the person's rows (seed 003's setting:
  a person's income over the years), so a person adds one value to one bucket;
* every other attribute must be **the same** on all of the person's rows; a column that
  differs is a :class:`~dpmm.data.DataError` naming the column and how many people differ
  (no value is quoted).

A null in a summed column makes the person's sum null (it is not skipped), so the
``bad_rows`` policy applies to the person as it would to a row. The combined records are
raw data, held in memory for counting only.

Example:
    >>> import pathlib, tempfile, pyarrow.parquet as pq
    >>> from dpmm.data import DataSpec, open_source
    >>> from dpmm.domain import Domain
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> pq.write_table(pa.table({"p": [1, 1], "site": [0, 0], "income": [5, 6]}),
    ...                folder / "a.parquet")
    >>> pq.write_table(pa.table({"p": [1, 2], "site": [0, 1], "income": [7, 1]}),
    ...                folder / "b.parquet")
    >>> domain = Domain.from_dict({"site": 2, "income": {"size": 2, "bins": [0, 10, 20]}})
    >>> source = open_source(DataSpec(str(folder), person="p"))
    >>> people = person_records(source, domain, summed=("income",))
    >>> sorted(zip(people.table["site"].to_pylist(), people.table["income"].to_pylist()))
    [(0, 18), (1, 1)]
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpmm.data import DataError, Source
from dpmm.data.encode import encode_column
from dpmm.data.execute import Progress, map_reduce
from dpmm.data.histogram import IngestReport, count_codes
from dpmm.data.reader import Partition, read_partition, with_keys
from dpmm.data.validate import Policed, apply_policy
from dpmm.domain import Domain
from dpmm.workload.prefix_sum import SUM_KINDS

__all__ = [
    "PersonCounts",
    "PersonRecords",
    "count_people",
    "encode_people",
    "person_records",
    "summed_attributes",
]

_KEEP_NULLS = pc.ScalarAggregateOptions(skip_nulls=False)


@dataclass(frozen=True)
class PersonRecords:
    """Rows grouped by person, raw data.

    :func:`person_records` gives one record per person, a column per attribute (named by
    the attribute); while partitions are merged, the columns are the aggregates
    (``a:sum``, or ``a:min`` and ``a:max``).

    Attributes:
        table: The records.
        rows: Input rows read (operator's log only).
    """

    table: pa.Table
    rows: int


def summed_attributes(workload: Sequence[Any]) -> tuple[str, ...]:
    """The attributes of the ``prefix_sum`` groups: summed over a person's rows."""
    names = [group.spec["attribute"] for group in workload if group.kind in SUM_KINDS]
    return tuple(dict.fromkeys(names))


def _aggregates(domain: Domain, summed: Sequence[str]) -> list[tuple[str, str]]:
    """``(internal column, aggregate)`` pairs: ``a:sum``, or ``a:min`` and ``a:max``."""
    out = []
    for name in domain.attributes:
        out += [(f"{name}:{how}", how) for how in (("sum",) if name in summed else ("min", "max"))]
    return out


def _group(table: pa.Table, person: str, pairs: list[tuple[str, str]], first: bool) -> pa.Table:
    """Group rows by person; ``first``: from attribute columns, else merging aggregates."""
    # The first pass aggregates each attribute column; a merge re-aggregates each
    # aggregate column with the same operation (sum of sums, min of mins, max of maxes).
    source = [(column.rsplit(":", 1)[0] if first else column, how) for column, how in pairs]
    grouped = table.group_by(person, use_threads=False).aggregate(
        [(column, how, _KEEP_NULLS) for column, how in source]
    )
    names = [f"{column}_{how}" for column, how in source]
    return pa.table(
        [grouped[person], *(grouped[name] for name in names)],
        names=[person, *(column for column, _ in pairs)],
    )


def _partition_people(
    partition: Partition, source: Source, domain: Domain, summed: Sequence[str]
) -> PersonRecords:
    spec, person = source.spec, source.spec.person
    columns = {name: spec.column(name) for name in domain.attributes}
    keys = set(source.key_columns)
    text = [columns[a] for a in domain.attributes if domain[a].labels is not None]
    wanted = [c for c in dict.fromkeys([person, *columns.values()]) if c not in keys]
    table = with_keys(
        read_partition(source, partition, wanted, text_columns=text),
        partition,
        [person, *columns.values()],
    )
    data = {}
    for name, column in [(person, person), *columns.items()]:
        values = table[column]
        if pa.types.is_dictionary(values.type):  # hive keys: min/max need plain values
            values = pc.cast(values, values.type.value_type)
        data[name] = values
    if pa.types.is_null(data[person].type) or table[person].null_count:
        raise DataError(f"File '{partition.path}' has rows without a person in column '{person}'")
    grouped = _group(pa.table(data), person, _aggregates(domain, summed), first=True)
    return PersonRecords(grouped, table.num_rows)


def _merge(*parts: PersonRecords, person: str, pairs: list[tuple[str, str]]) -> PersonRecords:
    try:
        table = pa.concat_tables([p.table for p in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DataError(
            f"The files' columns have types that cannot be combined ({error})"
        ) from None
    return PersonRecords(_group(table, person, pairs, first=False), sum(p.rows for p in parts))


def person_records(
    source: Source,
    domain: Domain,
    *,
    summed: Sequence[str],
    client: Any = None,
    progress: Progress | None = None,
) -> PersonRecords:
    """Combine each person's rows, across all partitions, into one record.

    Args:
        source: The opened data source; ``source.spec.person`` names the person column.
        domain: The domain (its attributes are read; their column names from the spec).
        summed: Attributes summed over a person's rows; the others must be constant.
        client: A ``distributed.Client``; None runs on local threads.
        progress: Called with ``(partitions done, total)``.

    Raises:
        DataError: A file lacks the person column or has a row without a person, or a
            non-summed attribute differs across a person's rows (naming the column and
            the number of such people).
    """
    person = source.spec.person
    pairs = _aggregates(domain, summed)
    task = functools.partial(_partition_people, source=source, domain=domain, summed=summed)
    merge = functools.partial(_merge, person=person, pairs=pairs)
    total = map_reduce(task, source.partitions, merge, client=client, progress=progress)
    table = total.table
    out = {}
    for name in domain.attributes:
        if name in summed:
            out[name] = table[f"{name}:sum"]
            continue
        low, high = table[f"{name}:min"], table[f"{name}:max"]
        differing = pc.sum(pc.fill_null(pc.not_equal(low, high), False)).as_py() or 0
        if differing:
            raise DataError(
                f"Column '{source.spec.column(name)}' is not the same on all rows of a person "
                f"(column '{person}'); with data.person every attribute but the summed "
                "prefix_sum ones must be constant per person",
                f"{differing:,} {'person' if differing == 1 else 'people'}",
            )
        out[name] = low
    return PersonRecords(pa.table(out), total.rows)


def encode_people(people: PersonRecords, source: Source, domain: Domain) -> Policed:
    """The combined records' attribute codes, under the data's ``bad_rows`` policy."""
    where = f"{source.spec.location} (rows combined per person)"
    encoded = [
        (
            name,
            source.spec.column(name),
            encode_column(people.table[name], domain[name], file=where, column=name),
        )
        for name in domain.attributes
    ]
    return apply_policy(encoded, people.table.num_rows, policy=source.spec.bad_rows, file=where)


@dataclass(frozen=True)
class PersonCounts:
    """Counts of the combined records: the vector, or marginal tables by attribute names."""

    vector: np.ndarray | None
    tables: dict[tuple[str, ...], np.ndarray]
    report: IngestReport


def count_people(
    source: Source,
    domain: Domain,
    *,
    summed: Sequence[str],
    sets: Sequence[tuple[str, ...]] | None = None,
    client: Any = None,
    progress: Progress | None = None,
) -> PersonCounts:
    """Combine rows per person, then count the records: the full vector, or ``sets``' tables
    (``()``: the number of people kept).

    Raises:
        DataError: As for :func:`person_records`, or a combined record outside the domain
            under ``bad_rows: reject`` (a sum above the top bin, say).
    """
    started = time.perf_counter()
    people = person_records(source, domain, summed=summed, client=client, progress=progress)
    kept = encode_people(people, source, domain)
    if sets is None:
        whole = tuple(domain.attributes)
        vector, tables = count_codes(kept, domain, [whole])[whole].reshape(-1), {}
    else:
        vector, tables = None, count_codes(kept, domain, sets)
    report = IngestReport(
        partitions=len(source.partitions),
        rows_read=people.rows,
        rows_dropped=kept.dropped,
        dropped_by_attribute=dict(kept.dropped_by_attribute),
        seconds=time.perf_counter() - started,
    )
    return PersonCounts(vector, tables, report)
