"""Eval script and patch text handling (swe-eval.md §2-§4): pure functions over diff text."""

from __future__ import annotations

import json

import pytest

import polar_jobs.scoring.swe as swe
from polar_jobs.scoring.swe.instance import load_instance
from polar_jobs.scoring.swe.patch import binary_paths, clean_diff, is_cache_path
from polar_jobs.scoring.swe.script import build_eval_script, eval_directives, patch_files

pytestmark = pytest.mark.unit

BASE = "0123456789abcdef0123456789abcdef01234567"

TEST_PATCH = """\
diff --git a/tests/test_mod.py b/tests/test_mod.py
index 1111111..2222222 100644
--- a/tests/test_mod.py
+++ b/tests/test_mod.py
@@ -1 +1,2 @@
 x = 1
+y = 2
diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1 @@
+def test_new(): pass
diff --git a/tests/data/case.json b/tests/data/case.json
new file mode 100644
index 0000000..4444444
--- /dev/null
+++ b/tests/data/case.json
@@ -0,0 +1 @@
+{}
diff --git a/tests/test_gone.py b/tests/test_gone.py
deleted file mode 100644
index 5555555..0000000
--- a/tests/test_gone.py
+++ /dev/null
@@ -1 +0,0 @@
-def test_gone(): pass
diff --git a/tests/test_old_name.py b/tests/test_renamed.py
similarity index 100%
rename from tests/test_old_name.py
rename to tests/test_renamed.py
"""


def test_patch_files_classifies_paths():
    files = patch_files(TEST_PATCH)
    assert files.existing == ("tests/test_mod.py", "tests/test_gone.py", "tests/test_old_name.py")
    assert files.added == ("tests/test_new.py", "tests/data/case.json", "tests/test_renamed.py")
    assert files.targets == ("tests/test_mod.py", "tests/test_new.py", "tests/data/case.json",
                             "tests/test_renamed.py")


def test_directives_drop_data_files_and_deleted_files():
    assert eval_directives(TEST_PATCH) == ["tests/test_mod.py", "tests/test_new.py", "tests/test_renamed.py"]


def _instance(test_patch: str = TEST_PATCH, **extra):
    return load_instance({"instance_id": "o__r-1", "repo": "o/r", "base_commit": BASE, "test_patch": test_patch,
                          "FAIL_TO_PASS": json.dumps(["tests/test_new.py::test_new"]), "PASS_TO_PASS": "[]",
                          **extra})


def test_eval_script_layout():
    script = build_eval_script(_instance(install=["pip install -e ."]))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "set -uxo pipefail" in lines and not any(line.startswith("set -e") for line in lines)
    reset = f"git checkout {BASE} -- tests/test_mod.py tests/test_gone.py tests/test_old_name.py"
    remove = "rm -f -- tests/test_new.py tests/data/case.json tests/test_renamed.py"
    order = ["git status", "git show --stat", f"git -c core.fileMode=false diff {BASE}", "pip install -e .",
             reset, remove, "git apply --verbose - <<'EOF_POLAR_SWE_TEST_PATCH'",
             ": '>>>>> Start Test Output'",
             "python -m pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_mod.py tests/test_new.py "
             "tests/test_renamed.py",
             "POLAR_SWE_TEST_EXIT_CODE=$?", ": '>>>>> End Test Output'",
             'echo ">>>>> Test Exit Code: $POLAR_SWE_TEST_EXIT_CODE"', reset, remove,
             "exit $POLAR_SWE_TEST_EXIT_CODE"]
    position = 0
    for line in order:  # each expected line appears, in this order
        position = lines.index(line, position) + 1
    assert lines.count(reset) == 2 and lines.count(remove) == 2
    assert TEST_PATCH in script


def test_a_test_patch_that_only_adds_files_never_checks_out_the_base():
    only_new = TEST_PATCH[TEST_PATCH.index("diff --git a/tests/test_new.py"):TEST_PATCH.index("diff --git a/tests/data")]
    script = build_eval_script(_instance(only_new))
    assert f"git checkout {BASE}" not in script
    assert "rm -f -- tests/test_new.py" in script.splitlines()


def test_heredoc_delimiter_never_collides_with_the_patch():
    patch = TEST_PATCH.replace("+def test_new(): pass", "+EOF_POLAR_SWE_TEST_PATCH = 1")
    script = build_eval_script(_instance(patch))
    assert "<<'EOF_POLAR_SWE_TEST_PATCH_X'" in script


def test_clean_diff_strips_preamble_crlf_and_fence():
    diff = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    messy = ("Sure! Run `diff --git` yourself or use:\n```diff\n" + diff + "```\n").replace("\n", "\r\n")
    assert clean_diff(messy) == diff
    assert clean_diff(diff.rstrip("\n")) == diff
    assert clean_diff("no diff here") == "" and clean_diff(None) == "" and clean_diff("") == ""


def test_cache_paths():
    assert is_cache_path("pkg/__pycache__/mod.cpython-311.pyc")
    assert is_cache_path(".pytest_cache/README.md")
    assert is_cache_path("build/mod.pyc")
    assert not is_cache_path("pkg/cache.py") and not is_cache_path("reproduce.py")


def test_binary_paths_from_numstat():
    numstat = "1\t0\tslug/text.py\0-\t-\tdata/blob.bin\0" "3\t1\tREADME.md\0-\t-\timg/a b.png\0"
    assert binary_paths(numstat) == ["data/blob.bin", "img/a b.png"]


def test_public_surface():
    assert sorted(swe.__all__) == sorted([
        "ApplyResult", "ExtractedPatch", "ResolvedStatus", "RunCheck", "SweEvaluator", "SweInstance", "SweReport",
        "TestStatus", "TestsReport", "apply_patch", "build_eval_script", "check_run", "clean_checkout",
        "clean_diff", "eval_directives", "extract_patch", "get_tests_report", "grade_patch", "is_failed",
        "is_p2p_maintained", "is_passed", "load_instance", "load_instances", "load_predictions",
        "parse_log_pytest", "parse_log_pytest_v2", "parse_test_output", "patch_files", "report_metrics",
        "resolution_status", "summarize", "unrun_report"])
    assert swe.SweEvaluator.name == "swe"
