"""``polar-jobs swe-eval`` end to end over fixture repositories laid out as REPOS/owner__name (swe-eval.md §7)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from polar_jobs.cli import main
from tests.swe_fixtures import build_fixture, git

pytestmark = pytest.mark.integration

BROKEN = ("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
          "@@ -1,2 +1,2 @@\n def multiply(a, b):\n-    return a\n+    return a * b\n")


@pytest.fixture
def layout(tmp_path):
    calc, slug, drift = (build_fixture(name, tmp_path / "build") for name in ("calc", "slug", "drift"))
    repos = tmp_path / "repos"
    for fixture in (calc, slug):
        git(tmp_path, "clone", "-q", str(fixture.repo), str(repos / fixture.instance["repo"].replace("/", "__")))
    calc2 = {**calc.instance, "instance_id": "polar__calc-2"}
    (tmp_path / "instances.json").write_text(json.dumps([calc.instance, calc2, slug.instance, drift.instance]))
    predictions = [{"instance_id": "polar__calc-1", "model_name_or_path": "m", "model_patch": calc.gold},
                   {"instance_id": "polar__slug-1", "model_name_or_path": "m", "model_patch": ""},
                   {"instance_id": "polar__calc-2", "model_name_or_path": "m", "model_patch": BROKEN}]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return tmp_path


def invoke(layout, *extra):
    return CliRunner().invoke(main, ["swe-eval", "--instances", str(layout / "instances.json"),
                                     "--predictions", str(layout / "preds.jsonl"), "--repos", str(layout / "repos"),
                                     "--report", str(layout / "out" / "run.json"), *extra])


def test_swe_eval_grades_reports_and_summarises(layout):
    result = invoke(layout, "--workers", "2", "--timeout", "60")
    assert result.exit_code == 0, result.output
    run = json.loads((layout / "out" / "run.json").read_text())
    summary = run["summary"]
    assert {key: summary[key] for key in ("total_instances", "submitted_instances", "completed_instances",
                                          "resolved_instances", "unresolved_instances", "empty_patch_instances",
                                          "error_instances")} == {
        "total_instances": 4, "submitted_instances": 3, "completed_instances": 1, "resolved_instances": 1,
        "unresolved_instances": 0, "empty_patch_instances": 1, "error_instances": 1}
    assert summary["resolved_ids"] == ["polar__calc-1"] and summary["empty_patch_ids"] == ["polar__slug-1"]
    assert summary["error_ids"] == ["polar__calc-2"] and summary["incomplete_ids"] == ["polar__drift-1"]
    assert summary["schema_version"] == 2

    gold = run["reports"]["polar__calc-1"]
    assert gold["resolved"] is True and gold["patch_successfully_applied"] is True and gold["patch_exists"] is True
    assert gold["tests_status"]["FAIL_TO_PASS"] == {
        "success": ["tests/test_calc.py::test_add_positive", "tests/test_calc.py::test_add_negative"], "failure": []}
    assert gold["tests_status"]["PASS_TO_PASS"] == {"success": ["tests/test_calc.py::test_sub"], "failure": []}
    assert (gold["status"], gold["f2p_ratio"], gold["p2p_ratio"], gold["apply_rung"]) == (
        "RESOLVED_FULL", 1.0, 1.0, "git_apply")
    broken = run["reports"]["polar__calc-2"]
    assert (broken["resolved"], broken["patch_successfully_applied"], broken["failure_reason"]) == (
        False, False, "patch_apply_failed")
    assert "polar__slug-1" not in run["reports"]  # empty patches are never run

    per_instance = json.loads((layout / "out" / "polar__calc-1.report.json").read_text())
    assert per_instance == {"polar__calc-1": gold}
    assert (layout / "out" / "polar__calc-2.report.json").exists()
    assert not (layout / "out" / "polar__slug-1.report.json").exists()

    rows = {line.split()[0]: line.split() for line in result.output.splitlines() if line.startswith("polar__")}
    assert rows["polar__calc-1"][1:5] == ["RESOLVED_FULL", "2/2", "1/1", "git_apply"]
    assert rows["polar__calc-2"][1:] == ["RESOLVED_NO", "0/2", "0/1", "-", "patch_apply_failed"]
    assert rows["polar__slug-1"][-1] == "empty_patch"
    assert "resolved 1" in result.output and "error 1" in result.output


def test_swe_eval_rejects_predictions_for_unknown_instances(layout):
    (layout / "preds.jsonl").write_text(json.dumps({"instance_id": "nope-1", "model_patch": "x"}) + "\n")
    result = invoke(layout)
    assert result.exit_code != 0 and "nope-1" in result.output


def test_swe_eval_reports_a_missing_repository_as_an_error(layout):
    (layout / "repos" / "polar__calc").rename(layout / "repos" / "elsewhere")
    result = invoke(layout)
    assert result.exit_code == 0, result.output
    summary = json.loads((layout / "out" / "run.json").read_text())["summary"]
    assert summary["error_ids"] == ["polar__calc-1", "polar__calc-2"] and summary["resolved_instances"] == 0
    assert "evaluator_error" in result.output
