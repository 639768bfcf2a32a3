"""``session_completed``: 1 if the harness finished normally (exit 0, within its budget), else 0."""

from __future__ import annotations

from typing import Any, ClassVar

from polar_jobs.runtimes.base import Runtime
from polar_jobs.scoring.base import Evaluation, EvaluationContext, EvaluationError


class SessionCompleted:
    name: ClassVar[str] = "session_completed"

    def __init__(self, config: dict[str, Any]):
        if config:
            raise EvaluationError(f"session_completed takes no config, got {sorted(config)}")

    def prepare(self, runtime: Runtime) -> None:
        return None

    def evaluate(self, context: EvaluationContext) -> Evaluation:
        harness = context.harness
        if harness is None:
            raise EvaluationError("session_completed needs the harness outcome, and the session has none")
        return Evaluation(reward=1.0 if harness.finished_normally else 0.0,
                          metrics={"exit_code": harness.exit_code, "timed_out": harness.timed_out,
                                   "harness_error": harness.error})
