"""Tests of dpmm.linalg.serialize: exact round trips of every matrix type, digests, errors."""

from __future__ import annotations

import json
import math
import pickle
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpmm.error import expected_error
from dpmm.errors import DpmmError
from dpmm.linalg import (
    AllRange,
    Dense,
    Haar,
    Hierarchical,
    HStack,
    Identity,
    Kron,
    Marginal,
    Marginals,
    MarginalsGram,
    Matrix,
    Ones,
    Prefix,
    Product,
    RangeQueries,
    Sparse,
    Sum,
    Transposed,
    VStack,
    Weighted,
)
from dpmm.linalg.eigen_strategy import EigenGram, EigenStrategy
from dpmm.linalg.helmert_blocks import HelmertBlocks
from dpmm.linalg.pidentity import PIdentity
from dpmm.linalg.residual_general import ResidualBlockStrategy
from dpmm.linalg.serialize import (
    FORMAT,
    SPEC_KEY,
    SUPPORTED_TYPES,
    SerializationError,
    load_matrix,
    matrix_digest,
    matrix_from_spec,
    matrix_to_spec,
    save_matrix,
)
from dpmm.linalg.table_krons import TableKrons
from dpmm.measure.exact import analyze_strategy
from dpmm.measure.quantize import measurable
from dpmm.privacy import ZCDP, PureDP
from dpmm.strategy import STRATEGY_METHODS, optimize

from ..conftest import INTEGER_STRATEGIES


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _orthonormal(n: int, seed: int) -> np.ndarray:
    return np.linalg.qr(_rng(seed).normal(size=(n, n)))[0]


def _sparse(rows: int, cols: int, seed: int) -> sp.csr_array:
    return sp.random_array((rows, cols), density=0.4, rng=_rng(seed), format="csr")


CATALOGUE: dict[str, Callable[[], Matrix]] = {
    "identity": lambda: Identity(5),
    "total": lambda: Ones(1, 7),
    "ones": lambda: Ones(3, 5),
    "prefix": lambda: Prefix(9),
    "ranges": lambda: RangeQueries(8, [(0, 3), (2, 2), (5, 7), (0, 7), (2, 2)]),
    "ranges-empty": lambda: RangeQueries(4, np.zeros((0, 2), dtype=int)),
    "allrange": lambda: AllRange(6),
    "hierarchical": lambda: Hierarchical(13, 3),
    "haar": lambda: Haar(11),
    "dense": lambda: Dense(_rng(1).normal(size=(6, 4))),
    "dense-full-rank": lambda: Dense(_rng(2).normal(size=(4, 4)), full_column_rank=True),
    "dense-fortran": lambda: Dense(_rng(3).normal(size=(3, 5))).T,
    "sparse": lambda: Sparse(_sparse(7, 5, 4)),
    "sparse-full-rank": lambda: Sparse(
        sp.eye_array(4) * 3.0 + _sparse(4, 4, 5), full_column_rank=True
    ),
    "transposed": lambda: Transposed(Prefix(7)),
    "weighted": lambda: Weighted(0.1 + 0.2, AllRange(4)),
    "weighted-tiny": lambda: Weighted(5e-324, Prefix(3)),
    "product": lambda: Product([AllRange(4), Prefix(4), Dense(_rng(6).normal(size=(4, 5)))]),
    "sum": lambda: Sum([Prefix(5), Identity(5), Weighted(-1 / 3, Ones(5, 5))]),
    "sum-full-rank": lambda: Sum([Prefix(4), Identity(4)], full_column_rank=True),
    "vstack": lambda: VStack([Identity(6), Ones(1, 6), Prefix(6)]),
    "hstack": lambda: HStack([Prefix(4), Ones(4, 2), Sparse(_sparse(4, 3, 7))]),
    "kron": lambda: Kron([Prefix(4), Hierarchical(5, 2), Ones(1, 3)]),
    "marginal": lambda: Marginal((3, 4, 2), [0, 2]),
    "marginal-total": lambda: Marginal((3, 4), []),
    "marginals": lambda: Marginals((3, 2, 4), {(0, 1): 1.0, (2,): -2.0 / 3, (): 0.5}),
    "marginals-gram": lambda: Marginals((2, 3, 4), {(0,): 1.0, (1, 2): 0.7}).gram(),
    "marginals-gram-eigen": lambda: MarginalsGram.from_eigenvalues((3, 4), {0: 2.0, 3: 0.1}),
    "pidentity-l1": lambda: PIdentity(_rng(8).uniform(size=(2, 6)), norm=1),
    "pidentity-l2": lambda: PIdentity(_rng(9).uniform(size=(3, 5)), norm=2),
    "eigen-kron": lambda: EigenStrategy(
        [_orthonormal(3, 10), _orthonormal(4, 11)], [_rng(12).uniform(size=3), np.ones(4)]
    ),
    "eigen-full": lambda: EigenStrategy(
        [_orthonormal(3, 13), _orthonormal(2, 14)], _rng(15).uniform(size=6)
    ),
    "eigen-gram": lambda: EigenGram([_orthonormal(4, 16)], [_rng(17).uniform(size=4)]),
    "residuals": lambda: ResidualBlockStrategy((2, 3, 4), {0: 0.5, 0b011: 1 / 3, 0b110: 2.0}),
    "residual blocks": lambda: ResidualBlockStrategy(
        (2, 3, 4),
        {
            0: 0.5,
            0b011: np.array([[1.0, 0.5], [0.0, 2.0]]),
            0b100: np.eye(3) / 3,
            0b110: np.arange(1.0, 7.0),  # a diagonal block
        },
    ),
    "helmert blocks": lambda: HelmertBlocks(
        (2, 3, 4), {0: np.array([5]), 0b010: np.array([[3, 1], [0, 2]]), 0b101: np.arange(1, 4)}
    ),
    "table krons": lambda: TableKrons(
        (2, 3, 4),
        [
            ((0, 2), (Identity(2), VStack([Identity(4), Weighted(0.25, Ones(1, 4))])), 0.4),
            ((1,), (Prefix(3),), 1 / 3),
            ((), (), 0.1),
        ],
        [{(): 0.5, (0,): 1, (2,): 1, (0, 2): 1}, {(): 0.3, (1,): 1}, {(): 0.2}],
    ),
    "nested": lambda: Kron(
        [
            VStack([Weighted(0.3, Prefix(3)), Dense(np.eye(3) * 0.7), Haar(3)]),
            Weighted(-1.5, Product([Prefix(2), Transposed(AllRange(2))])),
            Sum([Identity(2), Weighted(1e-300, Ones(2, 2))]),
        ]
    ),
    "nested-stack": lambda: VStack(
        [
            Marginals((2, 3), {(0,): 0.25, (0, 1): 1.0}),
            Weighted(2 / 7, Kron([Identity(2), PIdentity(np.full((1, 3), 0.5), norm=2)])),
            HStack([Identity(2), Ones(2, 4)]),
        ]
    ),
}


