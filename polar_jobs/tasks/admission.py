"""Admission: release pending sessions to init while the READY buffer has room (the DB decides)."""

from __future__ import annotations

from typing import Callable

from polar_jobs.tasks.pipeline import Pipeline

LOCK_NAME = "polar:admission"


def admit(pipeline: Pipeline, start: Callable[[str], None]) -> list[str]:
    """Claim what fits under ``ready_cap`` and start each claimed session's stage chain.

    A Redis lock serializes admitters across processes, so the count and the claims cannot interleave;
    a session is started only after its claim is committed.
    """
    with pipeline.redis.lock(LOCK_NAME, timeout=30, blocking_timeout=10):
        claimed = pipeline.jobs.claim_for_init(pipeline.settings.ready_cap)
    for session_id in claimed:
        start(session_id)
    return claimed
