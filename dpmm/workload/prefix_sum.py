"""The sum kinds: ``prefix_sum``, running sums of a numeric attribute (seed 003's W·T·D), and
``sum``, its totals (by groups).

A numeric attribute's bins are the buckets; a record in bucket b is counted at the
bucket's value ``D_b``, truncated at a public threshold θ when the group has one (``T``:
values above θ become θ). Query j sums ``min(D_b, θ)`` over the records in buckets
``0 … j``, so the group's factor on the attribute is ``Prefix(n) · diag(min(D, θ))`` and
the matrix mechanism measures it like any other linear workload: one record moves each
answer by at most ``max_b min(D_b, θ)``. A ``sum`` group is the last row of that: one total
per cell of its ``by`` attributes (one in all without ``by``), factor ``min(D, θ)ᵀ``.

``D_b`` is the bucket's midpoint by default (``valuation: midpoint``): a record's value is
off by at most half its bucket's width, either way. Seed 003 counts it at the upper edge
(``valuation: upper``), never below the value but up to a whole width above: on the RAND
HIE incomes in $2,500 buckets (θ = 60,000) the six sites' totals come out 13–19 % high
that way, and −0.5 to +1.1 % at the midpoints.

Config::

    - kind: prefix_sum
      attribute: income          # needs numeric bins starting at or above 0
      by: [sex]                  # optional, as for prefix
      truncation: {threshold: 50000}   # optional public bound on each record's value
      valuation: midpoint        # or upper: what a record in a bucket is counted at
      # or a bound chosen from the data, spending a share of the release's ε on it:
      # truncation: {method: svt, share: 1/10, ratio: 0.998, growth: 1.2, start: 50000}
      # truncation: {method: recursive, share: 1/10, floor: 50000, shift: 0.5}

A private threshold (seed 003's SVT or recursive mechanism) is drawn by the release
pipeline before its strategy is selected (:mod:`dpmm.pipeline.threshold_stage`). Until then
the group is built untruncated — every bucket weighs its value, the largest being the
per-record sensitivity — which is also what ``dpmm plan`` shows; its spec holds
the method (:class:`PrivateTruncation`) and the pipeline rebuilds it with ``{threshold: θ}``.

Example:
    >>> from dpmm.domain import Domain
    >>> domain = Domain.from_dict({"income": {"size": 3, "bins": [0, 10, 20, 40]}})
    >>> matrix, spec = prefix_sum_group({"attribute": "income"}, domain, "workload[0]")
    >>> matrix.dense().tolist(), spec["weights"]
    ([[5.0, 0.0, 0.0], [5.0, 15.0, 0.0], [5.0, 15.0, 30.0]], [5.0, 15.0, 30.0])
    >>> entry = {"attribute": "income", "valuation": "upper"}
    >>> prefix_sum_group(entry, domain, "workload[0]")[1]["weights"]
    [10.0, 20.0, 40.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np

from dpmm.domain import Attribute, Domain
from dpmm.errors import ConfigError, PrivacyParameterError, describe_value
from dpmm.linalg import Dense, Matrix
from dpmm.privacy.params import exact_fraction
from dpmm.workload.attributes import attribute_name, attribute_names, spread

__all__ = [
    "MAX_BUCKETS",
    "PRIVATE_METHODS",
    "SUM_KINDS",
    "TRUNCATION_KEYS",
    "VALUATIONS",
    "PrivateTruncation",
    "bucket_values",
    "bucket_weights",
    "prefix_sum_group",
    "private_truncation",
    "sum_group",
    "value_error_bound",
]

#: Most buckets of a prefix_sum attribute (its factor is a dense n × n matrix).
MAX_BUCKETS = 4096

#: Workload kinds whose answers are sums of a numeric attribute's values, not counts.
SUM_KINDS = ("prefix_sum", "sum")

#: What a record in a bucket is counted at: the bucket's midpoint (the default: a record's
#: error is at most half the bucket's width, either way), or its upper edge (seed 003's
#: vectorization: never below the value, up to a whole width above it).
VALUATIONS = ("midpoint", "upper")

TRUNCATION_KEYS = ("threshold",)

#: Truncation methods that choose θ from the data, and the keys each takes.
PRIVATE_METHODS = {
    "svt": ("method", "share", "ratio", "growth", "start"),
    "recursive": ("method", "share", "floor", "shift"),
}

#: Seed 003's settings (also :mod:`dpmm.sums.thresholds`' defaults): the share of ε spent
#: on the threshold; SVT's keep ratio, growth of the candidate bounds and first bound; the
#: recursive mechanism's floor θ₀ and upward log shift μ.
DEFAULT_SHARE = Fraction(1, 10)
SVT_RATIO = Fraction(998, 1000)
SVT_GROWTH = Fraction(6, 5)
SVT_START = 50_000
RECURSIVE_FLOOR = 50_000
RECURSIVE_SHIFT = 0.5


@dataclass(frozen=True)
class PrivateTruncation:
    """A threshold chosen from the data: the method, its budget share and its knobs.

    Attributes:
        method: ``svt`` or ``recursive``.
        share: The fraction of the release's ε spent on the threshold (0 < share < 1).
        ratio, growth, start: SVT's keep ratio ``r``, candidate growth ``c`` and first
            candidate ``s``.
        floor, shift: The recursive mechanism's smallest threshold ``θ₀`` and log shift ``μ``.

    Example:
        >>> weights = np.array([1e4, 1e5, 1e6])
        >>> choice = PrivateTruncation.from_config({"method": "svt", "share": "1/5"}, weights, "t")
        >>> choice.share, choice.to_dict()["ratio"]
        (Fraction(1, 5), '499/500')
    """

    method: str
    share: Fraction = DEFAULT_SHARE
    ratio: Fraction = SVT_RATIO
    growth: Fraction = SVT_GROWTH
    start: int = SVT_START
    floor: int = RECURSIVE_FLOOR
    shift: float = RECURSIVE_SHIFT

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready truncation section (fractions as exact text), method's keys only."""
        values = {
            "method": self.method,
            "share": str(self.share),
            "ratio": str(self.ratio),
            "growth": str(self.growth),
            "start": self.start,
            "floor": self.floor,
            "shift": self.shift,
        }
        return {key: values[key] for key in PRIVATE_METHODS[self.method]}

    @classmethod
    def from_config(cls, value: Mapping, weights: np.ndarray, path: str) -> PrivateTruncation:
        """Validate a ``{method: svt|recursive, ...}`` section; ``weights`` are the buckets'.

        Raises:
            ConfigError: naming ``<path>.<key>``: an unknown key, a share outside (0, 1), a
                ratio outside (0, 1), a growth at or below 1, a start or floor that is not an
                integer below the top bucket weight (SVT's start at least the smallest
                one: a candidate below every weight would count no one), a shift that is
                not finite.
        """
        method, top = value["method"], float(weights[-1])
        allowed = PRIVATE_METHODS[method]
        for key in value:
            if key not in allowed:
                raise ConfigError(
                    f"{path}.{key}: unknown key for method {method} (allowed: {', '.join(allowed)})"
                )
        share = _fraction(value, "share", DEFAULT_SHARE, path)
        if share >= 1:
            raise ConfigError(f"{path}.share: must be below 1 (a fraction of ε), got {share}")
        if method == "recursive":
            floor = _integer_in(value, "floor", RECURSIVE_FLOOR, (1, top), path)
            shift = value.get("shift", RECURSIVE_SHIFT)
            if isinstance(shift, bool) or not isinstance(shift, Real) or not math.isfinite(shift):
                raise ConfigError(f"{path}.shift: must be a finite number, got {shift!r}")
            return cls(method, share, floor=floor, shift=float(shift))
        ratio = _fraction(value, "ratio", SVT_RATIO, path)
        if ratio >= 1:
            raise ConfigError(f"{path}.ratio: must lie strictly between 0 and 1, got {ratio}")
        growth = _fraction(value, "growth", SVT_GROWTH, path)
        if growth <= 1:
            raise ConfigError(f"{path}.growth: must be above 1, got {growth}")
        start = _integer_in(value, "start", SVT_START, (math.ceil(weights[0]), top), path)
        return cls(method, share, ratio=ratio, growth=growth, start=start)


