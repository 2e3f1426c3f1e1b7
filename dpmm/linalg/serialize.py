"""Save and load dpmm matrices as ``.npz`` files, without pickle.

A matrix is written as a JSON *spec*, one node per implicit matrix
(``{"type": "Kron", "shape": [6, 6], "factors": [...]}``), plus the numeric arrays the
nodes refer to by key (``{"type": "Dense", "array": "a0"}``). Every node is rebuilt
through its type's public constructor, so a loaded strategy has the same type, repr,
entries and fast structured operations as the one saved. Scalar parameters (weights,
coefficients) are stored as ``float.hex`` strings and arrays keep their dtype, so
everything round-trips bit for bit.

Only the types in :data:`SUPPORTED_TYPES` are written, matched exactly (not by
``isinstance``, which would save a Hierarchical as a plain Sparse); anything else (a
Gram's helper class, a user's subclass) is refused with a :class:`SerializationError`.

Example:
    >>> import pathlib, tempfile
    >>> from dpmm.linalg import Identity, Kron, Prefix, Weighted
    >>> A = Kron([Weighted(0.1, Prefix(3)), Identity(2)])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_matrix(A, pathlib.Path(folder) / "strategy.npz")
    ...     B = load_matrix(pathlib.Path(folder) / "strategy.npz")
    >>> B, matrix_digest(B) == matrix_digest(A)
    (0.1·Prefix(3) ⊗ Identity(2), True)
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import scipy.sparse as sp

from dpmm.errors import DpmmError, UnsupportedQueryError
from dpmm.linalg.base import Matrix
from dpmm.linalg.combinators import (
    Dense,
    HStack,
    Product,
    Sparse,
    Sum,
    Transposed,
    VStack,
    Weighted,
)
from dpmm.linalg.eigen_strategy import EigenGram, EigenStrategy, is_dask
from dpmm.linalg.elementary import AllRange, Identity, Ones, Prefix, RangeQueries
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.hierarchy import Haar, Hierarchical
from dpmm.linalg.kron import Kron
from dpmm.linalg.marginals import Marginal, Marginals, MarginalsGram, mask_members, members_mask
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.table_krons import TableKrons

__all__ = [
    "FORMAT",
    "SUPPORTED_TYPES",
    "SerializationError",
    "load_matrix",
    "matrix_digest",
    "matrix_from_spec",
    "matrix_to_spec",
    "save_matrix",
]

#: The format tag of a saved matrix; a reader refuses any other.
FORMAT = "dpmm-matrix/1"
#: The npz key of the UTF-8 JSON document (a uint8 array).
SPEC_KEY = "__spec__"

Node = dict[str, Any]


class SerializationError(DpmmError, ValueError):
    """A matrix cannot be saved, or a file or spec is not a valid saved matrix."""


# -- writing -------------------------------------------------------------------------------


def _weighted_sets(weights: Mapping[int, float]) -> list[list[Any]]:
    """``{mask: value}`` as ``[[attribute positions], float.hex(value)]`` in order."""
    return [[mask_members(mask), float(value).hex()] for mask, value in weights.items()]


class _Encoder:
    """Builds the spec tree and collects its arrays, each stored once per distinct content."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._keys: dict[tuple[str, tuple[int, ...], str], str] = {}
        # id → node: a factor shared by several parents is encoded once (the matrices
        # stay alive in the tree being encoded, so their ids cannot be reused meanwhile).
        self._nodes: dict[int, Node] = {}

    def node(self, matrix: Matrix) -> Node:
        cached = self._nodes.get(id(matrix))
        if cached is not None:
            return cached
        encode = _ENCODERS.get(type(matrix))
        if encode is None:
            raise SerializationError(
                f"{matrix!r} is a {type(matrix).__name__}, which cannot be saved; supported "
                f"types are {', '.join(sorted(cls.__name__ for cls in SUPPORTED_TYPES))}"
            )
        node: Node = {"type": type(matrix).__name__, "shape": list(matrix.shape)}
        if hasattr(matrix, "domain_shape"):  # every type over an attribute domain records it
            node["domain"] = list(matrix.domain_shape)
        node.update(encode(matrix, self))
        self._nodes[id(matrix)] = node
        return node

    def nodes(self, matrices: list[Matrix]) -> list[Node]:
        return [self.node(matrix) for matrix in matrices]

    def array(self, values: Any) -> str:
        # Dask weights are computed here: a saved file holds the values themselves.
        array = np.asarray(values.compute() if is_dask(values) else values)
        if array.dtype.kind not in "biuf":
            raise SerializationError(f"An array of dtype {array.dtype} cannot be saved")
        identity = (array.dtype.str, array.shape, _content_hash(array))
        key = self._keys.get(identity)
        if key is None:
            key = self._keys[identity] = f"a{len(self.arrays)}"
            self.arrays[key] = array
        return key


