"""Fixture repositories for the SWE evaluator (swe-eval.md §9), built under a temp dir at test time.

Each builder makes a small git repository with a buggy base commit and returns a ``SweFixture``: the
repository, a full SWE-bench-format instance (``patch`` = gold fix, ``test_patch`` = the tests that
decide it) and named variant patches. Git runs with fixed identities and dates and no user config,
so the SHAs are deterministic. No network, no Docker: only git and pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from polar_jobs.runtimes.local import LocalRuntime

TEST_CMD = [sys.executable, "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider"]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Polar Fixture", "GIT_AUTHOR_EMAIL": "fixture@polar.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "Polar Fixture", "GIT_COMMITTER_EMAIL": "fixture@polar.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}

CREATED_AT = "2024-01-01T00:00:00Z"

FIXTURE_NAMES = ("calc", "slug", "drift", "hang", "tamper")


@dataclass
class SweFixture:
    """A fixture repository at its base commit, its instance row, and named model patches."""

    name: str
    repo: Path
    instance: dict
    variants: dict[str, str] = field(default_factory=dict)
    marker: str = ""

    @property
    def base_commit(self) -> str:
        return self.instance["base_commit"]

    @property
    def gold(self) -> str:
        return self.instance["patch"]

    @property
    def f2p(self) -> list[str]:
        return _as_list(self.instance["FAIL_TO_PASS"])

    @property
    def p2p(self) -> list[str]:
        return _as_list(self.instance["PASS_TO_PASS"])


def git(repo: Path, *args: str, input_text: str | None = None) -> str:
    """Run git deterministically in ``repo``; returns stdout, raises on failure."""
    result = subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "init.defaultBranch=main",
                             "-c", "commit.gpgsign=false", *args], cwd=repo, env={**os.environ, **GIT_ENV},
                            input=input_text, capture_output=True, text=True)
    if result.returncode:
        raise AssertionError(f"git {' '.join(args)} failed in {repo}: {result.stderr}")
    return result.stdout


def write_files(repo: Path, files: dict[str, str | bytes | None]) -> None:
    """Write text or bytes; None deletes the file."""
    for name, content in files.items():
        path = repo / name
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")


class RepoBuilder:
    """A deterministic git repository: commit a base, then diff edits against it one at a time."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q")
        git(path, "config", "core.autocrlf", "false")

    def commit(self, files: dict[str, str | bytes | None], message: str = "base") -> str:
        write_files(self.path, files)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD").strip()

    def diff(self, files: dict[str, str | bytes | None]) -> str:
        """The diff that makes ``files`` (new files via ``git add -N``), then back to a clean tree."""
        write_files(self.path, files)
        git(self.path, "add", "-N", ".")
        text = git(self.path, "diff", "--no-color", "--no-ext-diff", "HEAD")
        git(self.path, "reset", "-q", "--hard")
        git(self.path, "clean", "-fdq")
        return text


def instance_row(name: str, base_commit: str, patch: str, test_patch: str, f2p: list[str], p2p: list[str], *,
                 json_lists: bool, timeout_s: float = 60, test_cmd: list[str] | None = None) -> dict:
    """A SWE-bench-format row; F2P/P2P as JSON strings (SWE-bench) or lists (SWE-Gym)."""
    return {
        "instance_id": f"polar__{name}-1",
        "repo": f"polar/{name}",
        "base_commit": base_commit,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": f"{name}: see the failing tests.",
        "hints_text": "",
        "created_at": CREATED_AT,
        "version": "0.0",
        "FAIL_TO_PASS": json.dumps(f2p) if json_lists else list(f2p),
        "PASS_TO_PASS": json.dumps(p2p) if json_lists else list(p2p),
        "environment_setup_commit": base_commit,
        "test_cmd": list(test_cmd or TEST_CMD),
        "log_parser": "pytest",
        "timeout_s": timeout_s,
    }


# --- calc: test_patch edits an existing test file (F2P=2, P2P=1) ---------------------------------------

