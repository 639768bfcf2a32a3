"""The proxy's Flask app (the only Flask in ``polar_jobs.proxy``): routes in, ``ProxyService`` out."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, request, stream_with_context
from werkzeug.exceptions import HTTPException

from polar_jobs import jsonio
from polar_jobs.proxy.detection import provider_hint
from polar_jobs.proxy.errors import ProxyError
from polar_jobs.proxy.providers import PROVIDERS
from polar_jobs.proxy.service import ProxyOptions, ProxyService
from polar_jobs.proxy.upstream import UpstreamClient
from polar_jobs.settings import Settings
from polar_jobs.store import CaptureStore, SessionStore, make_engine

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024 * 1024


def build_service(settings: Settings) -> ProxyService:
    engine = make_engine(settings.resolved_database_url())
    upstream = UpstreamClient(settings.upstream_url, served_model=settings.served_model,
                              connect_timeout=settings.upstream_connect_timeout_s,
                              read_timeout=settings.upstream_timeout_s)
    options = ProxyOptions(open_capture=settings.open_capture, default_max_tokens=settings.default_max_tokens,
                           force_disable_thinking_for=settings.force_disable_thinking_for,
                           allow_untokenized=settings.allow_untokenized)
    return ProxyService(SessionStore(engine), CaptureStore(engine), upstream, options)


def create_proxy_app(settings: Settings | None = None, service: ProxyService | None = None) -> Flask:
    """App factory; pass a ``service`` to share stores with a test or another app."""
    app = Flask("polar_jobs.proxy")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    proxy = service or build_service(settings or Settings())
    app.extensions["polar_proxy"] = proxy

    @app.get("/healthz")
    def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.route("/", methods=["GET", "HEAD"])
    def root() -> Response:  # Claude Code sends a HEAD / preflight
        return _json(200, {"service": "polar-jobs proxy"})

    @app.get("/v1/models")
    @app.get("/models")
    def models() -> Response:
        try:
            info = proxy.upstream.model_info()
        except ProxyError as error:
            return _error(provider_hint(request.path, request.headers), error)
        entry = {"id": info.name, "object": "model", "type": "model", "created": 0, "created_at": "1970-01-01T00:00:00Z",
                 "owned_by": "polar-jobs", "display_name": info.name, "max_model_len": info.max_model_len}
        return _json(200, {"object": "list", "data": [entry], "has_more": False, "first_id": info.name,
                           "last_id": info.name})

    @app.get("/v1beta/models")
    def gemini_models() -> Response:
        try:
            info = proxy.upstream.model_info()
        except ProxyError as error:
            return _error("gemini", error)
        return _json(200, {"models": [{"name": f"models/{info.name}", "displayName": info.name,
                                       "inputTokenLimit": info.max_model_len,
                                       "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]}]})

    @app.post("/<path:path>")
    def model_call(path: str) -> Response:
        outcome = proxy.handle("/" + path, request.headers, request.get_data(cache=False), request.args)
        if outcome.events is not None:
            return Response(stream_with_context(outcome.events), status=outcome.status, mimetype="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return _json(outcome.status, outcome.body)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        provider = provider_hint(request.path, request.headers)
        return _error(provider, ProxyError(exc.code or 500, f"{exc.name}: {request.method} {request.path}"))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("proxy failure on %s", request.path)
        provider = provider_hint(request.path, request.headers)
        return _error(provider, ProxyError(500, f"internal proxy error: {type(exc).__name__}: {exc}"))

    return app


def _error(provider: str, error: ProxyError) -> Response:
    status, body = PROVIDERS[provider].error_response(error)
    return _json(status, body)


def _json(status: int, body: Any) -> Response:
    return Response(jsonio.dumps(body), status=status, mimetype="application/json")
