"""SWE-bench-style grading without Docker: extract a patch, apply it to a clean checkout, run the tests, grade.

Mirrors swebench 5.0.2 (log parsing, per-test predicates, resolution), with polar_jobs' stricter
instance loading, apply ladder and evaluator-error handling. See ``swe-eval.md`` in the shared reference.
"""

from polar_jobs.scoring.swe.evaluate import SweEvaluator, clean_checkout, grade_patch, report_metrics, unrun_report
from polar_jobs.scoring.swe.grading import (
    ResolvedStatus,
    RunCheck,
    TestsReport,
    check_run,
    get_tests_report,
    is_failed,
    is_p2p_maintained,
    is_passed,
    resolution_status,
)
from polar_jobs.scoring.swe.instance import SweInstance, load_instance, load_instances, load_predictions
from polar_jobs.scoring.swe.logs import TestStatus, parse_log_pytest, parse_log_pytest_v2, parse_test_output
from polar_jobs.scoring.swe.patch import ApplyResult, ExtractedPatch, apply_patch, clean_diff, extract_patch
from polar_jobs.scoring.swe.report import SweReport, summarize
from polar_jobs.scoring.swe.script import build_eval_script, eval_directives, patch_files

__all__ = [
    "ApplyResult",
    "ExtractedPatch",
    "ResolvedStatus",
    "RunCheck",
    "SweEvaluator",
    "SweInstance",
    "SweReport",
    "TestStatus",
    "TestsReport",
    "apply_patch",
    "build_eval_script",
    "check_run",
    "clean_checkout",
    "clean_diff",
    "eval_directives",
    "extract_patch",
    "get_tests_report",
    "grade_patch",
    "is_failed",
    "is_p2p_maintained",
    "is_passed",
    "load_instance",
    "load_instances",
    "load_predictions",
    "parse_log_pytest",
    "parse_log_pytest_v2",
    "parse_test_output",
    "patch_files",
    "report_metrics",
    "resolution_status",
    "summarize",
    "unrun_report",
]
