"""Malformed and hostile requests over real HTTP: each API answers in its own error shape, writes nothing.

Every row is sent to the running proxy; the answer must carry the right HTTP status, exactly the
provider's error envelope and a message that names the problem, and afterwards the proxy must still
be healthy and the store (sessions, completions, blobs) unchanged.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from sqlalchemy import func, select

from polar_jobs.store.models import Blob, Completion, Session, SessionStatus
from tests.conftest import build_proxy
from tests.servers import ServerThread

pytestmark = pytest.mark.integration

ANTHROPIC, CHAT, RESPONSES, GEMINI = "anthropic", "openai_chat", "responses", "gemini"
PATHS = {
    ANTHROPIC: "/v1/messages",
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    GEMINI: "/v1beta/models/gemini-2.5-pro:generateContent",
}
# What each API's error envelope says for a status (from the providers' public error documentation).
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large"}
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}

# Minimal valid bodies, varied per row.
A_OK = {"model": "claude-test", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
C_OK = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
R_OK = {"model": "gpt-5-codex", "instructions": "be brief", "input": "hi"}
G_OK = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def with_(base: dict, **changes: Any) -> dict:
    body = json.loads(json.dumps(base))
    body.update(changes)
    return body


def without(base: dict, key: str) -> dict:
    return {k: v for k, v in base.items() if k != key}


def a_user(*blocks: dict) -> dict:
    return with_(A_OK, messages=[{"role": "user", "content": list(blocks)}])


def nested(depth: int) -> bytes:
    return b'{"model":"m","messages":' + b"[" * depth + b"]" * depth + b"}"


def deep_tool_schema(depth: int) -> bytes:
    """Parseable JSON, but far deeper than any real schema (recursive converters would overflow)."""
    schema = b'{"type":"object","properties":{"x":' * depth + b'{"type":"string"}' + b"}}" * depth
    return (b'{"model":"g","messages":[{"role":"user","content":"hi"}],'
            b'"tools":[{"type":"function","function":{"name":"f","parameters":' + schema + b"}}]}")


@dataclass
class Row:
    id: str
    api: str
    body: Any  # dict/list → JSON; bytes → sent verbatim
    status: int
    needle: str  # a distinctive, case-insensitive substring of the error message
    key: str = "valid"  # valid | none | unknown | closed (running → postrun) | done
    param: str | None = None  # OpenAI-format rows: the expected ``param``
    method: str = "POST"
    path: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.id


ROWS = [
    # -- Anthropic Messages ---------------------------------------------------------------------
    Row("a-not-json", ANTHROPIC, b'{"model": "claude", "messages": [', 400, "not valid JSON"),
    Row("a-empty-body", ANTHROPIC, b"", 400, "empty"),
    Row("a-json-array", ANTHROPIC, [A_OK], 400, "JSON object"),
    Row("a-missing-messages", ANTHROPIC, without(A_OK, "messages"), 400, "messages: field required"),
    Row("a-missing-model", ANTHROPIC, without(A_OK, "model"), 400, "model: field required"),
    Row("a-messages-string", ANTHROPIC, with_(A_OK, messages="hi"), 400, "messages: expected array"),
    Row("a-max-tokens-string", ANTHROPIC, with_(A_OK, max_tokens="10"), 400, "max_tokens: expected integer"),
    Row("a-max-tokens-zero", ANTHROPIC, with_(A_OK, max_tokens=0), 400, "max_tokens: must be at least 1"),
    Row("a-max-tokens-negative", ANTHROPIC, with_(A_OK, max_tokens=-5), 400, "max_tokens"),
    Row("a-temperature-7", ANTHROPIC, with_(A_OK, temperature=7), 400, "temperature"),
    Row("a-stream-yes", ANTHROPIC, with_(A_OK, stream="yes"), 400, "stream: expected boolean"),
    Row("a-content-number", ANTHROPIC, with_(A_OK, messages=[{"role": "user", "content": 42}]), 400,
        "messages.0.content"),
    Row("a-tool-result-no-id", ANTHROPIC, a_user({"type": "tool_result", "content": "ok"}), 400,
        "tool_use_id"),
    Row("a-image-unknown-source", ANTHROPIC,
        a_user({"type": "image", "source": {"type": "ftp", "url": "ftp://x/y.png"}}), 400, "source.type"),
    Row("a-unknown-role", ANTHROPIC, with_(A_OK, messages=[{"role": "wizard", "content": "hi"}]), 400, "role"),
    Row("a-unknown-block", ANTHROPIC, a_user({"type": "hologram", "text": "hi"}), 400, "hologram"),
    Row("a-tool-no-name", ANTHROPIC,
        with_(A_OK, tools=[{"description": "nameless", "input_schema": {"type": "object"}}]), 400, "tools.0.name"),
    Row("a-invalid-utf8", ANTHROPIC, b'{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"\xff\xfe"}]}',
        400, "not valid JSON"),
    Row("a-nan", ANTHROPIC, b'{"model":"c","max_tokens":5,"temperature":NaN,"messages":[{"role":"user","content":"x"}]}',
        400, "NaN is not a JSON value"),
    Row("a-deep-nesting", ANTHROPIC, nested(5000), 400, "nested too deeply"),
    Row("a-no-key", ANTHROPIC, A_OK, 401, "missing API key", key="none"),
    Row("a-unknown-key", ANTHROPIC, A_OK, 401, "invalid API key", key="unknown"),
    Row("a-closed-session", ANTHROPIC, A_OK, 403, "accepts no more model calls", key="closed"),
    Row("a-get-messages", ANTHROPIC, None, 405, "Method Not Allowed", method="GET"),

    # -- OpenAI Chat ----------------------------------------------------------------------------
    Row("c-not-json", CHAT, b"model=gpt&messages=hi", 400, "not valid JSON"),
    Row("c-empty-body", CHAT, b"   ", 400, "empty"),
    Row("c-json-array", CHAT, [], 400, "JSON object"),
    Row("c-missing-messages", CHAT, without(C_OK, "messages"), 400, "messages: field required", param="messages"),
    Row("c-missing-model", CHAT, without(C_OK, "model"), 400, "model: field required", param="model"),
    Row("c-messages-string", CHAT, with_(C_OK, messages="hi"), 400, "messages: expected array", param="messages"),
    Row("c-max-tokens-string", CHAT, with_(C_OK, max_tokens="10"), 400, "max_tokens", param="max_tokens"),
    Row("c-max-tokens-negative", CHAT, with_(C_OK, max_tokens=-1), 400, "max_tokens", param="max_tokens"),
    Row("c-temperature-7", CHAT, with_(C_OK, temperature=7), 400, "temperature", param="temperature"),
    Row("c-stream-yes", CHAT, with_(C_OK, stream="yes"), 400, "stream", param="stream"),
    Row("c-content-number", CHAT, with_(C_OK, messages=[{"role": "user", "content": 3.5}]), 400,
        "messages.0.content", param="messages.0.content"),
    Row("c-unknown-role", CHAT, with_(C_OK, messages=[{"role": "wizard", "content": "hi"}]), 400,
        "unknown role", param="messages.0.role"),
    Row("c-unknown-part", CHAT, with_(C_OK, messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]),
        400, "video", param="messages.0.content.0.type"),
    Row("c-tool-message-no-id", CHAT, with_(C_OK, messages=[{"role": "tool", "content": "ok"}]), 400,
        "tool_call_id", param="messages.0.tool_call_id"),
    Row("c-n-2", CHAT, with_(C_OK, n=2), 400, "n=1", param="n"),
    Row("c-audio-modality", CHAT, with_(C_OK, modalities=["text", "audio"]), 400, "audio"),
    Row("c-audio-param", CHAT, with_(C_OK, audio={"voice": "alloy", "format": "wav"}), 400, "audio"),
    Row("c-tool-no-name", CHAT, with_(C_OK, tools=[{"type": "function", "function": {"parameters": {}}}]), 400,
        "name", param="tools.0.function.name"),
    Row("c-deep-tool-schema", CHAT, deep_tool_schema(400), 400, "nested deeper than 64 levels",
        param="tools.0.function.parameters"),
    Row("c-infinity", CHAT, b'{"model":"g","max_tokens":Infinity,"messages":[{"role":"user","content":"x"}]}', 400,
        "Infinity is not a JSON value"),
    Row("c-embeddings-endpoint", CHAT, {"model": "text-embedding-3-small", "input": "hi"}, 404, "not served",
        path="/v1/embeddings"),
    Row("c-no-key", CHAT, C_OK, 401, "missing API key", key="none"),
    Row("c-unknown-key", CHAT, C_OK, 401, "invalid API key", key="unknown"),
    Row("c-closed-session", CHAT, C_OK, 403, "accepts no more model calls", key="closed"),

    # -- OpenAI Responses -----------------------------------------------------------------------
    Row("r-not-json", RESPONSES, b"{'model': 'single-quoted'}", 400, "not valid JSON"),
    Row("r-empty-body", RESPONSES, b"", 400, "empty"),
    Row("r-json-string", RESPONSES, "just a string", 400, "JSON object"),
    Row("r-missing-input", RESPONSES, without(R_OK, "input"), 400, "input: field required", param="input"),
    Row("r-missing-model", RESPONSES, without(R_OK, "model"), 400, "model: field required", param="model"),
    Row("r-input-number", RESPONSES, with_(R_OK, input=7), 400, "input: expected string or array", param="input"),
    Row("r-max-output-tokens-zero", RESPONSES, with_(R_OK, max_output_tokens=0), 400, "max_output_tokens",
        param="max_output_tokens"),
    Row("r-temperature-7", RESPONSES, with_(R_OK, temperature=7), 400, "temperature", param="temperature"),
    Row("r-stream-yes", RESPONSES, with_(R_OK, stream="yes"), 400, "stream", param="stream"),
    Row("r-previous-response-id", RESPONSES, with_(R_OK, previous_response_id="resp_123"), 400,
        "previous_response_id", param="previous_response_id"),
    Row("r-item-reference", RESPONSES, with_(R_OK, input=[{"type": "item_reference", "id": "msg_1"}]), 400,
        "item_reference"),
    Row("r-unknown-role", RESPONSES, with_(R_OK, input=[{"type": "message", "role": "wizard", "content": "x"}]),
        400, "unknown role", param="input.0.role"),
    Row("r-unknown-item", RESPONSES, with_(R_OK, input=[{"type": "telepathy", "content": "x"}]), 400, "telepathy",
        param="input.0.type"),
    Row("r-output-no-call-id", RESPONSES, with_(R_OK, input=[{"type": "function_call_output", "output": "ok"}]), 400,
        "call_id", param="input.0.call_id"),
    Row("r-content-number", RESPONSES, with_(R_OK, input=[{"type": "message", "role": "user", "content": 5}]), 400,
        "input.0.content", param="input.0.content"),
    Row("r-tool-no-name", RESPONSES, with_(R_OK, tools=[{"type": "function", "parameters": {"type": "object"}}]),
        400, "tools.0.name", param="tools.0.name"),
    Row("r-invalid-utf8", RESPONSES, b'{"model":"x","input":"\xc3\x28"}', 400, "not valid JSON"),
    Row("r-no-key", RESPONSES, R_OK, 401, "missing API key", key="none"),
    Row("r-unknown-key", RESPONSES, R_OK, 401, "invalid API key", key="unknown"),
    Row("r-closed-session", RESPONSES, R_OK, 403, "accepts no more model calls", key="closed"),

    # -- Gemini ---------------------------------------------------------------------------------
    Row("g-not-json", GEMINI, b"contents: hi", 400, "not valid JSON"),
    Row("g-empty-body", GEMINI, b"", 400, "empty"),
    Row("g-json-array", GEMINI, [G_OK], 400, "JSON object"),
    Row("g-missing-contents", GEMINI, {"generationConfig": {"temperature": 0.2}}, 400, "contents: field required"),
    Row("g-contents-string", GEMINI, {"contents": "hi"}, 400, "contents: expected array"),
    Row("g-parts-number", GEMINI, {"contents": [{"role": "user", "parts": 3}]}, 400, "contents.0.parts"),
    Row("g-max-output-tokens-string", GEMINI, with_(G_OK, generationConfig={"maxOutputTokens": "10"}), 400,
        "maxOutputTokens"),
    Row("g-max-output-tokens-zero", GEMINI, with_(G_OK, generationConfig={"maxOutputTokens": 0}), 400,
        "maxOutputTokens"),
    Row("g-candidate-count-2", GEMINI, with_(G_OK, generationConfig={"candidateCount": 2}), 400, "candidateCount"),
    Row("g-audio-modality", GEMINI, with_(G_OK, generationConfig={"responseModalities": ["AUDIO"]}), 400,
        "responseModalities"),
    Row("g-unknown-role", GEMINI, {"contents": [{"role": "wizard", "parts": [{"text": "hi"}]}]}, 400,
        "contents.0.role"),
    Row("g-unknown-part", GEMINI, {"contents": [{"role": "user", "parts": [{"hologram": {}}]}]}, 400,
        "unsupported part"),
    Row("g-function-response-no-name", GEMINI,
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"response": {"ok": True}}}]}]}, 400,
        "functionResponse.name"),
    Row("g-function-declaration-no-name", GEMINI,
        with_(G_OK, tools=[{"functionDeclarations": [{"description": "nameless"}]}]), 400,
        "functionDeclarations.0.name"),
    Row("g-text-number", GEMINI, {"contents": [{"role": "user", "parts": [{"text": 12}]}]}, 400,
        "contents.0.parts.0.text"),
    Row("g-nan", GEMINI, b'{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"topP":NaN}}',
        400, "NaN is not a JSON value"),
    Row("g-deep-nesting", GEMINI, b'{"contents":' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "nested too deeply"),
    Row("g-oversized-body", GEMINI, b'{"contents":"' + b"a" * (70 * 1024 * 1024) + b'"}', 413, "Too Large"),
    Row("g-embed-content", GEMINI, {"content": {"parts": [{"text": "hi"}]}}, 404, "not served",
        path="/v1beta/models/gemini-2.5-pro:embedContent"),
    Row("g-no-key", GEMINI, G_OK, 401, "missing API key", key="none"),
    Row("g-unknown-key", GEMINI, G_OK, 401, "invalid API key", key="unknown"),
    Row("g-closed-session", GEMINI, G_OK, 403, "accepts no more model calls", key="closed"),
    Row("g-done-session", GEMINI, G_OK, 403, "is done", key="done"),
]


def test_table_covers_every_api():
    per_api = {api: sum(row.api == api for row in ROWS) for api in PATHS}
    assert len(ROWS) >= 36 and all(count >= 8 for count in per_api.values()), per_api
    assert len({row.id for row in ROWS}) == len(ROWS)


# -- helpers ----------------------------------------------------------------------------------
def store_counts(service) -> dict[str, int]:
    with service.captures.engine.connect() as db:
        return {table.__name__: db.execute(select(func.count()).select_from(table)).scalar_one()
                for table in (Session, Completion, Blob)}


def auth_headers(api: str, key: str | None) -> dict[str, str]:
    headers = {"anthropic-version": "2023-06-01"} if api == ANTHROPIC else {}
    if key is None:
        return headers
    if api == ANTHROPIC:
        headers["x-api-key"] = key
    elif api == GEMINI:
        headers["x-goog-api-key"] = key
    else:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def encode(body: Any) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def session_key(proxy, mode: str) -> str | None:
    if mode == "none":
        return None
    if mode == "unknown":
        return "pj-" + uuid.uuid4().hex
    if mode == "done":
        return proxy.service.sessions.create(status=SessionStatus.DONE).api_key
    _, key = proxy.new_session()
    if mode == "closed":
        session = proxy.service.sessions.by_key(key)
        assert proxy.service.sessions.transition(session.id, SessionStatus.RUNNING, SessionStatus.POSTRUN)
    return key


def assert_error_shape(api: str, status: int, body: Any, row: Row) -> str:
    """Exactly the provider's error envelope; returns the message."""
    if api == ANTHROPIC:
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        assert body["error"]["type"] == ANTHROPIC_TYPES[status], body
        message = body["error"]["message"]
    elif api == GEMINI:
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}, body
        error = body["error"]
        assert type(error["code"]) is int and error["code"] == status, body
        if status in GOOGLE_STATUS:
            assert error["status"] == GOOGLE_STATUS[status], body
        else:  # 413 has no canonical Google code of its own
            assert error["status"] in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"), body
        message = error["message"]
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        error = body["error"]
        assert isinstance(error["type"], str) and error["type"], body
        if status == 400:
            assert error["type"] == "invalid_request_error", body
        if row.param is not None:
            assert error["param"] == row.param, body
        message = error["message"]
    assert isinstance(message, str) and message
    return message


