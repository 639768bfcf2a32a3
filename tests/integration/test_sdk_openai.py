"""The official openai SDK (Chat Completions and Responses) against the proxy, plain and streamed."""

from __future__ import annotations

import json

import openai
import pytest

from tests.integration.fidelity import assert_token_fidelity

pytestmark = pytest.mark.integration

WRITE_TOOL = {"type": "function", "function": {
    "name": "write_file", "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}
RESPONSES_TOOL = {"type": "function", "name": "write_file", "description": "Write a file.",
                  "parameters": WRITE_TOOL["function"]["parameters"], "strict": False}


@pytest.fixture
def client(proxy):
    session_id, key = proxy.new_session()
    return session_id, openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_text_and_tool_round_trip(proxy, sim, client, marker, stream):
    session_id, oai = client
    sim.rule({"kind": "tool_call", "name": "write_file", "arguments": {"path": "a.txt", "content": "polar"}},
             contains=marker, last_role="user")
    sim.rule({"kind": "text", "text": f"Done writing {marker}."}, any_contains=marker, last_role="tool")
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"write it {marker}"}]

    def ask():
        if not stream:
            return oai.chat.completions.create(model="any-name", messages=messages, tools=[WRITE_TOOL])
        chunks = list(oai.chat.completions.create(model="any-name", messages=messages, tools=[WRITE_TOOL],
                                                  stream=True, stream_options={"include_usage": True}))
        assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
        return chunks

    first = ask()
    if stream:
        calls = [c for chunk in first for choice in chunk.choices for c in (choice.delta.tool_calls or [])]
        finish = [choice.finish_reason for chunk in first for choice in chunk.choices if choice.finish_reason]
        call_id, name, arguments = calls[0].id, calls[0].function.name, calls[0].function.arguments
    else:
        assert first.model == "any-name"
        call = first.choices[0].message.tool_calls[0]
        finish = [first.choices[0].finish_reason]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert finish == ["tool_calls"]
    assert name == "write_file" and json.loads(arguments) == {"path": "a.txt", "content": "polar"}
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
                 {"role": "tool", "tool_call_id": call_id, "content": "wrote 5 bytes"}]
    second = ask()
    text = "".join(choice.delta.content or "" for chunk in second for choice in chunk.choices) if stream \
        else second.choices[0].message.content
    assert text.strip() == f"Done writing {marker}."
    captured = assert_token_fidelity(proxy, sim, session_id, expected_calls=2)
    assert captured[1].prompt_ids[: len(captured[0].prompt_ids)] == captured[0].prompt_ids


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_call_round_trip(proxy, sim, client, marker, stream):
    session_id, oai = client
    sim.rule({"kind": "reasoning_tool_call", "reasoning": "I should write the file.", "name": "write_file",
              "arguments": {"path": "b.txt", "content": "x"}}, contains=marker, last_role="user")
    sim.rule({"kind": "text", "text": f"All done {marker}"}, any_contains=marker, last_role="tool")
    items: list = [{"role": "developer", "content": "You are Codex."},
                   {"role": "user", "content": [{"type": "input_text", "text": f"go {marker}"}]}]

    def ask():
        kwargs = dict(model="gpt-codex", input=items, tools=[RESPONSES_TOOL], reasoning={"effort": "medium"},
                      include=["reasoning.encrypted_content"], store=False)
        if not stream:
            return oai.responses.create(**kwargs)
        with oai.responses.stream(**kwargs) as events:
            kinds = [event.type for event in events]
            final = events.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        return final

    first = ask()
    assert first.status == "completed"
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "function_call"]
    reasoning_item, call = first.output
    assert "I should write the file." in reasoning_item.summary[0].text
    assert call.name == "write_file" and json.loads(call.arguments) == {"path": "b.txt", "content": "x"}
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "ok"})
    second = ask()
    assert second.output_text.strip() == f"All done {marker}"
    assert second.usage.input_tokens > first.usage.input_tokens
    captured = assert_token_fidelity(proxy, sim, session_id, expected_calls=2)
    # the echoed reasoning reached the engine again, attached to the assistant turn
    assistant = [m for m in captured[1].chat_request["messages"] if m["role"] == "assistant"]
    assert "I should write the file." in assistant[0]["reasoning"]