def _fraction(value: Mapping, key: str, default: Fraction, path: str) -> Fraction:
    raw = value.get(key, default)
    try:
        return exact_fraction(raw, key)
    except PrivacyParameterError:
        raise ConfigError(
            f"{path}.{key}: must be a positive exact number such as 1/10, got {describe_value(raw)}"
        ) from None


def _integer_in(
    value: Mapping, key: str, default: int, limits: tuple[int, float], path: str
) -> int:
    """An integer ``low ≤ v < top``: at or above the top bucket weight nothing is truncated."""
    raw, (low, top) = value.get(key, default), limits
    low = max(low, 1)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low or raw >= top:
        raise ConfigError(
            f"{path}.{key}: must be an integer from {low} to below the top bucket weight "
            f"{top:g}, got {describe_value(raw)}"
        )
    return raw


def private_truncation(spec: Mapping[str, Any]) -> PrivateTruncation | None:
    """The private truncation of a workload group's spec, or None (public or no threshold).

    Example:
        >>> private_truncation({"kind": "prefix_sum", "truncation": {"threshold": 5.0}}) is None
        True
    """
    section = spec.get("truncation") if spec.get("kind") in SUM_KINDS else None
    if not isinstance(section, Mapping) or section.get("method") not in PRIVATE_METHODS:
        return None
    return PrivateTruncation(
        method=section["method"],
        share=Fraction(section["share"]),
        **{
            key: (Fraction(section[key]) if key in ("ratio", "growth") else section[key])
            for key in PRIVATE_METHODS[section["method"]][2:]
        },
    )


