"""Audit a release: re-derive its privacy facts from its own files and check the ledger.

:func:`audit_release` runs eight checks in order and reports each as a :class:`Check`; a
failed check is a one-sentence finding, never an exception:

1. ``manifest`` — ``manifest.json`` parses and has the known format;
2. ``files`` — every listed file has its recorded size and sha256, nothing else is there;
3. ``strategy`` — ``strategy.npz`` loads, and its fingerprint and shape are the manifest's;
4. ``sensitivity`` — recomputed exactly from the loaded strategy, it is the manifest's; a
   private truncation threshold θ (manifest ``thresholds``) is the one its workload group
   was built with, each bucket weighing ``min(its value, θ)`` (midpoint or upper edge, by
   the group's ``valuation``);
5. ``noise`` — the Laplace scale or Gaussian σ² recomputed from the sensitivity and budget
   is the manifest's, and a Gaussian's guarantee is within the budget;
6. ``measurements`` — ``measurements.parquet`` reads (its values match their count and
   sha256) and its header agrees with the manifest;
7. ``answers`` — every estimate and standard error in ``answers.parquet`` is what the
   release's post-processing gives from ``measurements.parquet`` and ``strategy.npz``
   under the config the manifest holds (it is deterministic), within 1e-6; integer
   answers (``reconstruction.output: integer``) exactly;
8. ``ledger`` — the ledger's keyed hash chain verifies; the release's reservation exists,
   is for the dataset and the budget, and is spent by the entry (sequence number and hash)
   the manifest recorded; the ledger recorded this ``manifest.json``'s sha256 when the
   version was written (so a change to any byte of the manifest, and through its file
   digests to any file, is caught); each private threshold's reservation is spent, and
   thresholds plus measurement add up to the config's budget.

A check that needs the result of an earlier one that failed fails as "not checked".

A version whose arrays stayed on the Dask workers (``cluster.arrays: workers``: its
``answers.parquet`` and ``measurements.parquet`` are folders of parts) is recomputed on a
cluster, never in the auditing process, which would need memory proportional to the
domain: the one the release's config describes (:class:`~dpmm.cluster.DaskCluster`, the
release's own code: an address or a LocalCluster made for the audit; a cluster class the
manifest names is never imported), one the operator names by its scheduler's address, or
the caller's client. The workers
read the measurement's parts, solve least squares and compare each answers part where
they read it; only a count of rows, or a finding, comes back.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from dpmm import __version__
from dpmm.config import ReleaseConfig, load_config
from dpmm.errors import DpmmError
from dpmm.linalg import Matrix, Weighted
from dpmm.measure.exact import ExactStrategy, MeasurementError, analyze_strategy
from dpmm.pipeline.release import recompute_answers
from dpmm.privacy.accounting import discrete_gaussian_zcdp, gaussian_sigma2, laplace_scale
from dpmm.privacy.ledger import Entry, Ledger, LedgerTampered
from dpmm.privacy.params import ZCDP, PureDP, privacy_from_config
from dpmm.reconstruct.choice import EXACT
from dpmm.release.catalog import load_manifest
from dpmm.release.tables import PART, part_files, read_answers, read_measurements
from dpmm.release.writer import MANIFEST_NAME, file_digests, leftovers
from dpmm.settings import ClusterSettings, cluster_settings
from dpmm.workload.prefix_sum import bucket_values, value_error_bound

__all__ = ["AuditReport", "Check", "audit_release", "format_audit"]

#: ``progress(steps done, steps, what runs now)``, as the terminal's bar takes it.
Progress = Callable[[int, int, str], None]
#: Files every release lists in its manifest.
REQUIRED_FILES = ("answers.parquet", "measurements.parquet", "strategy.npz")


@dataclass(frozen=True)
class Check:
    """One audit finding: the check's name, whether it passed, and one sentence."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class AuditReport:
    """The checks run on one release folder, in order."""

    release_dir: Path
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return all(check.ok for check in self.checks)

    def failed(self) -> list[str]:
        """The names of the checks that failed."""
        return [check.name for check in self.checks if not check.ok]


class _FailedCheckError(Exception):
    """A check's finding; its message is the Check's detail."""


