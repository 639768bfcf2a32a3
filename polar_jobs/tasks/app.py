"""The Celery app and the stage tasks: thin wrappers; the work lives in stages/groups/admission/sweeper.

Payloads are session and task ids. Each session runs as a chain ``init → running → postrun`` on
the queues of the same names; the chain starts when admission claims the session.
"""

from __future__ import annotations

import logging
import threading

import requests
from celery import Celery, Task, chain
from celery.exceptions import WorkerLostError
from celery.signals import task_failure, worker_init, worker_process_init

from polar_jobs.settings import Settings
from polar_jobs.store.models import SessionStatus as S
from polar_jobs.tasks import admission, groups, stages, sweeper
from polar_jobs.tasks.pipeline import Pipeline

log = logging.getLogger(__name__)

celery_app = Celery("polar_jobs")
celery_app.config_from_object("celeryconfig")
_pipeline: dict[str, Pipeline] = {}


def current() -> Pipeline:
    """This process's pipeline (created lazily, and again after a fork)."""
    if "p" not in _pipeline:
        _pipeline["p"] = Pipeline(Settings())
    return _pipeline["p"]


@worker_process_init.connect
def _fresh_after_fork(**_) -> None:
    _pipeline.clear()  # no database connection or Redis socket crosses a fork


@worker_init.connect
def _check_visibility_timeout(**_) -> None:
    settings = Settings()
    configured = celery_app.conf.broker_transport_options.get("visibility_timeout", 3600)
    if configured <= settings.max_session_seconds:
        raise RuntimeError(f"broker visibility timeout {configured} s must exceed the longest session budget "
                           f"({settings.max_session_seconds} s), or running sessions would be redelivered")


class _Stage(Task):
    """A stage that a lost worker (SIGKILL, hard time limit) did not finish: move the session on."""

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        session_id = args[0] if args else kwargs.get("session_id")
        pipeline = current()
        log.error("stage %s of session %s was lost: %r", self.name, session_id, exc)
        if self.name == "polar_jobs.running":
            lost = '{"harness": {"exit_code": null, "error": "the running worker was lost"}}'
            if pipeline.jobs.transition(session_id, S.RUNNING, S.POSTRUN, result_json=lost):
                postrun.delay(session_id)
        elif self.name == "polar_jobs.init":
            _after_finish(pipeline.jobs.finish(session_id, S.FAILED, result={"error": f"init lost: {exc!r}"}))
        elif self.name == "polar_jobs.postrun":
            _after_finish(pipeline.jobs.finish(session_id, S.FAILED, result={"error": f"postrun lost: {exc!r}"}))


@task_failure.connect
def _stage_worker_lost(sender=None, task_id=None, exception=None, args=None, kwargs=None, einfo=None, **_) -> None:
    """A SIGKILLed (OOM-killed) pool child: Celery's parent only marks the task failed and sends this signal,
    it does not call ``on_failure`` (it does for hard time limits), so the lost stage is handled here."""
    if isinstance(sender, _Stage) and isinstance(exception, WorkerLostError):
        sender.on_failure(exception, task_id, args or (), kwargs or {}, einfo)


def start_session(session_id: str) -> None:
    chain(init.si(session_id), running.si(session_id), postrun.si(session_id)).apply_async()


def _after_finish(finished) -> None:
    if finished is not None and finished.group_complete:
        finalize_group.apply_async((finished.task_id,), task_id=f"finalize:{finished.task_id}")


@celery_app.task(name="polar_jobs.admit")
def admit() -> list[str]:
    return admission.admit(current(), start_session)


@celery_app.task(name="polar_jobs.init", base=_Stage)
def init(session_id: str) -> str:
    outcome = stages.init_stage(current(), session_id)
    if outcome in ("failed", "cancelled"):
        _after_finish_session(session_id)
    return outcome


@celery_app.task(name="polar_jobs.running", base=_Stage)
def running(session_id: str) -> str:
    # admission (a READY slot just freed) runs beside the harness's start, not before it
    return stages.running_stage(current(), session_id, admit=lambda: threading.Thread(
        target=admission.admit, args=(current(), start_session), name="admit", daemon=True).start())


@celery_app.task(name="polar_jobs.postrun", base=_Stage)
def postrun(session_id: str) -> str:
    _after_finish(stages.postrun_stage(current(), session_id))
    return "done"


def _after_finish_session(session_id: str) -> None:
    """After init ended a session itself: finalize if it was the group's last, and admit the next."""
    pipeline = current()
    session = pipeline.jobs.session(session_id)
    task = pipeline.jobs.task(session.task_id) if session else None
    if task is not None and task.status == "open" and task.n_done >= task.num_samples:
        finalize_group.apply_async((task.id,), task_id=f"finalize:{task.id}")
    admission.admit(pipeline, start_session)


@celery_app.task(name="polar_jobs.finalize_group")
def finalize_group(task_id: str) -> int | None:
    pipeline = current()
    cursor = groups.finalize_group(pipeline, task_id)
    request = pipeline.jobs.request_of(task_id)
    if cursor is not None and request.callback_url:
        callback.delay(task_id, cursor)
    return cursor


@celery_app.task(name="polar_jobs.callback", bind=True, max_retries=8, autoretry_for=(requests.RequestException,),
                 retry_backoff=True, retry_backoff_max=300, retry_jitter=True)
def callback(self, task_id: str, cursor: int) -> int:
    pipeline = current()
    body, headers = groups.callback_request(pipeline, task_id, cursor)
    url = str(pipeline.jobs.request_of(task_id).callback_url)
    try:
        response = requests.post(url, data=body, headers=headers, timeout=30)
        if response.status_code >= 500 or response.status_code == 429:
            raise requests.HTTPError(f"callback answered {response.status_code}")
    except requests.RequestException:
        if self.request.retries >= self.max_retries:
            pipeline.jobs.set_callback_status(task_id, "failed")
        raise
    pipeline.jobs.set_callback_status(task_id, "delivered" if response.ok else f"rejected {response.status_code}")
    return response.status_code


@celery_app.task(name="polar_jobs.sweep")
def sweep() -> dict[str, int]:
    pipeline = current()
    done = sweeper.sweep(pipeline, postrun=lambda sid: postrun.delay(sid),
                         finalize=lambda tid: finalize_group.apply_async((tid,), task_id=f"finalize:{tid}"))
    admission.admit(pipeline, start_session)
    return done
