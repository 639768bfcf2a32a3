"""The evaluator contract: given a session's trajectory, its runtime and a config, a finite reward."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from polar_jobs.runtimes.base import Runtime
from polar_jobs.trajectory.trace import Trajectory


class EvaluationError(Exception):
    """The evaluator could not grade the session (bad config, broken fixture, infrastructure): never a 0."""


@dataclass(frozen=True)
class HarnessOutcome:
    """How the harness run ended."""

    exit_code: int | None
    timed_out: bool = False
    duration_s: float = 0.0
    error: str | None = None

    @property
    def finished_normally(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None


@dataclass
class EvaluationContext:
    trajectory: Trajectory | None
    runtime: Runtime | None
    harness: HarnessOutcome | None = None
    instruction: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    reward: float
    trace_rewards: list[float] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_reward(self.reward, "reward")
        for index, value in enumerate(self.trace_rewards or []):
            _check_reward(value, f"trace_rewards[{index}]")


def _check_reward(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EvaluationError(f"{name} must be a finite number, got {value!r}")


class Evaluator(Protocol):
    """Built from its config at registry lookup (config errors surface before any session runs)."""

    name: ClassVar[str]

    def __init__(self, config: dict[str, Any]) -> None: ...

    def prepare(self, runtime: Runtime) -> None:
        """Optional pre-warm in the init stage (install test deps, check out the base commit)."""
        ...

    def evaluate(self, context: EvaluationContext) -> Evaluation: ...
