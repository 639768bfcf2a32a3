"""Per-test predicates, validity checks and the resolution decision table (swe-eval.md §6)."""

from __future__ import annotations

import pytest

from polar_jobs.scoring.swe.grading import (
    ResolvedStatus,
    TestsReport,
    check_run,
    get_tests_report,
    is_failed,
    is_p2p_maintained,
    is_passed,
    ratio,
    resolution_status,
)

pytestmark = pytest.mark.unit

T = "tests/t.py::test_x"


@pytest.mark.parametrize("status, passed, failed, maintained", [
    ("PASSED", True, False, True),
    ("XFAIL", True, False, True),
    ("FAILED", False, True, False),
    ("ERROR", False, True, False),
    ("SKIPPED", False, True, True),  # 5.0.2: a skipped F2P is a failure, a skipped P2P is maintained
    (None, False, True, False),      # missing
])
def test_predicates(status, passed, failed, maintained):
    status_map = {T: status} if status else {"tests/t.py::other": "PASSED"}
    assert is_passed(T, status_map) is passed
    assert is_failed(T, status_map) is failed
    assert is_p2p_maintained(T, status_map) is maintained


def test_truncated_parametrised_ids_match_by_prefix_both_ways():
    full = "tests/t.py::test_p[a b]"
    cut = "tests/t.py::test_p[a"
    assert is_passed(full, {cut: "PASSED"})
    assert is_passed(cut, {full: "PASSED"})
    assert not is_passed("tests/t.py::test_p", {"tests/t.py::test_p[a b]": "PASSED"})  # not a cut at a space
    assert not is_passed("tests/t.py::test_pq", {"tests/t.py::test_p": "PASSED"})


def test_a_truncated_id_passes_only_when_every_match_passes():
    status_map = {"tests/t.py::test_p[a b]": "PASSED", "tests/t.py::test_p[a c]": "FAILED"}
    assert not is_passed("tests/t.py::test_p[a", status_map)


def _tests(f2p_ok: int, f2p_bad: int, p2p_ok: int, p2p_bad: int) -> TestsReport:
    return TestsReport(tuple(f"s{i}" for i in range(f2p_ok)), tuple(f"f{i}" for i in range(f2p_bad)),
                       tuple(f"ps{i}" for i in range(p2p_ok)), tuple(f"pf{i}" for i in range(p2p_bad)))


@pytest.mark.parametrize("counts, expected", [
    ((2, 0, 1, 0), ResolvedStatus.FULL),
    ((2, 0, 0, 0), ResolvedStatus.FULL),       # no P2P: ratio 1
    ((1, 1, 1, 0), ResolvedStatus.PARTIAL),
    ((1, 1, 1, 1), ResolvedStatus.NO),         # PARTIAL needs every P2P test
    ((2, 0, 1, 1), ResolvedStatus.NO),
    ((0, 2, 1, 0), ResolvedStatus.NO),
])
def test_decision_table(counts, expected):
    assert resolution_status(_tests(*counts)) is expected


def test_ratios():
    assert ratio(0, 0) == 1.0
    assert ratio(1, 4) == 0.25
    tests = _tests(1, 3, 2, 2)
    assert (tests.f2p_ratio, tests.p2p_ratio) == (0.25, 0.5)


def test_tests_report_splits_f2p_and_p2p():
    status_map = {"a": "PASSED", "b": "SKIPPED", "c": "SKIPPED", "d": "FAILED"}
    report = get_tests_report(status_map, ["a", "b"], ["c", "d", "e"])
    assert report == TestsReport(("a",), ("b",), ("c",), ("d", "e"))


def _log(body: str, code: int = 0) -> str:
    return (f"+ : '>>>>> Start Test Output'\n{body}+ : '>>>>> End Test Output'\n"
            f">>>>> Test Exit Code: {code}\n")


def test_a_valid_run():
    check = check_run(_log("PASSED a::x\nFAILED a::y - boom\n", 1), exit_code=1)
    assert check.valid and check.status_map == {"a::x": "PASSED", "a::y": "FAILED"} and check.exit_code == 1


@pytest.mark.parametrize("line, reason", [
    (">>>>> Patch Apply Failed", "patch_apply_failed"),
    (">>>>> Reset Failed", "reset_failed"),
    (">>>>> Tests Errored", "tests_errored"),
    (">>>>> Tests Timed Out", "timeout"),
])
def test_harness_failure_lines_void_the_run(line, reason):
    check = check_run(line + "\n" + _log("PASSED a::x\n"))
    assert (check.valid, check.invalid_reason, dict(check.status_map)) == (False, reason, {})


def test_missing_end_marker_voids_the_run():
    assert check_run("+ : '>>>>> Start Test Output'\nPASSED a::x\n").invalid_reason == "missing_markers"


def test_no_tests_ran_is_invalid():
    assert check_run(_log("============ no tests ran in 0.01s ============\n")).invalid_reason == "no_tests_ran"


def test_unparsed_output_of_a_suite_that_ran_is_valid_but_empty():
    check = check_run(_log("============ 3 passed in 0.01s ============\n"))
    assert check.valid and check.status_map == {}


def test_nonzero_exit_without_failures_is_a_spoofed_log():
    assert check_run(_log("PASSED a::x\n", 1), exit_code=1).invalid_reason == "spoofed_log"
    assert check_run(_log("PASSED a::x\n", 1)).invalid_reason == "spoofed_log"  # exit code from the log
    assert check_run(_log("PASSED a::x\nERROR a.py - ImportError\n", 2), exit_code=2).valid


def test_given_exit_code_beats_a_printed_one():
    log = _log("PASSED a::x\n>>>>> Test Exit Code: 0\n", 0)
    assert check_run(log, exit_code=1).invalid_reason == "spoofed_log"