@dataclass
class _State:
    """What the checks learn, for the checks after them."""

    folder: Path
    ledger: str | Path | None
    #: The cluster the operator named (an address), None for the release's own.
    cluster: ClusterSettings | None = None
    #: The client of the cluster a chunked version is recomputed on, once there is one.
    client: Any = None
    progress: Progress | None = None
    #: The check running now (its position in the audit's checks), for ``progress``.
    step: int = 0
    #: What the audit started (a cluster), closed when it ends.
    resources: ExitStack = field(default_factory=ExitStack)
    manifest: dict[str, object] | None = None
    strategy: ExactStrategy | None = None
    sensitivity: Fraction | None = None
    notes: dict[str, str] = field(default_factory=dict)


def audit_release(
    release_dir: str | os.PathLike[str],
    *,
    ledger: str | Path | None = None,
    scheduler: str | None = None,
    client: Any = None,
    progress: Progress | None = None,
) -> AuditReport:
    """Run every check on a release version folder (see the module docstring).

    Args:
        release_dir: the version folder, e.g. ``releases/survey/v0003``.
        ledger: the ledger to check against; the manifest's ``ledger.location`` by default.
        scheduler: the address of the Dask scheduler to recompute a version made on the
            workers on; by default the cluster its config describes.
        client: a ``distributed.Client`` to recompute such a version on (instead of
            ``scheduler``), left open.
        progress: called with ``(checks done, checks, what runs now)``, and during the
            answers of a version made on the workers with the parts compared so far.

    Returns:
        The report; ``report.ok`` is True when every check passed.

    Raises:
        ConfigError: ``scheduler`` is not a scheduler address.
    """
    named = None if scheduler is None else cluster_settings({"address": scheduler})
    state = _State(Path(release_dir), ledger, named, client, progress)
    with state.resources:
        checks = _run_checks(state)
    return AuditReport(Path(release_dir), tuple(checks))


def _run_checks(state: _State) -> list[Check]:
    checks = []
    for done, (name, step) in enumerate(_STEPS):
        state.step = done
        if state.progress is not None:
            state.progress(done, len(_STEPS), name)
        try:
            checks.append(Check(name, True, step(state)))
        except _FailedCheckError as finding:
            checks.append(Check(name, False, str(finding)))
        except (DpmmError, OSError, sqlite3.Error) as error:
            checks.append(Check(name, False, _sentence(error)))
        except (ValueError, TypeError, KeyError, IndexError) as error:
            # Only a malformed manifest value reaches here (e.g. a shape that is not numbers).
            checks.append(
                Check(name, False, f"the manifest holds a malformed value ({_sentence(error)})")
            )
        except Exception as error:  # a damaged file is a finding, never a crash
            detail = f"a release file could not be read ({type(error).__name__}: {error})"
            checks.append(Check(name, False, detail))
    if state.progress is not None:
        state.progress(len(_STEPS), len(_STEPS), "")
    return checks


def format_audit(report: AuditReport, *, ascii_only: bool | None = None) -> str:
    """One line per check, ``✓``/``✗`` (or ``ok``/``FAIL`` where the terminal lacks them).

    Args:
        report: the audit report.
        ascii_only: force plain ASCII marks; by default, used when stdout cannot encode ✓.
    """
    if ascii_only is None:
        ascii_only = not _can_encode("✓✗")
    passed, failed = ("ok  ", "FAIL") if ascii_only else ("✓", "✗")
    width = max((len(check.name) for check in report.checks), default=0)
    lines = [f"audit of {report.release_dir}"]
    for check in report.checks:
        mark = passed if check.ok else failed
        lines.append(f"{mark} {check.name.ljust(width)}  {check.detail}")
    verdict = "passed" if report.ok else f"FAILED ({', '.join(report.failed())})"
    lines.append(f"audit {verdict}")
    return "\n".join(lines)


# -- the checks, in order --------------------------------------------------------------------


def _check_manifest(state: _State) -> str:
    state.manifest = load_manifest(state.folder)
    return f"{MANIFEST_NAME} is a {state.manifest['format']} manifest"


