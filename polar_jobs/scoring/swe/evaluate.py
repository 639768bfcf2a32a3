"""Grading a patch in a clean checkout of base_commit, and the ``swe`` evaluator built on it.

One code path for both callers: ``SweEvaluator`` (a session's workspace) and ``polar-jobs swe-eval``
(predictions files) each make a fresh clone at base_commit and call ``grade_patch``. The eval script
runs through the runtime with a timeout; the runtime kills the script's whole process group.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar, Mapping

from polar_jobs.runtimes.base import Runtime
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.scoring.base import Evaluation, EvaluationContext, EvaluationError
from polar_jobs.scoring.swe._runtime import WORK_DIR, git, output, upload_text
from polar_jobs.scoring.swe.grading import ResolvedStatus, check_run, get_tests_report, resolution_status
from polar_jobs.scoring.swe.instance import SweInstance, load_instance
from polar_jobs.scoring.swe.logs import START_MARKER
from polar_jobs.scoring.swe.patch import apply_patch, clean_diff, extract_patch
from polar_jobs.scoring.swe.report import SweReport
from polar_jobs.scoring.swe.script import TEST_PATCH_FAILED, TEST_PATCH_FAILED_EXIT, build_eval_script

GRADE_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}
"""Added to the eval script's environment: no bytecode left in the checkout."""

EVAL_SCRIPT = f"{WORK_DIR}/eval.sh"


def grade_patch(runtime: Runtime, instance: SweInstance, diff: str | None,
                timeout_s: float | None = None) -> SweReport:
    """Apply ``diff`` to a clean checkout of base_commit in ``runtime``, run the eval script, grade the log.

    An empty diff is graded as "no change" (the tests still run). Raises EvaluationError when the
    grader cannot do its job: base_commit missing, git failing, the test patch not applying.
    """
    git(runtime, "checkout", "-f", "-q", instance.base_commit)
    git(runtime, "clean", "-fdxq")
    diff_text = clean_diff(diff)
    apply_log = ""
    rung = None
    if diff_text:
        applied = apply_patch(runtime, diff_text)
        apply_log, rung = applied.log, applied.rung
        if not applied.applied:
            return unrun_report(instance, "patch_apply_failed", patch_exists=True, log=apply_log)
    upload_text(runtime, build_eval_script(instance), EVAL_SCRIPT)
    result = runtime.exec(["bash", EVAL_SCRIPT], env=GRADE_ENV, timeout=timeout_s or instance.timeout_s)
    log = apply_log + output(result)
    if result.timed_out:
        return unrun_report(instance, "timeout", patch_exists=bool(diff_text), patch_applied=bool(diff_text),
                            rung=rung, timed_out=True, log=log)
    if result.exit_code == TEST_PATCH_FAILED_EXIT and TEST_PATCH_FAILED in result.stdout \
            and START_MARKER not in result.stdout:
        raise EvaluationError(f"{instance.instance_id}: the test patch does not apply at {instance.base_commit}: "
                              f"{result.stdout[-1500:]}")
    check = check_run(result.stdout, result.exit_code, instance.log_parser)
    tests = get_tests_report(check.status_map, instance.fail_to_pass, instance.pass_to_pass)
    status = resolution_status(tests) if check.valid else ResolvedStatus.NO
    reason = None
    if status is not ResolvedStatus.FULL:
        reason = check.invalid_reason or ("tests_failed" if diff_text else "empty_patch")
    return SweReport(instance_id=instance.instance_id, status=status, tests=tests, patch_exists=bool(diff_text),
                     patch_applied=bool(diff_text), apply_rung=rung, failure_reason=reason,
                     patch_is_none=diff is None, exit_code=check.exit_code, log=log)


