"""The data domain: ordered attributes, their sizes, and optional value labels or bin edges.

A record is a cell of the domain's contingency table; the data vector ``x``
holds one count per cell, cells ordered in C (row-major) order of the
attributes.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmm.errors import DomainError

__all__ = ["Attribute", "Domain"]


def _is_list(value: object) -> bool:
    """A list-like of values: not a string (whose characters would pass for labels)."""
    return isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)


def _floats(values: Iterable[object]) -> tuple[float, ...] | None:
    """The values as floats, or None if one of them is not a number."""
    try:
        return tuple(float(value) for value in values)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, number of values, and optional labels or numeric bin edges.

    ``labels`` names each of the ``size`` values of a categorical attribute;
    ``bins`` gives the ``size + 1`` increasing edges of a numeric attribute.
    """

    name: str
    size: int
    labels: tuple[str, ...] | None = None
    bins: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DomainError(f"An attribute name must be a non-empty string, got {self.name!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise DomainError(
                f"Attribute '{self.name}' must have a positive integer size, got {self.size!r}"
            )
        if self.labels is not None:
            if not _is_list(self.labels):
                raise DomainError(
                    f"Attribute '{self.name}' labels must be a list, got {self.labels!r}"
                )
            object.__setattr__(self, "labels", tuple(str(label) for label in self.labels))
            if len(self.labels) != self.size:
                raise DomainError(
                    f"Attribute '{self.name}' has {len(self.labels)} labels for size {self.size}"
                )
            if len(set(self.labels)) != self.size:
                raise DomainError(f"Attribute '{self.name}' has duplicate labels")
        if self.bins is not None:
            edges = _floats(self.bins) if _is_list(self.bins) else None
            if edges is None:
                raise DomainError(
                    f"Attribute '{self.name}' bins must be a list of numbers, got {self.bins!r}"
                )
            object.__setattr__(self, "bins", edges)
            if len(edges) != self.size + 1:
                raise DomainError(
                    f"Attribute '{self.name}' needs {self.size + 1} bin edges, got {len(edges)}"
                )
            if any(not math.isfinite(e) for e in edges) or any(
                b <= a for a, b in itertools.pairwise(edges)
            ):
                raise DomainError(
                    f"Attribute '{self.name}' bin edges must be finite and increasing"
                )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description."""
        out: dict[str, Any] = {"name": self.name, "size": self.size}
        if self.labels is not None:
            out["labels"] = list(self.labels)
        if self.bins is not None:
            out["bins"] = list(self.bins)
        return out


@dataclass(frozen=True)
class Domain:
    """Ordered attributes; validated on construction.

    Example:
        >>> domain = Domain.from_dict({"sex": 2, "age": 5})
        >>> domain.shape, domain.size
        ((2, 5), 10)
        >>> domain.project(["age"]).attributes
        ('age',)
    """

    attrs: tuple[Attribute, ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        attrs = tuple(self.attrs)
        if not attrs:
            raise DomainError("A domain needs at least one attribute")
        for attr in attrs:
            if not isinstance(attr, Attribute):
                raise DomainError(f"Domain attributes must be Attribute values, got {attr!r}")
        names = [attr.name for attr in attrs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise DomainError(f"Domain has duplicate attribute '{duplicates[0]}'")
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "_index", {name: i for i, name in enumerate(names)})

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Domain:
        """Build from ``{name: size}``, ``{name: {size, labels?, bins?}}`` or a list of dicts."""
        if isinstance(spec, Mapping):
            items = [
                {"name": name, **(value if isinstance(value, Mapping) else {"size": value})}
                for name, value in spec.items()
            ]
        elif isinstance(spec, Sequence) and not isinstance(spec, str):
            items = list(spec)
        else:
            raise DomainError(f"A domain must be a mapping or a list of attributes, got {spec!r}")
        attrs = []
        for item in items:
            if not isinstance(item, Mapping) or "name" not in item or "size" not in item:
                raise DomainError(f"Each domain attribute needs 'name' and 'size', got {item!r}")
            unknown = set(item) - {"name", "size", "labels", "bins"}
            if unknown:
                raise DomainError(
                    f"Attribute '{item['name']}' has unknown key '{sorted(unknown)[0]}'"
                )
            attrs.append(
                Attribute(str(item["name"]), item["size"], item.get("labels"), item.get("bins"))
            )
        return cls(tuple(attrs))

    @classmethod
    def from_json(cls, path: str | Path) -> Domain:
        """Read a domain file (``{name: size}`` as private-pgm writes it, or a list of dicts)."""
        path = Path(path)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DomainError(f"Domain file '{path}' does not exist") from None
        except OSError as error:
            raise DomainError(f"Domain file '{path}' cannot be read ({error.strerror})") from None
        except UnicodeDecodeError as error:
            raise DomainError(
                f"Domain file '{path}' is not UTF-8 text (byte {error.start})"
            ) from None
        except json.JSONDecodeError as error:
            raise DomainError(f"Domain file '{path}' is not valid JSON: {error.msg}") from None
        try:
            return cls.from_dict(spec)
        except DomainError as error:
            raise DomainError(f"Domain file '{path}': {error}") from None

    def to_dict(self) -> list[dict[str, Any]]:
        """A JSON-ready description that :meth:`from_dict` reads back."""
        return [attr.to_dict() for attr in self.attrs]

    @property
    def attributes(self) -> tuple[str, ...]:
        """Attribute names, in order."""
        return tuple(attr.name for attr in self.attrs)

    @property
    def shape(self) -> tuple[int, ...]:
        """Attribute sizes, in order."""
        return tuple(attr.size for attr in self.attrs)

    @property
    def size(self) -> int:
        """Number of cells (an exact integer; may exceed 2⁶³)."""
        return math.prod(self.shape)

    def __len__(self) -> int:
        return len(self.attrs)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> Attribute:
        return self.attrs[self.index(name)]

    def index(self, name: str) -> int:
        """Position of an attribute; raises :class:`DomainError` naming it if unknown."""
        try:
            return self._index[name]
        except (KeyError, TypeError):
            known = ", ".join(self.attributes)
            raise DomainError(f"Unknown attribute '{name}' (the domain has: {known})") from None

    def indices(self, names: Iterable[str]) -> tuple[int, ...]:
        """Positions of several attributes, in the order given."""
        return tuple(self.index(name) for name in names)

    def project(self, names: Iterable[str]) -> Domain:
        """The sub-domain of the named attributes, kept in domain order."""
        positions = sorted(set(self.indices(names)))
        return Domain(tuple(self.attrs[i] for i in positions))
