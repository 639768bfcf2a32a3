"""Which provider a call speaks: path first, then headers, then body shape (example-based)."""

from __future__ import annotations

import pytest

from polar_jobs.proxy.detection import detect

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("path,provider", [
    ("/v1/messages", "anthropic"),
    ("/v1/messages?beta=true", "anthropic"),
    ("/anthropic/v1/messages/", "anthropic"),
    ("/messages", "anthropic"),
    ("/v1/chat/completions", "openai_chat"),
    ("/openai/v1/chat/completions?x=1", "openai_chat"),
    ("/chat/completions", "openai_chat"),
    ("/v1/responses", "responses"),
    ("/responses?stream=true", "responses"),
])
def test_path_rules(path: str, provider: str) -> None:
    assert detect(path, {}).provider == provider


def test_path_beats_headers_and_body() -> None:
    assert detect("/v1/chat/completions", {"anthropic-version": "2023-06-01"}, {"contents": []}).provider \
        == "openai_chat"
    assert detect("/v1/responses", {"Anthropic-Version": "2023-06-01"}).provider == "responses"


@pytest.mark.parametrize("path,model,stream", [
    ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "gemini-2.5-pro", True),
    ("/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", False),
    ("/v1/models/gemini-2.0-flash-001:generateContent?key=abc", "gemini-2.0-flash-001", False),
    ("/v1beta/models/gemini-2.5-flash:STREAMGENERATECONTENT?alt=sse", "gemini-2.5-flash", True),
    ("/v1beta/models/gemini-2.5-flash:streamgeneratecontent", "gemini-2.5-flash", True),
    ("/v1beta/models/gemini-2.5-flash:GenerateContent", "gemini-2.5-flash", False),
])
def test_gemini_path_model_and_stream(path: str, model: str, stream: bool) -> None:
    detected = detect(path, {})
    assert (detected.provider, detected.path_model, detected.path_stream) == ("gemini", model, stream)


@pytest.mark.parametrize("header", ["anthropic-version", "Anthropic-Version", "ANTHROPIC-VERSION"])
def test_anthropic_version_header(header: str) -> None:
    assert detect("/", {header: "2023-06-01"}).provider == "anthropic"
    assert detect("/some/proxy/path", {"content-type": "application/json", header: "2023-06-01"},
                  {"messages": []}).provider == "anthropic"


@pytest.mark.parametrize("body,provider", [
    ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, "gemini"),
    ({"model": "gpt-5", "input": "hi", "instructions": "be brief"}, "responses"),
    ({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}, "openai_chat"),
    ({"model": "gpt-5", "input": "hi"}, "openai_chat"),  # input without instructions is not enough
    (None, "openai_chat"),
    ([1, 2], "openai_chat"),
    ("not json object", "openai_chat"),
])
def test_body_shape_rules_and_default(body, provider: str) -> None:
    assert detect("/", {}, body).provider == provider


def test_default_is_openai_chat() -> None:
    detected = detect("/", {})
    assert detected.provider == "openai_chat"
    assert detected.path_model is None and detected.path_stream is False