CALC_OPS = "def add(a, b):\n    return {add}\n\n\ndef sub(a, b):\n    return {sub}\n"
CALC_TESTS = "from calc.ops import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
CALC_NEW_TESTS = ("\n\ndef test_add_positive():\n    assert add(2, 3) == 5\n"
                  "\n\ndef test_add_negative():\n    assert add(-2, -3) == -5\n")
CALC_WEAK_TESTS = ("from calc.ops import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
                   "\n\ndef test_add_positive():\n    assert add is not None\n"
                   "\n\ndef test_add_negative():\n    assert True\n")


def build_calc(root: Path) -> SweFixture:
    repo = RepoBuilder(root / "calc")
    base = repo.commit({"pytest.ini": "[pytest]\n", "calc/__init__.py": "",
                        "calc/ops.py": CALC_OPS.format(add="a - b", sub="a - b"), "tests/test_calc.py": CALC_TESTS})
    gold = repo.diff({"calc/ops.py": CALC_OPS.format(add="a + b", sub="a - b")})
    test_patch = repo.diff({"tests/test_calc.py": CALC_TESTS + CALC_NEW_TESTS})
    variants = {
        "positives_only": repo.diff({"calc/ops.py": CALC_OPS.format(add="abs(a) + abs(b)", sub="a - b")}),
        "breaks_sub": repo.diff({"calc/ops.py": CALC_OPS.format(add="a + b", sub="a + b")}),
        "weakened_tests": repo.diff({"tests/test_calc.py": CALC_WEAK_TESTS}),
        "gold_weakened_tests": repo.diff({"calc/ops.py": CALC_OPS.format(add="a + b", sub="a - b"),
                                          "tests/test_calc.py": CALC_WEAK_TESTS}),
    }
    f2p = ["tests/test_calc.py::test_add_positive", "tests/test_calc.py::test_add_negative"]
    p2p = ["tests/test_calc.py::test_sub"]
    return SweFixture("calc", repo.path, instance_row("calc", base, gold, test_patch, f2p, p2p, json_lists=True),
                      variants)


# --- slug: gold and test patches only add files ----------------------------------------------------------

SLUG_TEXT = ('import re\n\n\ndef slugify(text):\n    words = re.findall(r"[a-z0-9]+", text.lower())\n'
             '    return "-".join(words)\n')
SLUG_TESTS = ('import slug\n\n\ndef test_version():\n    assert slug.__version__ == "1.0"\n'
              '\n\ndef test_slugify_spaces():\n    from slug.text import slugify\n'
              '    assert slugify("Hello  World") == "hello-world"\n'
              '\n\ndef test_slugify_punctuation():\n    from slug.text import slugify\n'
              '    assert slugify("C\'est la vie!") == "c-est-la-vie"\n')
SLUG_AGENT_TESTS = "def test_slugify_spaces():\n    pass\n\n\ndef test_slugify_punctuation():\n    pass\n"


def build_slug(root: Path) -> SweFixture:
    repo = RepoBuilder(root / "slug")
    base = repo.commit({"pytest.ini": "[pytest]\n", "slug/__init__.py": '__version__ = "1.0"\n'})
    gold = repo.diff({"slug/text.py": SLUG_TEXT})
    test_patch = repo.diff({"tests/test_slug.py": SLUG_TESTS})
    f2p = ["tests/test_slug.py::test_slugify_spaces", "tests/test_slug.py::test_slugify_punctuation"]
    p2p = ["tests/test_slug.py::test_version"]
    return SweFixture("slug", repo.path, instance_row("slug", base, gold, test_patch, f2p, p2p, json_lists=False))


# --- drift: patches made against other versions of the file -----------------------------------------------

DRIFT_CORE = ('"""Core helpers."""\n\nHEADER = "drift"\n\n\ndef scale(values, factor):\n'
              '    # Multiply every value by the factor.\n    result = []\n    for value in values:\n'
              '        result.append(value {op} factor)\n    return result\n\n\ndef total(values):\n'
              '    return sum(values)\n')
