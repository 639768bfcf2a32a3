"""``polar-jobs swe-eval``: grade a predictions file against local git checkouts, SWE-bench style, without Docker.

Each prediction is graded in a fresh clone of ``REPOS/owner__name`` at its base_commit, through the
same ``grade_patch`` the ``swe`` evaluator uses. Instances run in a thread pool (``workers``); each
one is a separate clone and a separate process group.
"""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from polar_jobs.scoring.base import EvaluationError
from polar_jobs.scoring.swe import (
    SweInstance,
    SweReport,
    clean_checkout,
    grade_patch,
    load_instances,
    load_predictions,
    summarize,
    unrun_report,
)


def run_swe_eval(instances_path: str | Path, predictions_path: str | Path, repos_dir: str | Path,
                 report_path: str | Path, *, timeout_s: float | None = None, workers: int = 1,
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Grade every non-empty prediction, print the table, write the reports; returns the run summary."""
    instances = {instance.instance_id: instance for instance in load_instances(instances_path)}
    predictions = load_predictions(predictions_path)
    unknown = sorted(set(predictions) - set(instances))
    if unknown:
        raise ValueError(f"predictions for unknown instances: {', '.join(unknown)}")
    to_grade = [iid for iid in sorted(predictions) if (predictions[iid] or "").strip()]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        graded = pool.map(lambda iid: grade_prediction(instances[iid], predictions[iid], Path(repos_dir), timeout_s),
                          to_grade)
        reports = dict(zip(to_grade, graded))
    summary = summarize(instances, predictions, reports)
    write_reports(Path(report_path), summary, reports)
    echo(format_table(reports, summary))
    return summary


def grade_prediction(instance: SweInstance, patch: str | None, repos_dir: Path,
                     timeout_s: float | None = None) -> SweReport:
    """Grade one patch in a fresh clone; an evaluator-side failure becomes an error report, not a crash."""
    source = repos_dir / instance.repo_dirname
    try:
        if not source.is_dir():
            raise EvaluationError(f"no repository for {instance.repo} at {source}")
        with tempfile.TemporaryDirectory(prefix="polar-swe-eval-") as tmp:
            runtime = clean_checkout(source, Path(tmp))
            try:
                return grade_patch(runtime, instance, patch, timeout_s)
            finally:
                runtime.stop()
    except EvaluationError as exc:
        return unrun_report(instance, f"evaluator_error: {exc}", patch_exists=True, log=str(exc))
    except Exception as exc:  # a crash on one instance is that instance's error (error_ids), not the run's
        return unrun_report(instance, f"crash: {type(exc).__name__}: {exc}", patch_exists=True, log=repr(exc))


def write_reports(report_path: Path, summary: dict[str, Any], reports: dict[str, SweReport]) -> None:
    """The summary and every report in ``report_path``; ``<id>.report.json`` and ``<id>.log`` next to it."""
    report_path.parent.mkdir(parents=True, exist_ok=True)
    bodies: dict[str, Any] = {}
    for iid, report in sorted(reports.items()):
        body = report.to_json()
        bodies.update(body)
        (report_path.parent / f"{iid}.report.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        (report_path.parent / f"{iid}.log").write_text(report.log, encoding="utf-8")
    report_path.write_text(json.dumps({"summary": summary, "reports": bodies}, indent=2) + "\n", encoding="utf-8")


def format_table(reports: dict[str, SweReport], summary: dict[str, Any]) -> str:
    """One row per submitted instance (instance, status, F2P x/y, P2P x/y, rung, failure reason), then totals."""
    rows = [("instance", "status", "F2P", "P2P", "rung", "failure reason")]
    for iid in summary["submitted_ids"]:
        report = reports.get(iid)
        if report is None:
            rows.append((iid, "-", "-", "-", "-", "empty_patch"))
            continue
        tests = report.tests
        f2p = f"{len(tests.f2p_success)}/{len(tests.f2p_success) + len(tests.f2p_failure)}"
        p2p = f"{len(tests.p2p_success)}/{len(tests.p2p_success) + len(tests.p2p_failure)}"
        reason = (report.failure_reason or "-").splitlines()[0][:80]
        rows.append((iid, report.status.value, f2p, p2p, report.apply_rung or "-", reason))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.append("")
    lines.append(", ".join(f"{key.removesuffix('_instances')} {summary[key]}" for key in (
        "total_instances", "submitted_instances", "completed_instances", "resolved_instances",
        "unresolved_instances", "empty_patch_instances", "error_instances")))
    return "\n".join(lines)
