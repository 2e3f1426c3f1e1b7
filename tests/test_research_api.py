"""Tests of the research API: dpmm's lazy top level, measure_strategy, Measurement, measurable,
and the README's example."""

from __future__ import annotations

import doctest
import importlib
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpmm
from dpmm.linalg import Dense, Hierarchical, Identity, Kron, Marginals, Prefix, Weighted
from dpmm.measure import (
    QUANTIZATION_BITS,
    Measurement,
    MeasurementError,
    MeasurementMismatch,
    QuantizedStrategy,
    measurable,
    measure,
    measure_strategy,
    quantize,
)
from dpmm.measure.tables import MarginalCounts
from dpmm.privacy.params import ZCDP, PureDP
from dpmm.reconstruct import least_squares, nnls

from .conftest import ROOT

# --- the lazy top level ----------------------------------------------------------------------


def test_every_public_name_resolves_to_the_object_of_its_home_module() -> None:
    lazy = dpmm._LAZY
    assert set(dpmm.__all__) == {*lazy, "__version__"}
    for name, module in lazy.items():
        assert getattr(dpmm, name) is getattr(importlib.import_module(module), name), name
    assert dpmm.optimize is importlib.import_module("dpmm.strategy").optimize
    assert dpmm.least_squares is least_squares
    assert dpmm.measure_strategy is measure_strategy


def test_dir_lists_the_public_names() -> None:
    listed = dir(dpmm)
    assert set(dpmm.__all__) <= set(listed)
    assert listed == sorted(listed)


def test_unknown_names_raise_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = dpmm.no_such_name  # type: ignore[attr-defined]
    assert not hasattr(dpmm, "_private")
    from dpmm import domain  # a submodule, found by the import system, not __getattr__

    assert dpmm.Domain is domain.Domain


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from dpmm import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(dpmm.__all__)


