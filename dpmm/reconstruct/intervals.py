"""Confidence intervals exact for the discrete noise a release draws.

A linear (least-squares) answer's error is ``e = Σ_j c_j z_j``: ``z_j`` the independent
integer noise on measured row j (discrete Laplace of scale t, or discrete Gaussian of
parameter σ², in the measurement's integer units) and ``c`` the query's row of
``W (BᵀB)⁺ Bᵀ``. The half-width ``h`` published with an answer is the least one with
``P(|e| ≤ h) ≥ level`` that this module can certify, computed from the distribution of
``e`` itself, not a normal approximation:

* **convolution** (:func:`exact_half_width`): the coefficients are grouped by magnitude:
  a group of r equal ``|c|`` contributes ``|c| S_r`` (the noise is symmetric), ``S_r`` the
  sum of r draws, whose distribution on the integers is the r-fold convolution of the
  noise's exact PMF (repeated squaring). ``e`` is dominated by ``U = Σ_groups δ⌈|c| S_r/δ⌉``,
  which lives on the grid δ, so its distribution is the convolution of the groups';
  ``P(|e| > h) ≤ 2 P(U > h)`` by symmetry. When the ``|c|`` are integer multiples of δ
  (identity-like strategies, a single measurement, rational trees) ``U = e`` and ``h`` is
  the exact least half-width; otherwise δ is ``RESOLUTION · s / g`` for g groups and
  standard error s, and ``h`` exceeds the exact one by less than ``RESOLUTION`` standard
  errors. Mass trimmed from the tails (:data:`TRIM` per convolution) only lowers the
  certified coverage; :data:`NUMERICAL_SLACK` is charged for floating point.
* **wide discrete Laplace** (t > 2¹²): a draw is ``⌊E₁⌋ − ⌊E₂⌋`` for exponentials of mean
  t, within 1 of the continuous Laplace ``E₁ − E₂``; a group of r equal ``|c|`` is then
  ``|c| t (G₁ − G₂)`` (G ~ Gamma(r, 1), binned exactly on the grid from the incomplete gamma
  function) plus at most ``r|c|``, so ``h`` is the convolved groups' plus ``‖c‖₁``.
* **wide discrete Gaussian** (σ² > 2²⁴): ``z`` is within Kolmogorov distance ``0.1/σ²`` of
  ``round(Y)``, Y ~ N(0, σ²) (Euler–Maclaurin with its remainder: ``0.041/σ² + 0.063/σ³``),
  distances add over independent terms, and ``Σ c_j round(Y_j) ≤ Σ c_j Y_j + ½‖c‖₁``; so
  ``h = σ‖c‖₂ z' + ½‖c‖₁`` with ``z'`` the normal quantile at the level less
  ``2k · 0.1/σ²``. It needs only ``‖c‖₂`` (the standard error) and ``‖c‖₁ ≤ √k ‖c‖₂``, so
  answers whose coefficients are not formed get it too (from their standard errors).
* **Chernoff bound** (discrete Laplace without known coefficients, and multisets too costly to
  convolve): ``P(e > h) ≤ min_u e^{−uh} Π_j M(c_j u)``. The discrete Gaussian is
  σ²-subgaussian (Canonne, Kamath and Steinke 2020), so this is
  ``exp(−h² / 2σ²‖c‖²)``. The discrete Laplace's log-MGF
  ``−log(1 − 4q sinh²(u/2) / (1−q)²)`` (``q = e^{−1/t}``) is convex in ``u²`` and zero at 0,
  hence superadditive in ``u²``: ``Σ_j log M(c_j u) ≤ log M(‖c‖₂ u)``, so from the standard
  error alone one draw scaled by ``‖c‖₂`` bounds the sum. Rigorous, and wider than exact.
  For a wide discrete Laplace, or a discrete Gaussian summed term by term, whose multiset
  is known the **split bound** is published where it is less (:func:`_split_half_width`):
  its few largest groups convolved exactly, the rest through this bound, one convolution
  of the two (a wide Laplace: about 2.5 standard errors at 0.95 where Chernoff gives 2.7
  to 3.7).

Queries whose coefficient multisets agree (marginal cells, symmetric strategies) share one
distribution: it is computed once per distinct multiset, within a budget of work per
multiset and per release (:data:`WORK_LIMIT`, :data:`EXACT_BUDGET`) estimated from the
coefficients alone and given to the release's groups cheapest first
(:meth:`Intervals.admit`); past it the Chernoff bound of the multiset is published.

Example:
    >>> from fractions import Fraction
    >>> intervals = Intervals(NoiseLaw("discrete_laplace", Fraction(1)), 0.95)
    >>> h, exact = intervals.from_rows(np.array([[1.0, 0.0], [0.0, -1.0]]))
    >>> h.tolist(), exact.tolist()  # one draw of scale 1: P(|z| ≤ 3) = 0.973, P(|z| ≤ 2) = 0.927
    ([3.0, 3.0], [True, True])
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType

import numpy as np
from scipy import fft, optimize, special

from dpmm.linalg import Matrix
from dpmm.measure.record import MeasurementRecord, discrete_noise_variance
from dpmm.reconstruct.answers import covariance_factor

__all__ = [
    "RESOLUTION",
    "Intervals",
    "Multisets",
    "NoiseLaw",
    "coefficient_rows",
    "exact_half_width",
    "merged_multiset",
]

#: Off the coefficients' lattice, published half-widths exceed the exact ones by less than
#: this many standard errors (the grid's rounding).
RESOLUTION = 0.05
#: Longest grid (distribution support, in cells) an exact computation may use, the most
#: cells it may convolve for one multiset (up to 1 s here), and for one release's (up to
#: 5 s): beyond them the Chernoff bound of the coefficients is published. The work is
#: estimated from the coefficients alone, so the audit makes the same choices.
GRID_LIMIT = 1 << 21
WORK_LIMIT = 1 << 23
EXACT_BUDGET = 1 << 25
#: Longest lattice grid used for an exact half-width: a finer lattice (large multiples of
#: its step) is rounded like other coefficients, for speed.
LATTICE_LIMIT = 1 << 16
#: Work (queries × (cells + measured rows)) up to which the answers' coefficient rows are
#: formed for exact intervals, and the entries formed at once.
ROW_LIMIT = 1 << 22
BLOCK_ENTRIES = 1 << 22
#: Mass dropped from each tail after a convolution (counted as outside the interval).
TRIM = 1e-17
#: Probability charged for floating point in the convolutions.
NUMERICAL_SLACK = 1e-9
#: Coefficients below this share of the row's largest are the rounding residue of exact
#: zeros of ``W (BᵀB)⁺ Bᵀ`` and are dropped.
ZERO = 1e-12
#: Up to this σ² the discrete Gaussian's CDF is summed term by term; beyond, the normal
#: quantile is used.
_SUMMED_SIGMA2 = 1 << 24
#: Beyond this scale a discrete Laplace sum is handled through the continuous Laplace.
_WIDE_LAPLACE = 1 << 12
#: What a cell of a wide Laplace's computation costs against the limits' (binned Gamma
#: laws and FFT convolutions: 2·10⁷–10⁸ cells/s here, against the 8·10⁶ a second the
#: limits stand for).
_WIDE_CELL_COST = 0.125
#: Groups (distinct coefficients) of largest variance a wide Laplace's split bound
#: computes exactly (:func:`_split_half_width`).
_SPLIT_GROUPS = 4
#: The largest lattice refinement tried: coefficients ``n_j · |c|_min / d`` for d ≤ this.
_LATTICE_DIVISORS = 64


@dataclass(frozen=True)
class NoiseLaw:
    """The law of one noise draw, in the measurement's integer units.

    Attributes:
        noise: ``discrete_laplace`` (parameter: its scale t) or ``discrete_gaussian``
            (parameter: σ² of ``P(k) ∝ exp(−k²/2σ²)``).
        parameter: The exact parameter.
    """

    noise: str
    parameter: Fraction

    def __post_init__(self) -> None:
        if self.noise not in ("discrete_laplace", "discrete_gaussian"):
            raise ValueError(f"unknown noise {self.noise!r}")
        if not self.parameter > 0:
            raise ValueError(f"a noise parameter must be positive, got {self.parameter}")

    @classmethod
    def of(cls, record: MeasurementRecord) -> NoiseLaw:
        """The noise of a measurement record."""
        parameter = record.scale if record.noise == "discrete_laplace" else record.sigma2
        assert parameter is not None  # a record has the parameter of its noise
        return cls(record.noise, Fraction(parameter))

    @property
    def laplace(self) -> bool:
        return self.noise == "discrete_laplace"

    def variance(self) -> float:
        """The exact variance of one draw."""
        if self.laplace:
            return discrete_noise_variance(self.noise, self.parameter, None)
        return discrete_noise_variance(self.noise, None, self.parameter)

    def reach(self, tail: float) -> int:
        """An integer K with ``P(|z| > K) < tail``."""
        if self.laplace:  # P(|z| > K) = 2q^{K+1}/(1+q) ≤ 2e^{−(K+1)/t}
            return math.ceil(float(self.parameter) * math.log(2 / tail))
        # P(|z| > K) ≤ 2 exp(−K²/2σ²) (subgaussian, the reference in the module docstring)
        return math.ceil(math.sqrt(2 * float(self.parameter) * math.log(2 / tail)))

    def cdf(self, k: np.ndarray) -> tuple[np.ndarray, float]:
        """``P(z ≤ k)`` at integers ``k`` and a bound on its error (Kolmogorov distance)."""
        k = np.asarray(k, dtype=np.float64)
        if self.laplace:
            t = float(self.parameter)
            # k ≥ 0: 1 − q^{k+1}/(1+q); k < 0: q^{−k}/(1+q), with q = e^{−1/t}.
            tail = np.exp(-(np.abs(k) + (k >= 0)) / t) / (1 + math.exp(-1 / t))
            return np.where(k >= 0, 1 - tail, tail), 0.0
        sigma2 = float(self.parameter)
        if sigma2 <= _SUMMED_SIGMA2:
            reach = self.reach(1e-30)
            support = np.arange(-reach, reach + 1, dtype=np.float64)
            cumulative = np.cumsum(np.exp(-(support**2) / (2 * sigma2)))
            cumulative /= cumulative[-1]
            index = np.clip(k + reach, -1, 2 * reach).astype(np.int64)
            return np.where(index < 0, 0.0, cumulative[np.maximum(index, 0)]), 0.0
        sigma = math.sqrt(sigma2)
        return special.ndtr((k + 0.5) / sigma), 0.1 / sigma2


def _integer_sum(law: NoiseLaw, count: int, tail: float) -> tuple[np.ndarray, int] | None:
    """The distribution of the sum of ``count`` draws, on the integers from the returned
    offset (tails trimmed); None when its support would exceed :data:`GRID_LIMIT`."""
    reach = law.reach(tail)
    spread = math.sqrt(law.variance() * count)
    if 2 * reach + 1 > GRID_LIMIT or 60 * spread > GRID_LIMIT:
        return None
    k = np.arange(-reach, reach + 1)
    upper, _ = law.cdf(k)
    lower, _ = law.cdf(k - 1)
    return _power(_trimmed(upper - lower, -reach), count)


def _on_grid(
    masses: np.ndarray, offset: int, value: float, grid: float, multiple: int | None
) -> tuple[np.ndarray, int]:
    """The distribution of ``⌈value · s / grid⌉`` (``multiple · s`` on a lattice) for s
    distributed as ``masses`` from ``offset``."""
    s = np.arange(offset, offset + masses.size, dtype=np.float64)
    cells = multiple * s if multiple is not None else np.ceil(value * s / grid)
    first = int(cells[0])
    return np.bincount((cells - first).astype(np.int64), weights=masses), first


def _normal_half_width(
    norm2: float, norm1: float, terms: int, law: NoiseLaw, level: float
) -> tuple[float, float] | None:
    """A discrete Gaussian of large σ² is within Kolmogorov distance ``0.1/σ²`` of a rounded
    normal ``round(Y)`` (the module docstring), and ``Σ c_j round(Y_j) ≤ Σ c_j Y_j + ½‖c‖₁``:
    so ``h = σ ‖c‖₂ z' + ½‖c‖₁`` with ``z'`` the normal quantile at the level less the
    slack. Returns ``h`` and a bound on its excess over the exact least half-width, which
    is at least ``σ ‖c‖₂ z'' − ½‖c‖₁`` (``z''``: the level plus the slack); None when
    the slack takes more than half of ``1 − level``."""
    sigma2 = float(law.parameter)
    slack = NUMERICAL_SLACK + 2 * terms * 0.1 / sigma2
    if slack > (1 - level) / 2:
        return None
    quantile = float(special.ndtri(1 - (1 - level - slack) / 2))
    below = float(special.ndtri(1 - (1 - level + slack) / 2))
    scale = math.sqrt(sigma2) * norm2
    return scale * quantile + norm1 / 2, scale * (quantile - below) + norm1


def _continuous(law: NoiseLaw) -> bool:
    """Whether the noise is wide enough to be handled through its continuous counterpart
    (:func:`_normal_half_width`, :func:`_wide_laplace_half_width`)."""
    limit = _WIDE_LAPLACE if law.laplace else _SUMMED_SIGMA2
    return float(law.parameter) > limit


@functools.lru_cache(maxsize=1 << 12)
def _gamma_range(shape: int) -> tuple[float, float]:
    """Gamma(shape, 1)'s quantiles 1e-18 and 1 − 1e-18."""
    return (
        float(special.gammaincinv(shape, TRIM / 10)),
        float(special.gammainccinv(shape, TRIM / 10)),
    )


