"""Evaluator lookup by name, by module:Class and by entry point; failures are errors, never a silent 0."""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import pytest

from polar_jobs import scoring
from polar_jobs.scoring import Evaluation, EvaluationContext, EvaluationError

pytestmark = pytest.mark.unit


class Constant:
    name = "constant"

    def __init__(self, config: dict[str, Any]):
        self.value = config["value"]

    def prepare(self, runtime) -> None:
        return None

    def evaluate(self, context: EvaluationContext) -> Evaluation:
        return Evaluation(reward=self.value)


class Broken(Constant):
    def evaluate(self, context: EvaluationContext) -> Evaluation:
        raise ZeroDivisionError("division by zero in the grader")


class Sloppy(Constant):
    def evaluate(self, context: EvaluationContext):
        return 1.0


def test_builtins_resolve():
    assert set(scoring.BUILTINS) == {"session_completed", "output", "swe"}
    for name in ("session_completed", "output"):
        assert scoring.resolve(name).name == name


def test_module_class_path():
    evaluator = scoring.create(f"{__name__}:Constant", {"value": 0.5})
    assert scoring.run(evaluator, EvaluationContext(None, None)).reward == 0.5


def test_entry_point_group(tmp_path, monkeypatch):
    package = tmp_path / "my_grader.py"
    package.write_text(textwrap.dedent("""
        from polar_jobs.scoring import Evaluation
        class Grader:
            name = "my-grader"
            def __init__(self, config): self.bonus = config.get("bonus", 0.0)
            def prepare(self, runtime): pass
            def evaluate(self, context): return Evaluation(reward=0.25 + self.bonus)
    """))
    info = tmp_path / "my_grader-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-grader\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[polar_jobs.evaluators]\nmy-grader = my_grader:Grader\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    evaluator = scoring.create("my-grader", {"bonus": 0.5})
    assert scoring.run(evaluator, EvaluationContext(None, None)).reward == 0.75


@pytest.mark.parametrize("name, message", [
    ("no_such_evaluator", "unknown evaluator 'no_such_evaluator'; known: output, session_completed, swe"),
    ("no_such_module:Thing", "cannot import no_such_module:Thing"),
    (f"{__name__}:Missing", "cannot import"),
])
def test_unknown_evaluators(name, message):
    with pytest.raises(EvaluationError, match=message.replace("(", r"\(")):
        scoring.create(name)


def test_config_errors_and_failures_are_errors_not_zero():
    with pytest.raises(EvaluationError, match="rejected its config: KeyError"):
        scoring.create(f"{__name__}:Constant", {})
    with pytest.raises(EvaluationError, match="ZeroDivisionError: division by zero in the grader"):
        scoring.run(scoring.create(f"{__name__}:Broken", {"value": 1}), EvaluationContext(None, None))
    with pytest.raises(EvaluationError, match="not an Evaluation"):
        scoring.run(scoring.create(f"{__name__}:Sloppy", {"value": 1}), EvaluationContext(None, None))
    for bad in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(EvaluationError, match="finite"):
            scoring.run(scoring.create(f"{__name__}:Constant", {"value": bad}), EvaluationContext(None, None))
    with pytest.raises(EvaluationError, match="trace_rewards"):
        Evaluation(reward=1.0, trace_rewards=[0.5, float("nan")])
