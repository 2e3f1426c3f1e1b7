"""A synthetic census-like person file, written as hive-partitioned Parquet for the demo.

Every record is one person: ``region`` (the hive folder key), ``sex``, ``age``,
``race``, ``hispanic``, ``household_size`` and ``income``. The values follow
published shapes of a national census rather than uniform noise, so that a
release over them looks like a real one:

* region populations fall off like a Zipf law (the largest region has about
  five times the people of the smallest);
* age follows a population pyramid (flat through working ages, a post-war bulge
  near 62, then falling with mortality), and women outnumber men from age 50 on;
* race is dominated by one category, with region-specific shares;
* the Hispanic rate depends on region and race;
* household size depends on age (children never live alone; the old mostly live
  in households of one or two);
* income is zero for children under 16 and for a share of adults, otherwise
  log-normal around a median that peaks in mid-career and varies by region and sex.

Everything is drawn with vectorized numpy from the caller's generator, so the
same seed writes byte-identical files, and two million rows take a few seconds.

Example:
    >>> import tempfile, numpy as np
    >>> folder = Path(tempfile.mkdtemp()) / "people"
    >>> data = write_census_dataset(folder, rows=1000, rng=np.random.default_rng())
    >>> data.rows, data.partitions == len(data.files), data.files[0].parent.name
    (1000, True, 'region=south-atlantic')
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpmm.errors import DpmmError

__all__ = [
    "AGES",
    "HOUSEHOLD_SIZES",
    "INCOME_BINS",
    "LABELS",
    "PART_ROWS",
    "SCHEMA",
    "CensusDataset",
    "write_census_dataset",
]

#: Region labels, most populous first (the hive folder key ``region=<label>``).
REGIONS = (
    "south-atlantic",
    "pacific",
    "east-north-central",
    "mid-atlantic",
    "west-south-central",
    "mountain",
    "west-north-central",
    "new-england",
)
#: Labels of the categorical columns, in the order of the demo config's domain.
LABELS: dict[str, tuple[str, ...]] = {
    "region": REGIONS,
    "sex": ("female", "male"),
    "race": ("white", "black", "american-indian", "asian", "pacific-islander", "other-or-multiple"),
    "hispanic": ("no", "yes"),
}
#: Ages are whole years 0..AGES-1.
AGES = 100
#: Household sizes are 1..HOUSEHOLD_SIZES (the last one means "that many or more").
HOUSEHOLD_SIZES = 7
#: Income bin edges in dollars; the first bin holds exactly zero, the top edge caps the tail.
INCOME_BINS = (0, 1, 10_000, 25_000, 50_000, 75_000, 100_000, 150_000, 250_000, 100_000_000)
#: Target rows per Parquet file; a region gets ceil(its rows / PART_ROWS) files.
PART_ROWS = 250_000

#: Column types of every file (``region`` is the folder key, not a file column).
SCHEMA = pa.schema(
    [
        ("sex", pa.dictionary(pa.int8(), pa.string())),
        ("age", pa.int8()),
        ("race", pa.dictionary(pa.int8(), pa.string())),
        ("hispanic", pa.dictionary(pa.int8(), pa.string())),
        ("household_size", pa.int8()),
        ("income", pa.float64()),
    ]
)

# Zipf-like region populations: share ∝ 1 / rank^0.8.
_REGION_SHARES = 1.0 / np.arange(1, len(REGIONS) + 1) ** 0.8
_REGION_SHARES /= _REGION_SHARES.sum()
# National race shares (census "alone" shares, with "some other race" and
# "two or more" merged), then a per-region tilt: rows are regions in REGIONS order.
_RACE_SHARES = np.array([0.60, 0.125, 0.011, 0.06, 0.002, 0.202])
_RACE_TILT = np.array(
    [
        [1.0, 1.9, 0.5, 0.6, 0.5, 0.8],
        [0.8, 0.5, 1.2, 2.6, 4.0, 1.3],
        [1.2, 1.1, 0.6, 0.8, 0.3, 0.6],
        [0.9, 1.2, 0.4, 1.5, 0.3, 1.0],
        [0.9, 1.0, 1.1, 0.7, 0.5, 1.5],
        [1.1, 0.3, 3.5, 0.6, 1.5, 1.1],
        [1.3, 0.6, 2.0, 0.6, 0.4, 0.5],
        [1.3, 0.6, 0.4, 0.9, 0.3, 0.6],
    ]
)
# Hispanic rate by region, scaled by race (most Hispanic people report "other or multiple").
_HISPANIC_BY_REGION = np.array([0.14, 0.30, 0.08, 0.14, 0.35, 0.27, 0.07, 0.10])
_HISPANIC_BY_RACE = np.array([0.9, 0.1, 0.9, 0.1, 0.3, 2.6])
# Household size 1..7 by age band (children, 18–64, 65+).
_HOUSEHOLD_BY_BAND = np.array(
    [
        [0.00, 0.08, 0.30, 0.32, 0.17, 0.08, 0.05],
        [0.15, 0.33, 0.21, 0.16, 0.08, 0.04, 0.03],
        [0.30, 0.50, 0.08, 0.05, 0.04, 0.02, 0.01],
    ]
)
# Median income of a mid-career man by region (dollars), and the log-normal spread.
_INCOME_MEDIAN = np.array([52_000, 64_000, 50_000, 60_000, 48_000, 51_000, 49_000, 66_000])
_INCOME_SIGMA = 0.8


@dataclass(frozen=True)
class CensusDataset:
    """A written dataset.

    Attributes:
        folder: The dataset's folder (hive ``region=<label>/`` folders inside).
        rows: Rows in all files.
        partitions: Parquet files written (each one partition of an ingest).
        files: The files, region by region in :data:`REGIONS` order.
    """

    folder: Path
    rows: int
    partitions: int
    files: tuple[Path, ...]


def _age_weights() -> np.ndarray:
    """An age pyramid: slowly shrinking birth cohorts, a bulge near 62, mortality after 60."""
    age = np.arange(AGES, dtype=float)
    cohorts = 1.0 - 0.0025 * age + 0.25 * np.exp(-(((age - 62) / 7) ** 2))
    survival = np.exp(-((age / 82) ** 7))
    weights = cohorts * survival
    return weights / weights.sum()


def _apportion(total: int, shares: np.ndarray) -> np.ndarray:
    """Integer counts summing to ``total`` in the given shares (largest remainders)."""
    exact = total * shares
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    # Stable order: ties go to the earlier (larger) share, so counts stay non-increasing.
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def _categorical(rng: np.random.Generator, table: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """One draw per row from ``table[parent[row]]`` (rows of probabilities), vectorized.

    Each parent's CDF is shifted by the parent's index, so one sorted array holds
    every CDF and a single ``searchsorted`` inverts them all.
    """
    groups, width = table.shape
    cdf = np.cumsum(table / table.sum(axis=1, keepdims=True), axis=1)
    cdf[:, -1] = 1.0  # rounding must not leave a gap above the last category
    shifted = (cdf + np.arange(groups)[:, None]).ravel()
    position = np.searchsorted(shifted, parent + rng.random(parent.size), side="right")
    return np.minimum(position - parent * width, width - 1).astype(np.int8)


def _columns(rng: np.random.Generator, region: np.ndarray) -> dict[str, np.ndarray]:
    """Every column's values (codes for categorical ones) for rows of the given regions."""
    rows = region.size
    age = rng.choice(AGES, size=rows, p=_age_weights()).astype(np.int8)
    age_f = age.astype(float)
    # Women outlive men: the female share rises from 49.5% below 50 to 61.5% at 90.
    female = rng.random(rows) < 0.495 + 0.12 * np.clip((age_f - 50) / 40, 0, 1)
    sex = np.where(female, 0, 1).astype(np.int8)
    race = _categorical(rng, _RACE_SHARES * _RACE_TILT, region)
    hispanic_rate = np.minimum(_HISPANIC_BY_REGION[region] * _HISPANIC_BY_RACE[race], 0.9)
    hispanic = (rng.random(rows) < hispanic_rate).astype(np.int8)
    band = np.digitize(age, [18, 65]).astype(np.intp)
    household = (_categorical(rng, _HOUSEHOLD_BY_BAND, band) + 1).astype(np.int8)
    return {
        "sex": sex,
        "age": age,
        "race": race,
        "hispanic": hispanic,
        "household_size": household,
        "income": _income(rng, region, age_f, sex),
    }