def _gamma_cells(shape: int, per_unit: float) -> tuple[np.ndarray, int] | None:
    """The distribution of ``⌈a G⌉`` for G ~ Gamma(shape, 1), a = ``per_unit``, within G's
    quantiles 1e-18 and 1 − 1e-18; None beyond :data:`GRID_LIMIT`."""
    low, high = _gamma_range(shape)
    first, last = math.floor(per_unit * low), math.ceil(per_unit * high)
    if last - first + 1 > GRID_LIMIT:
        return None
    # Cell m holds G in ((m−1)/a, m/a].
    edges = np.arange(first - 1, last + 1, dtype=np.float64)
    below = special.gammainc(shape, np.maximum(edges, 0) / per_unit)
    return _trimmed(np.diff(below), first)


def _wide_laplace_half_width(
    values: np.ndarray, counts: np.ndarray, law: NoiseLaw, level: float
) -> tuple[float, bool] | None:
    """A discrete Laplace draw of scale t is ``⌊E₁⌋ − ⌊E₂⌋`` for exponentials of mean t,
    so it lies within 1 of the continuous Laplace ``E₁ − E₂``, and a group of r equal
    ``|c|`` contributes at most ``|c| t (G₁ − G₂) + r|c|``, G ~ Gamma(r, 1). Each group's
    ``⌈a G₁⌉ − ⌊a G₂⌋`` is exact on the grid (from the regularized incomplete gamma
    function), the groups are convolved, and ``‖c‖₁`` is added to the half-width found:
    ``(h, whether ‖c‖₁ is below a quarter of RESOLUTION standard errors)`` (the exact
    least half-width is at least ``h − 2‖c‖₁ −`` the rounding), or None past
    :data:`GRID_LIMIT`.

    The continuous part scales with t exactly (its grid is a fixed share of its standard
    deviation ``√2 t ‖c‖₂``), so it is computed once per multiset and level at t = 1
    (:func:`_wide_laplace_unit`) and scaled: the plan's search over budgets reuses it."""
    norm1 = float(np.sum(counts * values))
    spread = math.sqrt(law.variance() * float(np.sum(counts * values**2)))
    unit = _wide_laplace_unit(values.tobytes(), counts.astype(np.int64).tobytes(), level)
    if unit is None:
        return None
    return float(law.parameter) * unit + norm1, norm1 <= RESOLUTION * spread / 4


