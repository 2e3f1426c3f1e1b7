"""The ``prefix_sum`` workload kind: running sums of a numeric attribute (seed 003's W·T·D).

A numeric attribute's bins are the buckets; a record in bucket b stands for the bucket's
upper bound ``D_b`` (the seed's vectorization), truncated at a public threshold θ when
the group has one (``T``: weights above θ become θ). Query j sums ``min(D_b, θ)`` over
the records in buckets ``0 … j``, so the group's factor on the attribute is
``Prefix(n) · diag(min(D, θ))`` and the matrix mechanism measures it like any other
linear workload: one record moves each answer by at most ``max_b min(D_b, θ)``.

Config::

    - kind: prefix_sum
      attribute: income          # needs numeric bins starting at or above 0
      by: [sex]                  # optional, as for prefix
      truncation: {threshold: 50000}   # optional public bound on each record's value

A threshold chosen privately from the data (SVT or the recursive mechanism) spends budget
before the strategy exists; :func:`dpmm.sums.answer_prefix_sums` runs those, releases take
a public threshold.

Example:
    >>> from dpmm.domain import Domain
    >>> domain = Domain.from_dict({"income": {"size": 3, "bins": [0, 10, 20, 40]}})
    >>> matrix, spec = prefix_sum_group({"attribute": "income"}, domain, "workload[0]")
    >>> matrix.dense().tolist(), spec["weights"]
    ([[10.0, 0.0, 0.0], [10.0, 20.0, 0.0], [10.0, 20.0, 40.0]], [10.0, 20.0, 40.0])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

import numpy as np

from dpmm.domain import Attribute, Domain
from dpmm.errors import ConfigError
from dpmm.linalg import Dense, Matrix

__all__ = ["MAX_BUCKETS", "TRUNCATION_KEYS", "bucket_weights", "prefix_sum_group"]

#: Most buckets of a prefix_sum attribute (its factor is a dense n × n matrix).
MAX_BUCKETS = 4096

TRUNCATION_KEYS = ("threshold",)

#: Truncation methods that choose θ from the data, which a release does not run.
PRIVATE_METHODS = ("svt", "recursive")


def _threshold(value: object, path: str) -> float:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: must be a mapping like {{threshold: 50000}}, got {value!r}")
    if "method" in value and value["method"] in PRIVATE_METHODS:
        raise ConfigError(
            f"{path}.method: a threshold chosen from the data ({value['method']}) spends budget "
            "before the strategy exists and runs through dpmm.sums.answer_prefix_sums; a "
            "release takes a public threshold: {threshold: <number>}"
        )
    unknown = [key for key in value if key not in TRUNCATION_KEYS]
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}: unknown key (allowed: threshold)")
    if "threshold" not in value:
        raise ConfigError(f"{path}.threshold: is required")
    theta = value["threshold"]
    if isinstance(theta, bool) or not isinstance(theta, Real) or not math.isfinite(theta):
        raise ConfigError(f"{path}.threshold: must be a positive number, got {theta!r}")
    if theta <= 0:
        raise ConfigError(f"{path}.threshold: must be a positive number, got {theta!r}")
    return float(theta)


def bucket_weights(attribute: Attribute, path: str) -> np.ndarray:
    """The buckets' upper bounds ``D`` (the attribute's upper bin edges)."""
    if attribute.bins is None:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has no numeric bins; prefix_sum needs "
            "'bins' in the domain to know each bucket's value"
        )
    if attribute.bins[0] < 0:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has bins from {attribute.bins[0]:g}; "
            "prefix_sum sums non-negative values, so its bins must start at 0 or above"
        )
    if attribute.size > MAX_BUCKETS:
        raise ConfigError(
            f"{path}: attribute '{attribute.name}' has {attribute.size:,} buckets; prefix_sum "
            f"takes at most {MAX_BUCKETS:,} (merge bins)"
        )
    return np.asarray(attribute.bins[1:], dtype=np.float64)


def prefix_sum_group(entry: Mapping, domain: Domain, path: str) -> tuple[Matrix, dict[str, Any]]:
    """The group's matrix (a Kron over the domain) and its spec details.

    Raises:
        ConfigError: a missing or unknown attribute, an attribute without numeric bins or
            with negative values, too many buckets, or a bad truncation section.
    """
    from dpmm.workload.config import _attribute, _attribute_list, _spread

    if "attribute" not in entry:
        raise ConfigError(f"{path}.attribute: is required for kind 'prefix_sum'")
    name = _attribute(domain, entry["attribute"], f"{path}.attribute")
    weights = bucket_weights(domain[name], f"{path}.attribute")
    spec: dict[str, Any] = {"attribute": name}
    if "truncation" in entry:
        theta = _threshold(entry["truncation"], f"{path}.truncation")
        weights = np.minimum(weights, theta)
        spec["truncation"] = {"threshold": theta}
    by: list[str] = []
    if "by" in entry:
        by = _attribute_list(domain, entry["by"], f"{path}.by")
        if name in by:
            raise ConfigError(f"{path}.by: contains '{name}', the group's own attribute")
        spec["by"] = by
    spec["weights"] = weights.tolist()
    n = weights.size
    factor = Dense(np.tril(np.ones((n, n))) * weights[None, :])
    return _spread(domain, {name: factor}, by), spec
