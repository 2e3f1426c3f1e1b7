"""The manifest sections that describe a measurement: its privacy facts and its values.

One definition, used by the release writer's callers and read back by the audit
(``config/manifest.md`` documents every field).

Example:
    >>> import pathlib, tempfile, numpy as np
    >>> from dpmm.linalg import Identity
    >>> from dpmm.measure import measure
    >>> from dpmm.privacy.ledger import Ledger
    >>> from dpmm.privacy.params import PureDP
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with Ledger.init(folder / "budget.db") as ledger:
    ...     _ = ledger.grant("d", PureDP(1))
    ...     reservation = ledger.reserve("d", PureDP(1), release_id="r")
    ...     record = measure(Identity(2), np.array([1, 2]), PureDP(1), store=folder,
    ...                      measurement_id="m", ledger=ledger, reservation=reservation)
    >>> sections = measurement_sections(record)
    >>> sections["privacy"]["scale"], sections["measurement"]["count"]
    ('1', 2)
"""

from __future__ import annotations

from typing import Any

from dpmm.measure.record import MeasurementRecord

__all__ = ["EXPECTED_ERROR_BASIS", "MEASUREMENTS_FILE", "measurement_sections"]

MEASUREMENTS_FILE = "measurements.parquet"
#: What the expected errors of a manifest (``error.basis``) and of ``dpmm plan`` are: one
#: figure per strategy, the same in the plan, the release and any re-run of its measurement.
EXPECTED_ERROR_BASIS = (
    "least-squares answers through the quantized strategy measured (A_q = B/D) under the "
    "exact variance of the discrete noise drawn: each answer's variance is that variance "
    "times diag(W (A_qᵀA_q)⁺ Wᵀ), a group's expected RMSE the root of their mean"
)


def measurement_sections(record: MeasurementRecord) -> dict[str, dict[str, Any]]:
    """The manifest's ``privacy`` and ``measurement`` sections for a measurement record: its
    header's fields, exact fractions as text."""
    header = record.header()
    privacy = ("norm", "sensitivity", "noise", "scale", "sigma2", "guarantee")
    return {
        "privacy": {"budget": header["privacy"], **{key: header[key] for key in privacy}},
        "measurement": {
            "id": header["measurement_id"],
            "file": MEASUREMENTS_FILE,
            "count": header["count"],
            "values_sha256": header["values_sha256"],
            "created": header["created"],
        },
    }