def _wide_sum(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The distribution of ``V = Σ_groups ⌈a G⌉`` (a = ``|c| / grid``, G ~ Gamma(count, 1))
    on its cells from the least, and the grid ``RESOLUTION · √2 ‖c‖₂ / (4 · groups)`` (each
    group rounds twice: the grid keeps their sum under half the resolution); None past
    :data:`GRID_LIMIT`.

    ``⌈a G₁⌉ − ⌊a G₂⌋ = ⌈a G₁⌉ − ⌈a G₂⌉ + 1`` almost surely, so ``U / grid`` of
    :func:`_wide_total` is the number of groups plus ``V₁ − V₂``, V₁ and V₂ independent
    copies of V. V's groups are convolved two shortest at a time (a Huffman order: the many
    short groups meet on short transforms, the few long ones last), each sum's tails
    trimmed (:func:`_trimmed`: V₁ − V₂ loses the mass dropped, counted as outside)."""
    grid = RESOLUTION * math.sqrt(2 * float(np.sum(counts * values**2))) / (4 * len(values))
    pending: list[tuple[int, int, np.ndarray]] = []
    for value, count in zip(values, counts, strict=True):
        up = _gamma_cells(int(count), float(value) / grid)
        if up is None:
            return None
        pending.append((up[0].size, len(pending), up[0]))
    heapq.heapify(pending)
    while len(pending) > 1:
        _, first, left = heapq.heappop(pending)
        _, _, right = heapq.heappop(pending)
        merged = _convolve((left, 0), (right, 0))[0]
        if merged.size > GRID_LIMIT:
            return None
        heapq.heappush(pending, (merged.size, first, merged))
    return pending[0][2], grid


def _wide_total(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, int, float] | None:
    """The distribution of ``U = Σ_groups grid · (⌈a G₁⌉ − ⌊a G₂⌋)`` (a = ``|c| / grid``),
    which dominates the continuous Laplace sum ``Σ_groups |c| (G₁ − G₂)`` at t = 1, on the
    grid of :func:`_wide_sum`: ``(masses, first cell, grid)``, or None past
    :data:`GRID_LIMIT`. ``V₁ − V₂``'s distribution is V's correlated with itself, ``|F|²``
    in one transform; the tails are trimmed once, at the end."""
    found = _wide_sum(values, counts)
    if found is None:
        return None
    masses, grid = found
    reach = masses.size - 1  # V₁ − V₂ lies in −reach … reach
    length = fft.next_fast_len(2 * reach + 1, real=True)
    transform = fft.rfft(masses, length)
    lags = fft.irfft(transform.real**2 + transform.imag**2, length)  # lag k at k mod length
    ordered = np.concatenate([lags[length - reach :], lags[: reach + 1]])
    total = _trimmed(ordered, len(values) - reach)
    if total[0].size > GRID_LIMIT:
        return None
    return total[0], total[1], grid


@functools.lru_cache(maxsize=1 << 12)
def _wide_laplace_unit(values_bytes: bytes, counts_bytes: bytes, level: float) -> float | None:
    """The half-width of the continuous Laplace sum at t = 1 certified from
    :func:`_wide_total`'s U, found without forming its distribution: the least H with
    ``P(U ≤ H) ≥ 1 − (1 − level − slack)/2`` (:func:`_least_difference`); None past
    :data:`GRID_LIMIT` or where the masses kept never reach it."""
    values = np.frombuffer(values_bytes, dtype=np.float64)
    found = _wide_sum(values, np.frombuffer(counts_bytes, dtype=np.int64))
    if found is None:
        return None
    lag = _least_difference(found[0], level)
    return None if lag is None else (len(values) + lag) * found[1]


def _least_difference(masses: np.ndarray, level: float) -> int | None:
    """The least L with ``P(V₁ − V₂ ≤ L) ≥ 1 − (1 − level − slack)/2`` for independent V₁,
    V₂ distributed as ``masses`` (None if the masses kept never reach it), by bisection on
    ``P(V₁ − V₂ ≤ L) = Σ_i P(V₂ = i) P(V₁ ≤ i + L)``: a few sums of products in place of
    the difference's distribution (what :func:`_least_cell` reads from it)."""
    cumulative = np.cumsum(masses)
    cells = masses.size

    def below(lag: int) -> float:  # P(V₁ − V₂ ≤ lag), lag ≥ 0
        # einsum, not BLAS: a threaded BLAS dot waits on its slowest thread.
        inside = float(np.einsum("i,i->", masses[: cells - lag], cumulative[lag:]))
        return inside + float(cumulative[-1]) * float(masses[cells - lag :].sum())

    needed = _needed(level)
    if below(cells - 1) < needed:
        return None
    # V₁ − V₂ is symmetric: P(V₁ − V₂ ≤ −1) ≤ ½ < needed, so L ≥ 0.
    low, high = 0, cells - 1
    while low < high:
        middle = (low + high) // 2
        if below(middle) >= needed:
            high = middle
        else:
            low = middle + 1
    return low