# The same function two lines higher, with a context line whose whitespace differs: git apply refuses it,
# and the blob is not in the fixture repository, so --3way cannot help; patch --fuzz applies it.
DRIFT_SHIFTED = ('"""Core helpers."""\n\n\ndef scale(values, factor):\n'
                 '    #  Multiply every value by the factor.\n    result = []\n    for value in values:\n'
                 '        result.append(value {op} factor)\n    return result\n\n\ndef total(values):\n'
                 '    return sum(values)\n')
DRIFT_OTHER = '"""Core helpers."""\n\n\ndef scale(values, factor):\n    return [v {op} factor for v in values]\n'
DRIFT_TESTS = "from drift.core import scale, total\n\n\ndef test_total():\n    assert total([1, 2, 3]) == 6\n"
DRIFT_NEW_TESTS = "\n\ndef test_scale():\n    assert scale([1, 2], 3) == [3, 6]\n"


def build_drift(root: Path) -> SweFixture:
    repo = RepoBuilder(root / "drift")
    base = repo.commit({"pytest.ini": "[pytest]\n", "drift/__init__.py": "",
                        "drift/core.py": DRIFT_CORE.format(op="+"), "tests/test_core.py": DRIFT_TESTS})
    gold = repo.diff({"drift/core.py": DRIFT_CORE.format(op="*")})
    test_patch = repo.diff({"tests/test_core.py": DRIFT_TESTS + DRIFT_NEW_TESTS})
    variants = {
        "wrong_base": _foreign_diff(root / "drift-other", "drift/core.py", DRIFT_OTHER),
        "offset_whitespace": _foreign_diff(root / "drift-shifted", "drift/core.py", DRIFT_SHIFTED),
        "crlf_preamble": ("I fixed the bug in `scale`. Here is the patch:\n\n```diff\n" + gold + "```\n")
        .replace("\n", "\r\n"),
    }
    row = instance_row("drift", base, gold, test_patch, ["tests/test_core.py::test_scale"],
                       ["tests/test_core.py::test_total"], json_lists=True)
    return SweFixture("drift", repo.path, row, variants)


def _foreign_diff(path: Path, name: str, template: str) -> str:
    """A fix made in another repository, against another version of ``name``."""
    other = RepoBuilder(path)
    other.commit({name: template.format(op="+")})
    return other.diff({name: template.format(op="*")})


# --- hang: the unfixed wait_ready() never returns -----------------------------------------------------------

HANG_READY = ('import time\n\n\ndef wait_ready(attempts):\n    """Poll until ready, at most `attempts` times."""\n'
              '    while attempts > 0:\n        time.sleep(0.01){fix}\n    return True\n\n\ndef ping():\n'
              '    return "pong"\n')
HANG_TESTS = 'from hang.ready import ping, wait_ready\n\n\ndef test_ping():\n    assert ping() == "pong"\n'
HANG_NEW_TESTS = "\n\ndef test_wait_ready():\n    assert wait_ready(3) is True\n"


def build_hang(root: Path) -> SweFixture:
    repo = RepoBuilder(root / "hang")
    base = repo.commit({"pytest.ini": "[pytest]\n", "hang/__init__.py": "",
                        "hang/ready.py": HANG_READY.format(fix=""), "tests/test_ready.py": HANG_TESTS})
    gold = repo.diff({"hang/ready.py": HANG_READY.format(fix="\n        attempts -= 1")})
    test_patch = repo.diff({"tests/test_ready.py": HANG_TESTS + HANG_NEW_TESTS})
    marker = f"polar-hang-{uuid.uuid4().hex[:12]}"  # in the test command, so pgrep -f finds any survivor
    row = instance_row("hang", base, gold, test_patch, ["tests/test_ready.py::test_wait_ready"],
                       ["tests/test_ready.py::test_ping"], json_lists=False, timeout_s=3,
                       test_cmd=TEST_CMD + [f"--basetemp={root / marker}"])
    return SweFixture("hang", repo.path, row, marker=marker)


# --- tamper: patches that attack the tests instead of fixing the code -------------------------------------

