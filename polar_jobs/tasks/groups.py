"""Finishing a group: advantages over its samples, the record trainers poll, the signed callback."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from polar_jobs import jsonio
from polar_jobs.scoring.advantages import group_advantages
from polar_jobs.tasks.pipeline import Pipeline

SIGNATURE_HEADER = "X-Polar-Signature"
TIMESTAMP_HEADER = "X-Polar-Timestamp"


def group_record(pipeline: Pipeline, task_id: str) -> dict[str, Any]:
    """Rewards and advantages of every sample; samples without a reward (evaluation failed) get none."""
    task = pipeline.jobs.task(task_id)
    sessions = pipeline.jobs.sessions_of(task_id)
    scored = [s for s in sessions if s.reward is not None]
    method = pipeline.settings.advantage_method
    advantages: dict[str, float] = {}
    summary: dict[str, Any] = {"method": method, "no_signal": True, "mean": None, "std": None}
    if scored:
        group = group_advantages([s.reward for s in scored], method=method)
        advantages = {s.id: a for s, a in zip(scored, group.advantages)}
        summary = {"method": method, "no_signal": group.no_signal, "mean": group.mean, "std": group.std}
    samples = []
    for session in sessions:
        result = jsonio.loads(session.result_json) if session.result_json else {}
        samples.append({"session_id": session.id, "sample_index": session.sample_index, "status": session.status,
                        "reward": session.reward, "advantage": advantages.get(session.id),
                        "trajectory": result.get("trajectory"), "error": result.get("evaluation_error")
                        or result.get("postrun_error") or result.get("error")})
    return {"task_id": task_id, "mode": task.mode, "num_samples": task.num_samples, "advantage": summary,
            "samples": samples}


def finalize_group(pipeline: Pipeline, task_id: str) -> int | None:
    """Compute and store the group (once); its cursor, or None if it was already finalized."""
    task = pipeline.jobs.task(task_id)
    if task is None or task.status != "open":
        return None
    return pipeline.jobs.finalize(task_id, group_record(pipeline, task_id))


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 over ``timestamp.body`` (the timestamp stops replays)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, timestamp: str, body: bytes, signature: str, max_age_s: float = 300) -> bool:
    """What a callback receiver runs: constant-time compare, and a bounded clock skew."""
    try:
        fresh = abs(time.time() - float(timestamp)) <= max_age_s
    except ValueError:
        return False
    return fresh and hmac.compare_digest(sign(secret, timestamp, body), signature)


def callback_request(pipeline: Pipeline, task_id: str, cursor: int) -> tuple[bytes, dict[str, str]]:
    task = pipeline.jobs.task(task_id)
    body = jsonio.dumps({"cursor": cursor, **jsonio.loads(task.group_json)})
    timestamp = str(int(time.time()))
    return body, {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp,
                  SIGNATURE_HEADER: sign(pipeline.settings.callback_secret, timestamp, body)}
