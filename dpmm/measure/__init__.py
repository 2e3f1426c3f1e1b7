"""Measurement: exact noisy answers of a strategy, drawn once and persisted before use.

:func:`measure` charges a ledger reservation, adds exact discrete Laplace or discrete
Gaussian noise to ``A x`` and writes a :class:`MeasurementRecord` atomically to a store
folder; :func:`load_measurement` reads one back. It measures integer-valued strategies;
:func:`quantize` puts a real-valued strategy on an integer grid first. Residual and block
measurements (:func:`measure_residuals`, :func:`measure_blocks`) are persisted the same way
as a :class:`ResidualRecord`; :func:`load_residual_measurement` reads one back.

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> from dpmm.linalg import Hierarchical
    >>> from dpmm.privacy.ledger import Ledger
    >>> from dpmm.privacy.params import PureDP
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> ledger = Ledger.init(folder / "ledger.sqlite")
    >>> _ = ledger.grant("survey", PureDP(1))
    >>> reservation = ledger.reserve("survey", PureDP("1/2"), release_id="survey-2026")
    >>> record = measure(Hierarchical(4), np.array([3, 0, 5, 1]), PureDP("1/2"),
    ...                  store=folder, measurement_id="tree", ledger=ledger,
    ...                  reservation=reservation)
    >>> record.sensitivity, record.scale, record.values.shape, ledger.status(reservation)
    (Fraction(3, 1), Fraction(6, 1), (7,), 'spent')
    >>> load_measurement(folder, "tree") == record
    True
    >>> ledger.close()
"""

from dpmm.measure.exact import (
    ExactStrategy,
    MeasurementError,
    MeasurementMismatch,
    analyze_strategy,
    exact_answers,
)
from dpmm.measure.mechanism import measure
from dpmm.measure.quantize import (
    DEFAULT_BITS,
    QuantizationError,
    QuantizedStrategy,
    quantization_error_change,
    quantize,
)
from dpmm.measure.record import FORMAT, MeasurementRecord, load_measurement, record_path
from dpmm.measure.residual_blocks import (
    BlockMeasurement,
    QuantizedBlocks,
    block_answers,
    block_sensitivity,
    measure_blocks,
    quantize_blocks,
)
from dpmm.measure.residual_record import (
    ResidualRecord,
    load_residual_measurement,
    load_residual_record,
)
from dpmm.measure.residual_tables import (
    ResidualMeasurement,
    count_marginals,
    measure_residuals,
    residual_answers,
    residual_sigma2,
)
from dpmm.measure.tables import MarginalCounts, marginal_answers, strategy_tables

__all__ = [
    "DEFAULT_BITS",
    "FORMAT",
    "BlockMeasurement",
    "ExactStrategy",
    "MarginalCounts",
    "MeasurementError",
    "MeasurementMismatch",
    "MeasurementRecord",
    "QuantizationError",
    "QuantizedBlocks",
    "QuantizedStrategy",
    "ResidualMeasurement",
    "ResidualRecord",
    "analyze_strategy",
    "block_answers",
    "block_sensitivity",
    "count_marginals",
    "exact_answers",
    "load_measurement",
    "load_residual_measurement",
    "load_residual_record",
    "marginal_answers",
    "measure",
    "measure_blocks",
    "measure_residuals",
    "quantization_error_change",
    "quantize",
    "quantize_blocks",
    "record_path",
    "residual_answers",
    "residual_sigma2",
    "strategy_tables",
]