def assert_round_trip(A: Matrix, path: Path) -> Matrix:
    """Save, load and check that nothing changed: type, shape, entries, repr, spec, digest."""
    save_matrix(A, path)
    B = load_matrix(path)
    assert type(B) is type(A)
    assert B.shape == A.shape
    assert repr(B) == repr(A)
    assert np.array_equal(B.dense(), A.dense())
    assert B.known_full_column_rank == A.known_full_column_rank
    spec_a, arrays_a = matrix_to_spec(A)
    spec_b, arrays_b = matrix_to_spec(B)
    assert spec_b == spec_a
    assert arrays_b.keys() == arrays_a.keys()
    for key, array in arrays_a.items():
        assert arrays_b[key].dtype == array.dtype
        assert np.array_equal(arrays_b[key], array)
    assert matrix_digest(B) == matrix_digest(A)
    return B


def _types_in(spec: object) -> set[str]:
    if isinstance(spec, dict):
        found = {spec["type"]} if "type" in spec else set()
        return found.union(*(_types_in(value) for value in spec.values()))
    if isinstance(spec, list):
        return set().union(*(_types_in(value) for value in spec))
    return set()


def test_the_catalogue_covers_every_supported_type():
    seen = set().union(*(_types_in(matrix_to_spec(make())[0]) for make in CATALOGUE.values()))
    assert seen == {cls.__name__ for cls in SUPPORTED_TYPES}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_type_round_trips_exactly(name, tmp_path):
    A = CATALOGUE[name]()
    B = assert_round_trip(A, tmp_path / f"{name}.npz")
    for p in (1, 2):
        assert B.sensitivity(p) == A.sensitivity(p)


def test_scalar_parameters_round_trip_bit_for_bit(tmp_path):
    weights = [0.1 + 0.2, 1 / 3, -0.0, 5e-324, 1.7976931348623157e308, -math.pi]
    for i, weight in enumerate(weights):
        B = load_matrix(_saved(Weighted(weight, Identity(2)), tmp_path / f"w{i}.npz"))
        assert B.weight.hex() == weight.hex()
    marginals = Marginals((2, 3), {(0,): 0.1, (1,): 1 / 3, (0, 1): 1.0})
    loaded = load_matrix(_saved(marginals, tmp_path / "m.npz"))
    assert [w.hex() for w in loaded.weights.values()] == [
        w.hex() for w in marginals.weights.values()
    ]
    assert list(loaded.weights) == list(marginals.weights)  # block order kept


