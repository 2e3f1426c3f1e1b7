"""The bad-row policy: reject a dataset with a value outside the domain, or drop such rows.

``reject`` (the default) raises a :class:`~dpmm.data.errors.DataError` naming
the file, the column, how many of its rows are bad and up to five example
values. Those examples are raw data: the message is for the operator who runs
the ingest, and must never be copied into a release, a manifest, a run log
that is published, or a UI artifact.

``drop`` skips every row with at least one bad value and counts the dropped
rows, per column, in the ingest report. Those counts describe the raw data too:
they go to the operator's run log, never into a release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dpmm.data.encode import Encoded, Problem
from dpmm.data.errors import DataError
from dpmm.errors import describe_value

__all__ = ["Policed", "apply_policy", "example_values"]

#: At most this many example values are quoted in an error.
EXAMPLES = 5


def example_values(values: pa.Array, mask: np.ndarray, limit: int = EXAMPLES) -> list[object]:
    """Up to ``limit`` distinct non-null values at the masked rows, in row order.

    Example:
        >>> example_values(pa.array(["a", "b", "a", None]), np.array([1, 0, 1, 1], bool))
        ['a']
    """
    picked = values.filter(pa.array(mask)).drop_null()
    if pa.types.is_dictionary(picked.type):
        picked = picked.dictionary_decode()
    out: list[object] = []
    for value in picked.unique().to_pylist():
        out.append(value)
        if len(out) == limit:
            break
    return out


def _rejection(
    file: str, column: str, attribute: str, encoded: Encoded, problem: Problem
) -> DataError:
    """The error naming the file, column and problem; the count and example values of the
    offending rows go to its operator-only detail."""
    count = int(problem.mask.sum())
    examples = example_values(encoded.values, problem.mask)
    quoted = ", ".join(describe_value(v, 30) for v in examples)
    target = "" if column == attribute else f" (attribute '{attribute}')"
    return DataError(
        f"File '{file}', column '{column}'{target}: rows have {problem.reason}; fix the data "
        "or set data.bad_rows: drop to skip such rows",
        f"{count:,} {'row' if count == 1 else 'rows'}" + (f", e.g. {quoted}" if quoted else ""),
    )


@dataclass(frozen=True)
class Policed:
    """The codes of the rows kept, and how many rows were read and dropped (also per attribute)."""

    codes: list[np.ndarray]
    rows: int
    dropped: int
    dropped_by_attribute: Mapping[str, int]


def apply_policy(
    encoded: Sequence[tuple[str, str, Encoded]], rows: int, *, policy: str, file: str
) -> Policed:
    """Apply ``reject`` or ``drop`` to encoded columns.

    Args:
        encoded: ``(attribute, column, encoded)`` triples, all of ``rows`` rows.
        rows: Number of rows read.
        policy: ``reject`` or ``drop``.
        file: The data file, named in errors.

    Raises:
        DataError: With ``reject``, for the first column with a bad value; its message
            quotes raw example values (operator's eyes only, see the module docstring).
    """
    if policy not in ("reject", "drop"):
        raise DataError(f"Unknown bad-row policy {describe_value(policy)} (reject or drop)")
    bad = None
    dropped: dict[str, int] = {}
    for attribute, column, item in encoded:
        mask = item.bad_mask()
        if mask is None:
            continue
        if policy == "reject":
            raise _rejection(file, column, attribute, item, item.problems[0])
        dropped[attribute] = int(mask.sum())
        bad = mask if bad is None else bad | mask
    codes = [item.codes for _, _, item in encoded]
    if bad is None:
        return Policed(codes, rows, 0, {})
    keep = ~bad
    return Policed([c[keep] for c in codes], rows, int(bad.sum()), dropped)
