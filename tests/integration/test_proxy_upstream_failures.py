"""Upstream failures over real HTTP: each API's retryable / pass-through errors, and every failure recorded.

A 5xx, a refused connection or a timeout from the engine is the provider's "overloaded, try again"
answer (Anthropic 529 ``overloaded_error``, OpenAI 503, Gemini 503 ``UNAVAILABLE``); an engine 4xx is
passed through in the provider's shape; a prompt that does not fit the context is OpenAI's
``context_length_exceeded``. Every call that got as far as the upstream is stored as a failed capture.
"""

from __future__ import annotations

import socket
import time
import uuid

import anthropic
import openai
import pytest
import requests
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from polar_jobs.proxy.app import create_proxy_app
from polar_jobs.proxy.service import ProxyOptions, ProxyService
from polar_jobs.proxy.upstream import UpstreamClient
from polar_jobs.sim import create_sim_app
from polar_jobs.store import CaptureStore, SessionStore, make_engine
from tests.conftest import SIM_MODEL, ProxyHarness, build_proxy
from tests.servers import ServerThread

pytestmark = pytest.mark.integration

ANTHROPIC, CHAT, RESPONSES, GEMINI = "anthropic", "openai_chat", "responses", "gemini"
APIS = (ANTHROPIC, CHAT, RESPONSES, GEMINI)
PATHS = {
    ANTHROPIC: "/v1/messages",
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    GEMINI: "/v1beta/models/gemini-2.5-pro:generateContent",
}
SMALL_CONTEXT = 256
# The retryable answer each API's clients back off and retry on.
RETRYABLE = {ANTHROPIC: 529, CHAT: 503, RESPONSES: 503, GEMINI: 503}
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 422: "INVALID_ARGUMENT", 503: "UNAVAILABLE"}


# -- helpers ----------------------------------------------------------------------------------
def request_body(api: str, text: str, max_tokens: int | None = None) -> dict:
    if api == ANTHROPIC:
        return {"model": "claude-test", "max_tokens": max_tokens or 64, "messages": [{"role": "user", "content": text}]}
    if api == CHAT:
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": text}]}
        if max_tokens:
            body["max_tokens"] = max_tokens
        return body
    if api == RESPONSES:
        body = {"model": "gpt-5-codex", "instructions": "Be brief.", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}
        if max_tokens:
            body["max_output_tokens"] = max_tokens
        return body
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if max_tokens:
        body["generationConfig"] = {"maxOutputTokens": max_tokens}
    return body


def headers_for(api: str, key: str) -> dict[str, str]:
    if api == ANTHROPIC:
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if api == GEMINI:
        return {"x-goog-api-key": key}
    return {"Authorization": f"Bearer {key}"}


def call(harness: ProxyHarness, api: str, text: str, max_tokens: int | None = None,
         key: str | None = None) -> requests.Response:
    return requests.post(harness.url + PATHS[api], json=request_body(api, text, max_tokens),
                         headers=headers_for(api, key), timeout=60)


def error_of(api: str, status: int, body: dict) -> dict:
    """Check the provider's error envelope exactly; returns a flat {type, message, code, param} view."""
    if api == ANTHROPIC:
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        return {"type": body["error"]["type"], "message": body["error"]["message"]}
    if api == GEMINI:
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}, body
        assert body["error"]["code"] == status, body
        return {"type": body["error"]["status"], "message": body["error"]["message"]}
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return dict(body["error"])


def only_capture(harness: ProxyHarness, session_id: str):
    captured = harness.captures(session_id)
    assert len(captured) == 1, [c.summary() for c in captured]
    return captured[0]


def assert_retryable(api: str, response: requests.Response) -> dict:
    assert response.status_code == RETRYABLE[api], response.text
    error = error_of(api, response.status_code, response.json())
    if api == ANTHROPIC:
        assert error["type"] == "overloaded_error"
    elif api == GEMINI:
        assert error["type"] == "UNAVAILABLE"
    else:
        assert error["type"] not in ("invalid_request_error", "authentication_error"), error
    return error


