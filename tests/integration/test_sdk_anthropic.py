"""The official anthropic SDK against the proxy: create and stream, tool_use, thinking round trips."""

from __future__ import annotations

import anthropic
import pytest

from tests.integration.fidelity import assert_token_fidelity

pytestmark = pytest.mark.integration

BASH_TOOL = {"name": "Bash", "description": "Run a shell command.",
             "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                              "properties": {"command": {"type": "string"},
                                             "timeout": {"type": "integer", "maximum": 9007199254740991}},
                              "required": ["command"], "additionalProperties": False}}
SERVER_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}


@pytest.fixture
def client(proxy):
    session_id, key = proxy.new_session()
    return session_id, anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)


def _ask(claude, stream: bool, **kwargs):
    if not stream:
        return claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as events:
        kinds = [event.type for event in events]
        message = events.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    return message


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_tool_use_round_trip(proxy, sim, client, marker, stream):
    session_id, claude = client
    sim.rule({"kind": "reasoning_tool_call", "reasoning": f"Plan for {marker}: run echo.", "name": "Bash",
              "arguments": {"command": "echo hi > hello.txt"}}, contains=marker, last_role="user")
    sim.rule({"kind": "text", "text": "Created hello.txt."}, any_contains=marker, last_role="tool")
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=sdk-cli"},
              {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": f"make hello.txt {marker}"}]}]
    kwargs = dict(model="claude-test", max_tokens=32000 if stream else 16000, system=system, tools=[BASH_TOOL, SERVER_TOOL],
                  thinking={"type": "enabled", "budget_tokens": 2048}, messages=messages)

    first = _ask(claude, stream, **kwargs)
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["thinking", "tool_use"]
    thinking, tool_use = first.content
    assert f"Plan for {marker}: run echo." in thinking.thinking and thinking.signature
    assert tool_use.name == "Bash" and tool_use.input == {"command": "echo hi > hello.txt"}
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0

    messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id,
                                                  "content": "(Bash completed with no output)", "is_error": False}]})
    second = _ask(claude, stream, **kwargs)
    assert second.stop_reason == "end_turn"
    assert [block.type for block in second.content] == ["text"]
    assert second.content[0].text.strip() == "Created hello.txt."

    captured = assert_token_fidelity(proxy, sim, session_id, expected_calls=2)
    chat = captured[1].chat_request
    assert chat["messages"][0] == {"role": "system", "content": "You are Claude Code."}  # billing line stripped
    assert [t["function"]["name"] for t in chat["tools"]] == ["Bash"]  # server tool dropped
    assert "$schema" not in chat["tools"][0]["function"]["parameters"]
    assert chat["max_tokens"] <= 32768 - captured[1].prompt_tokens  # clamped to the context left
    assistant = chat["messages"][2]
    assert f"Plan for {marker}" in assistant["reasoning"]  # thinking round-tripped to the engine
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": tool_use.id,
                                   "content": "(Bash completed with no output)"}


def test_mid_conversation_system_and_error_result(proxy, sim, client, marker):
    session_id, claude = client
    sim.rule({"kind": "text", "text": "Noted the failure."}, any_contains=marker)
    message = claude.messages.create(model="claude", max_tokens=100, messages=[
        {"role": "user", "content": f"<system-reminder>today</system-reminder> start {marker}"},
        {"role": "system", "content": "Mid-conversation instructions."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "false"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "Bash",
                                           "input": {"command": "true"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "exit 1"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"},
            {"type": "text", "text": "continue"}]},
    ], tools=[BASH_TOOL], stop_sequences=["<END>"])
    assert message.content[0].text.strip() == "Noted the failure."
    (captured,) = assert_token_fidelity(proxy, sim, session_id, expected_calls=1)
    roles = [m["role"] for m in captured.chat_request["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assert captured.chat_request["messages"][0]["content"] == "Mid-conversation instructions."
    assert captured.chat_request["messages"][3]["content"] == "[Tool Error] exit 1"
    assert len(captured.chat_request["messages"][2]["tool_calls"]) == 2
    assert captured.chat_request["stop"] == ["<END>"]


def test_stop_sequence_and_max_tokens(proxy, sim, client, marker):
    _, claude = client
    sim.rule({"kind": "text", "text": "alpha beta <END> gamma"}, contains=f"stop {marker}")
    sim.rule({"kind": "text", "text": "one two three four five six seven eight nine ten"},
             contains=f"long {marker}")
    stopped = claude.messages.create(model="c", max_tokens=100, stop_sequences=["<END>"],
                                     messages=[{"role": "user", "content": f"stop {marker}"}])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "<END>"
    assert "gamma" not in stopped.content[0].text
    cut = claude.messages.create(model="c", max_tokens=3, messages=[{"role": "user", "content": f"long {marker}"}])
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3


def test_count_tokens_is_the_engines_count_and_records_nothing(proxy, sim, client, marker):
    session_id, claude = client
    request = dict(model="claude-test", system="Be brief.", tools=[BASH_TOOL],
                   messages=[{"role": "user", "content": f"count me, please {marker}"}])
    counted = claude.messages.count_tokens(**request)
    assert proxy.captures(session_id) == []
    served = claude.messages.create(max_tokens=50, **request)
    assert counted.input_tokens == served.usage.input_tokens
    (captured,) = proxy.captures(session_id)
    assert counted.input_tokens == len(captured.prompt_ids) == len(sim.tokenize_chat(captured.chat_request))