def _truncation(value: object, weights: np.ndarray, path: str) -> float | PrivateTruncation:
    """A public threshold θ, or the private method that will choose it."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: must be a mapping like {{threshold: 50000}}, got {value!r}")
    if "method" in value:
        if value["method"] not in PRIVATE_METHODS:
            raise ConfigError(
                f"{path}.method: unknown method {describe_value(value['method'])} "
                f"(expected one of: {', '.join(PRIVATE_METHODS)}; or give {{threshold: θ}})"
            )
        return PrivateTruncation.from_config(value, weights, path)
    unknown = [key for key in value if key not in TRUNCATION_KEYS]
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}: unknown key (allowed: threshold, or method)")
    if "threshold" not in value:
        raise ConfigError(f"{path}.threshold: is required")
    theta = value["threshold"]
    if isinstance(theta, bool) or not isinstance(theta, Real) or not math.isfinite(theta):
        raise ConfigError(f"{path}.threshold: must be a positive number, got {theta!r}")
    if theta <= 0:
        raise ConfigError(f"{path}.threshold: must be a positive number, got {theta!r}")
    return float(theta)


def bucket_weights(attribute: Attribute, path: str, valuation: str = "midpoint") -> np.ndarray:
    """The value each bucket's records are counted at: its midpoint, or its upper bin edge
    (seed 003's ``D``) for ``valuation="upper"``."""
    if attribute.bins is None:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has no numeric bins; a sum needs "
            "'bins' in the domain to know each bucket's value"
        )
    if attribute.bins[0] < 0:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has bins from {attribute.bins[0]:g}; "
            "a sum adds non-negative values, so its bins must start at 0 or above"
        )
    if attribute.size > MAX_BUCKETS:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has {attribute.size:,} buckets; a sum "
            f"takes at most {MAX_BUCKETS:,} (merge bins)"
        )
    return bucket_values(attribute.bins, valuation)