def _check_files(state: _State) -> str:
    manifest = _need_manifest(state)
    listed = _field(manifest, "files")
    if not isinstance(listed, dict):
        raise _FailedCheckError("the manifest's 'files' is not an object of file entries")
    for name in REQUIRED_FILES:  # a file, or a folder of its parts (dpmm.release.parts)
        if name not in listed and not any(path.startswith(name + "/") for path in listed):
            raise _FailedCheckError(f"the manifest does not list the required file {name}")
    for relative, entry in sorted(listed.items()):
        _member(state.folder, relative)  # a finding for a path outside the folder
        if not isinstance(entry, dict) or "sha256" not in entry or "bytes" not in entry:
            raise _FailedCheckError(f"the manifest's entry for {relative} lacks its sha256 or size")
    present = file_digests(state.folder)  # a ReleaseError for a symlink or special file
    for relative, entry in sorted(listed.items()):
        if relative not in present:
            raise _FailedCheckError(f"{relative} is listed in the manifest but missing")
        size, digest = present[relative]["bytes"], present[relative]["sha256"]
        if size != entry["bytes"]:
            raise _FailedCheckError(
                f"{relative} has {size} bytes, the manifest says {entry['bytes']}"
            )
        if digest != entry["sha256"]:
            raise _FailedCheckError(f"{relative} does not match its sha256 in the manifest")
    unlisted = sorted(set(present) - set(listed))
    if unlisted:
        raise _FailedCheckError(
            f"the folder holds files the manifest does not list: {', '.join(unlisted)}"
        )
    left = leftovers(state.folder.parent)  # by a writer killed while writing
    note = (
        f"; {len(left)} unfinished write{'s' if len(left) > 1 else ''} beside it "
        f"({', '.join(p.name for p in left)}), removed by the next release"
        if left
        else ""
    )
    return f"{len(listed)} files match their sizes and sha256{note}"


def _check_strategy(state: _State) -> str:
    manifest = _need_manifest(state)
    try:
        from dpmm.linalg.serialize import load_matrix  # imported when used: optional at import
    except ImportError:
        raise _FailedCheckError(
            "strategies cannot be loaded: dpmm.linalg.serialize is missing"
        ) from None

    path = _member(state.folder, str(_field(manifest, "strategy.file")))
    matrix = load_matrix(path)
    scale = int(_field(manifest, "strategy.quantization_scale"))
    exact = _integer_strategy(matrix, scale)
    # Later checks re-derive from the file's strategy even if it is not the manifest's.
    state.strategy = exact
    shape = [int(size) for size in _field(manifest, "strategy.shape")]
    if list(exact.matrix.shape) != shape:
        raise _FailedCheckError(
            f"the strategy in {path.name} has shape {list(exact.matrix.shape)}, "
            f"the manifest says {shape}"
        )
    if exact.fingerprint() != _field(manifest, "strategy.fingerprint"):
        raise _FailedCheckError(
            f"the strategy in {path.name} does not have the manifest's fingerprint"
        )
    return f"{path.name} loads with shape {shape} and the manifest's fingerprint"


def _check_sensitivity(state: _State) -> str:
    manifest = _need_manifest(state)
    if state.strategy is None:
        raise _FailedCheckError("not checked: the strategy could not be loaded")
    norm = _field(manifest, "privacy.norm")
    if norm == "l1":
        derived = Fraction(state.strategy.sensitivity_l1)
    elif norm == "l2":
        derived = Fraction(state.strategy.sensitivity_l2_squared)
    else:
        raise _FailedCheckError(f"the manifest's privacy.norm is {norm!r:.40}, not 'l1' or 'l2'")
    recorded = _fraction(manifest, "privacy.sensitivity")
    what = "L1 sensitivity" if norm == "l1" else "squared L2 sensitivity"
    if derived != recorded:
        raise _FailedCheckError(f"the strategy's {what} is {derived}, the manifest says {recorded}")
    state.sensitivity = derived
    return f"the strategy's {what} is {derived}, as recorded" + _check_threshold_weights(manifest)