def _split_half_width(values: np.ndarray, counts: np.ndarray, law: NoiseLaw, level: float) -> float:
    """A half-width exact for the :data:`_SPLIT_GROUPS` groups of largest variance and
    bounded for the rest (``math.inf`` where it does not apply): the Chernoff bound where
    the exact computation is too costly, made tight where a few coefficients dominate (its
    one-draw MGF charges them a bound's full slack).

    With ``D`` the dominant groups' sum and ``R`` the rest's,
    ``P(D + R > h) = E[P(R > h − D | D)] ≤ Σ_k P(U = k) min(1, B_R(h − k))`` for a grid
    variable ``U ≥ D`` and any bound ``B_R(x) ≥ P(R > x)`` falling with x
    (:func:`_split_least`). A wide discrete Laplace takes ``U`` from :func:`_wide_total`
    and ``B_R(x) = min_u e^{−ux} M_R(u)`` over a fixed set of u for the continuous Laplace
    at t = 1, with ``‖c‖₁`` added as for the exact computation; a discrete Gaussian takes
    ``U`` from its exact convolution on the grid (as :func:`exact_half_width` does) and
    ``B_R(x) = exp(−x² / 2σ²‖c_R‖²)`` (it is σ²-subgaussian)."""
    if len(values) <= _SPLIT_GROUPS:
        return math.inf
    if law.laplace and _continuous(law):
        unit = _split_unit(values.tobytes(), counts.astype(np.int64).tobytes(), level)
        return float(law.parameter) * unit + float(np.sum(counts * values))
    if not law.laplace and not _continuous(law):
        return _gaussian_split(values, counts, law, level)
    return math.inf