def _content_hash(array: np.ndarray) -> str:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return hashlib.sha256(flat).hexdigest()


def _encode_eigen(matrix: EigenStrategy | EigenGram, encoder: _Encoder) -> Node:
    node: Node = {"bases": [encoder.array(q) for q in matrix.bases]}
    if matrix.factor_values is not None:
        node["factor_weights"] = [encoder.array(v) for v in matrix.factor_values]
    else:
        node["weights"] = encoder.array(matrix.full_values)
    return node


def _encode_sparse(matrix: Sparse, encoder: _Encoder) -> Node:
    csr = matrix.matrix
    return {
        "data": encoder.array(csr.data),
        "indices": encoder.array(csr.indices),
        "indptr": encoder.array(csr.indptr),
        "full_column_rank": bool(matrix.known_full_column_rank),
    }


_Encode = Callable[[Any, _Encoder], Node]

_ENCODERS: dict[type, _Encode] = {
    Identity: lambda m, e: {"n": m.shape[0]},
    Ones: lambda m, e: {"rows": m.shape[0], "cols": m.shape[1]},
    Prefix: lambda m, e: {"n": m.shape[0]},
    RangeQueries: lambda m, e: {
        "n": m.shape[1],
        "intervals": e.array(np.stack([m.low, m.high], axis=1).astype(np.int64)),
    },
    AllRange: lambda m, e: {"n": m.shape[1]},
    Hierarchical: lambda m, e: {"n": m.shape[1], "branching": int(m.branching)},
    Haar: lambda m, e: {"n": m.shape[1]},
    Dense: lambda m, e: {
        "array": e.array(m.array),
        "full_column_rank": bool(m.known_full_column_rank),
    },
    Sparse: _encode_sparse,
    Transposed: lambda m, e: {"base": e.node(m.base)},
    Weighted: lambda m, e: {"weight": float(m.weight).hex(), "base": e.node(m.base)},
    Product: lambda m, e: {"factors": e.nodes(m.factors)},
    Sum: lambda m, e: {
        "terms": e.nodes(m.terms),
        "full_column_rank": bool(m.known_full_column_rank),
    },
    VStack: lambda m, e: {"blocks": e.nodes(m.blocks)},
    HStack: lambda m, e: {"blocks": e.nodes(m.blocks)},
    Kron: lambda m, e: {"factors": e.nodes(m.factors)},
    Marginal: lambda m, e: {"attributes": mask_members(m.mask)},
    Marginals: lambda m, e: {"marginals": _weighted_sets(m.weights)},
    MarginalsGram: lambda m, e: {"coefficients": _weighted_sets(m.coefficients)},
    PIdentity: lambda m, e: {"theta": e.array(m.theta), "norm": int(m.norm)},
    EigenStrategy: _encode_eigen,
    EigenGram: _encode_eigen,
    ResidualBlockStrategy: lambda m, e: {
        "blocks": [
            {"attributes": mask_members(mask), "array": e.array(block)}
            if isinstance(block, np.ndarray)
            else {"attributes": mask_members(mask), "scalar": float(block).hex()}
            for mask, block in m.blocks.items()
        ],
    },
    TableKrons: lambda m, e: {
        "tables": [
            {
                "attributes": list(t.attributes),
                "factors": e.nodes(list(t.factors)),
                "weight": float(t.weight).hex(),
            }
            for t in m.tables
        ],
        "coefficients": None
        if m.coefficients is None
        else [[[list(s), float(c).hex()] for s, c in block.items()] for block in m.coefficients],
    },
    HelmertBlocks: lambda m, e: {
        "blocks": [
            {"attributes": mask_members(mask), "integers": e.array(m.integers[mask])}
            for mask in m.sets
        ],
    },
}

#: Every matrix type that can be saved (exact types; subclasses are refused).
SUPPORTED_TYPES: tuple[type, ...] = tuple(_ENCODERS)


