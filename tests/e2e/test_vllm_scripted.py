"""The scripted logits processor on real vLLM: reasoning + tool calls reach each provider's client as its
own tool call (plain and streamed), and the multi-turn exchange prefix-merges into one chain."""

from __future__ import annotations

import json
import uuid

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from polar_jobs.trajectory.build import build_trajectory
from tests.e2e.vllm_tier import assert_vllm_fidelity, vllm, vproxy  # noqa: F401

pytestmark = pytest.mark.e2e

COMMAND_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def tool_script(word: str, name: str, command: str) -> str:
    return (f"<think>\nPlan for {word}: run a command.\n</think>\n\n<tool_call>\n<function={name}>\n"
            f"<parameter=command>\n{command}\n</parameter>\n</function>\n</tool_call>")


def answer(text: str) -> str:
    """A final answer after a (short) think block, as a Qwen3.5 model with thinking on writes it."""
    return f"<think>\nDone.\n</think>\n\n{text}"


def assert_one_chain(proxy, vllm, session_id: str, calls: int) -> None:
    captured = assert_vllm_fidelity(proxy, vllm, session_id, expected_calls=calls)
    assert captured[1].prompt_ids[: len(captured[0].prompt_ids)] == captured[0].prompt_ids
    trajectory = build_trajectory(session_id, captured, builder="prefix_merge")
    assert len(trajectory.traces) == 1, trajectory.breaks
    assert not trajectory.breaks


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_anthropic_thinking_tool_use_round_trip(vproxy, vllm, stream):
    session_id, key = vproxy.new_session()
    claude = anthropic.Anthropic(base_url=vproxy.url, api_key=key, max_retries=0)
    word = uuid.uuid4().hex[:8]
    tools = [{"name": "Bash", "description": "Run a shell command.", "input_schema": COMMAND_SCHEMA}]
    messages = [{"role": "user", "content": f"make hello.txt {vllm.script(tool_script(word, 'Bash', 'echo hi'))}"}]
    kwargs = dict(model="claude-x", max_tokens=256, tools=tools, messages=messages,
                  thinking={"type": "enabled", "budget_tokens": 1024})

    def ask():
        if not stream:
            return claude.messages.create(**kwargs)
        with claude.messages.stream(**kwargs) as events:
            return events.get_final_message()

    first = ask()
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["thinking", "tool_use"]
    assert f"Plan for {word}" in first.content[0].thinking
    assert first.content[1].name == "Bash" and first.content[1].input == {"command": "echo hi"}
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[1].id,
                                                  "content": f"hi {vllm.script(answer('Created hello.txt.'))}"}]})
    second = ask()
    assert second.stop_reason == "end_turn"
    assert "".join(b.text for b in second.content if b.type == "text").strip() == "Created hello.txt."
    assert_one_chain(vproxy, vllm, session_id, 2)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_reasoning_function_call_round_trip(vproxy, vllm, stream):
    session_id, key = vproxy.new_session()
    oai = openai.OpenAI(base_url=f"{vproxy.url}/v1", api_key=key, max_retries=0)
    word = uuid.uuid4().hex[:8]
    tool = {"type": "function", "name": "shell", "description": "Run a command.", "parameters": COMMAND_SCHEMA,
            "strict": False}
    items: list = [{"role": "user", "content": f"go {vllm.script(tool_script(word, 'shell', 'ls -la'))}"}]

    def ask():
        kwargs = dict(model="gpt-x", input=items, tools=[tool], reasoning={"effort": "medium"}, store=False,
                      include=["reasoning.encrypted_content"], max_output_tokens=256)
        if not stream:
            return oai.responses.create(**kwargs)
        with oai.responses.stream(**kwargs) as events:
            return events.get_final_response()

    first = ask()
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    assert f"Plan for {word}" in first.output[0].summary[0].text
    call = first.output[1]
    assert call.name == "shell" and json.loads(call.arguments) == {"command": "ls -la"}
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": f"a b {vllm.script(answer('Listed.'))}"})
    second = ask()
    assert second.output_text.strip() == "Listed."
    assert_one_chain(vproxy, vllm, session_id, 2)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_gemini_thought_function_call_round_trip(vproxy, vllm, stream):
    session_id, key = vproxy.new_session()
    gemini = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=vproxy.url))
    word = uuid.uuid4().hex[:8]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="run_shell_command", description="Run a command.", parameters_json_schema=COMMAND_SCHEMA)])],
        thinking_config=types.ThinkingConfig(include_thoughts=True), max_output_tokens=256)
    contents = [types.Content(role="user", parts=[types.Part(
        text=f"look {vllm.script(tool_script(word, 'run_shell_command', 'pwd'))}")])]

    def ask():
        if not stream:
            return gemini.models.generate_content(model="gemini-x", contents=contents, config=config)
        chunks = list(gemini.models.generate_content_stream(model="gemini-x", contents=contents, config=config))
        parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]
        return types.GenerateContentResponse(candidates=[types.Candidate(
            content=types.Content(role="model", parts=parts), finish_reason=chunks[-1].candidates[0].finish_reason)])

    first = ask()
    thoughts = [p for p in first.candidates[0].content.parts if p.thought]
    assert thoughts and f"Plan for {word}" in thoughts[0].text
    (call,) = first.function_calls
    assert call.name == "run_shell_command" and call.args == {"command": "pwd"}
    contents.append(first.candidates[0].content)
    contents.append(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call.id, name=call.name, response={"output": f"/work {vllm.script(answer('In /work.'))}"}))]))
    second = ask()
    assert second.text.strip() == "In /work."
    assert_one_chain(vproxy, vllm, session_id, 2)


def test_concurrent_requests_keep_their_own_scripts(vllm):
    """Straight to vLLM: scripts through ``vllm_xargs`` too, concurrently, each request its own."""
    from concurrent.futures import ThreadPoolExecutor

    import requests

    def one(i: int) -> str:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
                "vllm_xargs": {"polar_script": f"answer number {i}"}, "return_token_ids": True,
                "chat_template_kwargs": {"enable_thinking": False}}
        return requests.post(f"{vllm.url}/v1/chat/completions", json=body, timeout=120).json()[
            "choices"][0]["message"]["content"]

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(one, range(6))) == [f"answer number {i}" for i in range(6)]
