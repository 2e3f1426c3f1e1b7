"""Measurement: exact noisy answers of a strategy, drawn once and persisted before use.

:func:`measure` charges a ledger reservation, adds exact discrete Laplace or discrete
Gaussian noise to ``A x`` and writes a :class:`MeasurementRecord` atomically to a store
folder; :func:`load_measurement` reads one back. It measures integer-valued strategies;
:func:`quantize` puts a real-valued strategy on an integer grid first (a residual strategy
becomes integer residual blocks read from marginal tables). Without a store and ledger,
:func:`measure` draws in memory, for research use; :func:`measure_strategy` does so for any
matrix (quantized by :func:`measurable`) and returns a :class:`Measurement`, the answers and
noise in the strategy's own units, ready for a solver.

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
from dpmm.measure.measurement import Measurement, measure_strategy
from dpmm.measure.mechanism import measure
from dpmm.measure.quantize import (
    DEFAULT_BITS,
    QUANTIZATION_BITS,
    QuantizationError,
    QuantizedStrategy,
    measurable,
    quantize,
)
from dpmm.measure.record import FORMAT, MeasurementRecord, load_measurement, record_path
from dpmm.measure.tables import (
    MarginalCounts,
    TableGroups,
    count_marginals,
    marginal_answers,
    strategy_tables,
)

__all__ = [
    "DEFAULT_BITS",
    "FORMAT",
    "QUANTIZATION_BITS",
    "ExactStrategy",
    "MarginalCounts",
    "Measurement",
    "MeasurementError",
    "MeasurementMismatch",
    "MeasurementRecord",
    "QuantizationError",
    "QuantizedStrategy",
    "TableGroups",
    "analyze_strategy",
    "count_marginals",
    "exact_answers",
    "load_measurement",
    "marginal_answers",
    "measurable",
    "measure",
    "measure_strategy",
    "quantize",
    "record_path",
    "strategy_tables",
]