def matrix_to_spec(A: Matrix) -> tuple[dict, dict[str, np.ndarray]]:
    """A JSON-able spec of ``A`` and the arrays its nodes refer to by key.

    Args:
        A: a matrix whose every part is one of :data:`SUPPORTED_TYPES`.

    Returns:
        ``(spec, arrays)``: the nested spec (each node has ``type`` and ``shape``) and
        ``{key: array}``; arrays with equal dtype, shape and bytes share one key.

    Raises:
        SerializationError: ``A`` is not a dpmm matrix or holds an unsupported type.

    Example:
        >>> from dpmm.linalg import Dense, Identity, VStack
        >>> spec, arrays = matrix_to_spec(VStack([Identity(2), Dense([[1.0, 2.0]])]))
        >>> spec["blocks"][1]["array"], arrays["a0"].tolist()
        ('a0', [[1.0, 2.0]])
    """
    if not isinstance(A, Matrix):
        raise SerializationError(f"Only dpmm matrices can be saved, got a {type(A).__name__}")
    encoder = _Encoder()
    spec = encoder.node(A)
    return spec, encoder.arrays


# -- reading -------------------------------------------------------------------------------


class _Decoder:
    """Rebuilds matrices from spec nodes; every problem is one sentence naming ``source``."""

    def __init__(self, arrays: Mapping[str, np.ndarray], source: str) -> None:
        self.arrays = arrays
        self.source = source
        # Matrices are immutable: equal nodes give one shared object, as when saved (a Kron
        # of one repeated factor computes that factor's Gram once).
        self._built: dict[str, Matrix] = {}

    def fail(self, reason: str) -> NoReturn:
        raise SerializationError(f"Cannot load {self.source}: {reason}")

    def matrix(self, node: object, where: str) -> Matrix:
        if not isinstance(node, dict):
            self.fail(f"{where} is not a JSON object")
        kind = node.get("type")
        decode = _DECODERS.get(kind) if isinstance(kind, str) else None
        if decode is None:
            self.fail(f"{where} has the unknown matrix type {kind!r}")
        key = _cache_key(node)
        if key is not None and key in self._built:
            return self._built[key]
        try:
            matrix = decode(node, self, where)
        except SerializationError:
            raise
        except (DpmmError, ValueError, TypeError, OverflowError) as error:
            self.fail(f"{where} ({kind}) is invalid: {error}")
        recorded = node.get("shape")
        if recorded is not None and recorded != list(matrix.shape):
            self.fail(f"{where} ({kind}) has shape {matrix.shape} but the spec records {recorded}")
        if key is not None:
            self._built[key] = matrix
        return matrix

    def field(self, node: Node, key: str, where: str) -> Any:
        if key not in node:
            self.fail(f"{where} ({node['type']}) has no field '{key}'")
        return node[key]

    def integer(self, node: Node, key: str, where: str) -> int:
        value = self.field(node, key, where)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(f"{where}.{key} must be a non-negative integer, got {value!r}")
        return value

    def integers(self, value: object, where: str) -> list[int]:
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
        ):
            self.fail(f"{where} must be a list of non-negative integers, got {value!r}")
        return value

    def flag(self, node: Node, key: str, where: str) -> bool:
        value = self.field(node, key, where)
        if not isinstance(value, bool):
            self.fail(f"{where}.{key} must be true or false, got {value!r}")
        return value

    def number(self, value: object, where: str) -> float:
        # Hand-written specs may give plain JSON numbers; saved files always use float.hex.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float.fromhex(value)
            except ValueError:
                pass
        self.fail(f"{where} must be a float.hex() string, got {value!r}")

    def array(self, key: object, where: str, kinds: str) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            self.fail(f"{where} refers to the array {key!r}, which is missing")
        array = np.asarray(self.arrays[key])
        if array.dtype.kind not in kinds:
            self.fail(f"array '{key}' ({where}) has dtype {array.dtype}, expected kind {kinds!r}")
        return array

    def child(self, node: Node, key: str, where: str) -> Matrix:
        return self.matrix(self.field(node, key, where), f"{where}.{key}")

    def children(self, node: Node, key: str, where: str) -> list[Matrix]:
        values = self.field(node, key, where)
        if not isinstance(values, list):
            self.fail(f"{where}.{key} must be a list")
        return [self.matrix(value, f"{where}.{key}[{i}]") for i, value in enumerate(values)]

    def weighted_sets(self, node: Node, key: str, where: str) -> list[tuple[list[int], float]]:
        values = self.field(node, key, where)
        if not isinstance(values, list):
            self.fail(f"{where}.{key} must be a list")
        pairs = []
        for i, pair in enumerate(values):
            if not isinstance(pair, list) or len(pair) != 2:
                self.fail(f"{where}.{key}[{i}] must be [attribute positions, weight]")
            pairs.append((self.integers(pair[0], f"{where}.{key}[{i}]"), pair[1]))
        if len({tuple(sorted(attrs)) for attrs, _ in pairs}) != len(pairs):
            self.fail(f"{where}.{key} lists an attribute set twice")
        return [(attrs, self.number(v, f"{where}.{key}")) for attrs, v in pairs]

    def masks(self, node: Node, key: str, where: str) -> dict[int, float]:
        return {members_mask(attrs): value for attrs, value in self.weighted_sets(node, key, where)}


