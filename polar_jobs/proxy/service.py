"""One proxied call, start to finish: authorize, normalize, serve upstream, capture, convert back.

No Flask here: ``ProxyService.handle`` takes the path, headers and raw body and returns a
``ProxyOutcome`` (JSON or SSE frames). Bad input is answered before anything is written; every
call that reaches the upstream is recorded exactly once, failed or not, before the answer is sent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from polar_jobs import jsonio
from polar_jobs.proxy.common import Normalized, finalize, prepare
from polar_jobs.proxy.context_window import clamp_max_tokens
from polar_jobs.proxy.detection import COUNT_TOKENS, UNSUPPORTED, detect
from polar_jobs.proxy.errors import ProxyError, bad_request
from polar_jobs.proxy.providers import PROVIDERS
from polar_jobs.proxy.reply import Reply, parse_upstream
from polar_jobs.proxy.upstream import UpstreamClient
from polar_jobs.store import ACCEPTS_MODEL_CALLS, CaptureInput, CaptureStore, SessionStore

log = logging.getLogger(__name__)


@dataclass
class ProxyOutcome:
    status: int
    provider: str
    body: dict[str, Any] | None = None
    events: Iterator[bytes] | None = None
    completion_id: int | None = None


@dataclass
class ProxyOptions:
    open_capture: bool = False
    default_max_tokens: int = 4096
    force_disable_thinking_for: tuple[str, ...] = ("qwen3.5",)
    allow_untokenized: bool = False


@dataclass
class _Call:
    """What is known about a call so far; becomes one captured row."""

    provider: str
    path: str
    raw: bytes
    received_at: float = field(default_factory=time.time)
    session_id: str | None = None
    policy_version: int | None = None
    normalized: Normalized | None = None
    chat: dict[str, Any] | None = None
    serialized: bytes | None = None  # ``chat`` exactly as sent upstream


class ProxyService:
    def __init__(self, sessions: SessionStore, captures: CaptureStore, upstream: UpstreamClient,
                 options: ProxyOptions | None = None):
        self.sessions = sessions
        self.captures = captures
        self.upstream = upstream
        self.options = options or ProxyOptions()

    def handle(self, path: str, headers: Mapping[str, str], raw: bytes, query: Mapping[str, str] | None = None
               ) -> ProxyOutcome:
        call = _Call(provider=detect(path, headers).provider, path=path, raw=raw)
        try:
            call.session_id, call.policy_version = self._authorize(headers, query or {})
            body = _parse_json(raw)
            detected = detect(path, headers, body)
            call.provider = detected.provider
            if detected.operation == UNSUPPORTED:
                raise ProxyError(404, f"{path.split('?')[0]} is not served by this proxy (it serves Anthropic "
                                      "Messages, OpenAI Chat Completions and Responses, and Gemini generateContent)")
            call.normalized = self._normalize(detected, body)
            if detected.operation == COUNT_TOKENS:
                return self._count_tokens(call)
            if call.session_id is None:  # open capture: an ad-hoc session only for a call that will be served
                session = self.sessions.open_adhoc(api_key(headers, query or {}))
                call.session_id = _admit(session.id, session.status)
                call.policy_version = session.policy_version
        except ProxyError as error:
            return self._error(call.provider, error)
        return self._serve(call)

    # -- before anything is written ------------------------------------------------------------
    def _authorize(self, headers: Mapping[str, str], query: Mapping[str, str]) -> tuple[str | None, int | None]:
        """(session id, policy version); no id for a new key in open capture mode (opened once the call is valid)."""
        key = api_key(headers, query)
        if not key:
            raise ProxyError(401, "missing API key: send the session key as x-api-key, "
                                  "Authorization: Bearer or x-goog-api-key")
        found = self.sessions.status_by_key(key)
        if found is None:
            if not self.options.open_capture:
                raise ProxyError(401, "invalid API key: no session has this key")
            return None, None
        session_id, status, policy_version = found
        return _admit(session_id, status), policy_version

    def _normalize(self, detected, body: dict[str, Any]) -> Normalized:
        module = PROVIDERS[detected.provider]
        try:
            normalized = module.to_chat(body, default_max_tokens=self.options.default_max_tokens,
                                        path_model=detected.path_model, path_stream=detected.path_stream)
            prepare(normalized)
            return normalized
        except ProxyError:
            raise
        except RecursionError:
            raise bad_request("the request is nested too deeply") from None
        except Exception as exc:  # a shape no check anticipated: still the caller's input, still a 400
            log.warning("unexpected %s request shape: %r", detected.provider, exc)
            raise bad_request(f"malformed request: {type(exc).__name__}: {exc}") from exc

    def _count_tokens(self, call: _Call) -> ProxyOutcome:
        """Anthropic ``count_tokens`` / Gemini ``countTokens``: the engine's exact count; nothing recorded."""
        info = self.upstream.model_info()
        force = any(tag in info.name.lower() for tag in self.options.force_disable_thinking_for)
        count = self.upstream.count_prompt_tokens(finalize(call.normalized, info.name, force))
        body = {"totalTokens": count} if call.provider == "gemini" else {"input_tokens": count}
        return ProxyOutcome(200, call.provider, body=body)

    # -- from here on every call is recorded ---------------------------------------------------
    def _serve(self, call: _Call) -> ProxyOutcome:
        normalized = call.normalized
        upstream_response: dict[str, Any] | None = None
        started = finished = None
        try:
            info = self.upstream.model_info()
            force = any(tag in info.name.lower() for tag in self.options.force_disable_thinking_for)
            call.chat = finalize(normalized, info.name, force)
            call.serialized = _dumps(call.chat)
            if clamp_max_tokens(call.chat, len(call.serialized), info.max_model_len,
                                self.upstream.count_prompt_tokens) is not None:
                call.serialized = _dumps(call.chat)
            started = time.time()
            upstream_response = self.upstream.chat(call.serialized)
            finished = time.time()
            reply = parse_upstream(upstream_response)
            if not reply.tokenized and not self.options.allow_untokenized:
                raise ProxyError(502, "the upstream returned no token ids (prompt_token_ids / token_ids): serve "
                                      "with vLLM >= 0.10.2, or run the proxy with --allow-untokenized")
        except ProxyError as error:
            self._record_failure(call, error, upstream_response, started, finished or time.time())
            return self._error(call.provider, error)
        completion_id = self._record(call, reply, upstream_response, started, finished)
        module = PROVIDERS[call.provider]
        if normalized.stream:
            return ProxyOutcome(200, call.provider, events=module.to_events(reply, normalized),
                                completion_id=completion_id)
        return ProxyOutcome(200, call.provider, body=module.to_response(reply, normalized), completion_id=completion_id)

    def _capture(self, call: _Call, **fields: Any) -> CaptureInput:
        normalized = call.normalized
        return CaptureInput(session_id=call.session_id, provider=call.provider, path=call.path, raw_request=call.raw,
                            chat_request_json=call.serialized, stream=normalized.stream,
                            requested_model=normalized.requested_model,
                            served_model=(call.chat or {}).get("model"), received_at=call.received_at,
                            policy_version=call.policy_version,
                            responded_at=time.time(), **fields)

    def _record(self, call: _Call, reply: Reply, upstream_response: dict[str, Any], started: float,
                finished: float) -> int:
        return self.captures.record(self._capture(
            call, upstream_response=upstream_response, prompt_ids=reply.prompt_ids,
            response_ids=reply.response_ids, logprobs=reply.logprobs, finish_reason=reply.finish_reason,
            stop_reason=None if reply.stop_reason is None else str(reply.stop_reason),
            prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
            trainable=reply.tokenized, upstream_started_at=started, upstream_finished_at=finished))

    def _record_failure(self, call: _Call, error: ProxyError, upstream_response: dict[str, Any] | None,
                        started: float | None, finished: float) -> None:
        status = 503 if error.retryable else error.status
        self.captures.record(self._capture(
            call, upstream_response=upstream_response if isinstance(upstream_response, dict) else None,
            status="failed", http_status=status, error=error.message, trainable=False,
            upstream_started_at=started, upstream_finished_at=finished))

    @staticmethod
    def _error(provider: str, error: ProxyError) -> ProxyOutcome:
        status, body = PROVIDERS[provider].error_response(error)
        return ProxyOutcome(status, provider, body=body)