def _check_threshold_weights(manifest: dict[str, object]) -> str:
    """Each private θ is the one its group's bucket weights were truncated at."""
    if "thresholds" not in manifest:
        return ""
    groups = {g["name"]: g["spec"] for g in _field(manifest, "workload.groups")}
    attributes = {a["name"]: a for a in _field(manifest, "domain.attributes")}
    chosen = _field(manifest, "thresholds.groups")
    for entry in chosen:
        name, theta = entry["group"], float(entry["threshold"])
        spec = groups.get(name)
        if spec is None or spec.get("truncation", {}).get("threshold") != theta:
            raise _FailedCheckError(
                f"workload group {name!r} was not built with its recorded threshold {theta:g}"
            )
        bins = attributes[spec["attribute"]]["bins"]
        valuation = spec.get("valuation", "upper")  # versions before the key: upper edges
        expected = np.minimum(bucket_values(bins, valuation), theta).tolist()
        if [float(w) for w in spec["weights"]] != expected:
            raise _FailedCheckError(
                f"workload group {name!r} does not weigh its buckets min(bucket {valuation}, "
                f"θ = {theta:g})"
            )
        bound = spec.get("value_error_bound")  # versions before the key state none
        if bound is not None and bound != value_error_bound(bins, valuation, theta):
            raise _FailedCheckError(
                f"workload group {name!r} states a binning bound {bound:g} that its buckets "
                f"and θ = {theta:g} do not give"
            )
    return f"; {len(chosen)} private threshold(s) match their groups' weights"


def _check_noise(state: _State) -> str:
    manifest = _need_manifest(state)
    budget = _budget(manifest)
    sensitivity = state.sensitivity
    source = "re-derived"
    if sensitivity is None:
        sensitivity, source = _fraction(manifest, "privacy.sensitivity"), "recorded"
    norm, noise = _field(manifest, "privacy.norm"), _field(manifest, "privacy.noise")
    if isinstance(budget, PureDP):
        if (norm, noise) != ("l1", "discrete_laplace"):
            raise _FailedCheckError(
                f"a pure ε budget needs l1 discrete_laplace noise, not {norm} {noise}"
            )
        derived = laplace_scale(sensitivity, budget)
        recorded = _fraction(manifest, "privacy.scale")
        if derived != recorded:
            raise _FailedCheckError(
                f"the {source} sensitivity {sensitivity} and ε = {budget.epsilon} give Laplace "
                f"scale {derived}, the manifest says {recorded}"
            )
        return f"discrete Laplace scale {derived} = Δ₁/ε = {sensitivity}/({budget.epsilon})"
    if (norm, noise) != ("l2", "discrete_gaussian"):
        raise _FailedCheckError(
            f"a ρ-zCDP budget needs l2 discrete_gaussian noise, not {norm} {noise}"
        )
    derived = gaussian_sigma2(sensitivity, budget)
    recorded = _fraction(manifest, "privacy.sigma2")
    if derived != recorded:
        raise _FailedCheckError(
            f"the {source} squared sensitivity {sensitivity} and ρ = {budget.rho} give "
            f"σ² = {derived}, the manifest says {recorded}"
        )
    rows = int(_field(manifest, "strategy.shape")[0])
    guarantee = discrete_gaussian_zcdp(recorded, sensitivity, max(rows, 1))
    if guarantee.privacy.rho > budget.rho:
        raise _FailedCheckError(
            f"σ² = {recorded} gives only ρ = {guarantee.privacy.rho} by {guarantee.theorem}, "
            f"more than the budget's ρ = {budget.rho}"
        )
    return f"discrete Gaussian σ² = {derived} gives ρ = {guarantee.privacy.rho} ≤ {budget.rho}"


def _check_measurements(state: _State) -> str:
    manifest = _need_manifest(state)
    path = _member(state.folder, str(_field(manifest, "measurement.file")))
    record = read_measurements(path)
    expected = {
        "id": (record.measurement_id, _field(manifest, "measurement.id")),
        "fingerprint": (record.strategy_fingerprint, _field(manifest, "strategy.fingerprint")),
        "shape": (list(record.shape), [int(n) for n in _field(manifest, "strategy.shape")]),
        "privacy": (record.privacy, _budget(manifest)),
        "norm": (record.norm, _field(manifest, "privacy.norm")),
        "sensitivity": (record.sensitivity, _fraction(manifest, "privacy.sensitivity")),
        "noise": (record.noise, _field(manifest, "privacy.noise")),
        "scale": (record.scale, _optional_fraction(manifest, "privacy.scale")),
        "sigma2": (record.sigma2, _optional_fraction(manifest, "privacy.sigma2")),
        "quantization scale": (
            record.quantization_scale,
            int(_field(manifest, "strategy.quantization_scale")),
        ),
        "count": (int(record.values.size), int(_field(manifest, "measurement.count"))),
        "values sha256": (
            record.header()["values_sha256"],
            _field(manifest, "measurement.values_sha256"),
        ),
        "reservation": (record.reservation_id, _field(manifest, "ledger.reservation_id")),
        "release id": (record.release_id, _field(manifest, "ledger.release_id")),
    }
    different = [name for name, (stored, recorded) in expected.items() if stored != recorded]
    if different:
        raise _FailedCheckError(
            f"the header of {path.name} differs from the manifest in: {', '.join(different)}"
        )
    if record.values.size != record.shape[0]:
        raise _FailedCheckError(
            f"{path.name} holds {record.values.size} values for a strategy of "
            f"{record.shape[0]} rows"
        )
    return f"{path.name} holds {record.values.size} values matching the manifest"