TAMPER_WORDS = "def count_words(text):\n    return {expr}\n"
TAMPER_CONFTEST = 'import pytest\n\n\n@pytest.fixture\ndef sample():\n    return "alpha beta gamma"\n'
TAMPER_TESTS = ("from tamper.words import count_words\n\n\ndef test_count_sample(sample):\n"
                "    assert count_words(sample) == 3\n\n\ndef test_count_single():\n"
                '    assert count_words("alpha") == 1\n')
TAMPER_NEW_TESTS = ('\n\ndef test_count_double_spaces():\n    assert count_words("alpha  beta") == 2\n'
                    '\n\ndef test_count_padded():\n    assert count_words("  alpha beta ") == 2\n')
TAMPER_SKIP_F2P = TAMPER_CONFTEST + ('\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n'
                                     '        if item.name in ("test_count_double_spaces", "test_count_padded"):\n'
                                     '            item.add_marker(pytest.mark.skip(reason="flaky"))\n')
# Collects nothing, then prints fake PASSED lines once capture is over and exits 1 (swebench #620).
TAMPER_FAKE_PASS = TAMPER_CONFTEST + ("\n\nimport os\nimport sys\n\n\ndef pytest_collection_modifyitems(items):\n"
                                      "    items.clear()\n\n\ndef pytest_unconfigure(config):\n"
                                      "    for name in ('test_count_sample', 'test_count_single',\n"
                                      "                 'test_count_double_spaces', 'test_count_padded'):\n"
                                      "        print(f'PASSED tests/test_words.py::{name}')\n"
                                      "    sys.stdout.flush()\n    os._exit(1)\n")
TAMPER_COLLECT_NOTHING = ("def pytest_collection_modifyitems(items):\n    items.clear()\n\n\n"
                          "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n")


def build_tamper(root: Path) -> SweFixture:
    repo = RepoBuilder(root / "tamper")
    base = repo.commit({"pytest.ini": "[pytest]\n", "tamper/__init__.py": "",
                        "tamper/words.py": TAMPER_WORDS.format(expr='len(text.split(" "))'),
                        "tests/conftest.py": TAMPER_CONFTEST, "tests/test_words.py": TAMPER_TESTS})
    fixed = TAMPER_WORDS.format(expr="len(text.split())")
    gold = repo.diff({"tamper/words.py": fixed})
    test_patch = repo.diff({"tests/test_words.py": TAMPER_TESTS + TAMPER_NEW_TESTS})
    variants = {
        "deletes_p2p_conftest": repo.diff({"tamper/words.py": fixed, "tests/conftest.py": None}),
        "skips_f2p": repo.diff({"tests/conftest.py": TAMPER_SKIP_F2P}),
        "fake_pass_exit_1": repo.diff({"tests/conftest.py": TAMPER_FAKE_PASS}),
        "collects_nothing_exit_0": repo.diff({"tamper/words.py": fixed, "tests/conftest.py": TAMPER_COLLECT_NOTHING}),
    }
    f2p = ["tests/test_words.py::test_count_double_spaces", "tests/test_words.py::test_count_padded"]
    p2p = ["tests/test_words.py::test_count_sample", "tests/test_words.py::test_count_single"]
    return SweFixture("tamper", repo.path, instance_row("tamper", base, gold, test_patch, f2p, p2p, json_lists=True),
                      variants)


BUILDERS = {"calc": build_calc, "slug": build_slug, "drift": build_drift, "hang": build_hang, "tamper": build_tamper}


def build_fixture(name: str, root: Path) -> SweFixture:
    return BUILDERS[name](Path(root))


# --- workspaces and grading checkouts ---------------------------------------------------------------------

def agent_workspace(fixture: SweFixture, root: Path, session_id: str = "agent") -> LocalRuntime:
    """A started LocalRuntime whose workspace is a clone of the fixture repository at base_commit."""
    runtime = LocalRuntime(Path(root), session_id)
    runtime.start()
    git(Path(runtime.workdir), "clone", "-q", str(fixture.repo), ".")
    git(Path(runtime.workdir), "checkout", "-q", fixture.base_commit)
    return runtime


def _as_list(value) -> list[str]:
    return json.loads(value) if isinstance(value, str) else list(value)
