"""The intake API (Flask app factory): tasks in, sessions and finished groups out.

Routes are thin: validation with the ``TaskRequest`` model, state from ``JobStore``, and one seam,
``start``, that admission uses to begin sessions (Celery in production, anything in a test).
"""

from __future__ import annotations

import hmac
import zlib
from typing import Any, Callable

from flask import Flask, Response, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from polar_jobs import jsonio
from polar_jobs.intake import views
from polar_jobs.schemas import TaskRequest
from polar_jobs.settings import Settings
from polar_jobs.store import CaptureStore
from polar_jobs.store.jobs import IdempotencyConflict, JobStore
from polar_jobs.store.models import SessionStatus

MAX_GROUPS_PER_PAGE = 100


def create_intake_app(settings: Settings, jobs: JobStore, captures: CaptureStore,
                      admit: Callable[[], Any], metrics_extra: Callable[[], dict[str, float]] | None = None,
                      finalize: Callable[[str], Any] | None = None) -> Flask:
    """``admit`` releases pending sessions (after a submit or cancel); ``finalize`` closes a group whose
    last sessions the API itself ended (a cancel); ``metrics_extra`` adds gauges."""
    app = Flask("polar_jobs.intake")
    app.config["MAX_CONTENT_LENGTH"] = 16 * 1024 * 1024

    @app.before_request
    def authenticate() -> Response | None:
        if settings.api_token and request.path not in ("/healthz", "/metrics"):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {settings.api_token}".encode()):
                return _json(401, {"error": "missing or wrong bearer token"})
        return None

    @app.post("/v1/tasks")
    def submit() -> Response:
        try:
            body = jsonio.loads(request.get_data(cache=False) or b"null")
        except jsonio.JSONDecodeError as exc:
            return _json(400, {"error": f"the request body is not valid JSON: {exc}"})
        if not isinstance(body, dict):
            return _json(422, {"error": "invalid task request", "fields": [
                {"field": "(body)", "message": "a JSON object is required"}]})
        fields: list[dict[str, str]] = []
        task_request: TaskRequest | None = None
        try:
            task_request = TaskRequest.model_validate(body)
        except ValidationError as exc:
            fields = [{"field": ".".join(map(str, error["loc"])) or "(body)", "message": error["msg"]}
                      for error in exc.errors()]
        # the budget limit is checked even when other fields are invalid: a 422 names every invalid field
        timeout = task_request.timeout_seconds if task_request else body.get("timeout_seconds")
        if _exceeds(timeout, settings.max_session_seconds) and not any(
                f["field"] == "timeout_seconds" for f in fields):
            fields.append({"field": "timeout_seconds", "message": f"must be at most {settings.max_session_seconds:.0f} "
                                                                 "(POLAR_MAX_SESSION_SECONDS)"})
        if fields or task_request is None:
            return _json(422, {"error": "invalid task request", "fields": fields})
        try:
            task, created = jobs.create_task(task_request, request.headers.get("Idempotency-Key"))
        except IdempotencyConflict as exc:
            return _json(409, {"error": str(exc)})
        if created:
            admit()
        sessions = jobs.sessions_of(task.id)
        return _json(202 if created else 200, {"task_id": task.id, "created": created,
                                               "session_ids": [s.id for s in sessions]})

    @app.get("/v1/tasks")
    def list_tasks() -> Response:
        try:
            limit = int(request.args.get("limit", 50))
        except ValueError:
            return _json(400, {"error": "limit must be an integer"})
        return _json(200, {"tasks": views.task_list(jobs, limit=max(1, min(limit, 500)))})

    @app.get("/v1/tasks/<task_id>")
    def get_task(task_id: str) -> Response:
        task = jobs.task(task_id)
        if task is None:
            return _json(404, {"error": f"no task {task_id}"})
        return _json(200, views.task_view(jobs, task))

    @app.delete("/v1/tasks/<task_id>")
    def cancel_task(task_id: str) -> Response:
        if jobs.task(task_id) is None:
            return _json(404, {"error": f"no task {task_id}"})
        pending = jobs.request_cancel(task_id)
        for session_id in pending:
            finished = jobs.finish(session_id, SessionStatus.CANCELLED, result={"reason": "cancelled before it started"})
            if finished is not None and finished.group_complete and finalize is not None:
                finalize(task_id)
        admit()
        return _json(202, views.task_view(jobs, jobs.task(task_id)))

    @app.get("/v1/sessions/<session_id>")
    def get_session(session_id: str) -> Response:
        session = jobs.session(session_id)
        if session is None or session.task_id is None:
            return _json(404, {"error": f"no session {session_id}"})
        return _json(200, views.session_view(session))

    @app.get("/v1/sessions/<session_id>/completions")
    def get_completions(session_id: str) -> Response:
        if jobs.session(session_id) is None:
            return _json(404, {"error": f"no session {session_id}"})
        return _json(200, {"completions": [c.summary() for c in captures.load_session(session_id, with_payloads=False)]})

    @app.get("/v1/sessions/<session_id>/trajectory")
    def get_trajectory(session_id: str) -> Response:
        stored = jobs.trajectory_payload(session_id)
        if stored is None:
            return _json(404, {"error": f"session {session_id} has no trajectory yet"})
        return Response(zlib.decompress(stored.payload), status=200, mimetype="application/json")

    @app.get("/v1/groups")
    def get_groups() -> Response:
        try:
            after = int(request.args.get("after", 0))
            limit = int(request.args.get("limit", 10))
        except ValueError:
            return _json(400, {"error": "after and limit must be integers"})
        if after < 0 or not 1 <= limit <= MAX_GROUPS_PER_PAGE:
            return _json(400, {"error": f"after must be >= 0 and limit between 1 and {MAX_GROUPS_PER_PAGE}"})
        with_traces = request.args.get("traces", "1") not in ("0", "false")
        groups = [views.group_view(jobs, cursor, task, with_traces) for cursor, task in jobs.groups_after(after, limit)]
        return _json(200, {"groups": groups, "next": groups[-1]["cursor"] if groups else after})

    @app.get("/healthz")
    def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(views.prometheus(jobs, metrics_extra() if metrics_extra else {}),
                        mimetype="text/plain; version=0.0.4")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _json(exc.code or 500, {"error": exc.description or exc.name})

    return app


def _exceeds(value: Any, maximum: float) -> bool:
    try:
        return float(value) > maximum
    except (TypeError, ValueError):
        return False


def _json(status: int, body: Any) -> Response:
    return Response(jsonio.dumps(body), status=status, mimetype="application/json")