def _income(
    rng: np.random.Generator, region: np.ndarray, age: np.ndarray, sex: np.ndarray
) -> np.ndarray:
    """Zero for children and for some adults; log-normal otherwise, peaking near age 50."""
    rows = region.size
    # Chance of no income: students, then a small share of working-age and retired adults.
    no_income = np.select([age < 16, age < 25, age < 65], [1.0, 0.35, 0.08], 0.05)
    career = -0.9 * ((age - 50) / 30) ** 2
    log_median = np.log(_INCOME_MEDIAN[region]) + career - 0.2 * (sex == 0)
    income = np.exp(log_median + _INCOME_SIGMA * rng.standard_normal(rows))
    income = np.round(np.minimum(income, INCOME_BINS[-1] - 1))
    income[rng.random(rows) < no_income] = 0.0
    return income


def _table(columns: dict[str, np.ndarray], rows: slice) -> pa.Table:
    arrays = []
    for field in SCHEMA:
        values = columns[field.name][rows]
        if pa.types.is_dictionary(field.type):
            dictionary = pa.array(LABELS[field.name], pa.string())
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(values, pa.int8()), dictionary))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _check(folder: Path, rows: object, rng: object) -> None:
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise DpmmError(f"The demo dataset needs a positive whole number of rows, got {rows!r}")
    if not isinstance(rng, np.random.Generator):
        raise DpmmError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise DpmmError(f"'{folder}' already exists and is not an empty folder; choose another")