def _dominant(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the :data:`_SPLIT_GROUPS` groups of largest variance (in order)
    and of the rest."""
    order = np.argsort(counts * values**2)[::-1]
    return np.sort(order[:_SPLIT_GROUPS]), order[_SPLIT_GROUPS:]


@functools.lru_cache(maxsize=1 << 12)
def _split_unit(values_bytes: bytes, counts_bytes: bytes, level: float) -> float:
    """:func:`_split_half_width` of a wide discrete Laplace at t = 1, before ``‖c‖₁``."""
    values = np.frombuffer(values_bytes, dtype=np.float64)
    counts = np.frombuffer(counts_bytes, dtype=np.int64)
    dominant, rest = _dominant(values, counts)
    total = _wide_total(values[dominant], counts[dominant])
    if total is None:
        return math.inf
    masses, offset, grid = total
    rest_values, rest_counts = values[rest], counts[rest]
    # The continuous Laplace's MGF 1/(1 − c²u²) diverges at u = 1/max c.
    u = (1 / rest_values.max()) * np.concatenate(
        [np.geomspace(1e-4, 0.5, 40), 1 - np.geomspace(1e-6, 0.5, 40)[::-1][1:]]
    )
    log_mgf = -np.sum(rest_counts[:, None] * np.log1p(-np.square(rest_values[:, None] * u)), 0)
    # Beyond this many cells B_R is below 1e-20: the range of h searched.
    reach = math.ceil(float(np.min((log_mgf + 46) / u)) / grid) + 1

    def bound(shifts: np.ndarray) -> np.ndarray:
        found = np.empty(shifts.size)
        for start in range(0, shifts.size, 1 << 14):
            part = shifts[start : start + (1 << 14)]
            found[start : start + part.size] = np.exp(
                np.min(log_mgf[None, :] - part[:, None] * u[None, :], axis=1)
            )
        return found

    return _split_least(masses, offset, grid, bound, reach, level)


def _gaussian_split(values: np.ndarray, counts: np.ndarray, law: NoiseLaw, level: float) -> float:
    """:func:`_split_half_width` of a discrete Gaussian summed term by term."""
    dominant, rest = _dominant(values, counts)
    values_d, counts_d = values[dominant], counts[dominant]
    grid, multiples = _grid(values_d, counts_d, law)
    total: tuple[np.ndarray, int] | None = None
    for index, (value, count) in enumerate(zip(values_d, counts_d, strict=True)):
        summed = _integer_sum(law, int(count), TRIM / len(values_d))
        if summed is None:
            return math.inf
        multiple = None if multiples is None else int(multiples[index])
        group = _trimmed(*_on_grid(*summed, float(value), grid, multiple))
        total = group if total is None else _convolve(total, group)
        if total[0].size > GRID_LIMIT:
            return math.inf
    assert total is not None
    rest_variance = float(law.parameter) * float(np.sum(counts[rest] * values[rest] ** 2))
    reach = math.ceil(math.sqrt(2 * rest_variance * 46) / grid) + 1  # B_R < 1e-20 beyond

    def bound(shifts: np.ndarray) -> np.ndarray:
        return np.exp(-(shifts**2) / (2 * rest_variance))

    return _split_least(*total, grid, bound, reach, level)


def _split_least(
    masses: np.ndarray,
    offset: int,
    grid: float,
    bound: Callable[[np.ndarray], np.ndarray],
    reach: int,
    level: float,
) -> float:
    """The least h on the grid with ``Σ_k P(U = k) min(1, B_R(h − k)) ≤ (1 − level)/2``
    (less the slack and the mass trimmed), for U distributed as ``masses`` from
    ``offset`` (cells of ``grid``) and ``bound`` giving ``B_R`` at positive shifts, below
    1e-20 past ``reach`` cells: one convolution for every h (``math.inf``: none found)."""
    missing = max(0.0, 1.0 - float(masses.sum()))  # trimmed tails: counted as outside
    if masses.size + reach > GRID_LIMIT:
        return math.inf
    first = -(offset + masses.size - 1)  # b[j] is B_R((j + first) · grid)
    shifts = np.arange(first, reach + 1, dtype=np.float64) * grid
    tail = np.ones(shifts.size)
    positive = shifts > 0
    tail[positive] = np.clip(bound(shifts[positive]), None, 1.0)
    tails = _signal().fftconvolve(masses, tail)  # index n: h = (n + offset + first) · grid
    allowed = (1 - level - NUMERICAL_SLACK) / 2 - missing
    cells = np.flatnonzero(tails[: masses.size + shifts.size - 1] + 1e-12 <= allowed)
    cells = cells[cells + offset + first >= 0]
    return math.inf if not cells.size else float(cells[0] + offset + first) * grid


def _needed(level: float) -> float:
    """``P(U ≤ H)`` at least this certifies ``P(|e| ≤ H) ≥ level`` (U symmetric about
    what dominates ``|e|``, :data:`NUMERICAL_SLACK` charged)."""
    return 1 - (1 - level - NUMERICAL_SLACK) / 2


def _least_cell(masses: np.ndarray, offset: int, level: float) -> int | None:
    """The least H ≥ 0 with ``1 − 2 P(U > H) − slack ≥ level`` for U distributed as
    ``masses`` from ``offset`` (None if the masses kept never reach it)."""
    cells = int(np.searchsorted(np.cumsum(masses), _needed(level), side="left"))
    return None if cells >= masses.size else max(offset + cells, 0)


def _chernoff_width(values: np.ndarray, counts: np.ndarray, law: NoiseLaw, level: float) -> float:
    """The least h with ``2 min_u exp(−u h) Π_j M(c_j u) ≤ 1 − level`` (Chernoff), for
    coefficient magnitudes ``values`` with multiplicities ``counts``: for each u the bound
    holds from ``h(u) = (log Π_j M(c_j u) − log((1 − level)/2)) / u`` on, so any u the
    search lands on gives a valid half-width and the search only makes it tighter."""
    log_half_alpha = math.log((1 - level) / 2)
    if not law.laplace:  # σ²-subgaussian: exp(−h²/2σ²‖c‖²)
        norm2 = math.sqrt(float(np.sum(counts * values**2)))
        return math.sqrt(float(law.parameter) * -2 * log_half_alpha) * norm2 * (1 + 1e-9)
    t = float(law.parameter)
    q = math.exp(-1 / t)
    gap = -math.expm1(-1 / t)  # 1 − q
    # In w = u t the MGF of c z diverges at w = t · 2 asinh(gap / 2√q) / c.
    limit = t * 2 * math.asinh(gap / (2 * math.sqrt(q))) / float(values.max())

    def width(w: float) -> float:  # in units of t
        shrink = 4 * q * np.sinh(values * w / (2 * t)) ** 2 / gap**2
        return (float(np.sum(counts * -np.log1p(-shrink))) - log_half_alpha) / w

    best = optimize.minimize_scalar(
        width, bounds=(limit * 1e-9, limit * (1 - 1e-9)), method="bounded"
    )
    return width(float(best.x)) * t * (1 + 1e-9)


def _trimmed(masses: np.ndarray, offset: int) -> tuple[np.ndarray, int]:
    """Drop each tail's outer cells holding less than :data:`TRIM` in all (negative
    rounding residue of an FFT is set to 0)."""
    masses = np.maximum(masses, 0.0)
    cumulative = np.cumsum(masses)
    low = int(np.searchsorted(cumulative, TRIM, side="right"))
    high = int(np.searchsorted(cumulative, cumulative[-1] - TRIM, side="left")) + 1
    low, high = min(low, high - 1), max(high, low + 1)
    return masses[low:high], offset + low


def _signal() -> ModuleType:
    """``scipy.signal``, imported where a convolution needs it: importing it (with the
    ``scipy.stats`` it loads) took 0.4 s of every ``dpmm`` command's start."""
    import scipy.signal

    return scipy.signal


