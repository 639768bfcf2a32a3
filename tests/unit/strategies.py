"""Shared hypothesis strategies and helpers for the proxy property tests.

Nothing here knows what the converters produce: expected values in the tests come from the
protocol facts (docs/protocols), these helpers only build inputs and parse SSE framing.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from polar_jobs.proxy import anthropic, gemini, openai_chat, responses
from polar_jobs.proxy.reply import Reply, ToolCall

PROVIDERS = {"anthropic": anthropic, "openai_chat": openai_chat, "responses": responses, "gemini": gemini}

# -- scalars ------------------------------------------------------------------------------------
texts = st.text(max_size=40)  # unicode, surrogates excluded by hypothesis
nonempty_texts = st.text(min_size=1, max_size=40)
# text that survives every "is there anything?" check (a truthy, non-blank string)
solid_texts = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "")

tool_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=8), children, max_size=3)),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=4)


@st.composite
def tool_call_lists(draw, max_calls: int = 3) -> list[ToolCall]:
    count = draw(st.integers(0, max_calls))
    ids = draw(st.lists(st.text(string.ascii_letters + string.digits, min_size=1, max_size=12),
                        min_size=count, max_size=count, unique=True))
    calls = []
    for call_id in ids:
        arguments = draw(json_objects)
        compact = draw(st.booleans())
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":") if compact else None)
        calls.append(ToolCall(id="call_" + call_id, name=draw(tool_names), arguments=text))
    return calls


@st.composite
def replies(draw, finish_reasons=("stop", "tool_calls", "length")) -> Reply:
    calls = draw(tool_call_lists())
    prompt = draw(st.integers(0, 100_000))
    cached = draw(st.integers(0, prompt))
    return Reply(
        id="chatcmpl-" + draw(st.text(string.hexdigits.lower(), min_size=1, max_size=16)),
        created=draw(st.integers(0, 2**31)),
        content=draw(st.one_of(st.none(), st.just(""), texts)),
        reasoning=draw(st.one_of(st.none(), nonempty_texts)),
        tool_calls=calls,
        finish_reason=draw(st.sampled_from(finish_reasons)),
        stop_reason=None,
        prompt_tokens=prompt,
        completion_tokens=draw(st.integers(0, 50_000)),
        cached_tokens=cached,
    )


# -- an abstract conversation, rendered into each provider's request shape -----------------------
@dataclass
class Call:
    id: str
    name: str
    args: dict[str, Any]


@dataclass
class Turn:
    role: str  # "user" | "assistant" | "system"
    text: str = ""
    reasoning: str | None = None
    calls: list[Call] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # tool results (for the calls of the turn before)


@dataclass
class Conversation:
    system: list[str]
    turns: list[Turn]
    tools: list[str]
    stream: bool
    include_usage: bool
    max_tokens: int | None

    @property
    def has_system(self) -> bool:
        return bool(self.system) or any(t.role == "system" for t in self.turns)

    @property
    def tool_result_count(self) -> int:
        return sum(len(t.results) for t in self.turns)


@st.composite
def conversations(draw, mid_system: bool = True) -> Conversation:
    system = draw(st.lists(solid_texts, max_size=2))
    turns: list[Turn] = [Turn("user", draw(solid_texts))]
    counter = 0
    for _ in range(draw(st.integers(0, 3))):
        ncalls = draw(st.integers(0, 2))
        calls = []
        for _ in range(ncalls):
            counter += 1
            calls.append(Call(f"call_{counter}", draw(tool_names), draw(json_objects)))
        text = draw(st.one_of(st.just(""), solid_texts)) if calls else draw(solid_texts)
        turns.append(Turn("assistant", text, draw(st.one_of(st.none(), solid_texts)), calls))
        if mid_system and draw(st.booleans()) and not calls:
            turns.append(Turn("system", draw(solid_texts)))
        turns.append(Turn("user", draw(st.one_of(st.just(""), solid_texts)) if calls else draw(solid_texts),
                          results=[draw(texts) for _ in calls]))
    tools = sorted({c.name for t in turns for c in t.calls} | set(draw(st.lists(tool_names, max_size=2))))
    return Conversation(system, turns, tools, draw(st.booleans()), draw(st.booleans()),
                        draw(st.one_of(st.none(), st.integers(1, 10_000))))


def _calls_before(turns: list[Turn], index: int) -> list[Call]:
    for turn in reversed(turns[:index]):
        if turn.role == "assistant":
            return turn.calls
    return []


def anthropic_request(conv: Conversation, model: str = "claude-x") -> dict[str, Any]:
    from polar_jobs.proxy import reasoning

    messages: list[dict[str, Any]] = []
    for i, turn in enumerate(conv.turns):
        if turn.role == "system":
            messages.append({"role": "system", "content": turn.text})
        elif turn.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if turn.reasoning:
                blocks.append({"type": "thinking", "thinking": turn.reasoning,
                               "signature": reasoning.encode(turn.reasoning)})
            if turn.text:
                blocks.append({"type": "text", "text": turn.text})
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in turn.calls]
            messages.append({"role": "assistant", "content": blocks})
        else:
            calls = _calls_before(conv.turns, i)
            blocks = [{"type": "tool_result", "tool_use_id": c.id, "content": r}
                      for c, r in zip(calls, turn.results)]
            if turn.text:
                blocks.append({"type": "text", "text": turn.text})
            messages.append({"role": "user", "content": blocks if turn.results else turn.text})
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": conv.stream}
    if conv.max_tokens:
        body["max_tokens"] = conv.max_tokens
    if conv.system:
        body["system"] = [{"type": "text", "text": s} for s in conv.system] if len(conv.system) > 1 \
            else conv.system[0]
    body["tools"] = [{"name": n, "input_schema": {"type": "object", "properties": {}}} for n in conv.tools]
    return body


def chat_request(conv: Conversation, model: str = "gpt-x") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "developer" if i % 2 else "system", "content": s}
                                      for i, s in enumerate(conv.system)]
    for i, turn in enumerate(conv.turns):
        if turn.role == "system":
            messages.append({"role": "developer", "content": turn.text})
        elif turn.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.reasoning:
                message["reasoning_content"] = turn.reasoning
            if turn.calls:
                message["tool_calls"] = [{"id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": json.dumps(c.args)}}
                                         for c in turn.calls]
            messages.append(message)
        else:
            for call, result in zip(_calls_before(conv.turns, i), turn.results):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            if turn.text:
                messages.append({"role": "user", "content": turn.text})
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": conv.stream,
                            "tools": [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                                      for n in conv.tools]}
    if conv.stream:
        body["stream_options"] = {"include_usage": conv.include_usage}
    if conv.max_tokens:
        body["max_completion_tokens"] = conv.max_tokens
    return body


def responses_request(conv: Conversation, model: str = "gpt-5-codex") -> dict[str, Any]:
    from polar_jobs.proxy import reasoning

    items: list[dict[str, Any]] = [{"type": "message", "role": "developer",
                                    "content": [{"type": "input_text", "text": s}]} for s in conv.system[1:]]
    for i, turn in enumerate(conv.turns):
        if turn.role == "system":
            items.append({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": turn.text}]})
        elif turn.role == "assistant":
            if turn.reasoning:
                items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": turn.reasoning}],
                              "encrypted_content": reasoning.encode(turn.reasoning)})
            if turn.text:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": turn.text}]})
            items += [{"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.args)}
                      for c in turn.calls]
        else:
            items += [{"type": "function_call_output", "call_id": c.id, "output": r}
                      for c, r in zip(_calls_before(conv.turns, i), turn.results)]
            if turn.text:
                items.append({"role": "user", "content": turn.text})
    body: dict[str, Any] = {"model": model, "input": items, "stream": conv.stream,
                            "tools": [{"type": "function", "name": n, "parameters": {"type": "object"}}
                                      for n in conv.tools] + [{"type": "web_search"}]}
    if conv.system:
        body["instructions"] = conv.system[0]
    if conv.max_tokens:
        body["max_output_tokens"] = conv.max_tokens
    return body


def gemini_request(conv: Conversation) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for i, turn in enumerate(conv.turns):
        if turn.role == "system":
            raise ValueError("Gemini has no mid-conversation system turn")
        if turn.role == "assistant":
            parts: list[dict[str, Any]] = []
            if turn.reasoning:
                parts.append({"text": turn.reasoning, "thought": True})
            if turn.text:
                parts.append({"text": turn.text})
            parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.args}} for c in turn.calls]
            contents.append({"role": "model", "parts": parts or [{"text": ""}]})
        else:
            parts = [{"functionResponse": {"id": c.id, "name": c.name, "response": {"output": r}}}
                     for c, r in zip(_calls_before(conv.turns, i), turn.results)]
            if turn.text:
                parts.append({"text": turn.text})
            contents.append({"role": "user", "parts": parts})
    body: dict[str, Any] = {"contents": contents}
    if conv.system:
        body["systemInstruction"] = {"parts": [{"text": s} for s in conv.system]}
    if conv.tools:
        body["tools"] = [{"functionDeclarations": [{"name": n, "parameters": {"type": "OBJECT"}}
                                                   for n in conv.tools]}]
    if conv.max_tokens:
        body["generationConfig"] = {"maxOutputTokens": conv.max_tokens}
    return body


# -- SSE --------------------------------------------------------------------------------------------
def parse_sse(chunks) -> list[tuple[str | None, str]]:
    """(event name or None, data text) per frame; every frame must end with a blank line."""
    raw = b"".join(chunks).decode("utf-8")
    assert raw.endswith("\n\n"), "an SSE stream ends with a blank line"
    frames = []
    for block in raw[:-2].split("\n\n"):
        event, data = None, []
        for line in block.split("\n"):
            assert ": " in line, f"malformed SSE line {line!r}"
            key, value = line.split(": ", 1)
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE field {key!r}")
        assert data, f"an SSE frame without data: {block!r}"
        frames.append((event, "\n".join(data)))
    return frames
