"""Pytest log parsers (swe-eval.md §5): status lines, summaries that name no test, markers, ANSI."""

from __future__ import annotations

import pytest

from polar_jobs.scoring.swe.logs import (
    TestStatus,
    logged_exit_code,
    marked_section,
    parse_log_pytest,
    parse_log_pytest_v2,
    parse_test_output,
)

pytestmark = pytest.mark.unit

SUMMARY = """\
============================= test session starts ==============================
collected 7 items / 1 error

tests/test_a.py .F.sx                                                    [100%]

==================================== ERRORS ====================================
_____________________ ERROR collecting tests/test_broken.py ____________________
=========================== short test summary info ============================
PASSED tests/test_a.py::test_ok
PASSED tests/test_a.py::test_param[a b]
FAILED tests/test_a.py::test_bad - assert 1 == 2
XFAIL tests/test_a.py::test_known - reason: upstream bug
SKIPPED [1] tests/test_a.py:40: needs network
ERROR tests/test_broken.py - ModuleNotFoundError: No module named 'nope'
======== 1 failed, 2 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ==========
"""


def test_pytest_parser_reads_each_status_line():
    assert parse_log_pytest(SUMMARY) == {
        "tests/test_a.py::test_ok": "PASSED",
        "tests/test_a.py::test_param[a": "PASSED",  # v1 splits on whitespace: the id is cut at the space
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_a.py::test_known": "XFAIL",
        "tests/test_broken.py": "ERROR",
    }


def test_skipped_summary_lines_name_no_test():
    log = "SKIPPED [1] tests/test_a.py:40: needs network\nSKIPPED [3] tests/b.py:1: x\n"
    assert parse_log_pytest(log) == {}
    assert parse_log_pytest_v2(log) == {}


def test_skipped_test_lines_are_kept():
    assert parse_log_pytest("SKIPPED tests/a.py::test_s\n") == {"tests/a.py::test_s": "SKIPPED"}


def test_v2_keeps_ids_with_spaces_and_drops_messages():
    assert parse_log_pytest_v2(SUMMARY) == {
        "tests/test_a.py::test_ok": "PASSED",
        "tests/test_a.py::test_param[a b]": "PASSED",
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_a.py::test_known": "XFAIL",
        "tests/test_broken.py": "ERROR",
    }


def test_v2_strips_ansi_codes():
    log = "\x1b[32mPASSED\x1b[0m tests/a.py::test_green\n\x1b[31mFAILED\x1b[0m tests/a.py::test_red - boom\n"
    assert parse_log_pytest_v2(log) == {"tests/a.py::test_green": "PASSED", "tests/a.py::test_red": "FAILED"}


def test_v2_accepts_status_at_end_of_line():
    log = "tests/a.py::test_one PASSED\ntests/a.py::test_two FAILED\n"
    assert parse_log_pytest_v2(log) == {"tests/a.py::test_one": "PASSED", "tests/a.py::test_two": "FAILED"}
    assert parse_log_pytest(log) == {}


def test_v2_failed_message_with_brackets_does_not_extend_the_id():
    log = "FAILED tests/a.py::test_p[x y] - AssertionError: [1, 2] != [1]\n"
    assert parse_log_pytest_v2(log) == {"tests/a.py::test_p[x y]": "FAILED"}


def test_words_that_merely_start_like_a_status_are_not_tests():
    assert parse_log_pytest("PASSEDtests/a.py::x\nERRORS\n") == {}


def _log(body: str) -> str:
    return (f"+ git status\nPASSED tests/fake.py::before_markers\n+ : '>>>>> Start Test Output'\n{body}"
            "+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 0\n")


def test_only_the_marked_section_is_parsed():
    assert parse_test_output(_log("PASSED tests/a.py::test_x\n")) == {"tests/a.py::test_x": "PASSED"}


def test_falls_back_to_the_whole_log_when_the_section_is_empty():
    assert parse_test_output(_log("nothing here\n")) == {"tests/fake.py::before_markers": "PASSED"}


def test_marked_section_needs_both_markers():
    assert marked_section("+ : '>>>>> Start Test Output'\nPASSED a::b\n") is None
    assert marked_section("PASSED a::b\n+ : '>>>>> End Test Output'\n") is None
    assert marked_section(_log("X\n")) == "X\n"


def test_last_logged_exit_code_wins():
    assert logged_exit_code("echo\n>>>>> Test Exit Code: 0\n+ echo\n>>>>> Test Exit Code: 1\n") == 1
    assert logged_exit_code("no code here") is None


def test_status_values():
    assert [status.value for status in TestStatus] == ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"]
