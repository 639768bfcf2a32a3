"""JSON views of tasks, sessions and groups, and the Prometheus text of /metrics (pure reads)."""

from __future__ import annotations

import zlib
from typing import Any

from sqlmodel import Session as DbSession
from sqlmodel import col, select

from polar_jobs import jsonio
from polar_jobs.store.jobs import JobStore
from polar_jobs.store.models import Session, SessionStatus, Task


def session_view(session: Session) -> dict[str, Any]:
    return {"session_id": session.id, "task_id": session.task_id, "sample_index": session.sample_index,
            "status": session.status, "reward": session.reward, "deadline_at": session.deadline_at,
            "cancel_requested": session.cancel_requested, "created_at": session.created_at,
            "updated_at": session.updated_at,
            "result": jsonio.loads(session.result_json) if session.result_json else None}


def task_view(jobs: JobStore, task: Task) -> dict[str, Any]:
    sessions = jobs.sessions_of(task.id)
    counts: dict[str, int] = {}
    for session in sessions:
        counts[session.status] = counts.get(session.status, 0) + 1
    return {"task_id": task.id, "status": task.status, "cancelled": task.cancelled, "num_samples": task.num_samples,
            "done": task.n_done, "counts": counts, "created_at": task.created_at, "finalized_at": task.finalized_at,
            "callback_status": task.callback_status,
            "group": jsonio.loads(task.group_json) if task.group_json else None,
            "sessions": [{"session_id": s.id, "sample_index": s.sample_index, "status": s.status, "reward": s.reward}
                         for s in sessions]}


def task_list(jobs: JobStore, limit: int) -> list[dict[str, Any]]:
    with DbSession(jobs.engine) as db:
        tasks = db.exec(select(Task).order_by(col(Task.created_at).desc()).limit(limit)).all()
    return [{"task_id": t.id, "status": t.status, "num_samples": t.num_samples, "done": t.n_done,
             "created_at": t.created_at} for t in tasks]


def group_view(jobs: JobStore, cursor: int, task: Task, with_traces: bool) -> dict[str, Any]:
    group = jsonio.loads(task.group_json)
    group["cursor"] = cursor
    group["finalized_at"] = task.finalized_at
    if with_traces:
        for sample in group["samples"]:
            stored = jobs.trajectory_payload(sample["session_id"])
            trajectory = jsonio.loads(zlib.decompress(stored.payload)) if stored else None
            sample["rollout_id"] = trajectory["rollout_id"] if trajectory else sample["session_id"]
            sample["traces"] = [{key: trace[key] for key in ("prompt_ids", "response_ids", "loss_mask",
                                                             "response_logprobs", "finish_reason", "label")}
                                for trace in (trajectory["traces"] if trajectory else [])]
    return group


def prometheus(jobs: JobStore, extra: dict[str, float]) -> str:
    lines = ["# HELP polar_sessions Sessions by state.", "# TYPE polar_sessions gauge"]
    counts = jobs.status_counts()
    for state in SessionStatus:
        lines.append(f'polar_sessions{{state="{state.value}"}} {counts.get(state.value, 0)}')
    with DbSession(jobs.engine) as db:
        open_tasks = len(db.exec(select(Task.id).where(Task.status == "open")).all())
        finalized = len(db.exec(select(Task.id).where(Task.status == "finalized")).all())
    lines += ["# HELP polar_groups Groups by state.", "# TYPE polar_groups gauge",
              f'polar_groups{{state="open"}} {open_tasks}', f'polar_groups{{state="finalized"}} {finalized}']
    for name, value in extra.items():
        lines += [f"# TYPE {name} gauge", f"{name} {value}"]
    return "\n".join(lines) + "\n"
