"""Pytest log parsers (``swebench/harness/log_parsers/python.py``): test output to ``{test id: status}``.

Only the text between the Start and End Test Output markers is parsed; if that yields nothing, the
whole log is. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Callable

START_MARKER = ">>>>> Start Test Output"
END_MARKER = ">>>>> End Test Output"
EXIT_CODE_RE = re.compile(r">>>>> Test Exit Code: (-?\d+)")


class TestStatus(str, Enum):
    """A test's outcome as pytest's ``-rA`` summary prints it."""

    __test__ = False  # not a pytest test class

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


_STATUSES = tuple(status.value for status in TestStatus)
_SKIP_SUMMARY = re.compile(r"^SKIPPED \[\d+\] ")  # "SKIPPED [1] tests/x.py:12: reason" names no test
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[(\d+)m")
_CONTROL = str.maketrans("", "", "".join(chr(code) for code in range(1, 32) if code != 9))


def marked_section(log: str) -> str | None:
    """The lines between the first Start and the last End marker, or None when either is missing."""
    start = log.find(START_MARKER)
    end = log.rfind(END_MARKER)
    if start < 0 or end < 0 or end < start:
        return None
    body_start = log.find("\n", start) + 1
    body_end = log.rfind("\n", 0, end) + 1
    return log[body_start:body_end] if 0 < body_start <= body_end else ""


def logged_exit_code(log: str) -> int | None:
    """The last ``>>>>> Test Exit Code: N`` line (tests run before it, so they cannot print the last one)."""
    found = EXIT_CODE_RE.findall(log)
    return int(found[-1]) if found else None


def parse_log_pytest(log: str) -> dict[str, str]:
    """swebench's ``parse_log_pytest``: lines starting with a status; the id is the second token."""
    status_map: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(_STATUSES) or _SKIP_SUMMARY.match(line):
            continue
        if line.startswith(TestStatus.FAILED.value):
            line = line.replace(" - ", " ")
        tokens = line.split()
        if len(tokens) > 1 and tokens[0] in _STATUSES:
            status_map[tokens[1]] = tokens[0]
    return status_map


def parse_log_pytest_v2(log: str) -> dict[str, str]:
    """Like ``parse_log_pytest``, but strips ANSI codes, keeps ids with spaces, and reads ``id STATUS`` lines."""
    status_map: dict[str, str] = {}
    for raw in log.split("\n"):
        line = _ANSI.sub("", raw).translate(_CONTROL).strip()
        if _SKIP_SUMMARY.match(line):
            continue
        head, _, rest = line.partition(" ")
        if head in _STATUSES and rest:
            test_id = _leading_test_id(rest)
            if test_id:
                status_map[test_id] = head
            continue
        tokens = line.split()
        if len(tokens) >= 2 and tokens[-1] in _STATUSES:  # older pytest: "tests/x.py::test_a PASSED"
            status_map[line[: line.rfind(tokens[-1])].strip()] = tokens[-1]
    return status_map


LOG_PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "pytest": parse_log_pytest,
    "pytest_v2": parse_log_pytest_v2,
}


def parse_test_output(log: str, parser: str = "pytest") -> dict[str, str]:
    """Parse the marked test section with the named parser, falling back to the whole log."""
    parse = LOG_PARSERS[parser]
    section = marked_section(log)
    status_map = parse(section) if section is not None else {}
    return status_map or parse(log)


def _leading_test_id(text: str) -> str:
    """The test id at the start of ``text``: up to the first space outside ``[...]`` (parameters may hold spaces)."""
    depth = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        elif char == " " and depth == 0:
            return text[:index]
    return text.strip()