def unrun_report(instance: SweInstance, reason: str, *, patch_exists: bool = False, patch_applied: bool = False,
                 patch_is_none: bool = False, rung: str | None = None, timed_out: bool = False,
                 log: str = "") -> SweReport:
    """A report for a patch whose tests gave no verdict: every test counts as failed, status RESOLVED_NO."""
    tests = get_tests_report({}, instance.fail_to_pass, instance.pass_to_pass)
    return SweReport(instance_id=instance.instance_id, status=ResolvedStatus.NO, tests=tests,
                     patch_exists=patch_exists, patch_applied=patch_applied, apply_rung=rung,
                     failure_reason=reason, patch_is_none=patch_is_none, timed_out=timed_out, log=log)


def clean_checkout(source: str | Path, root: Path, session_id: str = "grade") -> LocalRuntime:
    """A fresh LocalRuntime under ``root`` whose workspace is a clone of ``source`` (checked out by grade_patch)."""
    runtime = LocalRuntime(Path(root), session_id, keep_files=False)
    runtime.start()
    result = runtime.exec(["git", "clone", "-q", "--no-checkout", str(source), runtime.workdir],
                          cwd=str(runtime.root), timeout=600)
    if not result.ok:
        runtime.stop()
        raise EvaluationError(f"cannot clone {source}: {result.stderr.strip()[-800:]}")
    return runtime


def report_metrics(report: SweReport, instance: SweInstance) -> dict[str, Any]:
    """The evaluator's metrics for one report; ``sft_accept`` is the SFT acceptance rule."""
    return {
        "status": report.status.value,
        "f2p_ratio": report.f2p_ratio,
        "p2p_ratio": report.p2p_ratio,
        "failure_reason": report.failure_reason,
        "patch_applied": report.patch_applied,
        "apply_rung": report.apply_rung,
        "resolved": report.resolved,
        "sft_accept": (report.resolved and report.patch_applied and not report.timed_out
                       and bool(instance.fail_to_pass)),
    }


class SweEvaluator:
    """Reward 1.0 when the workspace's changes resolve the SWE instance (RESOLVED_FULL), else 0.0.

    Config: an instance row (flat, or nested under ``instance``) accepted by ``load_instance``; optional
    ``timeout_s`` overrides the instance's.
    """

    name: ClassVar[str] = "swe"

    def __init__(self, config: Mapping[str, Any]) -> None:
        try:
            self.instance = load_instance(config)
        except ValueError as exc:
            raise EvaluationError(f"swe evaluator config: {exc}") from None
        timeout = config.get("timeout_s") if isinstance(config, Mapping) else None
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise EvaluationError(f"swe evaluator config: timeout_s must be a positive number, got {timeout!r}")
        self.timeout_s = float(timeout) if timeout is not None else self.instance.timeout_s

    def prepare(self, runtime: Runtime) -> None:
        """Check out base_commit in the agent's workspace."""
        git(runtime, "checkout", "-q", self.instance.base_commit)

    def evaluate(self, context: EvaluationContext) -> Evaluation:
        if context.runtime is None:
            raise EvaluationError("swe evaluator needs the session's runtime (its workspace holds the patch)")
        extracted = extract_patch(context.runtime, self.instance.base_commit)
        if not extracted.diff:
            report = unrun_report(self.instance, "empty_patch")
        else:
            report = self._grade(context.runtime, extracted.diff)
        metrics = report_metrics(report, self.instance)
        return Evaluation(reward=1.0 if report.resolved else 0.0, metrics=metrics)

    def _grade(self, workspace: Runtime, diff: str) -> SweReport:
        """Grade in a separate clone at base_commit, so nothing else the agent left behind can leak in."""
        with tempfile.TemporaryDirectory(prefix="polar-swe-") as tmp:
            source = _host_repository(workspace, Path(tmp))
            grader = clean_checkout(source, Path(tmp))
            try:
                return grade_patch(grader, self.instance, diff, self.timeout_s)
            finally:
                grader.stop()


def _host_repository(runtime: Runtime, tmp: Path) -> Path:
    """A repository on this machine holding the workspace's history: the workspace itself, or a copy of its .git."""
    if isinstance(runtime, LocalRuntime):
        return Path(runtime.workdir)
    target = tmp / "source"
    runtime.download(".git", target / ".git")
    return target