#: How far a recomputed answer or standard error may be from the published one (the
#: same computation, up to the order of floating-point sums on another machine).
ANSWER_TOLERANCE = 1e-6


def _manifest_config(manifest: dict[str, object], folder: Path) -> ReleaseConfig:
    """The release's config, from the document and the domain its manifest holds."""
    document = dict(_field(manifest, "config.document"))
    document["domain"] = {"attributes": _field(manifest, "domain.attributes")}
    declared = manifest.get("invariants")
    if isinstance(declared, dict) and "margins" in declared:  # their counts, not their files
        margins = [
            {"attribute": m["attribute"], "counts": m["counts"]} for m in declared["margins"]
        ]
        document["invariants"] = {**document["invariants"], "margins": margins}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / str(_field(manifest, "config.file"))
        path.write_text(json.dumps(document))
        return load_config(path, references=False)  # targets are not audited


def _check_answers(state: _State) -> str:
    """Recompute every answer from the measurement and the strategy, as the release did: in
    this process, or for a version made on the workers (its answers a folder of parts) on
    the audit's cluster."""
    manifest = _need_manifest(state)
    path = _member(state.folder, "answers.parquet")
    config = _manifest_config(manifest, state.folder)
    if not path.is_dir():
        return _recomputed_answers(state, manifest, config, path)
    import dask

    client = _cluster_client(state, config.cluster)
    with dask.config.set(scheduler=client):  # every persist and compute goes to the cluster
        return _recomputed_answers(state, manifest, config, path)


def _cluster_client(state: _State, release_cluster: ClusterSettings) -> Any:
    """The caller's client, or one of the cluster the operator named or the release's
    config describes, started through the release's own code and closed with the audit."""
    if state.client is None:
        from dpmm.cluster import DaskCluster  # loads distributed only when needed

        settings = state.cluster if state.cluster is not None else release_cluster
        if settings.cluster_class is not None:
            # A release folder may come from anyone: the audit never imports and starts
            # the class its manifest names (any importable callable, with its options).
            raise _FailedCheckError(
                f"not checked: the version was made on a cluster of class "
                f"'{settings.cluster_class}', which the audit does not start from a release "
                "folder; name its scheduler with --scheduler ADDRESS"
            )
        state.client = state.resources.enter_context(DaskCluster(settings)).client
    return state.client


def _recomputed_answers(
    state: _State, manifest: dict[str, object], config: ReleaseConfig, path: Path
) -> str:
    """The answers check: ``path``'s answers against those the release's post-processing
    gives from its measurement (on whichever scheduler is current)."""
    recomputed_release = recompute_answers(config, state.folder)
    # Standard errors are compared when this dpmm makes them the way the version says its
    # were made (an earlier dpmm's bootstrap drew differently). Versions before the key
    # had exact ones from least squares.
    solved = manifest.get("reconstruction", {})
    linear = EXACT if solved.get("method") == "least_squares" else None
    stated_method = solved.get("standard_errors", linear)
    same_errors = stated_method == recomputed_release.standard_errors
    # Versions before intervals were published have none to compare.
    stated_intervals = manifest.get("intervals", {})
    compared = _compared_columns(same_errors, "method" in stated_intervals)
    if "method" in stated_intervals and stated_intervals["method"] != recomputed_release.intervals:
        raise _FailedCheckError(
            f"the manifest says the intervals were had by {stated_intervals['method']!r}, but "
            f"its measurement and strategy give {recomputed_release.intervals!r}"
        )
    _check_rounding(manifest, solved, recomputed_release.rounding)
    level = config.release.confidence
    if "level" in stated_intervals and stated_intervals["level"] != level:
        raise _FailedCheckError(
            f"the manifest's intervals.level {stated_intervals['level']!r} is not its config's "
            f"release.confidence {level!r}"
        )
    integer = solved.get("output") == "integer"
    if path.is_dir():
        count = _compare_parts(path, recomputed_release.groups, compared, state, integer)
    else:
        count = _compare_table(path, recomputed_release.groups, compared, integer)
    if not same_errors:
        return (
            f"{path.name}: all {count} estimates recomputed from the measurement; standard "
            f"errors made by {stated_method or 'an earlier dpmm'}, not by this dpmm's "
            f"{recomputed_release.standard_errors}: not compared"
        )
    return f"{path.name}: all {count} answers recomputed from the measurement"


