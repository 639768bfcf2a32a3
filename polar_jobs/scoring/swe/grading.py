"""Resolution grading after swebench 5.0.2 ``grading.py``: is the run valid, which tests passed, what status.

Pure functions over a log and the instance's test lists; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

from polar_jobs.scoring.swe.logs import TestStatus, logged_exit_code, marked_section, parse_test_output

INVALID_LOG_MARKERS: dict[str, str] = {
    ">>>>> Patch Apply Failed": "patch_apply_failed",
    ">>>>> Reset Failed": "reset_failed",
    ">>>>> Tests Errored": "tests_errored",
    ">>>>> Tests Timed Out": "timeout",
}
"""Harness lines that void a run, with the failure reason each one gives."""

_PASSED = (TestStatus.PASSED.value, TestStatus.XFAIL.value)
_BROKEN = (TestStatus.FAILED.value, TestStatus.ERROR.value)
_SUITE_RAN = re.compile(r"\b\d+ (passed|failed|errors?|xfailed|xpassed)\b")


class ResolvedStatus(str, Enum):
    """How far a patch resolved the task; only FULL counts as resolved."""

    FULL = "RESOLVED_FULL"
    PARTIAL = "RESOLVED_PARTIAL"
    NO = "RESOLVED_NO"


@dataclass(frozen=True)
class RunCheck:
    """A parsed eval log: the status map, or why the run is void (``invalid_reason``; the map is then empty)."""

    status_map: Mapping[str, str]
    invalid_reason: str | None = None
    exit_code: int | None = None

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None


@dataclass(frozen=True)
class TestsReport:
    """F2P and P2P tests split into success and failure."""

    __test__ = False  # not a pytest test class

    f2p_success: tuple[str, ...]
    f2p_failure: tuple[str, ...]
    p2p_success: tuple[str, ...]
    p2p_failure: tuple[str, ...]

    @property
    def f2p_ratio(self) -> float:
        return ratio(len(self.f2p_success), len(self.f2p_success) + len(self.f2p_failure))

    @property
    def p2p_ratio(self) -> float:
        return ratio(len(self.p2p_success), len(self.p2p_success) + len(self.p2p_failure))


def check_run(log: str, exit_code: int | None = None, parser: str = "pytest") -> RunCheck:
    """Void runs (harness failure lines, missing markers, no tests run, a spoofed log) or the status map.

    ``exit_code`` is the test command's exit status when the caller knows it; else the logged one is used.
    """
    for marker, reason in INVALID_LOG_MARKERS.items():
        if marker in log:
            return RunCheck({}, reason, exit_code)
    section = marked_section(log)
    if section is None:
        return RunCheck({}, "missing_markers", exit_code)
    if exit_code is None:
        exit_code = logged_exit_code(log)
    status_map = parse_test_output(log, parser)
    if not status_map and not _SUITE_RAN.search(section):
        return RunCheck({}, "no_tests_ran", exit_code)
    if exit_code not in (None, 0) and not any(status in _BROKEN for status in status_map.values()):
        return RunCheck({}, "spoofed_log", exit_code)  # non-zero exit, yet nothing FAILED or ERROR (#620)
    return RunCheck(dict(status_map), None, exit_code)


def statuses_of(test: str, status_map: Mapping[str, str]) -> list[str]:
    """The statuses recorded for ``test``; a parametrised id cut at a space matches by prefix, either way."""
    if test in status_map:
        return [status_map[test]]
    return [status for key, status in status_map.items() if _truncates(key, test) or _truncates(test, key)]


def is_passed(test: str, status_map: Mapping[str, str]) -> bool:
    """PASSED or XFAIL (every match, when a truncated id matches several)."""
    found = statuses_of(test, status_map)
    return bool(found) and all(status in _PASSED for status in found)


def is_failed(test: str, status_map: Mapping[str, str]) -> bool:
    """Missing, FAILED, ERROR or SKIPPED (5.0.2: a skipped F2P test is not a fix)."""
    return not is_passed(test, status_map)


def is_p2p_maintained(test: str, status_map: Mapping[str, str]) -> bool:
    """Passed, or SKIPPED."""
    found = statuses_of(test, status_map)
    return bool(found) and all(status in _PASSED or status == TestStatus.SKIPPED.value for status in found)


def get_tests_report(status_map: Mapping[str, str], f2p: Iterable[str], p2p: Iterable[str]) -> TestsReport:
    """Split the instance's tests by the predicates above."""
    f2p, p2p = list(f2p), list(p2p)
    return TestsReport(
        f2p_success=tuple(test for test in f2p if is_passed(test, status_map)),
        f2p_failure=tuple(test for test in f2p if is_failed(test, status_map)),
        p2p_success=tuple(test for test in p2p if is_p2p_maintained(test, status_map)),
        p2p_failure=tuple(test for test in p2p if not is_p2p_maintained(test, status_map)),
    )


def ratio(success: int, total: int) -> float:
    """``success / total``; an empty list counts as 1 (why an empty F2P is rejected at load)."""
    return 1.0 if total == 0 else success / total


def resolution_status(tests: TestsReport) -> ResolvedStatus:
    """FULL when every F2P and P2P test holds; PARTIAL when some but not all F2P pass and P2P all hold."""
    f2p, p2p = tests.f2p_ratio, tests.p2p_ratio
    if f2p == 1 and p2p == 1:
        return ResolvedStatus.FULL
    if 0 < f2p < 1 and p2p == 1:
        return ResolvedStatus.PARTIAL
    return ResolvedStatus.NO


def _truncates(short: str, full: str) -> bool:
    """``short`` is ``full`` cut at a space inside a parametrisation (how ``parse_log_pytest`` splits ids)."""
    return "[" in short and len(full) > len(short) and full.startswith(short) and full[len(short)] == " "
