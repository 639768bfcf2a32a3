"""The proxy's engine layer against fake servers: vLLM (new and old), SGLang, and an engine without ids."""

from __future__ import annotations

import openai
import pytest
from flask import Flask, jsonify, request

from polar_jobs.proxy import engines
from polar_jobs.proxy.upstream import UpstreamClient
from tests.conftest import ProxyHarness, build_proxy
from tests.servers import ServerThread

pytestmark = pytest.mark.integration

PROMPT = [1, 2, 3, 4]
SAMPLED = [11, 12, 248046]
LOGPROBS = [-0.5, -1.25, -0.125]


def fake_engine(kind: str) -> Flask:
    """A server that answers like ``kind``: vllm-new, vllm-old, sglang or llamacpp (no ids at all)."""
    app = Flask(kind)
    seen: list[dict] = []
    app.config["seen"] = seen

    if kind.startswith("vllm"):
        @app.get("/version")
        def version():
            return jsonify(version="0.32.0+cpu" if kind == "vllm-new" else "0.9.2")
    if kind == "sglang":
        @app.get("/get_server_info")
        def server_info():
            return jsonify(version="0.5.1", model_path="Qwen/Qwen3.5-4B")

    @app.get("/v1/models")
    def models():
        return jsonify(data=[{"id": "fake", "max_model_len": 4096}])

    @app.post("/tokenize")
    def tokenize():
        return jsonify(count=len(PROMPT), tokens=PROMPT, max_model_len=4096)

    @app.post("/v1/chat/completions")
    def chat():
        body = request.get_json()
        seen.append(body)
        content = [{"token": f"token_id:{i}" if body.get("return_tokens_as_token_ids") else f"t{i}",
                    "logprob": lp, "bytes": None, "top_logprobs": []} for i, lp in zip(SAMPLED, LOGPROBS)]
        choice = {"index": 0, "message": {"role": "assistant", "content": "hi!"}, "finish_reason": "stop",
                  "logprobs": {"content": content}}
        response = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake",
                    "choices": [choice], "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}}
        if kind == "vllm-new" and body.get("return_token_ids"):
            response["prompt_token_ids"] = PROMPT
            choice["token_ids"] = SAMPLED
        if kind == "sglang" and body.get("return_meta_info"):
            choice["logprobs"] = None
            if body.get("return_prompt_token_ids"):
                choice["prompt_token_ids"] = PROMPT
            choice["meta_info"] = {"output_token_logprobs": [[lp, i, None] for i, lp in zip(SAMPLED, LOGPROBS)]}
        return jsonify(response)

    return app


@pytest.fixture(params=["vllm-new", "vllm-old", "sglang", "llamacpp"])
def engine_server(request):
    app = fake_engine(request.param)
    server = ServerThread(app)
    yield request.param, server, app.config["seen"]
    server.stop()


EXPECTED = {"vllm-new": (engines.VLLM, engines.TOKEN_IDS), "vllm-old": (engines.VLLM, engines.TOKENS_AS_IDS),
            "sglang": (engines.SGLANG, engines.SGLANG_META), "llamacpp": (engines.COMPATIBLE, engines.TOKEN_IDS)}


def test_detection(engine_server):
    kind, server, _ = engine_server
    engine = UpstreamClient(server.url).engine()
    assert (engine.kind, engine.capture) == EXPECTED[kind]
    assert kind not in ("vllm-new", "vllm-old") or engine.version


def test_capture_through_the_proxy(engine_server, tmp_path_factory):
    kind, server, seen = engine_server
    service, proxy_server = build_proxy(tmp_path_factory, server.url)
    proxy = ProxyHarness(service, proxy_server)
    try:
        session_id, key = proxy.new_session()
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
        if kind == "llamacpp":  # no ids anywhere: refused clearly, and recorded as failed
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert raised.value.status_code == 502 and "no token ids" in str(raised.value)
            (failed,) = proxy.captures(session_id)
            assert failed.status == "failed" and not failed.trainable
            return
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "hi!"
        sent = seen[-1]
        if kind == "vllm-new":
            assert sent["return_token_ids"] is True
        elif kind == "vllm-old":
            assert sent["return_tokens_as_token_ids"] is True and "return_token_ids" not in sent
        else:
            assert sent["return_prompt_token_ids"] and sent["return_meta_info"] and "return_token_ids" not in sent
        (captured,) = proxy.captures(session_id)
        assert captured.status == "ok" and captured.trainable
        assert captured.prompt_ids == PROMPT and captured.response_ids == SAMPLED
        assert captured.logprobs == LOGPROBS
        assert "meta_info" not in captured.upstream_response["choices"][0]
    finally:
        proxy_server.stop()


def test_allow_untokenized_marks_untrainable(tmp_path_factory):
    server = ServerThread(fake_engine("llamacpp"))
    service, proxy_server = build_proxy(tmp_path_factory, server.url, allow_untokenized=True)
    proxy = ProxyHarness(service, proxy_server)
    try:
        session_id, key = proxy.new_session()
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "hi!"
        (captured,) = proxy.captures(session_id)
        assert captured.status == "ok" and not captured.trainable
    finally:
        proxy_server.stop()
        server.stop()


@pytest.mark.parametrize("text,expected", [("0.10.2", (0, 10, 2)), ("0.32.0+cpu", (0, 32, 0)),
                                           ("v0.9.1rc1", (0, 9)), ("0.10.1.dev3+g1", (0, 10, 1))])
def test_version_tuple(text, expected):
    assert engines.version_tuple(text) == expected
