"""The threshold of the projection onto ``{x ≥ 0, Σx = T}``, for a vector split in blocks.

The projection of v is ``max(v − τ, 0)`` with τ the root of the decreasing, piecewise
linear ``m(τ) = Σ max(v − τ, 0) = T``. Here τ is found exactly in a fixed number of
passes, each a small summary per block and one combine, so the passes can be built
into a task graph ahead of time (:mod:`~dpmm.reconstruct.chunked_loop`) or cost a
fixed few round trips (:func:`~dpmm.reconstruct.projected_gradient.project` on a Dask
array):

1. :func:`summary`: the size, sum and largest entry give the bracket
   ``[(Σv − T)/n, max v]`` (``m`` is at least T at its left end);
2. :data:`HISTOGRAM_PASSES` times :func:`histogram` / :func:`narrow`: counts and sums
   of the entries in :data:`BINS` equal buckets of the bracket give ``m`` at every
   edge, and the bracket shrinks to the bucket holding τ;
3. :func:`inside` / :func:`exact`: the few entries inside the final bracket, with the
   count and sum of those above it, give τ by the sorting formula (Held, Wolfe &
   Crowder 1974): entries above the bracket are in the support, entries at or below
   it are not.

Michelot's fixed point, the alternative, needs a data-dependent number of passes
(many on skewed data), which a graph built ahead of time cannot have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "BINS",
    "HISTOGRAM_PASSES",
    "exact",
    "first_bracket",
    "histogram",
    "inside",
    "narrow",
    "summary",
    "threshold",
]

#: Buckets per histogram pass: each pass narrows the bracket this many times.
BINS = 4096

#: Histogram passes: 4096² ≈ 1.7·10⁷ narrows a bracket around 10⁹ spread entries to a few.
HISTOGRAM_PASSES = 2

Bracket = tuple[float, float]


def summary(block: np.ndarray) -> np.ndarray:
    """``[size, sum, max]`` of one block (``max`` is ``-inf`` for an empty block)."""
    largest = float(block.max()) if block.size else -np.inf
    return np.array([block.size, float(block.sum()), largest])


def first_bracket(summaries: Sequence[np.ndarray], total: float) -> Bracket:
    """``[(Σv − T)/n, max v]``, which holds τ: ``m`` at its left end is at least T.

    Example:
        >>> first_bracket([summary(np.array([3.0, -1.0, 1.0]))], 2.0)
        (0.3333333333333333, 3.0)
    """
    size = sum(float(s[0]) for s in summaries)
    mass = sum(float(s[1]) for s in summaries)
    largest = max(float(s[2]) for s in summaries)
    return (mass - total) / size, largest


def _buckets(block: np.ndarray, bracket: Bracket) -> np.ndarray:
    # Bucket k ≥ 1 holds the entries in (e_{k-1}, e_k]; 0 those at or below the bracket,
    # BINS + 1 those above it (e_k the BINS + 1 equally spaced edges).
    low, high = bracket
    width = (high - low) / BINS
    index = np.ceil((block - low) / width)
    np.clip(index, 0, BINS + 1, out=index)
    return index.astype(np.intp)


def histogram(block: np.ndarray, bracket: Bracket) -> np.ndarray:
    """The count and sum of one block's entries per bucket: shape ``(2, BINS + 2)``."""
    low, high = bracket
    if not high > low or not block.size:
        return np.zeros((2, BINS + 2))
    index = _buckets(block, bracket).reshape(-1)
    counts = np.bincount(index, minlength=BINS + 2)
    sums = np.bincount(index, weights=block.reshape(-1), minlength=BINS + 2)
    return np.stack([counts.astype(np.float64), sums])


def narrow(histograms: Sequence[np.ndarray], bracket: Bracket, total: float) -> Bracket:
    """The bucket of ``bracket`` that holds τ, from every block's :func:`histogram`."""
    low, high = bracket
    if not high > low:
        return bracket
    counts, sums = np.sum(histograms, axis=0)
    edges = np.linspace(low, high, BINS + 1)
    # Entries above edge k are those in buckets k + 1 and up.
    count_above = np.cumsum(counts[::-1])[::-1][1:]
    sum_above = np.cumsum(sums[::-1])[::-1][1:]
    mass = sum_above - edges * count_above
    (reaching,) = np.nonzero(mass >= total)
    k = int(reaching[-1]) if reaching.size else 0
    return float(edges[k]), float(edges[min(k + 1, BINS)])


def inside(block: np.ndarray, bracket: Bracket) -> tuple[int, float, np.ndarray]:
    """One block's count and sum of entries above the bracket, and its entries in it."""
    low, high = bracket
    above = block > high
    within = block[(block > low) & ~above]
    return int(above.sum()), float(block[above].sum()), within


def exact(parts: Sequence[tuple[int, float, np.ndarray]], bracket: Bracket, total: float) -> float:
    """τ from every block's :func:`inside`.

    With the entries of the bracket sorted down, ``c_1 ≥ c_2 ≥ …``, and N entries of
    sum S above it, τ is ``(S + c_1 + … + c_ρ − T)/(N + ρ)`` for the largest ρ whose
    ``c_ρ`` is above its own such value.

    Example:
        >>> exact([(0, 0.0, np.array([3.0, 1.0]))], (-1.0, 3.0), 2.0)
        1.0
    """
    count = sum(p[0] for p in parts)
    mass = sum(p[1] for p in parts)
    values = np.sort(np.concatenate([p[2] for p in parts]))[::-1]
    thresholds = (mass + np.cumsum(values) - total) / (count + np.arange(1, values.size + 1))
    (support,) = np.nonzero(values > thresholds)
    if support.size:
        return float(thresholds[support[-1]])
    if count:
        return (mass - total) / count
    return bracket[1]  # T = 0: every entry at or below the top goes to zero


def threshold(blocks: Sequence[Any], total: float) -> float:
    """τ for blocks in this process (numpy arrays) or on a cluster (Dask delayed values,
    each pass one ``dask.compute`` of small summaries).

    Example:
        >>> v = np.array([3.0, -1.0, 1.0])
        >>> tau = threshold([v[:1], v[1:]], 2.0)
        >>> np.maximum(v - tau, 0.0).tolist()
        [2.0, 0.0, 0.0]
    """

    def each(function: Callable[..., Any], *args: Any) -> list[Any]:
        if all(isinstance(b, np.ndarray) for b in blocks):
            return [function(b, *args) for b in blocks]
        import dask

        return list(dask.compute(*[dask.delayed(function)(b, *args) for b in blocks]))

    bracket = first_bracket(each(summary), total)
    for _ in range(HISTOGRAM_PASSES):
        bracket = narrow(each(histogram, bracket), bracket, total)
    return exact(each(inside, bracket), bracket, total)
