"""A release's report.html: written into the version, listed in its manifest, audited, and
drawn from the answers, standard errors and intervals it publishes."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import numpy as np
import pandas as pd

from dpmm.audit import audit_release
from dpmm.config import load_config
from dpmm.pipeline import rerun_post_processing, run_release
from dpmm.privacy.params import PureDP
from dpmm.report import REPORT_NAME, release_content
from dpmm.report.content import ANSWERS_SHOWN

TARGET = "workload: [{name: two-way, kind: marginals, k: 2}]"
WITH_TARGET = "workload: [{name: two-way, kind: marginals, k: 2, target: {rmse: 50}}]"


def test_a_release_writes_its_report_lists_it_and_the_audit_checks_it(make_small) -> None:
    config = make_small()
    config.path.write_text(config.path.read_text().replace(TARGET, WITH_TARGET))
    config = load_config(config.path)
    result = run_release(config, rng=np.random.default_rng(7))
    report = result.path / REPORT_NAME
    page = report.read_text(encoding="utf-8")
    manifest = json.loads((result.path / "manifest.json").read_text())
    # Listed with its size and sha256, like every file of the version.
    entry = manifest["files"][REPORT_NAME]
    assert entry["sha256"] == hashlib.sha256(report.read_bytes()).hexdigest()
    assert entry["bytes"] == report.stat().st_size
    assert audit_release(result.path).ok

    # The page: the table row with the manifest's target verdict, and the three figures,
    # the same PNGs the release flow leaves as artifacts.
    (group,) = manifest["error"]["groups"]
    assert "<title>Release report: adult-two-way</title>" in page
    assert "<td>two-way</td>" in page and "<td>RMSE ≤ 50</td>" in page
    assert ('<td class="met">yes</td>' in page) == group["target_met"]
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert [base64.b64decode(image) for image in images] == [f.png for f in result.figures]
    assert [f.key for f in result.figures] == ["error-vs-budget", "budget-shares", "answers"]

    # Its error bars are the published answers: the first rows of answers.parquet.
    content = release_content(config, result.strategy, result.reconstruction, PureDP(1))
    (sample,) = content.answers
    answers = pd.read_parquet(result.path / "answers.parquet").head(ANSWERS_SHOWN)
    np.testing.assert_array_equal(sample.estimates, answers["estimate"].to_numpy())
    np.testing.assert_array_equal(sample.standard_errors, answers["standard_error"].to_numpy())
    np.testing.assert_array_equal(sample.half_widths, answers["half_width"].to_numpy())
    assert sample.confidence == manifest["intervals"]["level"]
    assert list(sample.labels) == answers["label"].tolist()
    assert content.groups[0].target.met == group["target_met"]
    assert content.groups[0].rmse == group["expected_rmse"]

    # A changed report fails the audit, naming it.
    report.write_text(page.replace("two-way", "two-wax"), encoding="utf-8")
    audit = audit_release(result.path)
    assert not audit.ok
    assert audit.failed() == ["files"]
    assert f"{REPORT_NAME} does not match its sha256" in audit.checks[1].detail


def test_post_processing_again_writes_a_report_of_its_own(make_small) -> None:
    config = make_small()
    first = run_release(config, rng=np.random.default_rng(8))
    again = rerun_post_processing(config, first.path)
    assert (again.path / REPORT_NAME).is_file() and again.figures
    assert REPORT_NAME in json.loads((again.path / "manifest.json").read_text())["files"]
    assert audit_release(again.path).ok