def test_importing_dpmm_loads_neither_numpy_nor_any_subpackage() -> None:
    # Every dpmm command imports the package: it must stay as cheap as reading the version.
    code = (
        "import sys, dpmm; "
        "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('dpmm.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


def test_the_measure_subpackage_keeps_its_name() -> None:
    # The research function is measure_strategy: dpmm.measure is and stays the subpackage,
    # whatever was imported first.
    importlib.import_module("dpmm.measure")
    assert dpmm.measure is sys.modules["dpmm.measure"]
    assert dpmm.measure.measure is measure


# --- measure_strategy and Measurement ----------------------------------------------------------


def test_an_in_memory_measurement_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a file was written or locked")

    monkeypatch.setattr("dpmm.measure.record.write_record", refuse)
    monkeypatch.setattr("dpmm.measure.mechanism.exclusive_lock", refuse)
    monkeypatch.setattr("dpmm.durable.atomic_write", refuse)
    monkeypatch.chdir(tmp_path)
    x = np.array([3, 0, 5, 1, 2, 2, 0, 7])
    for privacy in (PureDP(1), ZCDP("1/2")):
        y = measure_strategy(Weighted(0.3, Hierarchical(8)), x, privacy)
        assert y.record.measurement_id == "in-memory"
        assert y.record.reservation_id == "" and y.record.release_id == ""
    assert list(tmp_path.iterdir()) == []


def test_a_real_strategy_is_measured_on_its_finest_measurable_grid() -> None:
    A = Weighted(0.3, Hierarchical(8))
    x = np.arange(8)
    y = measure_strategy(A, x, ZCDP(1), rng=np.random.default_rng(7))
    assert y.quantized.scale == measurable(A).scale == quantize(A, bits=QUANTIZATION_BITS[0]).scale
    assert y.quantized.scale > 1
    np.testing.assert_array_equal(y.strategy.dense(), measurable(A).matrix.dense())
    np.testing.assert_array_equal(y.answers, y.record.values / y.quantized.scale)
    assert y.noise_std == math.sqrt(y.record.noise_variance()) / y.quantized.scale
    assert y.record.privacy == ZCDP(1)


def test_an_integer_strategy_is_kept_and_a_quantized_one_is_used_as_given() -> None:
    tree = Hierarchical(8)
    x = np.arange(8)
    kept = measure_strategy(tree, x, PureDP(1), rng=np.random.default_rng(1))
    assert kept.quantized.integer is tree and kept.quantized.scale == 1
    assert kept.strategy is tree
    coarse = quantize(Weighted(0.3, tree), bits=4)
    given = measure_strategy(coarse, x, PureDP(1), rng=np.random.default_rng(1))
    assert given.quantized is coarse


def test_the_same_generator_gives_the_same_draw_as_measure() -> None:
    A, x = Weighted(0.7, Prefix(6)), np.array([1, 4, 0, 0, 2, 9])
    y = measure_strategy(A, x, PureDP(2), rng=np.random.default_rng(3))
    record = measure(measurable(A), x, PureDP(2), rng=np.random.default_rng(3))
    np.testing.assert_array_equal(y.record.values, record.values)
    assert y.record.sensitivity == record.sensitivity and y.record.scale == record.scale


def test_answers_are_unbiased_and_noise_std_is_their_spread() -> None:
    # 14,000 answers with independent noise per draw: pooled, the mean error is within 5
    # standard errors of 0 and the spread within 3 % of noise_std (7 of its standard errors).
    A = Kron([Weighted(0.37, Hierarchical(4)), Identity(2000)])
    rng = np.random.default_rng(11)
    x = rng.integers(0, 50, size=A.shape[1])
    for privacy in (PureDP(1), ZCDP("1/2")):
        draws = [measure_strategy(A, x, privacy, rng=rng) for _ in range(5)]
        exact = draws[0].strategy @ x
        errors = np.concatenate([y.answers - exact for y in draws])
        noise_std = draws[0].noise_std
        assert abs(errors.mean()) < 5 * noise_std / math.sqrt(errors.size)
        assert errors.std() == pytest.approx(noise_std, rel=0.03)


def test_measurements_reconstruct_with_either_solver() -> None:
    W, privacy = Prefix(16), ZCDP(2)
    x = np.array([40, 0, 0, 3, 9, 0, 12, 0, 0, 0, 7, 1, 0, 0, 30, 2])
    A = dpmm.optimize(W, "hdmm", privacy)  # a real-valued strategy: it is quantized
    y = measure_strategy(A, x, privacy, rng=np.random.default_rng(5))
    assert y.quantized.scale > 1
    for solver in (least_squares, nnls):
        estimate = solver(y.strategy, y.answers, noise_std=y.noise_std)
        assert estimate.noise_std == y.noise_std
        assert np.abs(W @ estimate.x - W @ x).max() < 10 * dpmm.rmse(W, y.strategy, privacy)


def test_marginal_tables_can_be_measured_without_the_vector() -> None:
    A = Marginals((2, 3), {(0,): 1, (0, 1): 1})
    counts = MarginalCounts(
        (2, 3), {(0,): np.array([4, 2]), (0, 1): np.array([[1, 0, 3], [2, 0, 0]])}
    )
    y = measure_strategy(A, counts, ZCDP(1), rng=np.random.default_rng(2))
    assert y.answers.shape == (8,)


def test_answers_are_read_only() -> None:
    y = measure_strategy(Identity(3), np.array([1, 2, 3]), PureDP(1))
    with pytest.raises(ValueError, match="read-only"):
        y.answers[0] = 0


def test_a_record_of_another_grid_or_shape_is_refused() -> None:
    x = np.arange(8)
    y = measure_strategy(Weighted(0.3, Hierarchical(8)), x, PureDP(1))
    other_grid = QuantizedStrategy(y.quantized.integer, y.quantized.scale * 2)
    with pytest.raises(MeasurementMismatch, match="grid"):
        Measurement(other_grid, y.record)
    with pytest.raises(MeasurementMismatch):
        Measurement(QuantizedStrategy(Hierarchical(8, 4), y.quantized.scale), y.record)
    with pytest.raises(MeasurementError, match="QuantizedStrategy"):
        Measurement(Hierarchical(8), y.record)  # type: ignore[arg-type]
    with pytest.raises(MeasurementError, match="MeasurementRecord"):
        Measurement(y.quantized, y.answers)  # type: ignore[arg-type]


def test_invalid_requests_raise_measurement_errors() -> None:
    with pytest.raises(MeasurementError, match=r"dpmm\.linalg matrix"):
        measure_strategy(np.eye(2), np.array([1, 2]), PureDP(1))  # type: ignore[arg-type]
    with pytest.raises(MeasurementError):
        measure_strategy(Identity(2), np.array([1, 2, 3]), PureDP(1))
    with pytest.raises(MeasurementError, match="PureDP or ZCDP"):
        measure_strategy(Identity(2), np.array([1, 2]), 1.0)  # type: ignore[arg-type]


# --- measurable --------------------------------------------------------------------------------


def test_measurable_keeps_an_integer_strategy() -> None:
    tree = Hierarchical(8)
    quantized = measurable(tree)
    assert quantized.integer is tree and quantized.scale == 1


def test_measurable_coarsens_the_grid_until_the_norms_are_exact() -> None:
    # Three real factors of 13 bits each: squared column norms near 2**78, beyond int64.
    rng = np.random.default_rng(4)
    A = Kron([Dense(rng.uniform(0.1, 1.0, size=(2, 2))) for _ in range(3)])
    x = np.ones(8, dtype=np.int64)
    with pytest.raises(MeasurementError, match="too large"):
        measure(quantize(A, bits=QUANTIZATION_BITS[0]), x, PureDP(1))
    quantized = measurable(A)
    assert quantized.scale < quantize(A, bits=QUANTIZATION_BITS[0]).scale
    measure(quantized, x, PureDP(1), rng=np.random.default_rng(1))


def test_measurable_refuses_a_strategy_no_grid_can_hold() -> None:
    with pytest.raises(MeasurementError, match="cannot be quantized"):
        measurable(Dense(np.array([[2.0**63]])))


# --- the README ---------------------------------------------------------------------------------


def test_the_readme_research_example_runs() -> None:
    # Its noise is fresh on every run; it prints only what holds for every draw.
    result = doctest.testfile(
        str(ROOT / "README.md"), module_relative=False, verbose=False, report=True
    )
    assert result.attempted >= 8
    assert result.failed == 0
