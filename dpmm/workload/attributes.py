"""Attribute names in a workload group's config, and the Kron product a group spreads
over the domain.

Every group kind reads the same way: one attribute by name, a list of distinct names
(returned in domain order), and a matrix that applies the group's own factors on its
attributes, an identity on each ``by`` attribute and a total on every other one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dpmm.domain import Domain
from dpmm.errors import ConfigError, describe_value
from dpmm.linalg import Matrix
from dpmm.workload import builders
from dpmm.workload.builders import _is_list

__all__ = ["attribute_name", "attribute_names", "spread"]


def attribute_name(domain: Domain, value: object, path: str) -> str:
    """``value`` as the name of one of the domain's attributes.

    Raises:
        ConfigError: ``value`` is not a string, or names no attribute (``path`` first).
    """
    if not isinstance(value, str):
        raise ConfigError(f"{path}: must be an attribute name, got {describe_value(value)}")
    if value not in domain:
        known = ", ".join(domain.attributes)
        raise ConfigError(f"{path}: unknown attribute '{value}' (the domain has: {known})")
    return value


def attribute_names(domain: Domain, value: object, path: str) -> list[str]:
    """A non-empty list of distinct attribute names, returned in domain order.

    Raises:
        ConfigError: not a non-empty list, an item names no attribute, or one is repeated.
    """
    if not _is_list(value) or not value:
        raise ConfigError(
            f"{path}: must be a non-empty list of attribute names, got {describe_value(value)}"
        )
    names = [attribute_name(domain, item, f"{path}[{j}]") for j, item in enumerate(value)]
    for j, name in enumerate(names):
        if name in names[:j]:
            raise ConfigError(f"{path}[{j}]: lists attribute '{name}' twice")
    return sorted(names, key=domain.index)


def spread(domain: Domain, chosen: Mapping[str, Matrix], by: Sequence[str] = ()) -> Matrix:
    """Kron over the domain: ``chosen`` factors, identities on ``by``, totals elsewhere."""
    factors = []
    for attribute, n in zip(domain.attributes, domain.shape, strict=True):
        if attribute in chosen:
            factors.append(chosen[attribute])
        else:
            factors.append(builders.identity(n) if attribute in by else builders.total(n))
    return builders.kron(factors)