def test_a_stored_residual_strategy_loads_as_scalar_blocks():
    # Files written when weighted residuals had their own type still load.
    spec = {"type": "ResidualStrategy", "domain": [2, 3], "residuals": [[[], "0x1p-1"], [[1], 3]]}
    A = matrix_from_spec(spec, {})
    assert isinstance(A, ResidualBlockStrategy) and A.blocks == {0: 0.5, 0b10: 3.0}
    expected = ResidualBlockStrategy((2, 3), {0: 0.5, 0b10: 3.0})
    assert matrix_digest(A) == matrix_digest(expected)


def _saved(A: Matrix, path: Path) -> Path:
    save_matrix(A, path)
    return path


def test_a_shared_factor_is_loaded_as_one_object(tmp_path):
    factor = Dense(_rng(20).normal(size=(3, 3)))
    B = load_matrix(_saved(Kron([factor, factor, Prefix(2)]), tmp_path / "k.npz"))
    assert B.factors[0] is B.factors[1]
    spec, arrays = matrix_to_spec(Kron([factor, Dense(factor.array.copy())]))
    assert len(arrays) == 1  # equal arrays are stored once
    assert spec["factors"][0]["array"] == spec["factors"][1]["array"]


def test_dask_eigen_weights_are_saved_as_their_values(tmp_path):
    da = pytest.importorskip("dask.array")
    bases = [_orthonormal(4, 21), _orthonormal(3, 22)]
    values = _rng(23).uniform(size=(4, 3))
    A = EigenStrategy(bases, da.from_array(values, chunks=(2, 3)))
    B = load_matrix(_saved(A, tmp_path / "dask.npz"))
    assert repr(B) == "EigenStrategy(4 ⊗ 3, full weights)"
    assert np.array_equal(B.dense(), EigenStrategy(bases, values).dense())


# -- strategies as dpmm.strategy.optimize returns them --------------------------------------

WORKLOADS = {
    "prefix-by-id": Kron([Prefix(8), Identity(3)]),
    "marginals": Marginals((3, 2, 4), {s: 1.0 for s in combinations(range(3), 2)}),
    "union": VStack(
        [Kron([Prefix(6), Ones(1, 3)]), Weighted(2.0, Kron([Identity(6), AllRange(3)]))]
    ),
}
PRIVACY = {"pure": PureDP(1), "zcdp": ZCDP(1)}


@pytest.mark.parametrize("privacy", sorted(PRIVACY))
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("method", STRATEGY_METHODS)
def test_every_optimized_strategy_round_trips(method, workload, privacy, tmp_path):
    W, budget = WORKLOADS[workload], PRIVACY[privacy]
    try:
        A = optimize(W, method, budget)
    except DpmmError as refusal:
        pytest.skip(f"{method} does not apply to {workload} under {privacy}: {refusal}")
    B = assert_round_trip(A, tmp_path / "strategy.npz")
    assert B.sensitivity(budget.norm) == A.sensitivity(budget.norm)
    assert expected_error(W, B, budget) == pytest.approx(expected_error(W, A, budget), rel=1e-12)


@pytest.mark.parametrize("method", ["eigen", "hdmm", "lrm", "hierarchical", "hdmm_marginals"])
@pytest.mark.parametrize("privacy", sorted(PRIVACY))
def test_quantized_strategies_keep_their_fingerprint(method, privacy, tmp_path):
    W = WORKLOADS["marginals" if method == "hdmm_marginals" else "prefix-by-id"]
    # Quantized as a release quantizes: the finest grid whose integer norms are exact (a
    # fitted strategy with widely spread weights can overflow the default grid).
    quantized = measurable(optimize(W, method, PRIVACY[privacy]))
    expected = analyze_strategy(quantized.integer).fingerprint()
    B = assert_round_trip(quantized.integer, tmp_path / "integer.npz")
    assert analyze_strategy(B).fingerprint() == expected
    rational = assert_round_trip(quantized.matrix, tmp_path / "rational.npz")
    assert np.array_equal(rational.dense(), quantized.matrix.dense())


@pytest.mark.parametrize("index", range(len(INTEGER_STRATEGIES)))
def test_integer_strategies_keep_their_fingerprint(index, tmp_path):
    A = INTEGER_STRATEGIES[index]
    B = assert_round_trip(A, tmp_path / "integer.npz")
    assert analyze_strategy(B).fingerprint() == analyze_strategy(A).fingerprint()


