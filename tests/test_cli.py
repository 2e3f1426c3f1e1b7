"""The ``dpmm`` command: ``plan`` as a table and as JSON, the examples, and bad input."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dpmm
import dpmm.plan
from dpmm.cli import main
from dpmm.config import load_config
from dpmm.errors import TooLargeError

from .conftest import EXAMPLES, ROOT, assert_plan_keys, example_copy

ADULT = ROOT / "config" / "examples" / "adult-marginals.yaml"
SMALL = {
    "name": "small",
    "domain": {"sex": 2, "age": 16},
    "privacy": {"epsilon": 1},
    "workload": [
        {"name": "age-cdf-by-sex", "kind": "prefix", "attribute": "age", "by": ["sex"]},
        {"name": "age-ranges", "kind": "all_range", "attribute": "age"},
    ],
    "strategy": {"method": "hierarchical"},
}


def write(folder: Path, document: object) -> Path:
    path = folder / "release.yaml"
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_table_has_a_row_per_group_and_a_total(tmp_path: Path, capsys) -> None:
    status, out, err = run(["plan", str(write(tmp_path, SMALL))], capsys)
    assert status == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("plan: small")
    assert any(line.startswith("domain: 2 attributes, 32 cells") for line in lines)
    assert any("sex 2, age 16" in line for line in lines)
    assert any(line.startswith("privacy: pure ε-DP, ε = 1") for line in lines)
    assert any(line.startswith("strategy: method 'hierarchical'") for line in lines)
    header = next(line for line in lines if line.startswith("group"))
    for column in ("kind", "queries", "expected RMSE", "SVD-bound RMSE", "identity RMSE"):
        assert column in header
    rows = {line.split()[0]: line.split() for line in lines if line.split()}
    assert rows["age-cdf-by-sex"][1:3] == ["prefix", "32"]
    assert rows["age-ranges"][1:3] == ["all_range", "136"]
    assert rows["total"][1] == "168"


def test_table_numbers_match_the_json(tmp_path: Path, capsys) -> None:
    path = str(write(tmp_path, SMALL))
    _, table, _ = run(["plan", path], capsys)
    _, text, _ = run(["plan", path, "--json"], capsys)
    data = json.loads(text)
    row = next(line.split() for line in table.splitlines() if line.startswith("age-ranges"))
    group = data["groups"][1]
    assert float(row[3].replace(",", "")) == pytest.approx(group["rmse"], abs=0.006)
    assert float(row[5].replace(",", "")) == pytest.approx(group["identity_rmse"], abs=0.006)


def test_json_is_one_object_with_the_required_keys(tmp_path: Path, capsys) -> None:
    status, out, err = run(["plan", str(write(tmp_path, SMALL)), "--json"], capsys)
    assert status == 0
    assert err == ""
    data = json.loads(out)  # fails unless stdout is exactly one JSON document
    assert isinstance(data, dict)
    assert_plan_keys(data)
    assert data["domain_size"] == 32
    assert data["privacy"] == {"kind": "pure", "epsilon": "1"}
    assert data["method"] == "hierarchical"
    assert [group["name"] for group in data["groups"]] == ["age-cdf-by-sex", "age-ranges"]


#: Examples whose plan takes more than a few seconds (many candidates on large factors).
SLOW_PLANS = {"ranges-1d.yaml", "census-sf1.yaml", "adult-targets.yaml", "adult-3way.yaml"}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PLANS else p for p in EXAMPLES],
    ids=lambda path: path.name,
)
def test_every_example_plans(path: Path, capsys, tmp_path: Path) -> None:
    path = example_copy(path.name, tmp_path)
    status, out, err = run(["plan", str(path), "--json"], capsys)
    assert status == 0, err
    data = json.loads(out)
    assert data["name"] == path.stem
    assert data["domain_size"] == math.prod(load_config(path).domain.shape)  # exact, any size
    assert all(group["rmse"] is not None for group in data["groups"])
    assert data["total_squared_error"] > 0


BAD = {
    "unknown top-level key": ({**SMALL, "colour": "blue"}, "colour"),
    "missing privacy": ({k: v for k, v in SMALL.items() if k != "privacy"}, "privacy"),
    "negative epsilon": ({**SMALL, "privacy": {"epsilon": -1}}, "privacy.epsilon"),
    "unknown attribute": (
        {**SMALL, "workload": [{"kind": "prefix", "attribute": "agee"}]},
        "workload[0].attribute",
    ),
    "unknown method": ({**SMALL, "strategy": {"method": "magic"}}, "strategy.method"),
    "malformed YAML": ("name: small\nprivacy: {epsilon: 1\n", "malformed YAML"),
}


@pytest.mark.parametrize(("document", "key"), BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_bad_config_is_one_error_line(
    tmp_path: Path, capsys, document: object, key: str, as_json: bool
) -> None:
    path = write(tmp_path, document)
    status, out, err = run(["plan", str(path), *(["--json"] if as_json else [])], capsys)
    assert status == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1
    assert err.startswith(f"dpmm: error: {path}: ")
    assert key in err
    assert "Traceback" not in err


def test_missing_config_file(tmp_path: Path, capsys) -> None:
    status, _, err = run(["plan", str(tmp_path / "absent.yaml")], capsys)
    assert status == 2
    assert err.startswith("dpmm: error: ") and "absent.yaml" in err
    assert err.count("\n") == 1


def test_missing_figures_show_as_na(tmp_path: Path, capsys, monkeypatch) -> None:
    def refuse(W, privacy, **options):
        raise TooLargeError("Refusing a dense Gram for the SVD bound")

    monkeypatch.setattr(dpmm.plan, "svd_bound", refuse)
    status, out, err = run(["plan", str(write(tmp_path, SMALL))], capsys)
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("age-ranges"))
    assert "n/a" in row
    assert "SVD bound" in err  # the library's warning, on stderr
    status, out, _ = run(["plan", str(write(tmp_path, SMALL)), "--json"], capsys)
    assert json.loads(out)["groups"][1]["svd_bound"] is None


def test_verbose_logs_progress_on_stderr(tmp_path: Path, capsys) -> None:
    status, out, err = run(["-v", "plan", str(write(tmp_path, SMALL)), "--json"], capsys)
    assert status == 0
    json.loads(out)
    assert "strategy" in err


def test_version(capsys) -> None:
    status, out, _ = run(["--version"], capsys)
    assert status == 0
    assert out.strip() == f"dpmm {dpmm.__version__}"


def test_usage_errors_exit_2(capsys) -> None:
    assert run([], capsys)[0] == 2
    assert run(["publish"], capsys)[0] == 2
    assert run(["plan"], capsys)[0] == 2


def _console_script() -> str | None:
    beside = Path(sys.executable).parent / "dpmm"
    return str(beside) if beside.exists() else shutil.which("dpmm")


@pytest.mark.slow
def test_installed_console_script_runs_plan(tmp_path: Path) -> None:
    script = _console_script()
    if script is None:
        pytest.fail("the dpmm console script is not installed (pip install -e .)")
    result = subprocess.run(
        [script, "plan", str(example_copy(ADULT.name, tmp_path)), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["name"] == "adult-marginals"
    assert_plan_keys(data)


@pytest.mark.slow  # test_python_dash_m_runs_the_command runs the package in a subprocess too
def test_module_runs_as_a_script(tmp_path: Path) -> None:
    path = write(tmp_path, {**SMALL, "privacy": {"epsilon": 0}})
    result = subprocess.run(
        [sys.executable, "-m", "dpmm.cli", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("dpmm: error: ")
    assert result.stderr.count("\n") == 1


def test_readme_opens_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.DOTALL)
    venv = "python3 -m venv .venv && . .venv/bin/activate"
    assert blocks[:2] == [
        f"{venv} && pip install . && dpmm demo",
        f'{venv} && pip install -e ".[test]" && pytest -n auto',
    ]
    before = readme[: readme.index("```sh")]
    assert before.strip() == "# dpmm"
    # CI runs both blocks as README.md has them: its extraction gives exactly these.
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    text = ci.read_text()
    assert "run_readme_command 1" in text and "run_readme_command 2" in text
    extract = f"source <(sed -n '/^readme_command()/,/^}}/p' {ci}); readme_command \"$1\""
    for number, block in enumerate(blocks[:2], start=1):
        done = subprocess.run(
            ["bash", "-c", extract, "ci", str(number)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == block


def test_readme_config_example_plans(tmp_path: Path, capsys) -> None:
    readme = (ROOT / "README.md").read_text()
    snippet = next(
        block
        for block in re.findall(r"```yaml\n(.*?)```", readme, flags=re.DOTALL)
        if block.startswith("name:")
    )
    status, out, err = run(["plan", str(write(tmp_path, snippet)), "--json"], capsys)
    assert status == 0, err
    assert [group["name"] for group in json.loads(out)["groups"]] == ["age-cdf", "people"]


def test_python_dash_m_runs_the_command() -> None:
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "dpmm", "--version"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0
    assert "dpmm" in completed.stdout + completed.stderr


def test_an_os_error_is_one_line_naming_the_path(tmp_path: Path, capsys) -> None:
    (tmp_path / "taken").write_text("a file where a folder should be")
    assert main(["demo", "--folder", str(tmp_path / "taken" / "demo")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"dpmm: error: {tmp_path / 'taken' / 'demo'}: Not a directory\n"


def test_plan_report_writes_the_page_beside_the_usual_output(tmp_path: Path, capsys) -> None:
    page = tmp_path / "plan.html"
    status, out, err = run(["plan", str(write(tmp_path, SMALL)), "--report", str(page)], capsys)
    assert status == 0, err
    assert out.startswith("plan: small") and out.endswith(f"\nreport written to {page}\n")
    text = page.read_text(encoding="utf-8")
    assert "<title>Plan report: small</title>" in text
    assert "<td>age-cdf-by-sex</td>" in text and "<td>age-ranges</td>" in text
    assert text.count('<img src="data:image/png;base64,') == 2

    # With --json, standard output stays one JSON object.
    status, out, err = run(
        ["plan", str(write(tmp_path, SMALL)), "--json", "--report", str(page)], capsys
    )
    assert status == 0, err
    assert json.loads(out)["name"] == "small"


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_plan_report_to_a_bad_path_is_one_sentence_before_planning(
    tmp_path: Path, capsys, monkeypatch, where: str
) -> None:
    target = tmp_path / "absent" / "plan.html" if where == "missing folder" else tmp_path

    def never(*args, **kwargs):
        raise AssertionError("planned although the report cannot be written")

    monkeypatch.setattr("dpmm.cli.plan", never)
    status, out, err = run(["plan", str(write(tmp_path, SMALL)), "--report", str(target)], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    reason = (
        f"cannot write the report there: folder {tmp_path / 'absent'} does not exist"
        if where == "missing folder"
        else "is a folder; give the HTML file to write"
    )
    assert err == f"dpmm: error: --report {target}: {reason}\n"


def test_plan_report_that_cannot_be_written_is_one_sentence(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("dpmm.report.write_report", full)
    page = tmp_path / "plan.html"
    status, _, err = run(["plan", str(write(tmp_path, SMALL)), "--report", str(page)], capsys)
    assert status == 2
    assert (
        err == f"dpmm: error: --report {page}: cannot write the report (No space left on device)\n"
    )