def bucket_values(bins: Sequence[float], valuation: str) -> np.ndarray:
    """Each bucket's value from its bin edges: the midpoint, or the upper edge (``upper``).

    Example:
        >>> bucket_values([0, 10, 20, 40], "midpoint").tolist()
        [5.0, 15.0, 30.0]
    """
    edges = np.asarray(bins, dtype=np.float64)
    return edges[1:] if valuation == "upper" else (edges[:-1] + edges[1:]) / 2


def value_error_bound(
    bins: Sequence[float], valuation: str, threshold: float | None = None
) -> float:
    """The most a record's counted value can differ from its own value, both capped at
    ``threshold`` (θ): half the widest bucket below θ at the midpoints, a whole width at
    the upper edges. An answer is off by at most this much per record it adds up, on top
    of its noise: the binning's bias, bounded from public facts alone.

    Example:
        >>> edges = [0, 10, 20, 40]
        >>> value_error_bound(edges, "midpoint"), value_error_bound(edges, "upper")
        (10.0, 20.0)
        >>> value_error_bound(edges, "midpoint", threshold=25)
        5.0
    """
    edges = np.minimum(np.asarray(bins, dtype=np.float64), threshold or np.inf)
    counted = np.minimum(bucket_values(bins, valuation), threshold or np.inf)
    return float(np.max(np.maximum(counted - edges[:-1], edges[1:] - counted)))


def _valuation(entry: Mapping, path: str) -> str:
    valuation = entry.get("valuation", "midpoint")
    if valuation not in VALUATIONS:
        raise ConfigError(
            f"{path}.valuation: must be one of {', '.join(VALUATIONS)}, got "
            f"{describe_value(valuation)}"
        )
    return valuation


def prefix_sum_group(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict[str, Any]]:
    """A ``prefix_sum`` group's matrix (a Kron over the domain) and its spec details.

    Raises:
        ConfigError: as :func:`sum_group`.
    """
    return _sum_group(entry, domain, path, running=True)


def sum_group(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict[str, Any]]:
    """A ``sum`` group's matrix (a Kron over the domain) and its spec details.

    Raises:
        ConfigError: a missing or unknown attribute, an attribute without numeric bins or
            with negative values, too many buckets, or a bad truncation section.
    """
    return _sum_group(entry, domain, path, running=False)


def _sum_group(
    entry: Mapping, domain: Domain, path: str, *, running: bool
) -> tuple[Matrix, dict[str, Any]]:
    if "attribute" not in entry:
        kind = "prefix_sum" if running else "sum"
        raise ConfigError(f"{path}.attribute: is required for kind '{kind}'")
    name = attribute_name(domain, entry["attribute"], f"{path}.attribute")
    valuation = _valuation(entry, path)
    weights = bucket_weights(domain[name], f"{path}.attribute", valuation)
    spec: dict[str, Any] = {"attribute": name, "valuation": valuation}
    if "truncation" in entry:
        chosen = _truncation(entry["truncation"], weights, f"{path}.truncation")
        if isinstance(chosen, PrivateTruncation):
            # θ is not known before the data: untruncated (the top bucket weight bounds a
            # record) until the pipeline rebuilds the group with the θ it drew.
            spec["truncation"] = chosen.to_dict()
        else:
            weights = np.minimum(weights, chosen)
            spec["truncation"] = {"threshold": chosen}
    threshold = spec.get("truncation", {}).get("threshold")  # None: θ not yet drawn
    spec["value_error_bound"] = value_error_bound(domain[name].bins, valuation, threshold)
    by: list[str] = []
    if "by" in entry:
        by = attribute_names(domain, entry["by"], f"{path}.by")
        if name in by:
            raise ConfigError(f"{path}.by: contains '{name}', the group's own attribute")
        spec["by"] = by
    spec["weights"] = weights.tolist()
    n = weights.size
    factor = Dense(np.tril(np.ones((n, n))) * weights[None, :] if running else weights[None, :])
    return spread(domain, {name: factor}, by), spec
