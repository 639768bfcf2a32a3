"""Request normalization invariants: what reaches the engine, for random valid requests of each provider.

The shared rules (protocols.md §4, §6, §8): one system message, first; no developer role; input
reasoning under ``reasoning``; tool results answer earlier calls; capture fields on; no streaming
fields upstream; no empty tool list.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from polar_jobs.proxy import anthropic, gemini, openai_chat, responses
from polar_jobs.proxy.common import finalize
from tests.unit.strategies import (
    Conversation, anthropic_request, chat_request, conversations, gemini_request, responses_request,
)

pytestmark = pytest.mark.unit

EXAMPLES = settings(max_examples=100, deadline=None)


def _check(upstream: dict, conv: Conversation, served: str = "served-model") -> None:
    messages = upstream["messages"]
    roles = [m["role"] for m in messages]
    assert upstream["model"] == served
    assert "developer" not in roles
    if conv.has_system:
        assert roles.count("system") == 1 and roles[0] == "system"
        for text in conv.system + [t.text for t in conv.turns if t.role == "system"]:
            assert text in messages[0]["content"]
    else:
        assert "system" not in roles
    assert all("reasoning_content" not in m for m in messages)
    assert set(roles) <= {"system", "user", "assistant", "tool"}

    seen_calls: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            for call in message.get("tool_calls") or []:
                assert call["type"] == "function"
                json.loads(call["function"]["arguments"])
                seen_calls.append(call["id"])
        elif message["role"] == "tool":
            assert message["tool_call_id"] in seen_calls, "a tool result answers an earlier call"
    assert sum(1 for r in roles if r == "tool") == conv.tool_result_count

    expected_calls = [c.id for t in conv.turns for c in t.calls]
    assert seen_calls == expected_calls
    expected_reasoning = [t.reasoning for t in conv.turns if t.role == "assistant" and t.reasoning]
    assert [m["reasoning"] for m in messages if m.get("reasoning")] == expected_reasoning

    assert upstream["return_token_ids"] is True
    assert upstream["logprobs"] is True
    assert upstream["top_logprobs"] == 0
    assert "stream" not in upstream and "stream_options" not in upstream
    if "tools" in upstream:
        assert upstream["tools"], "an empty tool list is never sent"
        assert all(t["type"] == "function" for t in upstream["tools"])
    else:
        assert "tool_choice" not in upstream
    assert all(value is not None for value in upstream.values())
    if conv.max_tokens:
        assert upstream["max_tokens"] == conv.max_tokens


def _upstream(normalized, conv: Conversation) -> dict:
    """The request sent upstream, after the checks every provider shares."""
    assert normalized.stream == conv.stream
    upstream = finalize(normalized, "served-model", False)
    _check(upstream, conv)
    return upstream


@EXAMPLES
@given(conv=conversations())
def test_anthropic_normalization(conv: Conversation) -> None:
    upstream = _upstream(anthropic.to_chat(anthropic_request(conv), default_max_tokens=4096), conv)
    if not conv.max_tokens:
        assert upstream["max_tokens"] == 4096
    assert ("tools" in upstream) == bool(conv.tools)


@EXAMPLES
@given(conv=conversations())
def test_chat_normalization(conv: Conversation) -> None:
    upstream = _upstream(openai_chat.to_chat(chat_request(conv), default_max_tokens=4096), conv)
    assert ("tools" in upstream) == bool(conv.tools)


@EXAMPLES
@given(conv=conversations())
def test_responses_normalization(conv: Conversation) -> None:
    upstream = _upstream(responses.to_chat(responses_request(conv), default_max_tokens=4096), conv)
    # the hosted web_search tool is always dropped; function tools survive
    assert [t["function"]["name"] for t in upstream.get("tools", [])] == conv.tools


@EXAMPLES
@given(conv=conversations(mid_system=False))
def test_gemini_normalization(conv: Conversation) -> None:
    upstream = _upstream(gemini.to_chat(gemini_request(conv), default_max_tokens=4096, path_model="gemini-x",
                                      path_stream=conv.stream), conv)
    assert ("tools" in upstream) == bool(conv.tools)


@EXAMPLES
@given(conv=conversations())
def test_force_no_thinking_wins(conv: Conversation) -> None:
    body = anthropic_request(conv)
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    normalized = anthropic.to_chat(body, default_max_tokens=4096)
    assert finalize(normalized, "m", False)["chat_template_kwargs"] == {"enable_thinking": True}
    assert finalize(normalized, "m", True)["chat_template_kwargs"] == {"enable_thinking": False}