def _cache_key(node: Node) -> str | None:
    try:
        return json.dumps(node, sort_keys=True)
    except (TypeError, ValueError):  # a hand-made spec holding non-JSON values: no sharing
        return None


def _blocks(
    node: Node, d: _Decoder, where: str, required: tuple[str, ...], described: str
) -> Iterator[tuple[int, dict[str, Any], str]]:
    """Per entry of ``node["blocks"]``: its attribute mask, the entry, and where it is.

    Every entry must be an object with 'attributes' and the keys ``required``; ``described``
    says what else it holds in the message that refuses one.
    """
    entries = d.field(node, "blocks", where)
    if not isinstance(entries, list):
        d.fail(f"{where}.blocks must be a list, got {entries!r}")
    for k, entry in enumerate(entries):
        at = f"{where}.blocks[{k}]"
        if not isinstance(entry, dict) or not {"attributes", *required} <= entry.keys():
            d.fail(f"{at} must be an object with 'attributes' and {described}")
        yield members_mask(d.integers(entry["attributes"], f"{at}.attributes")), entry, at


def _decode_residual_blocks(node: Node, d: _Decoder, where: str) -> ResidualBlockStrategy:
    blocks: dict[int, float | np.ndarray] = {}
    for mask, entry, at in _blocks(node, d, where, (), "an 'array' or a 'scalar'"):
        if ("array" in entry) == ("scalar" in entry):
            d.fail(f"{at} must have exactly one of 'array' and 'scalar'")
        if "array" in entry:
            blocks[mask] = d.array(entry["array"], at, "f")
        else:
            blocks[mask] = d.number(entry["scalar"], f"{at}.scalar")
    return ResidualBlockStrategy(
        d.integers(d.field(node, "domain", where), f"{where}.domain"), blocks
    )


def _decode_helmert_blocks(node: Node, d: _Decoder, where: str) -> HelmertBlocks:
    integers = {
        mask: d.array(entry["integers"], at, "i")
        for mask, entry, at in _blocks(node, d, where, ("integers",), "'integers'")
    }
    return HelmertBlocks(d.integers(d.field(node, "domain", where), f"{where}.domain"), integers)


def _decode_table_krons(node: Node, d: _Decoder, where: str) -> TableKrons:
    entries = d.field(node, "tables", where)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        d.fail(f"{where}.tables must be a list of tables")
    tables = [
        (
            d.integers(d.field(entry, "attributes", at), f"{at}.attributes"),
            d.children(entry, "factors", at),
            d.number(d.field(entry, "weight", at), f"{at}.weight"),
        )
        for at, entry in ((f"{where}.tables[{i}]", e) for i, e in enumerate(entries))
    ]
    given = node.get("coefficients")
    if given is not None and not isinstance(given, list):
        d.fail(f"{where}.coefficients must be a list per table")
    coefficients = None
    if given is not None:
        coefficients = [
            {
                tuple(d.integers(pair[0], at)): d.number(pair[1], at)
                for pair in block
                if isinstance(pair, list) and len(pair) == 2
            }
            for at, block in ((f"{where}.coefficients[{i}]", b) for i, b in enumerate(given))
        ]
    try:
        domain = d.integers(d.field(node, "domain", where), f"{where}.domain")
        return TableKrons(domain, tables, coefficients)
    except (ValueError, UnsupportedQueryError) as error:
        d.fail(f"{where}: {error}")


def _decode_sparse(node: Node, d: _Decoder, where: str) -> Sparse:
    shape = d.integers(d.field(node, "shape", where), f"{where}.shape")
    matrix = sp.csr_array(
        (
            d.array(node.get("data"), where, "f"),
            d.array(node.get("indices"), where, "iu"),
            d.array(node.get("indptr"), where, "iu"),
        ),
        shape=tuple(shape),
    )
    matrix.check_format(full_check=True)  # indices within the shape, indptr monotone
    return Sparse(matrix, full_column_rank=d.flag(node, "full_column_rank", where))