def _admit(session_id: str, status: str) -> str:
    if status not in ACCEPTS_MODEL_CALLS:
        raise ProxyError(403, f"session {session_id} is {status} and accepts no more model calls")
    return session_id


def api_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The session key from x-api-key, Authorization: Bearer, x-goog-api-key or Gemini's ``?key=``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    authorization = lowered.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return lowered.get("x-api-key") or lowered.get("x-goog-api-key") or query.get("key") or None


def _parse_json(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise bad_request("the request body is empty; a JSON object is required")
    try:
        body = jsonio.loads(raw)
    except jsonio.JSONDecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {_explain(exc, raw)}") from None
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {type(body).__name__}")
    return body


def _explain(error: jsonio.JSONDecodeError, raw: bytes) -> str:
    """The parser's message, with the two cases it words vaguely named plainly."""
    if "depth limit" in str(error):
        return "it is nested too deeply (more than 1024 levels)"
    at = raw[error.pos:error.pos + 9].lstrip(b"-")
    for constant in (b"NaN", b"Infinity"):
        if at.startswith(constant):
            return f"{constant.decode()} is not a JSON value (RFC 8259), at character {error.pos}"
    return str(error)


def _dumps(chat: dict[str, Any]) -> bytes:
    return jsonio.dumps(chat)
