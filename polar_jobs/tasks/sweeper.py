"""The safety net: close sessions that outlived their budget (a worker died), finish lost groups."""

from __future__ import annotations

import time
from typing import Callable

from polar_jobs import jsonio
from polar_jobs.store.models import SessionStatus as S
from polar_jobs.tasks.pipeline import Pipeline


def sweep(pipeline: Pipeline, *, postrun: Callable[[str], None], finalize: Callable[[str], None],
          now: float | None = None) -> dict[str, int]:
    """One pass; ``postrun``/``finalize`` enqueue those stages. Returns what it did, by kind."""
    now = now or time.time()
    grace = pipeline.settings.sweep_grace_s
    done = {"timed_out": 0, "to_postrun": 0, "postrun_again": 0, "finalized": 0}
    long_overdue = {session_id for session_id, _ in pipeline.jobs.overdue(now - 2 * grace)}
    for session_id, status in pipeline.jobs.overdue(now - grace):
        if status in (S.PENDING.value, S.INIT.value, S.READY.value):
            pipeline.runtime(session_id).stop()
            finished = pipeline.jobs.finish(session_id, S.TIMEOUT, result={"reason": "budget exceeded before running"})
            done["timed_out"] += finished is not None
            if finished and finished.group_complete:
                finalize(finished.task_id)
        elif status == S.RUNNING.value:
            lost = {"harness": {"exit_code": None, "timed_out": True,
                                "error": "the session outlived its budget: its running worker was lost"}}
            if pipeline.jobs.transition(session_id, S.RUNNING, S.POSTRUN, result_json=jsonio.dumps(lost).decode()):
                pipeline.runtime(session_id).stop()
                postrun(session_id)
                done["to_postrun"] += 1
        elif status == S.POSTRUN.value and session_id in long_overdue:
            postrun(session_id)  # a lost postrun message: run it again (it ends the session only once)
            done["postrun_again"] += 1
    for task_id in pipeline.jobs.open_tasks_complete():
        finalize(task_id)
        done["finalized"] += 1
    return done