def _eigen_parts(node: Node, d: _Decoder, where: str) -> tuple[list[np.ndarray], Any]:
    """The bases and weights of an eigen strategy or Gram node."""
    bases = [d.array(key, where, "f") for key in d.field(node, "bases", where)]
    if "factor_weights" in node:
        return bases, [d.array(key, where, "f") for key in node["factor_weights"]]
    return bases, d.array(d.field(node, "weights", where), where, "f")


_Decode = Callable[[Node, _Decoder, str], Matrix]

_DECODERS: dict[str, _Decode] = {
    "Identity": lambda n, d, w: Identity(d.integer(n, "n", w)),
    "Ones": lambda n, d, w: Ones(d.integer(n, "rows", w), d.integer(n, "cols", w)),
    "Prefix": lambda n, d, w: Prefix(d.integer(n, "n", w)),
    "RangeQueries": lambda n, d, w: RangeQueries(
        d.integer(n, "n", w), d.array(d.field(n, "intervals", w), w, "iu")
    ),
    "AllRange": lambda n, d, w: AllRange(d.integer(n, "n", w)),
    "Hierarchical": lambda n, d, w: Hierarchical(
        d.integer(n, "n", w), d.integer(n, "branching", w)
    ),
    "Haar": lambda n, d, w: Haar(d.integer(n, "n", w)),
    "Dense": lambda n, d, w: Dense(
        d.array(d.field(n, "array", w), w, "fiu"),
        full_column_rank=d.flag(n, "full_column_rank", w),
    ),
    "Sparse": _decode_sparse,
    "Transposed": lambda n, d, w: Transposed(d.child(n, "base", w)),
    "Weighted": lambda n, d, w: Weighted(
        d.number(d.field(n, "weight", w), f"{w}.weight"), d.child(n, "base", w)
    ),
    "Product": lambda n, d, w: Product(d.children(n, "factors", w)),
    "Sum": lambda n, d, w: Sum(
        d.children(n, "terms", w), full_column_rank=d.flag(n, "full_column_rank", w)
    ),
    "VStack": lambda n, d, w: VStack(d.children(n, "blocks", w)),
    "HStack": lambda n, d, w: HStack(d.children(n, "blocks", w)),
    "Kron": lambda n, d, w: Kron(d.children(n, "factors", w)),
    "Marginal": lambda n, d, w: Marginal(
        d.integers(d.field(n, "domain", w), f"{w}.domain"),
        d.integers(d.field(n, "attributes", w), f"{w}.attributes"),
    ),
    "Marginals": lambda n, d, w: Marginals(
        d.integers(d.field(n, "domain", w), f"{w}.domain"),
        {tuple(attrs): value for attrs, value in d.weighted_sets(n, "marginals", w)},
    ),
    "MarginalsGram": lambda n, d, w: MarginalsGram(
        d.integers(d.field(n, "domain", w), f"{w}.domain"), d.masks(n, "coefficients", w)
    ),
    "PIdentity": lambda n, d, w: PIdentity(
        d.array(d.field(n, "theta", w), w, "f"), d.integer(n, "norm", w)
    ),
    "EigenStrategy": lambda n, d, w: EigenStrategy(*_eigen_parts(n, d, w)),
    "EigenGram": lambda n, d, w: EigenGram(*_eigen_parts(n, d, w)),
    # The weighted residuals of files written before they became scalar blocks.
    "ResidualStrategy": lambda n, d, w: ResidualBlockStrategy(
        d.integers(d.field(n, "domain", w), f"{w}.domain"), d.masks(n, "residuals", w)
    ),
    "ResidualBlockStrategy": _decode_residual_blocks,
    "HelmertBlocks": _decode_helmert_blocks,
    "TableKrons": _decode_table_krons,
}


def matrix_from_spec(spec: dict, arrays: Mapping[str, np.ndarray]) -> Matrix:
    """Rebuild the matrix of :func:`matrix_to_spec` through the types' constructors.

    Raises:
        SerializationError: an unknown type, a missing field or array, an invalid
            parameter, or a node whose rebuilt shape differs from the one recorded.

    Example:
        >>> matrix_from_spec({"type": "Kron", "factors": [{"type": "Prefix", "n": 3},
        ...                   {"type": "Identity", "n": 2}]}, {})
        Prefix(3) ⊗ Identity(2)
    """
    return _from_spec(spec, arrays, "a matrix spec")


