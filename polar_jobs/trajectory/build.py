"""Build a session's trajectory: choose a builder, check every trace, decide trainability."""

from __future__ import annotations

from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory import calls, invariants
from polar_jobs.trajectory.per_request import build_per_request
from polar_jobs.trajectory.prefix_merge import build_prefix_merge
from polar_jobs.trajectory.rerender import Decoder
from polar_jobs.trajectory.trace import Trajectory, TrajectoryStatus

BUILDERS = ("prefix_merge", "per_request")
PARTIAL_SESSION_STATES = frozenset({"timeout", "failed", "cancelled"})


def build_trajectory(session_id: str, completions: list[CapturedCompletion], *, builder: str = "prefix_merge",
                     session_status: str | None = None, eot: int | None = None, decode: Decoder | None = None,
                     rollout_id: str | None = None) -> Trajectory:
    """Traces of one session, each checked against its captures (``InvariantViolation`` if not faithful)."""
    if builder not in BUILDERS:
        raise ValueError(f"unknown builder {builder!r}; expected one of {', '.join(BUILDERS)}")
    ordered = calls.usable(completions)
    eot = eot if eot is not None else calls.infer_eot(ordered)
    if builder == "per_request":
        traces, breaks = build_per_request(ordered, eot), []
        stats = {"completions": len(completions), "usable": len(ordered), "traces": len(traces)}
    else:
        merged = build_prefix_merge(completions, eot, decode)
        traces, breaks, stats = merged.traces, merged.breaks, merged.stats
    by_id = {completion.id: completion for completion in ordered}
    for trace in traces:
        invariants.check(trace, by_id, eot, decode)
    stats["failed_calls"] = sum(1 for c in completions if c.status != "ok")
    status, reasons = _status(completions, session_status)
    return Trajectory(session_id=session_id, rollout_id=rollout_id or session_id, builder=builder, status=status,
                      traces=traces, breaks=breaks, reasons=reasons, stats=stats)


def _status(completions: list[CapturedCompletion], session_status: str | None) -> tuple[TrajectoryStatus, list[str]]:
    untrainable = []
    aborted = [c.id for c in completions if c.finish_reason == "abort"]
    if aborted:
        untrainable.append(f"aborted completions {aborted} (cut off by a weight update)")
    versions = sorted({c.policy_version for c in completions if c.status == "ok" and c.policy_version is not None})
    if len(versions) > 1:
        untrainable.append(f"calls span policy versions {versions}")
    untokenized = [c.id for c in completions if c.status == "ok" and not c.trainable]
    if untokenized:
        untrainable.append(f"completions {untokenized} were served without token ids")
    if untrainable:
        return TrajectoryStatus.UNTRAINABLE, untrainable
    if session_status in PARTIAL_SESSION_STATES:
        return TrajectoryStatus.PARTIAL, [f"the session ended {session_status}: built from the calls captured"]
    return TrajectoryStatus.COMPLETE, []
