"""The official google-genai SDK against the proxy: generate_content and its stream, function calls."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import types

from tests.integration.fidelity import assert_token_fidelity

pytestmark = pytest.mark.integration

SHELL = types.FunctionDeclaration(
    name="run_shell_command", description="Run a command.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}},
                            "required": ["command"]})


@pytest.fixture
def client(proxy):
    session_id, key = proxy.new_session()
    return session_id, genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url))


def _ask(gemini, stream: bool, contents, config):
    if not stream:
        return gemini.models.generate_content(model="gemini-2.5-pro", contents=contents, config=config)
    chunks = list(gemini.models.generate_content_stream(model="gemini-2.5-pro", contents=contents, config=config))
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    parts = [part for chunk in chunks for part in chunk.candidates[0].content.parts]
    return types.GenerateContentResponse(candidates=[types.Candidate(
        content=types.Content(role="model", parts=parts), finish_reason=chunks[-1].candidates[0].finish_reason)],
        usage_metadata=chunks[-1].usage_metadata)


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_function_calls_round_trip(proxy, sim, client, marker, stream):
    session_id, gemini = client
    sim.rule({"kind": "tool_calls", "calls": [{"name": "run_shell_command", "arguments": {"command": "ls"}},
                                              {"name": "run_shell_command", "arguments": {"command": "pwd"}}]},
             contains=marker, last_role="user")
    sim.rule({"kind": "reasoning", "reasoning": "Both ran.", "text": f"Listed {marker}."},
             any_contains=marker, last_role="tool")
    config = types.GenerateContentConfig(
        system_instruction="You are Gemini CLI.", tools=[types.Tool(function_declarations=[SHELL])],
        thinking_config=types.ThinkingConfig(include_thoughts=True), temperature=1.0, top_p=0.95)
    contents = [types.Content(role="user", parts=[types.Part(text=f"look around {marker}")])]

    first = _ask(gemini, stream, contents, config)
    calls = first.function_calls
    assert [c.args for c in calls] == [{"command": "ls"}, {"command": "pwd"}]
    assert calls[0].id != calls[1].id  # parallel calls to one function stay distinguishable
    contents.append(first.candidates[0].content)
    contents.append(types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(id=c.id, name=c.name, response={"output": c.args["command"]}))
        for c in calls]))
    second = _ask(gemini, stream, contents, config)
    thought = [p for p in second.candidates[0].content.parts if p.thought]
    assert thought and "Both ran." in thought[0].text
    assert second.text.strip() == f"Listed {marker}."
    assert second.usage_metadata.prompt_token_count > first.usage_metadata.prompt_token_count

    captured = assert_token_fidelity(proxy, sim, session_id, expected_calls=2)
    tool_messages = [m for m in captured[1].chat_request["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [calls[0].id, calls[1].id]
    assert captured[1].chat_request["temperature"] == 1.0


def test_count_tokens(proxy, sim, client):
    session_id, gemini = client
    counted = gemini.models.count_tokens(model="gemini-2.5-pro", contents="how many tokens is this?")
    expected = sim.tokenize_chat({"model": "polar-sim-qwen3",
                                  "messages": [{"role": "user", "content": "how many tokens is this?"}]})
    assert counted.total_tokens == len(expected)
    assert proxy.captures(session_id) == []