def assert_failed_capture(harness: ProxyHarness, session_id: str, api: str, http_status: int, needle: str):
    row = only_capture(harness, session_id)
    assert row.status == "failed" and row.http_status == http_status, row.summary()
    assert row.provider == api and row.trainable is False
    assert row.error and needle.lower() in row.error.lower(), row.error
    assert row.raw_request  # the harness's own bytes are kept even for a failure
    return row


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- extra servers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A proxy in front of its own sim whose context is only SMALL_CONTEXT tokens."""
    upstream = ServerThread(create_sim_app(model=SIM_MODEL, max_model_len=SMALL_CONTEXT))
    service, server = build_proxy(tmp_path_factory, upstream.url)
    yield ProxyHarness(service, server)
    server.stop()
    upstream.stop()


@pytest.fixture(scope="module")
def dead(tmp_path_factory):
    """A proxy whose upstream port has nothing listening (connection refused)."""
    service, server = build_proxy(tmp_path_factory, f"http://127.0.0.1:{free_port()}")
    yield ProxyHarness(service, server)
    server.stop()


@pytest.fixture(scope="module")
def impatient(sim, tmp_path_factory):
    """A proxy in front of the shared sim that waits at most 1 s for an answer."""
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('db') / 'impatient.db'}")
    service = ProxyService(SessionStore(engine), CaptureStore(engine),
                           UpstreamClient(sim.url, read_timeout=1), ProxyOptions())
    server = ServerThread(create_proxy_app(service=service))
    yield ProxyHarness(service, server)
    server.stop()


# -- (a) engine 5xx → retryable ---------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
def test_upstream_500_is_the_retryable_error_and_is_recorded(proxy, sim, marker, api):
    session_id, key = proxy.new_session()
    sim.rule({"kind": "error", "status": 500, "message": f"boom {marker}"}, contains=marker)
    response = call(proxy, api, f"hello {marker}", key=key)
    error = assert_retryable(api, response)
    assert f"boom {marker}" in error["message"]
    row = assert_failed_capture(proxy, session_id, api, 503, f"boom {marker}")
    assert row.chat_request is not None and row.chat_request["model"] == SIM_MODEL  # it did reach the upstream
    assert row.response_ids == [] and row.prompt_ids == []


# -- (b) engine 4xx → passed through ----------------------------------------------------------
@pytest.mark.parametrize("status", [400, 422])
@pytest.mark.parametrize("api", APIS)
def test_upstream_4xx_passes_through_in_the_provider_shape(proxy, sim, marker, api, status):
    session_id, key = proxy.new_session()
    sim.rule({"kind": "error", "status": status, "message": f"engine rejects {marker}", "type": "BadRequestError"},
             contains=marker)
    response = call(proxy, api, f"hello {marker}", key=key)
    assert response.status_code == status, response.text
    error = error_of(api, status, response.json())
    assert f"engine rejects {marker}" in error["message"]
    expected_type = {ANTHROPIC: "invalid_request_error", GEMINI: GOOGLE_STATUS[status]}.get(api, "invalid_request_error")
    assert error["type"] == expected_type
    if api in (CHAT, RESPONSES):
        assert error["code"] != "context_length_exceeded"
    assert_failed_capture(proxy, session_id, api, status, f"engine rejects {marker}")


# -- (c) context window -----------------------------------------------------------------------
def long_text(marker: str) -> str:
    return " ".join(f"word{i}" for i in range(600)) + f" {marker}"


@pytest.mark.parametrize("api,max_tokens", [(ANTHROPIC, 64), (CHAT, 64), (CHAT, None), (RESPONSES, 64),
                                            (RESPONSES, None), (GEMINI, 64)])
def test_prompt_longer_than_the_context_is_context_length_exceeded(small, marker, api, max_tokens):
    session_id, key = small.new_session()
    response = call(small, api, long_text(marker), max_tokens=max_tokens, key=key)
    assert response.status_code == 400, response.text
    error = error_of(api, 400, response.json())
    assert str(SMALL_CONTEXT) in error["message"] and "context length" in error["message"].lower()
    if api in (CHAT, RESPONSES):
        assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    elif api == ANTHROPIC:  # Claude Code compacts its context when it reads this phrase
        assert error["type"] == "invalid_request_error" and error["message"].startswith("prompt is too long")
    else:
        assert error["type"] == "INVALID_ARGUMENT"
    assert_failed_capture(small, session_id, api, 400, "context length")


@pytest.mark.parametrize("api", APIS)
def test_max_tokens_beyond_the_context_left_is_clamped(small, marker, api):
    session_id, key = small.new_session()
    response = call(small, api, f"hi {marker}", max_tokens=10_000, key=key)
    assert response.status_code == 200, response.text
    row = only_capture(small, session_id)
    assert row.status == "ok" and row.http_status == 200
    prompt_tokens = len(row.prompt_ids)
    assert 0 < prompt_tokens < SMALL_CONTEXT and row.prompt_tokens == prompt_tokens
    assert 1 <= row.chat_request["max_tokens"] <= SMALL_CONTEXT - prompt_tokens
    assert prompt_tokens + row.completion_tokens <= SMALL_CONTEXT


# -- (d) connection refused -------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
def test_refused_upstream_is_the_retryable_error_and_is_recorded(dead, marker, api):
    session_id, key = dead.new_session()
    response = call(dead, api, f"hello {marker}", key=key)
    error = assert_retryable(api, response)
    assert "unreachable" in error["message"]
    row = assert_failed_capture(dead, session_id, api, 503, "unreachable")
    assert row.upstream_response is None


# -- (e) timeout ------------------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
def test_upstream_timeout_is_the_retryable_error_and_is_recorded(impatient, sim, marker, api):
    session_id, key = impatient.new_session()
    sim.rule({"kind": "text", "text": "too late", "delay_ms": 3000}, contains=marker)
    started = time.monotonic()
    response = call(impatient, api, f"hello {marker}", key=key)
    elapsed = time.monotonic() - started
    error = assert_retryable(api, response)
    assert "did not answer" in error["message"]
    assert elapsed < 2.8, elapsed  # gave up at the 1 s read timeout, not when the engine finished
    assert_failed_capture(impatient, session_id, api, 503, "did not answer")


# -- (f) the official SDKs --------------------------------------------------------------------
def test_anthropic_sdk_sees_overloaded(proxy, sim, marker):
    session_id, key = proxy.new_session()
    sim.rule({"kind": "error", "status": 500, "message": f"boom {marker}"}, contains=marker)
    claude = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude.messages.create(model="claude-test", max_tokens=32, messages=[{"role": "user", "content": marker}])
    assert isinstance(caught.value, anthropic.InternalServerError)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert f"boom {marker}" in caught.value.message
    assert len(proxy.captures(session_id)) == 1


def test_openai_sdk_sees_server_error_for_chat_and_responses(proxy, sim, marker):
    session_id, key = proxy.new_session()
    sim.rule({"kind": "error", "status": 500, "message": f"boom {marker}"}, contains=marker)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.InternalServerError) as chat_error:
        client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": marker}])
    assert chat_error.value.status_code == 503
    with pytest.raises(openai.InternalServerError) as responses_error:
        client.responses.create(model="gpt-5-codex", input=f"hello {marker}")
    assert responses_error.value.status_code == 503
    assert [row.status for row in proxy.captures(session_id)] == ["failed", "failed"]


def test_openai_sdk_sees_context_length_exceeded(small, marker):
    session_id, key = small.new_session()
    client = openai.OpenAI(base_url=small.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-test", max_tokens=32,
                                       messages=[{"role": "user", "content": long_text(marker)}])
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert [row.status for row in small.captures(session_id)] == ["failed"]


def test_genai_sdk_sees_server_error(dead, marker):
    session_id, key = dead.new_session()
    options = types.HttpOptions(base_url=dead.url, retry_options=types.HttpRetryOptions(attempts=1))
    gemini = genai.Client(api_key=key, http_options=options)
    with pytest.raises(genai_errors.ServerError) as caught:
        gemini.models.generate_content(model="gemini-2.5-pro", contents=f"hello {marker}")
    assert caught.value.code == 503
    assert caught.value.status == "UNAVAILABLE"
    assert [row.status for row in dead.captures(session_id)] == ["failed"]


def test_genai_sdk_sees_server_error_for_an_engine_500(proxy, sim, marker):
    session_id, key = proxy.new_session()
    sim.rule({"kind": "error", "status": 500, "message": f"boom {marker}"}, contains=marker)
    options = types.HttpOptions(base_url=proxy.url, retry_options=types.HttpRetryOptions(attempts=1))
    gemini = genai.Client(api_key=key, http_options=options)
    with pytest.raises(genai_errors.ServerError) as caught:
        gemini.models.generate_content(model="gemini-2.5-pro", contents=f"hello {marker}")
    assert caught.value.code == 503
    assert f"boom {marker}" in caught.value.message
    assert len(proxy.captures(session_id)) == 1
