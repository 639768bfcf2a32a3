"""The four provider APIs, plain and streamed, through the proxy to real vLLM (CPU build, tiny model).

Each call is checked end to end: the official SDK parses the answer, and the capture holds vLLM's own
prompt ids (= ``/tokenize`` of the normalized request), sampled ids, 1:1 logprobs, finish reason, usage.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from tests.e2e.vllm_tier import assert_vllm_fidelity, vllm, vproxy  # noqa: F401

pytestmark = pytest.mark.e2e

APIS = ["anthropic", "chat", "responses", "gemini"]


def ask(api: str, proxy, key: str, prompt: str, max_tokens: int, stream: bool) -> tuple[str, str]:
    """(text, provider's finish reason) through the official SDK."""
    if api == "anthropic":
        client = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)
        kwargs = dict(model="claude-x", max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}])
        if stream:
            with client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        return "".join(b.text for b in message.content if b.type == "text"), message.stop_reason
    if api == "chat":
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
        messages = [{"role": "user", "content": prompt}]
        if stream:
            chunks = list(client.chat.completions.create(model="gpt-x", messages=messages, max_tokens=max_tokens,
                                                         stream=True, stream_options={"include_usage": True}))
            assert chunks[-1].usage.prompt_tokens > 0
            text = "".join(c.delta.content or "" for chunk in chunks for c in chunk.choices)
            finish = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
            return text, finish[-1]
        reply = client.chat.completions.create(model="gpt-x", messages=messages, max_tokens=max_tokens)
        return reply.choices[0].message.content or "", reply.choices[0].finish_reason
    if api == "responses":
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
        kwargs = dict(model="gpt-x", input=prompt, max_output_tokens=max_tokens, store=False)
        if stream:  # a cut reply ends with response.incomplete, which get_final_response() does not accept
            with client.responses.stream(**kwargs) as events:
                final = [e for e in events if e.type in ("response.completed", "response.incomplete")]
            response = final[-1].response
        else:
            response = client.responses.create(**kwargs)
        reason = response.incomplete_details.reason if response.incomplete_details else response.status
        return response.output_text, reason
    client = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url))
    config = types.GenerateContentConfig(max_output_tokens=max_tokens)
    if stream:
        chunks = list(client.models.generate_content_stream(model="gemini-x", contents=prompt, config=config))
        text = "".join(p.text or "" for c in chunks for p in (c.candidates[0].content.parts or []) if not p.thought)
        return text, chunks[-1].candidates[0].finish_reason.name
    reply = client.models.generate_content(model="gemini-x", contents=prompt, config=config)
    return reply.text or "", reply.candidates[0].finish_reason.name


STOPPED = {"anthropic": "end_turn", "chat": "stop", "responses": "completed", "gemini": "STOP"}
CUT = {"anthropic": "max_tokens", "chat": "length", "responses": "max_output_tokens", "gemini": "MAX_TOKENS"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_scripted_text_reply(vproxy, vllm, api, stream):
    session_id, key = vproxy.new_session()
    expected = f"Hello from the real engine via {api}."
    # thinking is on by default (Qwen3.5 template): a real model closes its think block before answering
    script = vllm.script(f"<think>\nA greeting.\n</think>\n\n{expected}")
    text, finish = ask(api, vproxy, key, f"Say hello. {script}", 64, stream)
    assert text.strip() == expected
    assert finish == STOPPED[api]
    (captured,) = assert_vllm_fidelity(vproxy, vllm, session_id, expected_calls=1)
    assert captured.finish_reason == "stop"
    assert captured.response_ids[-1] == 248046  # <|im_end|> is sampled and kept
    assert vllm.detokenize(captured.response_ids) == f"<think>\nA greeting.\n</think>\n\n{expected}<|im_end|>"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_unscripted_sample_cut_at_max_tokens(vproxy, vllm, api, stream):
    """The random model's own samples: cut at max_tokens, ids and logprobs still exactly vLLM's."""
    session_id, key = vproxy.new_session()
    _, finish = ask(api, vproxy, key, "Write anything at all.", 6, stream)
    assert finish == CUT[api]
    (captured,) = assert_vllm_fidelity(vproxy, vllm, session_id, expected_calls=1)
    assert captured.finish_reason == "length" and len(captured.response_ids) == 6
