"""Map a column's values to an attribute's indices 0..size−1, and rows to cell indices.

Three kinds of attribute (see :class:`dpmm.domain.Attribute`):

* labelled (``labels``): a value's index is the position of its text among the
  labels; any column type is compared as text.
* binned (``bins``, ``size + 1`` increasing edges ``e₀ < … < e_size``): bin ``i``
  holds ``e_i ≤ v < e_{i+1}``, left-closed like :func:`numpy.histogram`, and the
  last bin also holds the top edge, ``v = e_size``. Values below ``e₀`` or above
  ``e_size`` are outside the domain.
* integer codes (neither): the value itself, which must be a whole number in
  ``0..size−1``. Booleans count as 0 and 1.

Nulls and NaNs are never in the domain. A value that is outside the domain is a
*bad row*, which :mod:`dpmm.data.validate` rejects or drops; a column of the
wrong type (text for a numeric attribute) is an error whatever the policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpmm.data.errors import DataError
from dpmm.domain import Attribute
from dpmm.errors import TooLargeError, describe_value

__all__ = ["Encoded", "Problem", "cell_index", "encode_column", "encode_text"]

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")
#: Largest cell index numpy can hold in an int64.
MAX_CELLS = 2**63 - 1


@dataclass(frozen=True)
class Problem:
    """Rows of one column whose values are not in the domain, and why."""

    reason: str
    mask: np.ndarray


@dataclass(frozen=True)
class Encoded:
    """One column's indices (arbitrary where a problem's mask is set) and its bad rows."""

    codes: np.ndarray
    values: pa.Array
    problems: tuple[Problem, ...] = field(default=())

    def bad_mask(self) -> np.ndarray | None:
        """Rows with any problem, or None when every row is in the domain."""
        if not self.problems:
            return None
        mask = self.problems[0].mask.copy()
        for problem in self.problems[1:]:
            mask |= problem.mask
        return mask


def _where(file: str, column: str) -> str:
    return f"File '{file}', column '{column}'"


def _range_text(attribute: Attribute) -> str:
    if attribute.bins is not None:
        return f"bins [{attribute.bins[0]:g}, {attribute.bins[-1]:g}]"
    if attribute.labels is not None:
        return "labels"
    return f"integer codes 0..{attribute.size - 1}"


def _type_error(values: pa.Array, attribute: Attribute, file: str, column: str) -> DataError:
    kind = (
        "text"
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
        else (f"values of type {values.type}")
    )
    examples = ""  # raw values: the operator-only detail
    if kind == "text":
        odd = [v for v in values.unique().to_pylist() if v is not None and not _NUMBER.fullmatch(v)]
        if odd:
            examples = "e.g. " + ", ".join(describe_value(v, 30) for v in odd[:5])
    return DataError(
        f"{_where(file, column)} holds {kind}, but attribute '{attribute.name}' "
        f"takes {_range_text(attribute)}",
        examples,
    )


def _null_problem(values: pa.Array) -> list[Problem]:
    if values.null_count == 0:
        return []
    return [Problem("missing (null) values", values.is_null().to_numpy(zero_copy_only=False))]


def _labels(values: pa.Array, attribute: Attribute) -> tuple[np.ndarray, list[Problem]]:
    problems = _null_problem(values)
    text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    positions = pc.index_in(text, value_set=pa.array(attribute.labels, pa.string()))
    unknown = pc.and_(positions.is_null(), values.is_valid())
    if pc.any(unknown).as_py():
        problems.append(
            Problem("values not among its labels", unknown.to_numpy(zero_copy_only=False))
        )
    codes = positions.fill_null(0).to_numpy(zero_copy_only=False).astype(np.intp, copy=False)
    return codes, problems


def _numbers(values: pa.Array, attribute: Attribute, file: str, column: str) -> np.ndarray:
    kind = values.type
    if pa.types.is_null(kind):
        # An all-null column (or an empty one written without a type): every row is missing.
        return np.zeros(len(values), np.intp)
    if pa.types.is_boolean(kind):
        values = pc.cast(values, pa.int8())
    elif pa.types.is_decimal(kind):
        values = pc.cast(values, pa.float64())
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise _type_error(values, attribute, file, column)
    if values.null_count:
        values = values.fill_null(0)
    return values.to_numpy(zero_copy_only=False)


def _bins(numbers: np.ndarray, attribute: Attribute) -> tuple[np.ndarray, list[Problem]]:
    edges = np.asarray(attribute.bins)
    problems = []
    with np.errstate(invalid="ignore"):
        nan = np.isnan(numbers) if numbers.dtype.kind == "f" else None
        codes = np.searchsorted(edges, numbers, side="right") - 1
        # The top edge closes the last bin.
        codes[numbers == edges[-1]] = attribute.size - 1
        outside = (numbers < edges[0]) | (numbers > edges[-1])
    if nan is not None and nan.any():
        problems.append(Problem("NaN values", nan))
    if outside.any():
        problems.append(Problem(f"values outside the bins [{edges[0]:g}, {edges[-1]:g}]", outside))
    return codes.clip(0, attribute.size - 1).astype(np.intp, copy=False), problems


def _integer_codes(numbers: np.ndarray, attribute: Attribute) -> tuple[np.ndarray, list[Problem]]:
    problems = []
    if numbers.dtype.kind == "f":
        nan = np.isnan(numbers)
        if nan.any():
            problems.append(Problem("NaN values", nan))
        with np.errstate(invalid="ignore"):
            fractional = (numbers != np.floor(numbers)) & ~nan
        if fractional.any():
            problems.append(Problem("values that are not whole numbers", fractional))
        numbers = np.where(nan | fractional, 0, numbers)
    if numbers.size:
        low, high = numbers.min(), numbers.max()
        # One pass for min and max; a mask only when something is out of range.
        if low < 0 or high >= attribute.size:
            outside = (numbers < 0) | (numbers >= attribute.size)
            problems.append(Problem(f"codes outside 0..{attribute.size - 1}", outside))
            numbers = np.where(outside, 0, numbers)
    if numbers.dtype.kind == "f":
        numbers = numbers.astype(np.intp)
    return numbers, problems


def encode_column(
    values: pa.Array | pa.ChunkedArray, attribute: Attribute, *, file: str, column: str
) -> Encoded:
    """The attribute indices of a column's values, with the rows that are outside the domain.

    Args:
        values: The column.
        attribute: The attribute it holds.
        file: Data file name, for error messages.
        column: Column name, for error messages.

    Raises:
        DataError: The column's type cannot hold the attribute (text for a numeric one).

    Example:
        >>> from dpmm.domain import Attribute
        >>> age = Attribute("age", 3, bins=(0, 18, 65, 120))
        >>> out = encode_column(pa.array([0, 17.5, 18, 120, 121]), age, file="f", column="age")
        >>> out.codes.tolist()[:4], [p.reason for p in out.problems]
        ([0, 0, 1, 2], ['values outside the bins [0, 120]'])
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if pa.types.is_dictionary(values.type):
        return _dictionary(values, attribute, file, column)
    if attribute.labels is not None:
        codes, problems = _labels(values, attribute)
        return Encoded(codes, values, tuple(problems))
    numbers = _numbers(values, attribute, file, column)
    problems = _null_problem(values)
    if attribute.bins is not None:
        codes, more = _bins(numbers, attribute)
    else:
        codes, more = _integer_codes(numbers, attribute)
    nulls = problems[0].mask if problems else None
    for problem in more:
        # A null was filled with 0 to compute; report it once, as missing.
        mask = problem.mask & ~nulls if nulls is not None else problem.mask
        if mask.any():
            problems.append(Problem(problem.reason, mask))
    return Encoded(codes, values, tuple(problems))


