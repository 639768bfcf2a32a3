"""Patch extraction from an agent's workspace and the ``swe`` evaluator end to end (swe-eval.md §2, §8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from polar_jobs.scoring.base import EvaluationContext, EvaluationError
from polar_jobs.scoring.swe import SweEvaluator, extract_patch
from tests.swe_fixtures import (
    CALC_WEAK_TESTS,
    SLUG_AGENT_TESTS,
    SLUG_TEXT,
    RepoBuilder,
    agent_workspace,
    build_fixture,
    git,
    write_files,
)

pytestmark = pytest.mark.integration

BINARY = bytes(range(256)) * 4


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-fixtures")
    return {name: build_fixture(name, root) for name in ("calc", "slug")}


def messy_slug_workspace(fixture, root: Path):
    """The slug fix made by hand, plus what agents leave behind."""
    runtime = agent_workspace(fixture, root)
    work = Path(runtime.workdir)
    write_files(work, {
        "slug/text.py": SLUG_TEXT,
        "reproduce.py": "from slug.text import slugify\nprint(slugify('Hello World'))\n",
        "data/blob.bin": BINARY,
        "slug/__pycache__/text.cpython-311.pyc": BINARY[:64],
        ".pytest_cache/README.md": "# pytest cache directory #\n",
        "tests/test_slug.py": SLUG_AGENT_TESTS,  # the agent's own version of the file test_patch adds
    })
    nested = RepoBuilder(work / "vendor" / "lib")
    nested.commit({"helper.py": "def helper():\n    return 1\n"})
    return runtime


def _files_in(diff: str) -> set[str]:
    return {line.split(" b/", 1)[1] for line in diff.splitlines() if line.startswith("diff --git ")}


def test_extraction_keeps_the_fix_and_leaves_out_binaries_caches_and_gitlinks(fixtures, tmp_path):
    fixture = fixtures["slug"]
    runtime = messy_slug_workspace(fixture, tmp_path)
    patch = extract_patch(runtime, fixture.base_commit)
    assert _files_in(patch.diff) == {"slug/text.py", "reproduce.py", "tests/test_slug.py", "vendor/lib/helper.py"}
    assert "Subproject commit" not in patch.diff and "160000" not in patch.diff
    assert not (Path(runtime.workdir) / "vendor/lib/.git").exists()
    assert set(patch.excluded) == {"vendor/lib/.git/", "data/blob.bin", "slug/__pycache__/text.cpython-311.pyc",
                                   ".pytest_cache/README.md"}
    assert patch.diff.startswith("diff --git ") and patch.diff.endswith("\n") and "\r" not in patch.diff
    assert patch.raw.startswith("diff --git ")


def test_a_committed_fix_is_still_captured(fixtures, tmp_path):
    fixture = fixtures["slug"]
    runtime = agent_workspace(fixture, tmp_path)
    work = Path(runtime.workdir)
    write_files(work, {"slug/text.py": SLUG_TEXT})
    git(work, "add", "slug/text.py")
    git(work, "commit", "-q", "-m", "agent fix")
    patch = extract_patch(runtime, fixture.base_commit)
    assert _files_in(patch.diff) == {"slug/text.py"}
    assert "+def slugify(text):" in patch.diff


def test_evaluator_rewards_a_hand_made_fix_among_junk(fixtures, tmp_path):
    fixture = fixtures["slug"]
    runtime = messy_slug_workspace(fixture, tmp_path)
    evaluator = SweEvaluator(fixture.instance)
    evaluation = evaluator.evaluate(EvaluationContext(trajectory=None, runtime=runtime))
    assert evaluation.reward == 1.0
    assert evaluation.metrics == {"status": "RESOLVED_FULL", "f2p_ratio": 1.0, "p2p_ratio": 1.0,
                                  "failure_reason": None, "patch_applied": True, "apply_rung": "git_apply",
                                  "resolved": True, "sft_accept": True}


def test_evaluator_is_not_fooled_by_weakened_tests(fixtures, tmp_path):
    fixture = fixtures["calc"]
    runtime = agent_workspace(fixture, tmp_path)
    write_files(Path(runtime.workdir), {"tests/test_calc.py": CALC_WEAK_TESTS})
    # the weakened tests do pass in the agent's own workspace
    own = subprocess.run(fixture.instance["test_cmd"] + ["tests/test_calc.py"], cwd=runtime.workdir,
                         capture_output=True, text=True)
    assert own.returncode == 0, own.stdout
    evaluation = SweEvaluator({"instance": fixture.instance, "timeout_s": 60}).evaluate(
        EvaluationContext(trajectory=None, runtime=runtime))
    assert evaluation.reward == 0.0
    assert evaluation.metrics["status"] == "RESOLVED_NO" and evaluation.metrics["f2p_ratio"] == 0.0
    assert evaluation.metrics["failure_reason"] == "tests_failed" and evaluation.metrics["sft_accept"] is False


def test_evaluator_with_no_changes_gives_zero_without_running(fixtures, tmp_path):
    fixture = fixtures["calc"]
    runtime = agent_workspace(fixture, tmp_path)
    evaluator = SweEvaluator(fixture.instance)
    evaluator.prepare(runtime)
    evaluation = evaluator.evaluate(EvaluationContext(trajectory=None, runtime=runtime))
    assert evaluation.reward == 0.0
    assert (evaluation.metrics["failure_reason"], evaluation.metrics["patch_applied"],
            evaluation.metrics["sft_accept"]) == ("empty_patch", False, False)


def test_evaluator_errors_are_never_a_silent_zero(fixtures, tmp_path):
    with pytest.raises(EvaluationError, match="FAIL_TO_PASS"):
        SweEvaluator({**fixtures["calc"].instance, "FAIL_TO_PASS": "[]"})
    with pytest.raises(EvaluationError, match="timeout_s"):
        SweEvaluator({"instance": fixtures["calc"].instance, "timeout_s": -1})
    evaluator = SweEvaluator(fixtures["calc"].instance)
    with pytest.raises(EvaluationError, match="runtime"):
        evaluator.evaluate(EvaluationContext(trajectory=None, runtime=None))
    not_a_repo = agent_workspace(fixtures["calc"], tmp_path)
    subprocess.run(["rm", "-rf", str(Path(not_a_repo.workdir) / ".git")], check=True)
    with pytest.raises(EvaluationError, match="git"):
        evaluator.evaluate(EvaluationContext(trajectory=None, runtime=not_a_repo))


class ForeignRuntime:
    """A runtime that is not a LocalRuntime (as a container would be): the evaluator must copy .git out."""

    def __init__(self, inner):
        self.inner = inner
        self.workdir = inner.workdir
        self.downloads: list[str] = []

    def start(self):
        self.inner.start()

    def exec(self, command, **kwargs):
        return self.inner.exec(command, **kwargs)

    def upload(self, local, remote):
        self.inner.upload(local, remote)

    def download(self, remote, local):
        self.downloads.append(remote)
        self.inner.download(remote, local)

    def stop(self):
        self.inner.stop()


def test_evaluator_grades_a_non_local_runtime_from_a_copy_of_its_history(fixtures, tmp_path):
    fixture = fixtures["calc"]
    runtime = ForeignRuntime(agent_workspace(fixture, tmp_path))
    git(Path(runtime.workdir), "apply", "-", input_text=fixture.gold)
    evaluation = SweEvaluator(fixture.instance).evaluate(EvaluationContext(trajectory=None, runtime=runtime))
    assert runtime.downloads == [".git"]
    assert evaluation.reward == 1.0 and evaluation.metrics["sft_accept"] is True


def test_registry_builds_the_swe_evaluator_from_a_dataset_row(fixtures):
    from polar_jobs.scoring.datasets import swe_task_request
    from polar_jobs.scoring.registry import create

    request = swe_task_request({"data_source": "swe-gym", "prompt": [{"role": "user", "content": "fix it"}],
                                "instance": fixtures["calc"].instance}, agent_command="true")
    evaluator = create(request.evaluator.name, request.evaluator.config)
    assert isinstance(evaluator, SweEvaluator)
    assert evaluator.instance.fail_to_pass == tuple(fixtures["calc"].f2p)