def _check_rounding(manifest: dict[str, Any], solved: dict[str, Any], rounding: str | None) -> None:
    """An integer version's ``reconstruction.rounding`` against how its post-processing
    rounds now, where this dpmm wrote it (an earlier dpmm may have worded it otherwise;
    its integers are compared exactly all the same).

    Raises:
        _FailedCheckError: they differ, or one of them rounds and the other does not.
    """
    if manifest.get("software", {}).get("dpmm") != __version__:
        return
    stated = solved.get("rounding") if solved.get("output") == "integer" else None
    if stated != rounding:
        raise _FailedCheckError(
            f"the manifest says the answers were rounded as {stated!r}, but its measurement "
            f"and config round them as {rounding!r}"
        )


def _compared_columns(same_errors: bool, intervals: bool) -> tuple[str, ...]:
    """The answer columns the audit recomputes: estimates always; standard errors made the
    way this dpmm makes them; half-widths and their kind where the version has them."""
    columns = ("estimate",) + (("standard_error",) if same_errors else ())
    return columns + (("half_width", "exact_interval") if same_errors and intervals else ())


def _recomputed(group: Any, column: str) -> Any:
    """A recomputed group's values of an ``answers.parquet`` column (numpy or Dask)."""
    if column == "exact_interval":
        flags = group.exact_intervals
        if np.ndim(flags) == 0:  # one for the group
            return group.values * 0 + float(flags)
        return flags.astype(np.float64)  # numpy, or Dask on the cluster
    attribute = {"estimate": "values", "standard_error": "standard_errors"}
    return getattr(group, attribute.get(column, "half_widths"))


def _compare_table(path: Path, groups: list[Any], compared: tuple[str, ...], integer: bool) -> int:
    """Compare ``answers.parquet`` with the recomputed groups (integer estimates exactly:
    a relative tolerance would let a large count move by one); the rows compared."""
    published = read_answers(path, ("group", "query", *compared)).to_pydict()
    names = np.asarray(published["group"])
    count = 0
    for group in groups:
        rows = names == group.name
        order = np.argsort(np.asarray(published["query"])[rows])
        columns = [(column, _recomputed(group, column)) for column in compared]
        for column, recomputed in columns:
            stated = np.asarray(published[column], dtype=np.float64)[rows][order]
            tolerance = 0.0 if integer and column == "estimate" else ANSWER_TOLERANCE
            if stated.shape != recomputed.shape or not np.allclose(
                stated, recomputed, rtol=tolerance, atol=tolerance
            ):
                raise _FailedCheckError(
                    f"the {column.replace('_', ' ')}s of group '{group.name}' in {path.name} "
                    "are not what its measurement and strategy give"
                )
        count += int(rows.sum())
    if count != names.size:
        raise _FailedCheckError(f"{path.name} holds answers of groups the release does not have")
    return count


def _compare_parts(
    folder: Path, groups: list[Any], compared: tuple[str, ...], state: _State, integer: bool
) -> int:
    """Compare a folder of answer parts with the recomputed groups (Dask arrays), each part
    against its block by a task on the audit's cluster that reads only that part (integer
    estimates exactly); the rows compared."""
    import dask
    from distributed import as_completed

    parts = {path.name: path for path in part_files(folder)}
    tasks = []
    for number, group in enumerate(groups):
        chunks = group.values.chunks
        starts = np.cumsum((0, *chunks[0]))
        columns = [_recomputed(group, column).rechunk(chunks) for column in compared]
        blocks = zip(*(column.to_delayed().ravel() for column in columns), strict=True)
        for index, recomputed in enumerate(blocks):
            name = PART.format(f"{number:04d}-{index:06d}")
            if name not in parts:
                raise _FailedCheckError(f"{folder.name}/{name} is missing")
            span = (int(starts[index]), int(starts[index + 1]))
            tasks.append(
                dask.delayed(_compare_part)(
                    parts.pop(name),
                    group.name,
                    span,
                    dict(zip(compared, recomputed, strict=True)),
                    integer,
                )
            )
    if parts:
        raise _FailedCheckError(f"{folder.name} holds parts the release does not have")
    futures = state.client.compute(tasks)
    count = 0
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            count += future.result()  # a part's finding is raised here
            if state.progress is not None:
                state.progress(state.step, len(_STEPS), f"answers: {done}/{len(tasks)} parts")
    finally:
        state.client.cancel(futures)  # the rest, after a finding
    return count


