"""Echo round trip: what a provider response becomes when a harness sends it back on the next turn.

For every provider, the assistant message that reaches the engine on turn N+1 must carry the same
text, reasoning and tool calls the engine produced on turn N (protocols.md §4-§6), and the tool
results must answer those calls by id, in order.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.proxy.common import finalize
from polar_jobs.proxy.reply import Reply
from tests.unit.strategies import PROVIDERS, replies

pytestmark = pytest.mark.unit

SERVED = "served/model"
FIRST_USER = "hello there"

BASE = {
    "anthropic": {"model": "claude-x", "messages": [{"role": "user", "content": FIRST_USER}]},
    "openai_chat": {"model": "gpt-x", "messages": [{"role": "user", "content": FIRST_USER}]},
    "responses": {"model": "gpt-5-codex", "input": [{"role": "user", "content": FIRST_USER}]},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": FIRST_USER}]}]},
}


def _to_chat(provider: str, body: dict[str, Any]):
    return PROVIDERS[provider].to_chat(body, default_max_tokens=1024, path_model="gemini-x"
                                       if provider == "gemini" else None)


def _result_text(call_id: str) -> str:
    return f"result of {call_id}"


def _echo(provider: str, response: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The next request, built exactly as a harness of that provider echoes a response."""
    body = json.loads(json.dumps(BASE[provider]))  # deep copy
    if provider == "anthropic":
        body["messages"].append({"role": "assistant", "content": response["content"]})
        results = [{"type": "tool_result", "tool_use_id": block["id"], "content": _result_text(block["id"])}
                   for block in response["content"] if block["type"] == "tool_use"]
        if results:
            body["messages"].append({"role": "user", "content": results})
    elif provider == "openai_chat":
        message = response["choices"][0]["message"]
        body["messages"].append(message)
        for call in message.get("tool_calls") or []:
            body["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": _result_text(call["id"])})
    elif provider == "responses":
        body["input"].extend(response["output"])
        body["input"].extend({"type": "function_call_output", "call_id": item["call_id"],
                              "output": _result_text(item["call_id"])}
                             for item in response["output"] if item["type"] == "function_call")
    else:
        content = response["candidates"][0]["content"]
        body["contents"].append(content)
        responses_ = [{"functionResponse": {"id": part["functionCall"]["id"], "name": part["functionCall"]["name"],
                                            "response": {"output": _result_text(part["functionCall"]["id"])}}}
                      for part in content["parts"] if "functionCall" in part]
        if responses_:
            body["contents"].append({"role": "user", "parts": responses_})
    return body


def _check_echo(provider: str, reply: Reply) -> None:
    normalized = _to_chat(provider, BASE[provider])
    response = PROVIDERS[provider].to_response(reply, normalized)
    upstream = finalize(_to_chat(provider, _echo(provider, response, reply)), SERVED, False)
    messages = upstream["messages"]

    assert messages[0] == {"role": "user", "content": FIRST_USER}
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert len(assistants) == 1, messages
    assistant = assistants[0]
    assert messages[1] is assistant

    assert (assistant.get("content") or "") == (reply.content or "")
    assert "reasoning_content" not in assistant
    assert (assistant.get("reasoning") or None) == (reply.reasoning or None)

    calls = assistant.get("tool_calls") or []
    assert [c["id"] for c in calls] == [c.id for c in reply.tool_calls]
    assert [c["function"]["name"] for c in calls] == [c.name for c in reply.tool_calls]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [json.loads(c.arguments)
                                                                       for c in reply.tool_calls]
    assert all(c.get("type") == "function" for c in calls)

    tools = messages[2:]
    assert all(m["role"] == "tool" for m in tools), messages
    assert [m["tool_call_id"] for m in tools] == [c.id for c in reply.tool_calls]
    for message, call in zip(tools, reply.tool_calls):
        assert _result_text(call.id) in message["content"]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@settings(max_examples=100, deadline=None)
@given(reply=replies())
def test_echo_round_trip(provider: str, reply: Reply) -> None:
    _check_echo(provider, reply)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("content,reasoning", [(None, None), ("", None), ("", "why"), (None, "why"),
                                               ("  ", None), ("héllo 🌍\n\nworld", "ünïcode\nthought")])
@settings(max_examples=10, deadline=None)
@given(calls=st.sampled_from([0, 1, 3]), data=st.data())
def test_echo_edge_contents(provider: str, content, reasoning, calls: int, data) -> None:
    reply = data.draw(replies())
    reply = replace(reply, content=content, reasoning=reasoning,
                    tool_calls=(reply.tool_calls * 3)[:calls] if reply.tool_calls else reply.tool_calls)
    if len({c.id for c in reply.tool_calls}) != len(reply.tool_calls):
        reply = replace(reply, tool_calls=[replace(c, id=f"{c.id}_{i}") for i, c in enumerate(reply.tool_calls)])
    _check_echo(provider, reply)