# -- the table --------------------------------------------------------------------------------
@pytest.mark.parametrize("row", ROWS, ids=str)
def test_bad_request_is_answered_in_the_provider_shape_and_writes_nothing(proxy, row):
    key = session_key(proxy, row.key)
    before = store_counts(proxy.service)
    headers = auth_headers(row.api, key) | row.headers
    data = encode(row.body)
    if data is not None:
        headers.setdefault("Content-Type", "application/json")
    response = requests.request(row.method, proxy.url + (row.path or PATHS[row.api]), data=data, headers=headers,
                                timeout=60)

    assert response.status_code == row.status, response.text[:500]
    assert response.headers["Content-Type"].startswith("application/json")
    message = assert_error_shape(row.api, row.status, response.json(), row)
    assert row.needle.lower() in message.lower(), message

    assert requests.get(proxy.url + "/healthz", timeout=5).status_code == 200
    assert store_counts(proxy.service) == before


# -- open capture mode ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def open_proxy(sim, tmp_path_factory):
    service, server = build_proxy(tmp_path_factory, sim.url, open_capture=True)
    yield service, server.url
    server.stop()


def test_open_capture_opens_a_session_only_for_a_valid_call(open_proxy, sim, marker):
    service, url = open_proxy
    key = "adhoc-" + uuid.uuid4().hex
    headers = {"Authorization": f"Bearer {key}"}
    before = store_counts(service)

    bad = requests.post(url + PATHS[CHAT], json=with_(C_OK, n=3), headers=headers, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "n"
    bad = requests.post(url + PATHS[CHAT], data=b"{not json", headers=headers, timeout=30)
    assert bad.status_code == 400
    assert service.sessions.by_key(key) is None
    assert store_counts(service) == before

    sim.rule({"kind": "text", "text": f"hello {marker}"}, contains=marker)
    body = with_(C_OK, messages=[{"role": "user", "content": f"say hello {marker}"}])
    first = requests.post(url + PATHS[CHAT], json=body, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == f"hello {marker}"
    session = service.sessions.by_key(key)
    assert session is not None and session.kind == "adhoc" and session.status == SessionStatus.RUNNING
    after_first = store_counts(service)
    assert after_first["Session"] == before["Session"] + 1
    assert after_first["Completion"] == before["Completion"] + 1

    second = requests.post(url + PATHS[CHAT], json=body, headers=headers, timeout=30)
    assert second.status_code == 200, second.text
    assert service.sessions.by_key(key).id == session.id
    after_second = store_counts(service)
    assert after_second["Session"] == after_first["Session"]
    assert after_second["Completion"] == after_first["Completion"] + 1
    assert [c.status for c in service.captures.load_session(session.id)] == ["ok", "ok"]