# -- digests --------------------------------------------------------------------------------


def test_equal_matrices_built_separately_have_equal_digests():
    array = _rng(30).normal(size=(3, 4))

    def build(values: np.ndarray) -> Matrix:
        return VStack(
            [Kron([Prefix(2), Dense(values)]), Weighted(0.1, Kron([Ones(1, 2), Identity(4)]))]
        )

    assert matrix_digest(build(array)) == matrix_digest(build(array.copy()))
    assert matrix_digest(build(array)) == matrix_digest(build(np.asfortranarray(array)))
    shared = Dense(array)
    assert matrix_digest(Kron([shared, shared])) == matrix_digest(
        Kron([Dense(array), Dense(array)])
    )


def test_digests_tell_apart_any_change():
    array = _rng(31).normal(size=(3, 3))
    nudged = array.copy()
    nudged[1, 2] = np.nextafter(nudged[1, 2], np.inf)  # one ulp
    variants = [
        Dense(array),
        Dense(nudged),
        Dense(array, full_column_rank=True),
        Dense(array).T,
        Weighted(2.0, Identity(3)),
        Weighted(np.nextafter(2.0, 3.0), Identity(3)),
        Dense(2 * np.eye(3)),  # the same linear map as the line above, another representation
        Hierarchical(3, 2),
        Hierarchical(3, 3),
        Marginals((3,), {(0,): 1.0}),
        Marginal((3,), [0]),
    ]
    digests = [matrix_digest(A) for A in variants]
    assert len(set(digests)) == len(digests)
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in digests)


# -- errors ---------------------------------------------------------------------------------


