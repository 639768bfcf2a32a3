"""Per-instance reports in swebench's ``report.json`` shape (plus polar_jobs fields) and the run summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from polar_jobs.scoring.swe.grading import ResolvedStatus, TestsReport

SUMMARY_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class SweReport:
    """How one patch fared. ``completed`` is False where swebench writes no report (apply failed, timeout)."""

    instance_id: str
    status: ResolvedStatus
    tests: TestsReport
    patch_exists: bool
    patch_applied: bool
    apply_rung: str | None = None
    failure_reason: str | None = None
    patch_is_none: bool = False
    timed_out: bool = False
    exit_code: int | None = None
    log: str = ""

    @property
    def resolved(self) -> bool:
        return self.status is ResolvedStatus.FULL

    @property
    def completed(self) -> bool:
        return self.patch_applied and not self.timed_out

    @property
    def f2p_ratio(self) -> float:
        return self.tests.f2p_ratio

    @property
    def p2p_ratio(self) -> float:
        return self.tests.p2p_ratio

    def to_json(self) -> dict[str, Any]:
        """``{instance_id: {...}}`` as swebench writes it, with status, ratios, failure reason and apply rung."""
        return {self.instance_id: {
            "patch_is_None": self.patch_is_none,
            "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied,
            "resolved": self.resolved,
            "tests_status": {
                "FAIL_TO_PASS": {"success": list(self.tests.f2p_success), "failure": list(self.tests.f2p_failure)},
                "PASS_TO_PASS": {"success": list(self.tests.p2p_success), "failure": list(self.tests.p2p_failure)},
                "FAIL_TO_FAIL": {},
                "PASS_TO_FAIL": {},
            },
            "status": self.status.value,
            "f2p_ratio": self.f2p_ratio,
            "p2p_ratio": self.p2p_ratio,
            "failure_reason": self.failure_reason,
            "apply_rung": self.apply_rung,
        }}


def summarize(instance_ids: Iterable[str], predictions: Mapping[str, str | None],
              reports: Mapping[str, SweReport]) -> dict[str, Any]:
    """The run summary (schema v2): counts and id lists; a submitted patch without a completed report is an error."""
    instance_ids = list(instance_ids)
    submitted = [iid for iid in instance_ids if iid in predictions]
    empty = [iid for iid in submitted if not (predictions[iid] or "").strip()]
    completed = [iid for iid in submitted if iid in reports and reports[iid].completed and iid not in empty]
    resolved = [iid for iid in completed if reports[iid].resolved]
    unresolved = [iid for iid in completed if not reports[iid].resolved]
    errors = [iid for iid in submitted if iid not in empty and iid not in completed]
    return {
        "total_instances": len(instance_ids),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(iid for iid in instance_ids if iid not in submitted),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "error_ids": sorted(errors),
        "schema_version": SUMMARY_SCHEMA_VERSION,
    }
