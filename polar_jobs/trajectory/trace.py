"""What builders produce: token-level traces, reported chain breaks, and the session's trajectory."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class TrajectoryStatus(StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"  # the harness timed out or crashed: built from what was captured
    UNTRAINABLE = "untrainable"  # an aborted completion, or calls from more than one policy version


@dataclass(frozen=True)
class Span:
    """Where one completion's sampled tokens sit in a trace's response (``[start, end)``)."""

    completion_id: int
    start: int
    end: int


@dataclass
class Trace:
    """One training sequence: prompt, then response tokens with a loss mask (1 = sampled by the model)."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    response_logprobs: list[float] | None
    finish_reason: str | None
    spans: list[Span]
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)
    response_messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    system_hash: str = ""
    label: str = "main"  # "main" for the agent's own context; "side" for title, memory, sub-agent calls
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_ids(self) -> list[int]:
        return [span.completion_id for span in self.spans]

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def num_turns(self) -> int:
        return len(self.spans)


@dataclass(frozen=True)
class ChainBreak:
    """A completion that continued a context whose history had been rewritten; it starts a new trace."""

    completion_id: int
    broken_trace: int  # index of the trace it could not extend
    position: int  # first token position where the rewritten history differs
    cause: str
    expected: str  # decoded text around the position, as the model saw it before
    found: str  # decoded text around the position, as the new prompt has it


@dataclass
class Trajectory:
    """A session's traces, with how they were built and whether they can be trained on."""

    session_id: str
    rollout_id: str
    builder: str
    status: TrajectoryStatus
    traces: list[Trace]
    breaks: list[ChainBreak] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why the status is not "complete"
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def trainable(self) -> bool:
        return self.status is not TrajectoryStatus.UNTRAINABLE
