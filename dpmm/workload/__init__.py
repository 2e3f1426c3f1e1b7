"""Workloads: the linear queries a release answers, as implicit matrices over the domain.

``builders`` makes 1-D query sets (identity, total, prefix, ranges) and joins
them (Kronecker products, unions, weights, marginals); ``census`` holds the
Census SF1 workload; ``config`` reads the ``workload:`` section of a release
configuration into named :class:`WorkloadGroup` values.

Example:
    >>> from dpmm.workload import all_range, identity, kron
    >>> kron([all_range(4), identity(2)]).shape
    (20, 8)
"""

from dpmm.workload.builders import (
    all_range,
    identity,
    kron,
    marginal,
    marginals,
    prefix,
    ranges,
    total,
    vstack,
    weighted,
)
from dpmm.workload.census import census_domain, census_factors, census_sf1, census_w1
from dpmm.workload.config import WorkloadGroup, from_config, stack
from dpmm.workload.labels import query_labels
from dpmm.workload.table_form import TableBlock, answer_from_tables, needed_tables, table_form

__all__ = [
    "TableBlock",
    "WorkloadGroup",
    "all_range",
    "answer_from_tables",
    "census_domain",
    "census_factors",
    "census_sf1",
    "census_w1",
    "from_config",
    "identity",
    "kron",
    "marginal",
    "marginals",
    "needed_tables",
    "prefix",
    "query_labels",
    "ranges",
    "stack",
    "table_form",
    "total",
    "vstack",
    "weighted",
]