def write_census_dataset(
    folder: str | Path,
    *,
    rows: int = 2_000_000,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> CensusDataset:
    """Generate a census-like person dataset and write it as hive-partitioned Parquet.

    The files go to ``folder/region=<label>/part-<k>.parquet``. They are written
    into a hidden sibling folder first and renamed into place at the end, so a
    crash leaves either the whole dataset or none of it.

    Args:
        folder: Where the dataset goes; it must not exist, or be an empty folder.
        rows: Number of person records.
        rng: The random generator (the caller chooses the seed).
        progress: Called with ``(files written, files in all)`` after each file.

    Returns:
        The folder, row count and files written.

    Raises:
        DpmmError: ``rows`` is not a positive integer, ``rng`` is not a Generator, or
            ``folder`` already holds something.
    """
    folder = Path(folder)
    _check(folder, rows, rng)
    per_region = _apportion(rows, _REGION_SHARES)
    region = np.repeat(np.arange(len(REGIONS)), per_region)
    columns = _columns(rng, region)
    plan = []  # (region label, part number, row slice)
    start = 0
    for label, count in zip(REGIONS, per_region.tolist(), strict=True):
        parts = math.ceil(count / PART_ROWS)
        bounds = np.linspace(start, start + count, parts + 1).round().astype(int)
        plan += [(label, k, slice(bounds[k], bounds[k + 1])) for k in range(parts)]
        start += count
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    staging.chmod(0o755)  # mkdtemp's folder is private; the dataset is not
    try:
        if progress is not None:
            progress(0, len(plan))
        relative = []
        for done, (label, k, rows_slice) in enumerate(plan, start=1):
            path = Path(f"region={label}") / f"part-{k}.parquet"
            (staging / path.parent).mkdir(exist_ok=True)
            pq.write_table(_table(columns, rows_slice), staging / path)
            relative.append(path)
            if progress is not None:
                progress(done, len(plan))
        if folder.exists():
            folder.rmdir()  # checked empty above
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = tuple(folder / path for path in relative)
    return CensusDataset(folder=folder, rows=rows, partitions=len(files), files=files)
