"""The ``sum`` kind: totals of a numeric attribute by groups, released and audited like the
running sums, with a private threshold as well as a public one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmm.audit import audit_release
from dpmm.domain import Domain
from dpmm.errors import ConfigError
from dpmm.pipeline import run_release
from dpmm.workload import from_config
from dpmm.workload.labels import query_labels
from dpmm.workload.prefix_sum import VALUATIONS, bucket_values, value_error_bound
from tests.pipeline.conftest import write_config
from tests.pipeline.test_private_threshold import BINS, SVT, _skewed_income, _write_people

DOMAIN = Domain.from_dict(
    {"site": {"size": 3, "labels": ["a", "b", "c"]}, "income": {"size": 10, "bins": BINS}}
)


def _groups(kind: str, **keys: object) -> list:
    entry = {"kind": kind, "attribute": "income", "by": ["site"], **keys}
    return from_config([entry], DOMAIN)


def test_a_sum_is_the_last_running_sum_of_each_group() -> None:
    (total,) = _groups("sum", truncation={"threshold": 450})
    (running,) = _groups("prefix_sum", truncation={"threshold": 450})
    np.testing.assert_array_equal(total.matrix.dense(), running.matrix.dense()[9::10])
    assert total.spec["weights"] == [min(edge - 50.0, 450.0) for edge in BINS[1:]]  # midpoints
    assert query_labels(total, DOMAIN) == [
        "site=a,sum(income)",
        "site=b,sum(income)",
        "site=c,sum(income)",
    ]
    (overall,) = from_config([{"kind": "sum", "attribute": "income"}], DOMAIN)
    assert overall.matrix.shape == (1, 30) and query_labels(overall, DOMAIN) == ["sum(income)"]


def test_a_sum_needs_numeric_bins() -> None:
    domain = Domain.from_dict({"site": 3, "income": 10})
    with pytest.raises(ConfigError, match=r"workload\[0\].attribute: .*no numeric bins; a sum"):
        from_config([{"kind": "sum", "attribute": "income"}], domain)


@pytest.mark.parametrize("truncation", ["{threshold: 450}", SVT])
def test_a_sum_release_answers_near_the_truth_and_passes_its_audit(
    tmp_path: Path, truncation: str
) -> None:
    income = _skewed_income()
    data = _write_people(tmp_path / "data", income)
    body = (
        "name: totals\ndomain:\n  attributes:\n    - {name: site, size: 3}\n"
        f"    - {{name: income, size: 10, bins: {BINS}}}\n"
        "privacy: {epsilon: 1}\nworkload:\n"
        "  - {name: totals, kind: sum, attribute: income, by: [site], "
        f"truncation: {truncation}}}\n"
        "strategy: {method: auto}\n"
    )
    config = write_config(tmp_path / "release", body, data=data)
    result = run_release(config, rng=np.random.default_rng(3))
    theta = result.manifest.get("thresholds", {"groups": [{"threshold": 450}]})["groups"][0][
        "threshold"
    ]
    site = np.arange(income.size) % 3
    # The incomes are their buckets' midpoints, so the sums are exact up to θ.
    truth = np.bincount(site, weights=np.minimum(income, theta), minlength=3)
    answers = pq.read_table(result.path / "answers.parquet").to_pandas()
    assert list(answers["label"]) == [
        "site=0,sum(income)",
        "site=1,sum(income)",
        "site=2,sum(income)",
    ]
    miss = np.abs(answers["estimate"].to_numpy() - truth)
    assert np.all(miss <= 5 * answers["standard_error"].to_numpy())
    assert audit_release(result.path).ok
    # The binning bound is stated for the drawn θ, and the audit checks it.
    (group,) = result.manifest["workload"]["groups"]
    assert group["spec"]["value_error_bound"] == value_error_bound(BINS, "midpoint", theta)
    manifest = result.path / "manifest.json"
    stated = json.loads(manifest.read_text())
    stated["workload"]["groups"][0]["spec"]["value_error_bound"] = 1.0
    manifest.write_text(json.dumps(stated))
    if truncation == SVT:  # a drawn θ's group is rebuilt and checked by the audit
        report = audit_release(result.path)
        assert any("binning bound" in check.detail for check in report.checks if not check.ok)


@settings(max_examples=200, deadline=None)
@given(
    widths=st.lists(st.integers(1, 1000), min_size=1, max_size=8),
    fractions=st.lists(st.floats(0, 1), min_size=1, max_size=50),
    theta=st.one_of(st.none(), st.integers(1, 9000)),
    valuation=st.sampled_from(VALUATIONS),
)
def test_the_binning_bound_holds_for_every_record_inside_its_bucket(
    widths: list[int], fractions: list[float], theta: int | None, valuation: str
) -> None:
    edges = np.concatenate([[0.0], np.cumsum(widths, dtype=np.float64)])
    bound = value_error_bound(edges, valuation, theta)
    cap = np.inf if theta is None else theta
    counted = np.minimum(bucket_values(edges, valuation), cap)
    for i, fraction in enumerate(fractions):
        bucket = i % len(widths)
        value = edges[bucket] + fraction * widths[bucket]
        assert abs(min(value, cap) - counted[bucket]) <= bound + 1e-9
    half = max(widths) / 2 if valuation == "midpoint" else max(widths)
    assert bound <= half