def _dictionary(
    values: pa.DictionaryArray, attribute: Attribute, file: str, column: str
) -> Encoded:
    """Encode the (small) dictionary once, then look every row up by its index."""
    dictionary = values.dictionary
    if pa.types.is_string(dictionary.type) and attribute.labels is None:
        inner = encode_text(dictionary, attribute, file=file, column=column)
    else:
        inner = encode_column(dictionary, attribute, file=file, column=column)
    indices = values.indices.fill_null(0).to_numpy(zero_copy_only=False)
    codes = inner.codes[indices] if len(inner.codes) else np.zeros(len(values), np.intp)
    problems = [Problem(p.reason, p.mask[indices]) for p in inner.problems]
    problems = [p for p in problems if p.mask.any()] + _null_problem(values)
    return Encoded(codes, values, tuple(problems))


def encode_text(values: pa.Array, attribute: Attribute, *, file: str, column: str) -> Encoded:
    """Encode text that spells numbers (a hive folder value) for a numeric attribute.

    Example:
        >>> from dpmm.domain import Attribute
        >>> out = encode_text(pa.array(["1", "7"]), Attribute("sex", 2), file="f", column="sex")
        >>> out.codes.tolist(), [p.reason for p in out.problems]
        ([1, 0], ['codes outside 0..1'])
    """
    if attribute.labels is not None:
        return encode_column(values, attribute, file=file, column=column)
    texts = values.to_pylist()
    if any(t is not None and not _NUMBER.fullmatch(t) for t in texts):
        raise _type_error(values, attribute, file, column)
    numbers = pa.array([None if t is None else float(t) for t in texts], pa.float64())
    return encode_column(numbers, attribute, file=file, column=column)


def cell_index(codes: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """Mixed-radix cell index in C order: the index of a cell of ``np.zeros(shape)``.

    Example:
        >>> cell_index([np.array([1, 0]), np.array([2, 1])], (2, 3)).tolist()
        [5, 1]
        >>> np.ravel_multi_index(([1, 0], [2, 1]), (2, 3)).tolist()
        [5, 1]
    """
    if len(codes) != len(shape) or not codes:
        raise DataError("cell_index needs one code array per attribute of the shape")
    if math.prod(shape) > MAX_CELLS:
        raise TooLargeError(
            f"A domain of {math.prod(shape)} cells does not fit 64-bit cell indices"
        )
    index = codes[0].astype(np.int64, copy=True)
    for column, size in zip(codes[1:], shape[1:], strict=True):
        # In place: no temporary array per attribute.
        np.multiply(index, size, out=index)
        np.add(index, column, out=index, casting="unsafe")
    return index
