"""Stream = plain: folding each provider's synthesized SSE stream gives its non-streaming response.

Also the grammar each harness's SSE reader relies on (protocols.md §8), and the official SDK types
accepting what the proxy sends.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic.types as anthropic_types
import pydantic
import pytest
from google.genai import types as genai_types
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from polar_jobs.proxy import anthropic, gemini, openai_chat, responses
from polar_jobs.proxy.reply import Reply
from tests.unit.strategies import parse_sse, replies

pytestmark = pytest.mark.unit

EXAMPLES = settings(max_examples=100, deadline=None)
_RAW_ANTHROPIC_EVENT = pydantic.TypeAdapter(anthropic_types.RawMessageStreamEvent)
_RESPONSES_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def _norm(module, body: dict[str, Any], **kw):
    return module.to_chat(body, default_max_tokens=512, **kw)


# -- Anthropic Messages -------------------------------------------------------------------------
def fold_anthropic(frames: list[tuple[str | None, str]]) -> dict[str, Any]:
    events = [(name, json.loads(data)) for name, data in frames]
    for name, event in events:
        assert name == event["type"], "the SSE event name repeats the event type"
        _RAW_ANTHROPIC_EVENT.validate_python(event)
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_start") == names.count("message_delta") == names.count("message_stop") == 1

    message = dict(events[0][1]["message"])
    assert message["content"] == [] and message["stop_reason"] is None
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    open_index = None
    for name, event in events[1:-2]:
        if name == "content_block_start":
            assert open_index is None, "a block starts before the previous one stopped"
            assert event["index"] == len(blocks), "block indices are contiguous from 0"
            open_index = event["index"]
            blocks.append(dict(event["content_block"]))
        elif name == "content_block_delta":
            assert event["index"] == open_index
            block, delta = blocks[open_index], event["delta"]
            kind = delta["type"]
            if kind == "text_delta":
                assert block["type"] == "text"
                block["text"] += delta["text"]
            elif kind == "thinking_delta":
                assert block["type"] == "thinking"
                block["thinking"] += delta["thinking"]
            elif kind == "signature_delta":
                assert block["type"] == "thinking"
                block["signature"] += delta["signature"]
            elif kind == "input_json_delta":
                assert block["type"] == "tool_use"
                partial[open_index] = partial.get(open_index, "") + delta["partial_json"]
            else:
                raise AssertionError(f"unknown delta {kind}")
        elif name == "content_block_stop":
            assert event["index"] == open_index
            if blocks[open_index]["type"] == "tool_use":
                text = partial.get(open_index, "")
                blocks[open_index]["input"] = json.loads(text) if text else {}
            open_index = None
        else:
            raise AssertionError(f"unexpected event {name} between message_start and message_delta")
    assert open_index is None, "every block is stopped before message_delta"
    final = events[-2][1]
    message["content"] = blocks
    message["stop_reason"] = final["delta"]["stop_reason"]
    message["stop_sequence"] = final["delta"]["stop_sequence"]
    message["usage"] = dict(message["usage"], **final["usage"])
    return message


@EXAMPLES
@given(reply=replies(finish_reasons=("stop", "tool_calls", "length", "content_filter")))
def test_anthropic_stream_equals_plain(reply: Reply) -> None:
    normalized = _norm(anthropic, {"model": "claude-x", "messages": [{"role": "user", "content": "q"}],
                                   "stream": True})
    plain = anthropic.to_response(reply, normalized)
    anthropic_types.Message.model_validate(plain)
    assert fold_anthropic(parse_sse(anthropic.to_events(reply, normalized))) == plain
    # the plain response itself, by the protocol: thinking → text → tool_use, never empty
    kinds = [b["type"] for b in plain["content"]]
    assert kinds == sorted(kinds, key=["thinking", "text", "tool_use"].index)
    assert kinds.count("tool_use") == len(reply.tool_calls)
    assert plain["content"], "an empty reply is one empty text block"


# -- OpenAI Chat --------------------------------------------------------------------------------
def fold_chat(frames: list[tuple[str | None, str]], include_usage: bool) -> dict[str, Any]:
    assert all(name is None for name, _ in frames), "Chat frames are data-only"
    assert frames[-1][1] == "[DONE]"
    assert sum(1 for _, data in frames if data == "[DONE]") == 1
    chunks = [json.loads(data) for _, data in frames[:-1]]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        assert chunk["object"] == "chat.completion.chunk"
    usage = None
    if include_usage:
        last = chunks.pop()
        assert last["choices"] == [] and last["usage"] is not None
        usage = last["usage"]
        assert all("usage" in c and c["usage"] is None for c in chunks), "every other chunk has usage: null"
    else:
        assert all(c.get("usage") is None for c in chunks)
    message: dict[str, Any] = {"role": None, "content": None}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in chunks:
        assert len(chunk["choices"]) == 1
        choice = chunk["choices"][0]
        assert finish is None, "nothing follows the finish_reason chunk but the usage chunk"
        delta = choice["delta"]
        if "role" in delta:
            message["role"] = delta["role"]
        for key in ("content", "reasoning_content"):
            if delta.get(key) is not None:
                message[key] = (message.get(key) or "") + delta[key]
        for call in delta.get("tool_calls") or []:
            slot = calls.setdefault(call["index"], {"id": None, "type": "function",
                                                    "function": {"name": "", "arguments": ""}})
            slot["id"] = call.get("id") or slot["id"]
            slot["function"]["name"] += call.get("function", {}).get("name") or ""
            slot["function"]["arguments"] += call.get("function", {}).get("arguments") or ""
        finish = choice["finish_reason"]
    assert finish is not None
    if calls:
        assert sorted(calls) == list(range(len(calls)))
        message["tool_calls"] = [calls[i] for i in range(len(calls))]
    return {"message": message, "finish_reason": finish, "usage": usage}


@EXAMPLES
@given(reply=replies(), include_usage=st.booleans())
def test_chat_stream_equals_plain(reply: Reply, include_usage: bool) -> None:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "q"}], "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    normalized = _norm(openai_chat, body)
    plain = openai_chat.to_response(reply, normalized)
    ChatCompletion.model_validate(plain)
    folded = fold_chat(parse_sse(openai_chat.to_events(reply, normalized)), include_usage)
    message = plain["choices"][0]["message"]
    assert folded["message"]["role"] == "assistant"
    assert (folded["message"]["content"] or "") == (message["content"] or "")
    assert folded["message"].get("reasoning_content") == message.get("reasoning_content")
    assert folded["message"].get("tool_calls") == message.get("tool_calls")
    assert folded["finish_reason"] == plain["choices"][0]["finish_reason"]
    if include_usage:
        assert folded["usage"] == plain["usage"]
    assert plain["usage"]["total_tokens"] == reply.prompt_tokens + reply.completion_tokens
    if reply.tool_calls and reply.finish_reason == "stop":
        assert plain["choices"][0]["finish_reason"] == "tool_calls"


# -- OpenAI Responses ---------------------------------------------------------------------------
def fold_responses(frames: list[tuple[str | None, str]]) -> dict[str, Any]:
    events = [json.loads(data) for _, data in frames]
    for (name, _), event in zip(frames, events):
        assert name == event["type"]
        _RESPONSES_EVENT.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert all(e["type"] not in ("response.completed", "response.incomplete") for e in events[:-1])

    items: dict[int, dict[str, Any]] = {}
    text: dict[int, str] = {}
    summary: dict[int, str] = {}
    arguments: dict[int, str] = {}
    added: list[int] = []
    for event in events[1:-1]:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert event["output_index"] == len(added), "output indices are contiguous from 0"
            added.append(event["output_index"])
        elif kind == "response.output_item.done":
            assert event["output_index"] == added[-1]
            items[event["output_index"]] = event["item"]
        elif kind == "response.output_text.delta":
            text[event["output_index"]] = text.get(event["output_index"], "") + event["delta"]
        elif kind == "response.reasoning_summary_text.delta":
            summary[event["output_index"]] = summary.get(event["output_index"], "") + event["delta"]
        elif kind == "response.function_call_arguments.delta":
            arguments[event["output_index"]] = arguments.get(event["output_index"], "") + event["delta"]
        if "output_index" in event:
            assert event["output_index"] == added[-1], "events belong to the item last added"
    assert sorted(items) == added
    output = [items[i] for i in added]
    for index, item in enumerate(output):  # the deltas spell what the finished item says
        if item["type"] == "message":
            assert text.get(index, "") == item["content"][0]["text"]
        elif item["type"] == "reasoning":
            assert summary.get(index, "") == item["summary"][0]["text"]
        elif item["type"] == "function_call":
            assert arguments.get(index, "") == item["arguments"]
    final = events[-1]["response"]
    assert final["output"] == output
    return final


@EXAMPLES
@given(reply=replies())
def test_responses_stream_equals_plain(reply: Reply) -> None:
    normalized = _norm(responses, {"model": "gpt-5-codex", "input": "q", "stream": True})
    plain = responses.to_response(reply, normalized)
    Response.model_validate(plain)
    assert fold_responses(parse_sse(responses.to_events(reply, normalized))) == plain
    assert plain["status"] == ("incomplete" if reply.finish_reason == "length" else "completed")
    assert plain["usage"]["input_tokens"] == reply.prompt_tokens
    assert plain["usage"]["output_tokens"] == reply.completion_tokens
    assert plain["usage"]["total_tokens"] == reply.prompt_tokens + reply.completion_tokens
    calls = [i for i in plain["output"] if i["type"] == "function_call"]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
        (c.id, c.name, c.arguments) for c in reply.tool_calls]


# -- Gemini ---------------------------------------------------------------------------------------
def fold_gemini(frames: list[tuple[str | None, str]]) -> dict[str, Any]:
    assert all(name is None for name, _ in frames)
    bodies = [json.loads(data) for _, data in frames]
    for body in bodies:
        genai_types.GenerateContentResponse.model_validate_json(json.dumps(body))
    parts: list[dict[str, Any]] = []
    for body in bodies:
        candidate = body["candidates"][0]
        assert candidate["content"]["role"] == "model"
        parts.extend(candidate["content"]["parts"])
    *early, last = bodies
    assert all("finishReason" not in b["candidates"][0] for b in early)
    assert "finishReason" in last["candidates"][0], "the last frame carries the finish reason"
    calls_in_last = [p for p in last["candidates"][0]["content"]["parts"] if "functionCall" in p]
    assert calls_in_last == [p for p in parts if "functionCall" in p], "all calls come in the last frame"
    return {"candidates": [dict(last["candidates"][0], content={"role": "model", "parts": parts})],
            "usageMetadata": last["usageMetadata"], "modelVersion": last["modelVersion"],
            "responseId": last["responseId"]}


@EXAMPLES
@given(reply=replies(finish_reasons=("stop", "tool_calls", "length", "content_filter")))
def test_gemini_stream_equals_plain(reply: Reply) -> None:
    normalized = _norm(gemini, {"contents": [{"role": "user", "parts": [{"text": "q"}]}]},
                       path_model="gemini-2.5-pro", path_stream=True)
    plain = gemini.to_response(reply, normalized)
    parsed = genai_types.GenerateContentResponse.model_validate_json(json.dumps(plain))
    assert fold_gemini(parse_sse(gemini.to_events(reply, normalized))) == plain
    expected_finish = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS",
                       "content_filter": "SAFETY"}[reply.finish_reason]
    assert plain["candidates"][0]["finishReason"] == expected_finish
    assert [(c.id, c.name, c.args) for c in parsed.function_calls or []] == [
        (c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls]
    assert (parsed.text or "") == (reply.content or "")