def _compare_part(
    path: Path,
    group: str,
    span: tuple[int, int],
    recomputed_columns: dict[str, np.ndarray],
    integer: bool,
) -> int:
    table = read_answers(path, ("group", "query", *recomputed_columns))
    queries = table.column("query").to_numpy()
    names = set(table.column("group").to_pylist())
    if names != {group} or not np.array_equal(queries, np.arange(*span)):
        raise _FailedCheckError(f"{path.name} does not hold queries {span} of group '{group}'")
    for column, recomputed in recomputed_columns.items():
        stated = table.column(column).to_numpy().astype(np.float64)
        tolerance = 0.0 if integer and column == "estimate" else ANSWER_TOLERANCE
        if not np.allclose(stated, recomputed, rtol=tolerance, atol=tolerance):
            raise _FailedCheckError(
                f"the {column.replace('_', ' ')}s of group '{group}' in {path.name} "
                "are not what its measurement and strategy give"
            )
    return len(queries)


def _check_ledger(state: _State) -> str:
    manifest = _need_manifest(state)
    location = state.ledger if state.ledger is not None else _field(manifest, "ledger.location")
    dataset = str(_field(manifest, "ledger.dataset"))
    reservation_id = str(_field(manifest, "ledger.reservation_id"))
    release_id = _field(manifest, "ledger.release_id")
    budget = _budget(manifest)
    with Ledger.open(location) as opened:
        try:
            entries = opened.verify()
        except LedgerTampered as error:
            raise _FailedCheckError(_sentence(error)) from None
        reserved = {e.reservation_id: e for e in opened.history(dataset) if e.kind == "reserve"}
        entry = reserved.get(reservation_id)
        if entry is None:
            raise _FailedCheckError(
                f"ledger {opened.path} has no reservation {reservation_id} for dataset {dataset!r}"
            )
        if type(entry.budget) is not type(budget) or entry.budget != budget:
            raise _FailedCheckError(
                f"reservation {reservation_id} holds {entry.budget.to_dict()}, the manifest's "
                f"budget is {budget.to_dict()}"
            )
        if entry.release_id != release_id:
            raise _FailedCheckError(
                f"reservation {reservation_id} is for release {entry.release_id!r}, the "
                f"manifest says {release_id!r}"
            )
        status = opened.status(reservation_id)
        if status != "spent":
            raise _FailedCheckError(f"reservation {reservation_id} is {status}, not spent")
        spend = opened.spend_entry(reservation_id)
        if _field(manifest, "ledger.spend") != {"seq": spend.seq, "hash": spend.hash}:
            raise _FailedCheckError(
                f"the ledger's spend of reservation {reservation_id} (entry {spend.seq}) is not "
                "the entry the manifest recorded: the ledger or the manifest was rewritten"
            )
        digest = hashlib.sha256((state.folder / MANIFEST_NAME).read_bytes()).hexdigest()
        if digest not in opened.published(reservation_id):
            raise _FailedCheckError(
                f"{MANIFEST_NAME} (sha256 {digest[:12]}…) is not a manifest the ledger recorded "
                f"for reservation {reservation_id}: it was changed after it was written"
            )
        thresholds = _check_threshold_ledger(manifest, opened, reserved, release_id, budget)
    return (
        f"ledger verifies ({entries} entries); reservation {reservation_id} is spent at entry "
        f"{spend.seq} and the ledger recorded this manifest's sha256" + thresholds
    )