def _convolve(
    left: tuple[np.ndarray, int], right: tuple[np.ndarray, int]
) -> tuple[np.ndarray, int]:
    return _trimmed(_signal().convolve(left[0], right[0]), left[1] + right[1])


def _power(term: tuple[np.ndarray, int], count: int) -> tuple[np.ndarray, int]:
    """The ``count``-fold convolution of ``term``, by repeated squaring."""
    result: tuple[np.ndarray, int] | None = None
    while count:
        if count & 1:
            result = term if result is None else _convolve(result, term)
        count >>= 1
        if count:
            term = _convolve(term, term)
    assert result is not None
    return result


def _lattice(values: np.ndarray) -> tuple[float, np.ndarray] | None:
    """``(δ, n)`` with ``values = n δ`` for integers n (to 1e-9), δ = min / d, d ≤ 64."""
    smallest = float(values.min())
    for divisor in range(1, _LATTICE_DIVISORS + 1):
        ratios = values * divisor / smallest
        whole = np.rint(ratios)
        if np.all(np.abs(ratios - whole) <= 1e-9 * whole):
            return smallest / divisor, whole.astype(np.int64)
    return None


def _multiset(coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct magnitudes of the non-zero coefficients and their multiplicities."""
    magnitudes = np.abs(np.asarray(coefficients, dtype=np.float64).reshape(-1))
    if not magnitudes.size or magnitudes.max() == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.unique(magnitudes[magnitudes > ZERO * magnitudes.max()], return_counts=True)


def _grid(values: np.ndarray, counts: np.ndarray, law: NoiseLaw) -> tuple[float, np.ndarray | None]:
    """The grid step of an exact computation for these distinct magnitudes, and their
    multiples of it when they lie on a lattice fine enough (then the result is exact)."""
    spread = math.sqrt(law.variance() * float(np.sum(counts * values**2)))
    if law.laplace and _continuous(law):
        # Each group rounds twice: the grid keeps their sum under half the resolution.
        return RESOLUTION * spread / (4 * len(values)), None
    lattice = _lattice(values)
    # The sum's support to tails of 1e-17 spans under 60 standard errors (one Laplace draw:
    # 2 · 40 t, with s = √2 t).
    if lattice is not None and 60 * spread / lattice[0] <= LATTICE_LIMIT:
        return lattice
    return RESOLUTION * spread / len(values), None


def _work(values: np.ndarray, counts: np.ndarray, law: NoiseLaw) -> float:
    """The cells an exact computation makes, about: each group's sum (a wide Laplace's
    binned Gamma law; otherwise the repeated squaring of one draw's law to the group's
    count of draws, twice the sum's support) and the convolution of the groups, groups ×
    the total's support (at :data:`_WIDE_CELL_COST` each for a wide Laplace)."""
    if not values.size or (_continuous(law) and not law.laplace):
        return 0.0
    spread = math.sqrt(law.variance() * float(np.sum(counts * values**2)))
    grid = _grid(values, counts, law)[0]
    convolved = len(values) * (60 * spread / grid + 2)
    if _continuous(law):
        summed = sum(
            (_gamma_range(int(count))[1] - _gamma_range(int(count))[0]) * float(value) / grid + 2
            for value, count in zip(values, counts, strict=True)
        )
        return summed + convolved * _WIDE_CELL_COST
    one = 2 * law.reach(TRIM / len(values)) + 1
    deviation = math.sqrt(law.variance())
    summed = sum(
        2 * min(int(count) * one, 60 * deviation * math.sqrt(int(count)) + one)
        for count in counts
        if count > 1
    )
    return summed + convolved


def exact_half_width(
    coefficients: np.ndarray, law: NoiseLaw, level: float, *, work_limit: float = WORK_LIMIT
) -> tuple[float, bool] | None:
    """The least half-width certified for ``Σ_j c_j z_j`` at ``level`` from its exact
    distribution (see the module docstring), and whether it lies within
    :data:`RESOLUTION` standard errors of the exact least one (it is that one when the
    coefficients lie on a lattice); None when the convolutions would exceed
    :data:`GRID_LIMIT` or ``work_limit`` cells.

    Example:
        >>> law = NoiseLaw("discrete_gaussian", Fraction(1, 4))
        >>> exact_half_width(np.array([1.0, 1.0, 1.0]), law, 0.9)
        (1.0, True)
    """
    return _exact_of_multiset(*_multiset(coefficients), law, level, work_limit)


def _exact_of_multiset(
    values: np.ndarray, counts: np.ndarray, law: NoiseLaw, level: float, work_limit: float
) -> tuple[float, bool] | None:
    """:func:`exact_half_width` of the coefficients with distinct magnitudes ``values``
    and multiplicities ``counts``."""
    if not values.size:
        return 0.0, True
    if _work(values, counts, law) > work_limit:
        return None
    terms = int(counts.sum())
    norm2 = math.sqrt(float(np.sum(counts * values**2)))
    if _continuous(law) and law.laplace:
        return _wide_laplace_half_width(values, counts, law, level)
    if _continuous(law):
        found = _normal_half_width(norm2, float(np.sum(counts * values)), terms, law, level)
        if found is None:
            return None
        return found[0], found[1] <= RESOLUTION * math.sqrt(law.variance()) * norm2
    grid, multiples = _grid(values, counts, law)
    total: tuple[np.ndarray, int] | None = None
    for index, (value, count) in enumerate(zip(values, counts, strict=True)):
        summed = _integer_sum(law, int(count), TRIM / len(values))
        if summed is None:
            return None
        multiple = None if multiples is None else int(multiples[index])
        group = _trimmed(*_on_grid(*summed, float(value), grid, multiple))
        total = group if total is None else _convolve(total, group)
    assert total is not None
    found = _least_cell(*total, level)
    return None if found is None else (found * grid, True)


@dataclass(frozen=True, eq=False)
class Multisets:
    """Each query's coefficient magnitudes on the noise, as the distinct multisets of a
    group of queries and which one each query has: what its interval depends on, for any
    noise law (least squares' coefficients do not depend on the noise's scale).

    Attributes:
        distinct: ``(values, counts)`` per distinct multiset: the distinct magnitudes of
            the non-zero coefficients and their multiplicities, in order of first use.
        index: Per query, the position of its multiset in ``distinct``.
    """

    distinct: tuple[tuple[np.ndarray, np.ndarray], ...]
    index: np.ndarray

    @classmethod
    def collect(cls, multisets: Iterator[tuple[np.ndarray, np.ndarray]]) -> Multisets:
        """The queries' ``(values, counts)`` in order, each distinct multiset kept once
        (equal to 12 significant digits of its largest magnitude)."""
        known: dict[bytes, int] = {}
        distinct: list[tuple[np.ndarray, np.ndarray]] = []
        index = []
        for values, counts in multisets:
            key = _multiset_key(values, counts)
            if key not in known:
                known[key] = len(distinct)
                distinct.append((values, counts))
            index.append(known[key])
        return cls(tuple(distinct), np.asarray(index, dtype=np.int64))

    @classmethod
    def of_rows(cls, blocks: Iterator[tuple[int, np.ndarray]]) -> Multisets:
        """From the coefficient rows of the queries (:func:`coefficient_rows`'s blocks)."""
        return cls.collect(
            merged_multiset(row, np.ones(row.size, dtype=np.int64))
            for _, rows in blocks
            for row in rows
        )


def merged_multiset(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Magnitudes with multiplicities (repeats allowed), zeros dropped (:data:`ZERO`) and
    magnitudes equal to 12 significant digits of the largest merged into their largest
    (well inside the 1e-9 a lattice is recognized to): the floating-point residue of a
    computation whose exact coefficients agree does not multiply the convolutions."""
    magnitudes = np.abs(np.asarray(values, dtype=np.float64).reshape(-1))
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if not magnitudes.size or magnitudes.max() == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    largest = float(magnitudes.max())
    kept = (magnitudes > ZERO * largest) & (counts > 0)
    magnitudes, counts = magnitudes[kept], counts[kept]
    order = np.argsort(magnitudes)
    magnitudes, counts = magnitudes[order], counts[order]
    # A new magnitude starts where it exceeds the previous by more than the 12th digit.
    starts = np.flatnonzero(np.diff(magnitudes, prepend=-np.inf) > 1e-12 * largest)
    ends = np.append(starts[1:], magnitudes.size) - 1
    return magnitudes[ends], np.add.reduceat(counts, starts)


@dataclass
class Intervals:
    """Half-widths at one level for one measurement's noise, the distribution of each
    distinct coefficient multiset computed once.

    Attributes:
        law: The measurement's noise.
        level: The intervals' level, in (0, 1).
    """

    law: NoiseLaw
    level: float
    _known: dict[bytes, tuple[float, bool]] = field(default_factory=dict, repr=False)
    #: Per multiset decided, whether it is computed exactly (:meth:`admit`).
    _admitted: dict[bytes, bool] = field(default_factory=dict, repr=False)
    #: Work left for exact computations (:data:`EXACT_BUDGET`).
    _work_left: float = field(default=EXACT_BUDGET, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.level < 1:
            raise ValueError(f"a confidence level must lie in (0, 1), got {self.level}")

    def factor(self, terms: int) -> tuple[float, bool]:
        """``(κ, exact)``: ``κ · standard error`` is a valid half-width for any answer
        whose error sums at most ``terms`` noise draws, known from its standard error
        alone; ``exact`` as for :func:`exact_half_width`. A wide discrete Gaussian gives
        the normal quantile plus ``½‖c‖₁ ≤ ½√terms ‖c‖₂``; otherwise the Chernoff bound of
        one draw scaled by ``‖c‖₂`` (the module docstring)."""
        sigma = math.sqrt(self.law.variance())
        if _continuous(self.law) and not self.law.laplace:
            found = _normal_half_width(1.0, math.sqrt(terms), terms, self.law, self.level)
            if found is not None:
                return found[0] / sigma, found[1] <= RESOLUTION * sigma
        one = np.ones(1)
        return _chernoff_width(one, one, self.law, self.level) / sigma, False

    def bounded(self, standard_errors: object, terms: int) -> tuple[object, bool]:
        """Half-widths from standard errors alone (numpy or Dask arrays), and whether they
        are exact (:meth:`factor`)."""
        kappa, exact = self.factor(terms)
        return kappa * standard_errors, exact

    def normal(self, standard_errors: np.ndarray) -> np.ndarray:
        """``z · standard error``: the normal approximation, for estimates that are not
        linear in the noise (NNLS), where nothing exact or rigorous is known."""
        return float(special.ndtri((1 + self.level) / 2)) * standard_errors

    def from_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Half-widths of the queries whose coefficient rows (integer noise units) are
        ``rows``, and whether each is exact (:meth:`of`)."""
        rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
        return self.of(Multisets.of_rows(iter([(0, rows)])))

    def of(self, multisets: Multisets) -> tuple[np.ndarray, np.ndarray]:
        """Half-widths of queries with these coefficient multisets, and whether each is
        exact (:meth:`distinct`)."""
        widths, exact = self.distinct(multisets.distinct)
        return widths[multisets.index], exact[multisets.index]

    def distinct(
        self, multisets: Sequence[tuple[np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The half-width of each distinct ``(values, counts)`` multiset, in order, and
        whether it is exact; one too costly to convolve (:meth:`admit`) gets the Chernoff
        bound of its own coefficients (or the split bound, where less)."""
        self.admit([multisets])
        found = [self._multiset(values, counts) for values, counts in multisets]
        widths = np.array([width for width, _ in found], dtype=np.float64)
        exact = np.array([flag for _, flag in found], dtype=bool)
        return widths, exact

    def admit(self, groups: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]]) -> None:
        """Decide which multisets of these groups (each a sequence of ``(values, counts)``)
        are computed exactly: the groups cheapest first (the work of their multisets within
        :data:`WORK_LIMIT`; ties in the order given), each multiset within
        :data:`WORK_LIMIT` and the work left of :data:`EXACT_BUDGET`. A release decides
        for all its groups before computing any, so a costly group cannot take the budget
        from cheap ones after it; the work is estimated from the coefficients alone, so
        every computation of the release (the plan's, the audit's) decides the same.
        Multisets already decided keep their decision."""
        costed = []
        for position, group in enumerate(groups):
            undecided: dict[bytes, float] = {}
            for values, counts in group:
                key = _multiset_key(values, counts)
                if key not in self._admitted and key not in undecided:
                    undecided[key] = _work(values, counts, self.law)
            cost = sum(work for work in undecided.values() if work <= WORK_LIMIT)
            costed.append((cost, position, undecided))
        for _, _, undecided in sorted(costed, key=lambda entry: entry[:2]):
            for key, work in undecided.items():
                if key in self._admitted:  # in an earlier group too
                    continue
                admitted = work <= min(WORK_LIMIT, self._work_left)
                if admitted:
                    self._work_left -= work
                self._admitted[key] = admitted

    def _multiset(self, values: np.ndarray, counts: np.ndarray) -> tuple[float, bool]:
        key = _multiset_key(values, counts)
        known = self._known.get(key)
        if known is None:
            found = None
            if self._admitted[key]:
                found = _exact_of_multiset(values, counts, self.law, self.level, math.inf)
            if found is None:
                bound = _chernoff_width(values, counts, self.law, self.level)
                split = _split_half_width(values, counts, self.law, self.level)
                found = (min(bound, split), False)
            known = self._known[key] = found
        return known


def _multiset_key(values: np.ndarray, counts: np.ndarray) -> bytes:
    """The magnitudes rounded to 12 significant digits of the largest, and multiplicities."""
    if not values.size:
        return b""
    exponent = math.floor(math.log10(float(values.max()))) - 11
    rounded = np.rint(values / 10.0**exponent)
    return np.float64(exponent).tobytes() + rounded.tobytes() + counts.astype(np.int64).tobytes()


def coefficient_rows(W: Matrix, A: Matrix, scale: int) -> Iterator[tuple[int, np.ndarray]] | None:
    """``(first query, rows)`` blocks of ``W (AᵀA)⁺ Aᵀ / scale``: each least-squares
    answer's coefficients on the integer noise of the measurement of ``A`` (on the grid
    1/``scale``), through the covariance factor the standard errors use; None when they
    would take more than :data:`ROW_LIMIT` entries of work.

    Example:
        >>> from dpmm.linalg import Identity, Prefix
        >>> [rows.tolist() for _, rows in coefficient_rows(Prefix(2), Identity(2), 1)]
        [[[1.0, 0.0], [1.0, 1.0]]]
    """
    queries, cells = W.shape
    measured = A.shape[0]
    if queries * (cells + measured) > ROW_LIMIT:
        return None
    P = covariance_factor(A, None)
    width = max(1, BLOCK_ENTRIES // (cells + measured))

    def blocks() -> Iterator[tuple[int, np.ndarray]]:
        for first in range(0, queries, width):
            last = min(queries, first + width)
            pick = np.zeros((queries, last - first))
            pick[np.arange(first, last), np.arange(last - first)] = 1.0
            columns = np.asarray(A @ (P @ np.asarray(W.T @ pick)), dtype=np.float64)
            yield first, columns.T / scale

    return blocks()
