"""``output``: weighted checks on the final answer or the workspace.

Checks: exact / contains / regex on the last assistant text; a file's existence or content; a
command's exit code; a parsed test-outcome map that must equal an expected map. The reward is the
weighted mean of the check scores (each 0 or 1), in [0, 1].
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from polar_jobs.runtimes.base import Runtime
from polar_jobs.scoring.base import Evaluation, EvaluationContext, EvaluationError
from polar_jobs.trajectory.trace import Trajectory


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float = Field(default=1.0, ge=0)


class AnswerCheck(_Check):
    kind: Literal["answer_exact", "answer_contains", "answer_regex"]
    value: str
    ignore_case: bool = False
    strip: bool = True


class FileCheck(_Check):
    kind: Literal["file_exists", "file_content"]
    path: str
    equals: str | None = None
    contains: str | None = None
    regex: str | None = None

    @model_validator(mode="after")
    def _one_expectation(self) -> "FileCheck":
        given = [v for v in (self.equals, self.contains, self.regex) if v is not None]
        if self.kind == "file_content" and len(given) != 1:
            raise ValueError("file_content needs exactly one of equals, contains, regex")
        return self


class CommandCheck(_Check):
    kind: Literal["command"]
    command: str | list[str]
    exit_code: int = 0
    timeout: float = Field(default=300, gt=0)


class TestOutcomeCheck(_Check):
    kind: Literal["test_outcomes"]
    command: str | list[str]
    expected: dict[str, Literal["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"]] = Field(min_length=1)
    parser: Literal["pytest", "pytest_v2"] = "pytest"
    timeout: float = Field(default=600, gt=0)


Check = Annotated[Union[AnswerCheck, FileCheck, CommandCheck, TestOutcomeCheck], Field(discriminator="kind")]


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checks: list[Check] = Field(min_length=1)


class OutputEvaluator:
    name: ClassVar[str] = "output"

    def __init__(self, config: dict[str, Any]):
        try:
            self.config = OutputConfig.model_validate(config)
        except ValidationError as exc:
            raise EvaluationError(f"output evaluator config: {exc}") from None
        for check in self.config.checks:
            if isinstance(check, AnswerCheck) and check.kind == "answer_regex":
                _compile(check.value, check.ignore_case)
            if isinstance(check, FileCheck) and check.regex is not None:
                _compile(check.regex, False)
        if not sum(check.weight for check in self.config.checks) > 0:
            raise EvaluationError("output evaluator config: the check weights sum to 0")

    def prepare(self, runtime: Runtime) -> None:
        return None

    def evaluate(self, context: EvaluationContext) -> Evaluation:
        scores, details = [], []
        for index, check in enumerate(self.config.checks):
            passed, detail = self._run(check, context)
            scores.append((check.weight, 1.0 if passed else 0.0))
            details.append({"check": index, "kind": check.kind, "passed": passed, **detail})
        total = sum(weight for weight, _ in scores)
        reward = sum(weight * score for weight, score in scores) / total
        return Evaluation(reward=reward, metrics={"checks": details, "passed": sum(1 for d in details if d["passed"])})

    def _run(self, check: Any, context: EvaluationContext) -> tuple[bool, dict[str, Any]]:
        if isinstance(check, AnswerCheck):
            answer = last_assistant_text(context.trajectory)
            return _match_answer(check, answer), {"answer": answer[-500:]}
        runtime = context.runtime
        if runtime is None:
            raise EvaluationError(f"the {check.kind} check needs the session's runtime, and it has none")
        if isinstance(check, FileCheck):
            return _check_file(runtime, check)
        result = runtime.exec(check.command if isinstance(check.command, list) else ["bash", "-lc", check.command],
                              timeout=check.timeout)
        if isinstance(check, CommandCheck):
            return (not result.timed_out and result.exit_code == check.exit_code,
                    {"exit_code": result.exit_code, "timed_out": result.timed_out})
        from polar_jobs.scoring.swe.logs import parse_log_pytest, parse_log_pytest_v2

        parse = parse_log_pytest if check.parser == "pytest" else parse_log_pytest_v2
        outcomes = {name: str(getattr(status, "value", status)) for name, status in
                    parse(result.stdout + "\n" + result.stderr).items()}
        observed = {name: outcomes.get(name, "MISSING") for name in check.expected}
        return observed == check.expected and not result.timed_out, {"observed": observed,
                                                                       "timed_out": result.timed_out}


def last_assistant_text(trajectory: Trajectory | None) -> str:
    """The final answer: the last assistant message of the main trace (text parts joined)."""
    if trajectory is None or not trajectory.traces:
        return ""
    traces = [t for t in trajectory.traces if t.label == "main"] or trajectory.traces
    for message in reversed(traces[-1].response_messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content or ""
    return ""


def _match_answer(check: AnswerCheck, answer: str) -> bool:
    text = answer.strip() if check.strip else answer
    if check.kind == "answer_regex":
        return _compile(check.value, check.ignore_case).search(text) is not None
    value = check.value.strip() if check.strip else check.value
    if check.ignore_case:
        text, value = text.casefold(), value.casefold()
    return text == value if check.kind == "answer_exact" else value in text


def _check_file(runtime: Runtime, check: FileCheck) -> tuple[bool, dict[str, Any]]:
    if check.kind == "file_exists":
        result = runtime.exec(["test", "-e", check.path])
        return result.exit_code == 0, {"path": check.path}
    result = runtime.exec(["cat", "--", check.path])
    if result.exit_code != 0:
        return False, {"path": check.path, "error": result.stderr.strip()[:200]}
    content = result.stdout
    if check.equals is not None:
        passed = content == check.equals or content.rstrip("\n") == check.equals.rstrip("\n")
    elif check.contains is not None:
        passed = check.contains in content
    else:
        passed = _compile(check.regex, False).search(content) is not None
    return passed, {"path": check.path}


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise EvaluationError(f"output evaluator config: bad regex {pattern!r}: {exc}") from None


__all__ = ["OutputEvaluator", "last_assistant_text"]
