"""Measurement: exact noisy answers of a strategy, drawn once and persisted before use.

:func:`measure` charges a ledger reservation, adds exact discrete Laplace or discrete
Gaussian noise to ``A x`` and writes a :class:`MeasurementRecord` atomically to a store
folder; :func:`load_measurement` reads one back. It measures integer-valued strategies;
:func:`quantize` puts a real-valued strategy on an integer grid first (a residual strategy
becomes integer residual blocks read from marginal tables). Without a store and ledger,
:func:`measure` draws in memory, for research use.

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
    "ExactStrategy",
    "MarginalCounts",
    "MeasurementError",
    "MeasurementMismatch",
    "MeasurementRecord",
    "QuantizationError",
    "QuantizedStrategy",
    "ResidualMeasurement",
    "analyze_strategy",
    "count_marginals",
    "exact_answers",
    "load_measurement",
    "marginal_answers",
    "measure",
    "measure_residuals",
    "quantization_error_change",
    "quantize",
    "record_path",
    "residual_answers",
    "residual_sigma2",
    "strategy_tables",
]
