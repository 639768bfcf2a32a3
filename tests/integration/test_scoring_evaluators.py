"""The evaluator registry and the session_completed and output evaluators, against a real local runtime."""

from __future__ import annotations

import sys
import textwrap

import pytest

from polar_jobs import scoring
from polar_jobs.runtimes import LocalRuntime
from polar_jobs.scoring import EvaluationContext, EvaluationError, HarnessOutcome
from polar_jobs.trajectory import Trace, Trajectory, TrajectoryStatus

pytestmark = pytest.mark.integration


def _trajectory(final_answer: str) -> Trajectory:
    trace = Trace(prompt_ids=[1], response_ids=[2], loss_mask=[1], response_logprobs=[-0.1], finish_reason="stop",
                  spans=[], response_messages=[{"role": "assistant", "content": "thinking out loud"},
                                               {"role": "tool", "content": "ok", "tool_call_id": "c1"},
                                               {"role": "assistant", "content": final_answer}])
    return Trajectory("s1", "s1", "prefix_merge", TrajectoryStatus.COMPLETE, [trace])


@pytest.fixture
def runtime(tmp_path):
    runtime = LocalRuntime(tmp_path, "session")
    runtime.start()
    yield runtime
    runtime.stop()


def test_session_completed():
    evaluator = scoring.create("session_completed")
    done = scoring.run(evaluator, EvaluationContext(None, None, HarnessOutcome(exit_code=0)))
    assert done.reward == 1.0
    for outcome in (HarnessOutcome(exit_code=1), HarnessOutcome(exit_code=None, timed_out=True),
                    HarnessOutcome(exit_code=0, error="runtime lost")):
        assert scoring.run(evaluator, EvaluationContext(None, None, outcome)).reward == 0.0
    with pytest.raises(EvaluationError, match="harness outcome"):
        scoring.run(evaluator, EvaluationContext(None, None, None))


def test_output_checks_combine_by_weight(runtime):
    (runtime.root / "workspace" / "hello.txt").write_text("polar bear\n")
    (runtime.root / "workspace" / "test_it.py").write_text(textwrap.dedent("""
        def test_ok():
            assert True
        def test_bad():
            assert False
    """))
    evaluator = scoring.create("output", {"checks": [
        {"kind": "answer_exact", "value": "The answer is 42."},
        {"kind": "answer_regex", "value": r"answer is (\d+)", "weight": 2},
        {"kind": "answer_contains", "value": "FORTY", "ignore_case": True},
        {"kind": "file_exists", "path": "hello.txt"},
        {"kind": "file_content", "path": "hello.txt", "contains": "polar"},
        {"kind": "file_content", "path": "missing.txt", "equals": "x"},
        {"kind": "command", "command": "grep -q bear hello.txt"},
        {"kind": "test_outcomes", "command": [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                                              "test_it.py"],
         "expected": {"test_it.py::test_ok": "PASSED", "test_it.py::test_bad": "FAILED"}},
        {"kind": "test_outcomes", "command": [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                                              "test_it.py"],
         "expected": {"test_it.py::test_bad": "PASSED"}, "weight": 3},
    ]})
    result = scoring.run(evaluator, EvaluationContext(_trajectory("The answer is 42."), runtime))
    passed = [check["passed"] for check in result.metrics["checks"]]
    assert passed == [True, True, False, True, True, False, True, True, False]
    weights = [1, 2, 1, 1, 1, 1, 1, 1, 3]
    assert result.reward == pytest.approx(sum(w for w, p in zip(weights, passed) if p) / sum(weights))
    assert result.metrics["checks"][8]["observed"] == {"test_it.py::test_bad": "FAILED"}


def test_command_timeout_fails_the_check(runtime):
    evaluator = scoring.create("output", {"checks": [{"kind": "command", "command": "sleep 30", "timeout": 1}]})
    result = scoring.run(evaluator, EvaluationContext(None, runtime))
    assert result.reward == 0.0 and result.metrics["checks"][0]["timed_out"] is True


@pytest.mark.parametrize("config, message", [
    ({}, "checks"),
    ({"checks": []}, "checks"),
    ({"checks": [{"kind": "answer_regex", "value": "("}]}, "bad regex"),
    ({"checks": [{"kind": "file_content", "path": "a"}]}, "exactly one of"),
    ({"checks": [{"kind": "telepathy"}]}, "telepathy"),
    ({"checks": [{"kind": "file_exists", "path": "a", "weight": 0}]}, "sum to 0"),
])
def test_bad_output_config_is_an_evaluation_error(config, message):
    with pytest.raises(EvaluationError, match=message):
        scoring.create("output", config)


def test_workspace_checks_need_a_runtime():
    evaluator = scoring.create("output", {"checks": [{"kind": "file_exists", "path": "x"}]})
    with pytest.raises(EvaluationError, match="needs the session's runtime"):
        scoring.run(evaluator, EvaluationContext(None, None))