def _from_spec(spec: object, arrays: Mapping[str, np.ndarray], source: str) -> Matrix:
    decoder = _Decoder(arrays, source)
    try:
        return decoder.matrix(spec, "matrix")
    except RecursionError:
        decoder.fail("its spec is nested too deeply")


# -- files ---------------------------------------------------------------------------------


def save_matrix(A: Matrix, path: str | Path) -> None:
    """Write ``A`` to ``path`` as one compressed ``.npz`` file, atomically.

    The file holds the arrays of :func:`matrix_to_spec` and, under ``__spec__``, the
    UTF-8 JSON ``{"format": "dpmm-matrix/1", "matrix": spec}`` as a uint8 array. It is
    written to a temporary name in the same folder and then renamed over ``path``, so a
    reader never sees a partial file. ``path`` is used as given (no ``.npz`` is added).

    Raises:
        SerializationError: ``A`` holds an unsupported type, or the file cannot be written.
    """
    path = Path(path)
    try:
        spec, arrays = matrix_to_spec(A)
    except SerializationError as error:
        raise SerializationError(f"Cannot save to '{path}': {error}") from None
    document = json.dumps({"format": FORMAT, "matrix": spec}, separators=(",", ":"))
    payload = {SPEC_KEY: np.frombuffer(document.encode("utf-8"), dtype=np.uint8), **arrays}
    folder = path.parent if str(path.parent) else Path(".")
    temporary = None
    try:
        # Created as any file a release writes (0666 less the umask: readable by whoever
        # reads the answers beside it), not as a private temporary file (0600).
        temporary = folder / f".{path.name}.{secrets.token_hex(8)}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, "wb") as handle:
            np.savez_compressed(handle, **payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise SerializationError(f"Cannot save {A!r} to '{path}': {error}") from None


#: What a damaged archive raises; zipfile raises RuntimeError for a member flagged as
#: encrypted and NotImplementedError (a RuntimeError) for an unknown compression method.
_READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    RuntimeError,
    zipfile.BadZipFile,
    zlib.error,
)


def load_matrix(path: str | Path) -> Matrix:
    """Read a matrix written by :func:`save_matrix` (never unpickling anything).

    Raises:
        SerializationError: the file is missing, not an npz archive, corrupt or truncated,
            holds a pickled object array, has another format version, or its spec is
            invalid (unknown type, missing array, shape mismatch); the message names it.
    """
    source = f"the matrix file '{path}'"
    fail = _Decoder({}, source).fail  # one wording for every refusal
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        fail("it does not exist")
    except _READ_ERRORS as error:
        fail(f"it is not a readable npz archive ({type(error).__name__}: {error})")
    if not isinstance(archive, np.lib.npyio.NpzFile):
        fail("it holds a single .npy array, not an npz archive")
    arrays: dict[str, np.ndarray] = {}
    with archive:
        if SPEC_KEY not in archive.files:
            fail(f"it has no '{SPEC_KEY}' entry, so it is not a saved dpmm matrix")
        for key in archive.files:
            try:
                arrays[key] = archive[key]
            except _READ_ERRORS as error:
                fail(f"its entry '{key}' cannot be read ({type(error).__name__}: {error})")
    raw = arrays.pop(SPEC_KEY)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        fail(f"its '{SPEC_KEY}' entry is not a UTF-8 byte array")
    try:
        document = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        fail(f"its spec is not valid UTF-8 JSON ({error})")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        fail(f"it has format {found!r}, and this version of dpmm reads only '{FORMAT}'")
    if "matrix" not in document:
        fail("its spec has no 'matrix' entry")
    return _from_spec(document["matrix"], arrays, source)


def matrix_digest(A: Matrix) -> str:
    """sha256 hex of ``A``'s canonical spec and arrays: equal representations, equal digests.

    The digest covers the spec as JSON with sorted keys and, for every array, its key,
    dtype, shape and C-order bytes. It identifies a representation, not the linear map:
    ``Weighted(2.0, Identity(3))`` and ``Dense(2 * I)`` have different digests.

    Example:
        >>> from dpmm.linalg import Prefix
        >>> matrix_digest(Prefix(4)) == matrix_digest(Prefix(4)) != matrix_digest(Prefix(5))
        True
    """
    spec, arrays = matrix_to_spec(A)
    digest = hashlib.sha256(FORMAT.encode() + b"\0")
    digest.update(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"\0{key}\0{array.dtype.str}\0{list(array.shape)}\0".encode())
        digest.update(array.reshape(-1).view(np.uint8))
    return digest.hexdigest()
