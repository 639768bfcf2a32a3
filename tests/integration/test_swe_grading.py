"""grade_patch on real fixture repositories (swe-eval.md §9): real git, real pytest, real timeouts."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from polar_jobs.scoring.base import EvaluationError
from polar_jobs.scoring.swe import ResolvedStatus, clean_checkout, grade_patch, load_instance
from tests.swe_fixtures import FIXTURE_NAMES, build_fixture

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-fixtures")
    return {name: build_fixture(name, root) for name in FIXTURE_NAMES}


def grade(fixture, diff, tmp_path, **instance_overrides):
    instance = load_instance({**fixture.instance, **instance_overrides})
    runtime = clean_checkout(fixture.repo, tmp_path)
    try:
        return grade_patch(runtime, instance, diff)
    finally:
        runtime.stop()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_gold_patch_resolves_every_fixture(fixtures, name, tmp_path):
    fixture = fixtures[name]
    report = grade(fixture, fixture.gold, tmp_path)
    assert report.status is ResolvedStatus.FULL, report.log[-3000:]
    assert list(report.tests.f2p_success) == fixture.f2p and list(report.tests.p2p_success) == fixture.p2p
    assert (report.resolved, report.patch_applied, report.apply_rung, report.failure_reason) == (
        True, True, "git_apply", None)


@pytest.mark.parametrize("name", [name for name in FIXTURE_NAMES if name != "hang"])  # hang: see the timeout test
def test_empty_patch_fails_every_f2p_and_keeps_every_p2p(fixtures, name, tmp_path):
    fixture = fixtures[name]
    report = grade(fixture, "", tmp_path)
    assert list(report.tests.f2p_failure) == fixture.f2p, report.log[-3000:]
    assert list(report.tests.p2p_success) == fixture.p2p
    assert (report.status, report.failure_reason, report.patch_exists) == (ResolvedStatus.NO, "empty_patch", False)


# --- calc ---------------------------------------------------------------------------------------------------

def test_calc_positives_only_fix_is_partial(fixtures, tmp_path):
    report = grade(fixtures["calc"], fixtures["calc"].variants["positives_only"], tmp_path)
    assert report.status is ResolvedStatus.PARTIAL and not report.resolved
    assert report.tests.f2p_success == ("tests/test_calc.py::test_add_positive",)
    assert report.tests.f2p_failure == ("tests/test_calc.py::test_add_negative",)
    assert (report.f2p_ratio, report.p2p_ratio) == (0.5, 1.0)


def test_calc_fix_that_breaks_sub_is_not_resolved(fixtures, tmp_path):
    report = grade(fixtures["calc"], fixtures["calc"].variants["breaks_sub"], tmp_path)
    assert report.status is ResolvedStatus.NO
    assert (report.f2p_ratio, report.tests.p2p_failure) == (1.0, ("tests/test_calc.py::test_sub",))


def test_calc_weakened_tests_are_reset(fixtures, tmp_path):
    report = grade(fixtures["calc"], fixtures["calc"].variants["weakened_tests"], tmp_path)
    assert report.status is ResolvedStatus.NO and report.patch_applied
    assert list(report.tests.f2p_failure) == fixtures["calc"].f2p


def test_calc_gold_with_weakened_tests_still_resolves(fixtures, tmp_path):
    report = grade(fixtures["calc"], fixtures["calc"].variants["gold_weakened_tests"], tmp_path)
    assert report.status is ResolvedStatus.FULL, report.log[-3000:]


# --- drift --------------------------------------------------------------------------------------------------

def test_drift_patch_for_another_base_fails_every_rung(fixtures, tmp_path):
    report = grade(fixtures["drift"], fixtures["drift"].variants["wrong_base"], tmp_path)
    assert (report.failure_reason, report.patch_applied, report.apply_rung, report.completed) == (
        "patch_apply_failed", False, None, False)
    assert report.status is ResolvedStatus.NO and not report.resolved
    assert ">>>>> Patch Apply Failed" in report.log
    assert "--3way" in report.log and ("patch --batch" in report.log or "patch is not installed" in report.log)


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) is not installed")
def test_drift_offset_and_whitespace_drift_needs_the_fuzz_rung(fixtures, tmp_path):
    report = grade(fixtures["drift"], fixtures["drift"].variants["offset_whitespace"], tmp_path)
    assert report.apply_rung == "patch_fuzz", report.log[-3000:]
    assert report.status is ResolvedStatus.FULL


def test_drift_preamble_and_crlf_apply_after_cleanup(fixtures, tmp_path):
    assert "\r\n" in fixtures["drift"].variants["crlf_preamble"]
    report = grade(fixtures["drift"], fixtures["drift"].variants["crlf_preamble"], tmp_path)
    assert (report.status, report.apply_rung) == (ResolvedStatus.FULL, "git_apply")


# --- hang ---------------------------------------------------------------------------------------------------

def test_hang_times_out_and_leaves_no_process(fixtures, tmp_path):
    fixture = fixtures["hang"]
    started = time.monotonic()
    report = grade(fixture, "", tmp_path)
    elapsed = time.monotonic() - started
    assert (report.failure_reason, report.timed_out, report.status) == ("timeout", True, ResolvedStatus.NO)
    assert list(report.tests.f2p_failure) == fixture.f2p and not report.completed
    assert 3 <= elapsed < 15
    survivors = subprocess.run(["pgrep", "-f", fixture.marker], capture_output=True, text=True)
    assert survivors.stdout == "", f"processes left behind: {survivors.stdout}"


# --- tamper -------------------------------------------------------------------------------------------------

def test_tamper_deleting_a_p2p_conftest_fails_p2p(fixtures, tmp_path):
    report = grade(fixtures["tamper"], fixtures["tamper"].variants["deletes_p2p_conftest"], tmp_path)
    assert report.status is ResolvedStatus.NO and report.f2p_ratio == 1.0
    assert report.tests.p2p_failure == ("tests/test_words.py::test_count_sample",)


def test_tamper_skipping_f2p_is_a_failure(fixtures, tmp_path):
    # pytest -rA reports skips only as "SKIPPED [2] file: reason", so the skipped F2P tests are missing here;
    # the 5.0.2 rule for an explicit SKIPPED status is pinned by the unit tests of the predicates.
    report = grade(fixtures["tamper"], fixtures["tamper"].variants["skips_f2p"], tmp_path)
    assert report.status is ResolvedStatus.NO and report.failure_reason == "tests_failed"
    assert list(report.tests.f2p_failure) == fixtures["tamper"].f2p
    assert "SKIPPED" in report.log


def test_tamper_fake_passed_lines_with_exit_1_are_invalid(fixtures, tmp_path):
    report = grade(fixtures["tamper"], fixtures["tamper"].variants["fake_pass_exit_1"], tmp_path)
    assert "PASSED tests/test_words.py::test_count_padded" in report.log  # the spoof did print
    assert (report.status, report.failure_reason, report.exit_code) == (ResolvedStatus.NO, "spoofed_log", 1)


def test_tamper_nothing_collected_with_exit_0_is_invalid(fixtures, tmp_path):
    report = grade(fixtures["tamper"], fixtures["tamper"].variants["collects_nothing_exit_0"], tmp_path)
    assert (report.status, report.failure_reason, report.exit_code) == (ResolvedStatus.NO, "no_tests_ran", 0)


# --- evaluator-side errors ------------------------------------------------------------------------------------

def test_a_test_patch_that_does_not_apply_is_an_evaluator_error(fixtures, tmp_path):
    fixture = fixtures["calc"]
    broken = fixture.instance["test_patch"].replace(" def test_sub():", " def test_subtract():")
    with pytest.raises(EvaluationError, match="test patch does not apply"):
        grade(fixture, fixture.gold, tmp_path, test_patch=broken)


def test_a_missing_base_commit_is_an_evaluator_error(fixtures, tmp_path):
    with pytest.raises(EvaluationError, match="checkout"):
        grade(fixtures["calc"], fixtures["calc"].gold, tmp_path, base_commit="f" * 40)