def _check_threshold_ledger(
    manifest: dict[str, object],
    opened: Ledger,
    reserved: dict[str, Entry],
    release_id: object,
    measurement: PureDP | ZCDP,
) -> str:
    """Each private threshold's reservation is spent, and the split adds up to the budget."""
    if "thresholds" not in manifest:
        return ""
    # The whole budget spent: as recorded (a derived one's config says `least`), or the
    # config's own in versions written before it was recorded.
    recorded = _field(manifest, "config").get("budget")
    whole = recorded["total"] if recorded else _field(manifest, "config.document.privacy")
    total = privacy_from_config(whole)
    where = "thresholds.total_budget"
    if privacy_from_config(_field(manifest, where), where) != total:
        raise _FailedCheckError("the manifest's thresholds.total_budget is not the config's")
    used = measurement.epsilon if isinstance(measurement, PureDP) else None
    chosen = _field(manifest, "thresholds.groups")
    for index, entry in enumerate(chosen):
        held = reserved.get(entry["reservation_id"])
        budget = privacy_from_config(entry["budget"], f"thresholds.groups[{index}].budget")
        if held is None or held.release_id != release_id or held.budget != budget:
            raise _FailedCheckError(
                f"the threshold of group {entry['group']!r} has no reservation of "
                f"{budget.to_dict()} for release {release_id!r} in ledger {opened.path}"
            )
        status = opened.status(held.reservation_id)
        if status != "spent":
            raise _FailedCheckError(
                f"the threshold reservation {held.reservation_id} is {status}, not spent"
            )
        used = None if used is None or not isinstance(budget, PureDP) else used + budget.epsilon
    if not isinstance(total, PureDP) or used != total.epsilon:
        raise _FailedCheckError(
            f"thresholds and measurement spend ε = {used}, not the config's budget {total}"
        )
    return f"; {len(chosen)} threshold reservation(s) spent, adding up to ε = {total.epsilon}"


_STEPS: tuple[tuple[str, Callable[[_State], str]], ...] = (
    ("manifest", _check_manifest),
    ("files", _check_files),
    ("strategy", _check_strategy),
    ("sensitivity", _check_sensitivity),
    ("noise", _check_noise),
    ("measurements", _check_measurements),
    ("answers", _check_answers),
    ("ledger", _check_ledger),
)


# -- helpers ---------------------------------------------------------------------------------


def _need_manifest(state: _State) -> dict[str, object]:
    if state.manifest is None:
        raise _FailedCheckError("not checked: the manifest could not be read")
    return state.manifest


def _field(manifest: dict[str, object], dotted: str) -> object:
    """The manifest's value at a dotted path, or a finding naming the missing field."""
    value: object = manifest
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise _FailedCheckError(f"the manifest has no field {dotted}")
        value = value[key]
    return value


def _fraction(manifest: dict[str, object], dotted: str) -> Fraction:
    value = _field(manifest, dotted)
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise _FailedCheckError(
            f"the manifest's {dotted} is {value!r:.40}, not an exact fraction"
        ) from None


def _optional_fraction(manifest: dict[str, object], dotted: str) -> Fraction | None:
    return None if _field(manifest, dotted) is None else _fraction(manifest, dotted)


def _budget(manifest: dict[str, object]) -> PureDP | ZCDP:
    value = _field(manifest, "privacy.budget")
    try:
        return privacy_from_config(value, "privacy.budget")
    except (ValueError, ZeroDivisionError):
        raise _FailedCheckError(
            f"the manifest's privacy.budget {value!r:.60} is not a budget"
        ) from None


def _integer_strategy(matrix: Matrix, scale: int) -> ExactStrategy:
    """The integer strategy measured: the file holds it, or ``A_q = integer / scale``."""
    try:
        return analyze_strategy(matrix)
    except MeasurementError:
        if scale > 1 and isinstance(matrix, Weighted) and matrix.weight * scale == 1:
            return analyze_strategy(matrix.base)
        raise


def _member(folder: Path, relative: str) -> Path:
    """``folder / relative`` for a relative POSIX path that stays inside ``folder``."""
    parts = PurePosixPath(relative).parts
    if not relative or PurePosixPath(relative).is_absolute() or ".." in parts:
        raise _FailedCheckError(
            f"the manifest names the file {relative!r:.60} outside the release folder"
        )
    return folder.joinpath(*parts)


def _sentence(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__


def _can_encode(text: str) -> bool:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True
