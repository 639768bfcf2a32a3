"""The simulated vLLM upstream over real HTTP (threaded werkzeug on 127.0.0.1)."""

import json
import threading

import pytest
import requests
from werkzeug.serving import make_server

from polar_jobs.sim import create_sim_app
from polar_jobs.sim.tokenizer import IM_END_ID, decode, encode

pytestmark = pytest.mark.integration

MODEL = "qwen3.5-sim"
MAX_LEN = 4096
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def base_url():
    server = make_server("127.0.0.1", 0, create_sim_app(MODEL, MAX_LEN), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def url(base_url):
    requests.delete(base_url + "/sim/rules", timeout=5)
    requests.delete(base_url + "/sim/requests", timeout=5)
    return base_url


def set_rules(url, rules, replace=True):
    r = requests.post(url + "/sim/rules" + ("?replace=1" if replace else ""), json=rules, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def chat(url, **body):
    body.setdefault("model", MODEL)
    body.setdefault("messages", HELLO)
    return requests.post(url + "/v1/chat/completions", json=body, timeout=10)


def test_metadata_endpoints(url):
    assert requests.get(url + "/health", timeout=5).status_code == 200
    assert requests.get(url + "/version", timeout=5).json() == {"version": "0.0.0+polar-sim"}
    card = requests.get(url + "/v1/models", timeout=5).json()["data"][0]
    assert (card["id"], card["owned_by"], card["max_model_len"]) == (MODEL, "vllm", MAX_LEN)


def test_chat_tokenize_equals_prompt_ids(url):
    body = {"model": MODEL, "messages": HELLO, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}
    tok = requests.post(url + "/tokenize", json=body, timeout=5).json()
    out = chat(url, return_token_ids=True, **{k: v for k, v in body.items() if k != "model"}).json()
    assert tok["tokens"] == out["prompt_token_ids"]
    assert tok["count"] == out["usage"]["prompt_tokens"] == len(tok["tokens"])
    assert tok["max_model_len"] == MAX_LEN
    text = decode(tok["tokens"])
    assert text.startswith("<|im_start|>system\n# Tools")
    assert text.endswith("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tokenize_completion_form_and_detokenize(url):
    tok = requests.post(url + "/tokenize", json={"model": MODEL, "prompt": "<|im_start|>hi", "return_token_strs": True},
                        timeout=5).json()
    assert tok["tokens"][0] == 248045 and tok["token_strs"][0] == "<|im_start|>"
    back = requests.post(url + "/detokenize", json={"model": MODEL, "tokens": tok["tokens"]}, timeout=5).json()
    assert back == {"prompt": "<|im_start|>hi"}


def test_default_reply_and_request_log(url):
    out = chat(url, return_token_ids=True).json()
    choice = out["choices"][0]
    assert choice["message"]["content"] == "Sim reply to: Hello there"
    assert choice["finish_reason"] == "stop" and choice["message"]["tool_calls"] == []
    assert choice["token_ids"][-1] == IM_END_ID
    assert decode(choice["token_ids"]) == "Sim reply to: Hello there<|im_end|>"
    assert out["usage"]["completion_tokens"] == len(choice["token_ids"])
    logged = requests.get(url + "/sim/requests", timeout=5).json()
    assert logged[-1]["messages"] == HELLO


def test_tool_call_policy(url):
    set_rules(url, [{"match": {"tool": "get_weather"}, "policy": {
        "kind": "tool_call", "name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}])
    out = chat(url, tools=TOOLS, return_token_ids=True).json()
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("chatcmpl-tool-") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert choice["message"]["content"] is None
    assert decode(choice["token_ids"]) == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>"
    )
    assert choice["token_ids"][0] == 248058


def test_reasoning_policy(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "reasoning", "reasoning": "Think hard", "text": "Done."}}])
    msg = chat(url).json()["choices"][0]["message"]
    assert msg["reasoning"] == "\nThink hard\n"
    assert msg["content"] == "\n\nDone."


def test_logprobs_aligned_and_deterministic(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": "héllo wörld 🙂"}}])
    first = chat(url, return_token_ids=True, logprobs=True, top_logprobs=0).json()["choices"][0]
    again = chat(url, return_token_ids=True, logprobs=True, top_logprobs=0).json()["choices"][0]
    entries = first["logprobs"]["content"]
    assert len(entries) == len(first["token_ids"])
    assert all(-4.0 <= e["logprob"] < 0.0 and e["top_logprobs"] == [] for e in entries)
    assert [e["logprob"] for e in entries] == [e["logprob"] for e in again["logprobs"]["content"]]
    assert entries[-1]["token"] == "<|im_end|>"
    assert all(e["bytes"] == list(e["token"].encode("utf-8")) for e in entries)
    other = chat(url, messages=[{"role": "user", "content": "different"}], return_token_ids=True,
                 logprobs=True).json()["choices"][0]
    assert [e["logprob"] for e in other["logprobs"]["content"]] != [e["logprob"] for e in entries]
    top = chat(url, logprobs=True, top_logprobs=3).json()["choices"][0]["logprobs"]["content"][0]
    assert len(top["top_logprobs"]) == 3 and top["top_logprobs"][0]["logprob"] == top["logprob"]


def test_length_truncation(url):
    text = "one two three four five six seven eight"
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": text}}])
    choice = chat(url, max_tokens=3, return_token_ids=True).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["token_ids"] == encode(text)[:3]
    assert choice["message"]["content"] == decode(encode(text)[:3])


def test_context_length_error(url):
    prompt = len(requests.post(url + "/tokenize", json={"messages": HELLO}, timeout=5).json()["tokens"])
    r = chat(url, max_tokens=MAX_LEN)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert err["message"] == (
        f"This model's maximum context length is {MAX_LEN} tokens. However, you requested {prompt + MAX_LEN} "
        f"tokens ({prompt} in the messages, {MAX_LEN} in the completion). "
        "Please reduce the length of the messages or completion."
    )
    huge = [{"role": "user", "content": "word " * MAX_LEN}]
    assert chat(url, messages=huge).status_code == 400


def test_missing_max_tokens_uses_remaining_context(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": "ok"}}])
    assert chat(url).json()["choices"][0]["finish_reason"] == "stop"


def test_stop_sequences(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": "alpha beta STOP gamma"}}])
    choice = chat(url, stop=["gamma", "STOP"], return_token_ids=True).json()["choices"][0]
    assert choice["message"]["content"] == "alpha beta "
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "STOP"
    assert IM_END_ID not in choice["token_ids"]
    assert "STOP" in decode(choice["token_ids"]) and "gamma" not in decode(choice["token_ids"])
    assert chat(url, stop="beta").json()["choices"][0]["message"]["content"] == "alpha "


def read_stream(response):
    frames = []
    for line in response.iter_lines(decode_unicode=True):
        if line:
            assert line.startswith("data: ")
            frames.append(line[len("data: "):])
    assert frames[-1] == "[DONE]"
    return [json.loads(f) for f in frames[:-1]]


def test_streaming_reassembles_to_the_same_ids(url):
    policy = {"kind": "reasoning_tool_call", "reasoning": "Need the weather first", "name": "get_weather",
              "arguments": {"city": "Zürich", "days": 2}}
    set_rules(url, [{"match": {}, "policy": policy}])
    whole = chat(url, tools=TOOLS, return_token_ids=True).json()
    with chat(url, tools=TOOLS, return_token_ids=True, stream=True, logprobs=True,
              stream_options={"include_usage": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = read_stream(r)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    body = [c["choices"][0] for c in chunks if c["choices"]][1:]
    ids = [t for ch in body for t in ch["token_ids"]]
    assert ids == whole["choices"][0]["token_ids"]
    assert sum(len(ch["logprobs"]["content"]) for ch in body) == len(ids)
    reasoning = "".join(ch["delta"].get("reasoning", "") for ch in body)
    assert reasoning == whole["choices"][0]["message"]["reasoning"]
    calls = [tc for ch in body for tc in ch["delta"].get("tool_calls", [])]
    assert [(tc["index"], tc["function"]["name"]) for tc in calls] == [(0, "get_weather")]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Zürich", "days": 2}
    assert body[-1]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(ids)


def test_streaming_text_content(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": "Streaming text, emoji 🙂 and more words."}}])
    with chat(url, stream=True, return_token_ids=True) as r:
        chunks = read_stream(r)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content == "Streaming text, emoji 🙂 and more words."
    assert all("usage" not in c for c in chunks)


def test_rules_times_and_listing(url):
    set_rules(url, [{"match": {"contains": "Hello"}, "policy": {"kind": "text", "text": "scripted"}, "times": 2}])
    texts = [chat(url).json()["choices"][0]["message"]["content"] for _ in range(3)]
    assert texts == ["scripted", "scripted", "Sim reply to: Hello there"]
    assert requests.get(url + "/sim/rules", timeout=5).json() == []
    bad = requests.post(url + "/sim/rules", json=[{"match": {}, "policy": {"kind": "bogus"}}], timeout=5)
    assert bad.status_code == 400 and "error" in bad.json()


def test_error_policy(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "error", "status": 503, "message": "overloaded"}, "times": 1}])
    r = chat(url)
    assert r.status_code == 503 and r.json()["error"]["message"] == "overloaded"
    assert chat(url).status_code == 200


def test_request_errors(url):
    assert chat(url, model="gpt-4").status_code == 404
    assert chat(url, model="gpt-4").json()["error"]["message"] == "The model `gpt-4` does not exist."
    assert chat(url, n=2).status_code == 400
    assert chat(url, messages=[]).status_code == 400
    assert chat(url, messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]).status_code == 400
    bad = requests.post(url + "/v1/chat/completions", data="not json", timeout=5)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400


def test_concurrent_requests(url):
    set_rules(url, [{"match": {}, "policy": {"kind": "text", "text": "slow", "delay_ms": 200}}])
    results = []
    threads = [threading.Thread(target=lambda: results.append(chat(url).status_code)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 4