def assert_refused(path: Path, *fragments: str) -> None:
    with pytest.raises(SerializationError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message


def _write_spec(path: Path, document: object, **arrays: np.ndarray) -> Path:
    spec = np.frombuffer(json.dumps(document).encode(), dtype=np.uint8)
    np.savez_compressed(path, **{SPEC_KEY: spec}, **arrays)
    return path


def test_a_missing_file_is_refused(tmp_path):
    assert_refused(tmp_path / "nothing.npz", "does not exist")


def test_a_corrupt_file_is_refused(tmp_path):
    path = tmp_path / "corrupt.npz"
    path.write_bytes(_rng(40).integers(0, 256, size=4000, dtype=np.uint8).tobytes())
    assert_refused(path, "not a readable npz archive")


def test_a_corrupt_entry_inside_a_valid_archive_is_refused(tmp_path):
    path = _saved(Dense(_rng(41).normal(size=(40, 40))), tmp_path / "flipped.npz")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(16)
    path.write_bytes(bytes(data))
    assert_refused(path)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_a_truncated_file_is_refused(tmp_path, fraction):
    path = _saved(Kron([Dense(_rng(42).normal(size=(20, 20))), Prefix(3)]), tmp_path / "cut.npz")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    assert_refused(path)


def test_a_pickled_object_array_is_refused_without_unpickling(tmp_path):
    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = tmp_path / "pickled.npz"
    spec = {"format": FORMAT, "matrix": {"type": "Dense", "array": "a0", "full_column_rank": False}}
    payload = np.empty(1, dtype=object)
    payload[0] = Trap()
    _write_spec(path, spec, a0=payload)
    assert_refused(path, "'a0'")
    assert not marker.exists()
    pickled = tmp_path / "plain.pickle"
    pickled.write_bytes(pickle.dumps(Identity(3)))
    assert_refused(pickled, "not a readable npz archive")


def test_a_single_npy_array_is_refused(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, np.eye(3))
    assert_refused(path, "single .npy array")


def test_an_npz_without_a_spec_is_refused(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, a0=np.eye(2))
    assert_refused(path, SPEC_KEY)


def test_another_format_version_is_refused(tmp_path):
    path = _write_spec(tmp_path / "v2.npz", {"format": "dpmm-matrix/2", "matrix": {}})
    assert_refused(path, "dpmm-matrix/2", FORMAT)


@pytest.mark.parametrize(
    ("node", "arrays", "fragment"),
    [
        ({"type": "Bogus", "n": 3}, {}, "unknown matrix type 'Bogus'"),
        (
            {"type": "Kron", "factors": [{"type": "Prefix", "n": 2}, {"type": "Nope"}]},
            {},
            "matrix.factors[1]",
        ),
        ({"type": "Dense", "array": "a7", "full_column_rank": False}, {}, "'a7', which is missing"),
        ({"type": "Identity"}, {}, "no field 'n'"),
        (
            {"type": "ResidualBlockStrategy", "domain": [2, 3], "blocks": [{"attributes": [0]}]},
            {},
            "exactly one of 'array' and 'scalar'",
        ),
        (
            {"type": "ResidualBlockStrategy", "domain": [2, 3], "blocks": [{"scalar": "0x1p0"}]},
            {},
            "an object with 'attributes'",
        ),
        ({"type": "Identity", "n": "3"}, {}, "non-negative integer"),
        (
            {"type": "Identity", "n": 3, "shape": [4, 4]},
            {},
            "shape (3, 3) but the spec records [4, 4]",
        ),
        (
            {"type": "Weighted", "weight": "heavy", "base": {"type": "Prefix", "n": 2}},
            {},
            "float.hex",
        ),
        ({"type": "Weighted", "weight": "inf", "base": {"type": "Prefix", "n": 2}}, {}, "finite"),
        (
            {
                "type": "Sparse",
                "shape": [2, 2],
                "data": "a0",
                "indices": "a1",
                "indptr": "a2",
                "full_column_rank": False,
            },
            {
                "a0": np.ones(2),
                "a1": np.array([0, 5], dtype=np.int32),
                "a2": np.array([0, 1, 2], dtype=np.int32),
            },
            "matrix (Sparse) is invalid",
        ),
        (
            {"type": "Dense", "array": "a0", "full_column_rank": False},
            {"a0": np.array([1.0, np.nan])},
            "invalid",
        ),
        (
            {"type": "Marginals", "domain": [2, 3], "marginals": [[[0], 1.0], [[0], 2.0]]},
            {},
            "twice",
        ),
        (
            {
                "type": "Product",
                "factors": [{"type": "Prefix", "n": 2}, {"type": "Prefix", "n": 3}],
            },
            {},
            "invalid",
        ),
        (
            {"type": "EigenStrategy", "bases": ["a0"], "weights": "a1"},
            {"a0": np.ones((2, 2)), "a1": np.ones(2)},
            "orthonormal",
        ),
    ],
)
def test_invalid_specs_are_refused_naming_the_file(tmp_path, node, arrays, fragment):
    path = _write_spec(tmp_path / "bad.npz", {"format": FORMAT, "matrix": node}, **arrays)
    assert_refused(path, fragment)
    with pytest.raises(SerializationError, match="a matrix spec"):
        matrix_from_spec(node, arrays)


def test_a_deeply_nested_spec_is_refused(tmp_path):
    node: dict = {"type": "Identity", "n": 2}
    for _ in range(5000):
        node = {"type": "Transposed", "base": node}
    with pytest.raises(SerializationError, match="nested too deeply"):
        matrix_from_spec(node, {})


class _OwnDense(Dense):
    """A user's subclass: saving it as a Dense would silently drop its behaviour."""


@pytest.mark.parametrize(
    ("A", "name"),
    [
        (Prefix(4).gram(), "ClosedFormGram"),
        (Hierarchical(4).gram(), "TreeGram"),
        (ResidualBlockStrategy((2, 3), {1: 1.0}).gram(), "ResidualGram"),
        (PIdentity(np.ones((1, 3)), norm=1).gram(), "PIdentityGram"),
        (VStack([Identity(2), _OwnDense(np.eye(2))]), "_OwnDense"),
    ],
)
def test_unsupported_types_are_refused_and_nothing_is_written(tmp_path, A, name):
    path = tmp_path / "refused.npz"
    with pytest.raises(SerializationError, match=name) as caught:
        save_matrix(A, path)
    assert str(path) in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SerializationError, match=name):
        matrix_digest(A)


def test_saving_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "strategy.bin"  # the name is kept as given, no .npz appended
    save_matrix(Prefix(3), path)
    save_matrix(Identity(4), path)
    assert [p.name for p in tmp_path.iterdir()] == ["strategy.bin"]
    assert load_matrix(str(path)).shape == (4, 4)


def test_saving_into_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(SerializationError, match="missing"):
        save_matrix(Identity(2), tmp_path / "missing" / "a.npz")
    with pytest.raises(SerializationError, match="ndarray"):
        matrix_to_spec(np.eye(2))


def test_a_saved_strategy_is_as_readable_as_the_files_beside_it(tmp_path):
    """A release's strategy.npz gets the mode of its answers (0666 less the umask), not a
    private temporary file's 0600: an auditor reads them all."""
    beside = tmp_path / "answers.parquet"
    beside.write_bytes(b"")
    save_matrix(Prefix(4), tmp_path / "strategy.npz")
    assert (tmp_path / "strategy.npz").stat().st_mode & 0o777 == beside.stat().st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.parquet", "strategy.npz"]
