"""Specific protocol mappings (protocols.md §4-§5) that the property tests do not pin down."""

from __future__ import annotations

import json

import pytest

from polar_jobs.proxy import anthropic, gemini, openai_chat, reasoning, responses
from polar_jobs.proxy.common import finalize
from polar_jobs.proxy.reply import Reply, ToolCall

pytestmark = pytest.mark.unit


def reply(**kw) -> Reply:
    fields = dict(id="chatcmpl-abc123", created=1700000000, content="hi", reasoning=None, tool_calls=[],
                  finish_reason="stop", stop_reason=None, prompt_tokens=100, completion_tokens=7, cached_tokens=0)
    fields.update(kw)
    return Reply(**fields)


CALL = ToolCall(id="call_1", name="read_file", arguments='{"path": "a.py"}')


# -- Anthropic ----------------------------------------------------------------------------------------
def a_chat(**extra):
    body = {"model": "claude-sonnet", "messages": [{"role": "user", "content": "hi"}], **extra}
    return anthropic.to_chat(body, default_max_tokens=4096)


A_TOOLS = [{"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.mark.parametrize("choice,expected", [
    ({"type": "auto"}, "auto"),
    ({"type": "any"}, "required"),
    ({"type": "none"}, "none"),
    ({"type": "tool", "name": "read_file"}, {"type": "function", "function": {"name": "read_file"}}),
])
def test_anthropic_tool_choice(choice, expected) -> None:
    assert a_chat(tools=A_TOOLS, tool_choice=choice).chat["tool_choice"] == expected


def test_anthropic_empty_tools_drop_tool_choice_and_server_tools() -> None:
    upstream = finalize(a_chat(tools=[], tool_choice={"type": "auto"}), "m", False)
    assert "tools" not in upstream and "tool_choice" not in upstream
    upstream = finalize(a_chat(tools=[{"type": "web_search_20250305", "name": "web_search"}, *A_TOOLS]), "m", False)
    assert [t["function"]["name"] for t in upstream["tools"]] == ["read_file"]
    assert upstream["tools"][0]["function"]["parameters"] == A_TOOLS[0]["input_schema"]


def test_anthropic_defaults_and_parameters() -> None:
    normalized = a_chat(stop_sequences=["###"], thinking={"type": "enabled", "budget_tokens": 2000},
                        system="x-anthropic-billing-header: cc_version=1; hash=abc\nYou are Claude.")
    upstream = finalize(normalized, "m", False)
    assert upstream["max_tokens"] == 4096
    assert upstream["stop"] == ["###"]
    assert upstream["chat_template_kwargs"] == {"enable_thinking": True}
    assert upstream["messages"][0] == {"role": "system", "content": "You are Claude."}


def test_anthropic_tool_results_and_images() -> None:
    body = {"model": "c", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"k": 1}},
                                          {"type": "tool_use", "id": "t2", "name": "g", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "after"},
            {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
            {"type": "tool_result", "tool_use_id": "t2", "content": [
                {"type": "text", "text": "ok"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]},
    ]}
    messages = finalize(anthropic.to_chat(body, default_max_tokens=10), "m", False)["messages"]
    assert messages[1]["content"] == "a\nb"
    assert [json.loads(c["function"]["arguments"]) for c in messages[1]["tool_calls"]] == [{"k": 1}, {}]
    assert messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "[Tool Error] boom"}
    assert messages[3] == {"role": "tool", "tool_call_id": "t2", "content": "ok"}
    assert messages[4]["role"] == "user"
    assert messages[4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert messages[5] == {"role": "user", "content": "after"}


@pytest.mark.parametrize("finish,stop_reason", [
    ("stop", "end_turn"), ("tool_calls", "tool_use"), ("length", "max_tokens"), ("content_filter", "refusal"),
])
def test_anthropic_stop_reasons(finish: str, stop_reason: str) -> None:
    calls = [CALL] if finish == "tool_calls" else []
    out = anthropic.to_response(reply(finish_reason=finish, tool_calls=calls), a_chat())
    assert (out["stop_reason"], out["stop_sequence"]) == (stop_reason, None)


def test_anthropic_stop_sequence_names_the_match() -> None:
    normalized = a_chat(stop_sequences=["</answer>", "###"])
    out = anthropic.to_response(reply(stop_reason="###"), normalized)
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "###")
    out = anthropic.to_response(reply(stop_reason=151645), normalized)  # an EOS token id, not a sequence
    assert (out["stop_reason"], out["stop_sequence"]) == ("end_turn", None)
    out = anthropic.to_response(reply(stop_reason="###"), a_chat())  # not one the client asked for
    assert out["stop_reason"] == "end_turn"


def test_anthropic_usage() -> None:
    out = anthropic.to_response(reply(prompt_tokens=1000, cached_tokens=640, completion_tokens=33), a_chat())
    assert out["usage"]["input_tokens"] == 360
    assert out["usage"]["cache_read_input_tokens"] == 640
    assert out["usage"]["output_tokens"] == 33


def test_anthropic_response_blocks_and_model_name() -> None:
    out = anthropic.to_response(reply(content="", reasoning="think", tool_calls=[
        ToolCall("toolu_1", "f", "not json")]), a_chat())
    assert out["model"] == "claude-sonnet"
    assert [b["type"] for b in out["content"]] == ["thinking", "tool_use"]
    assert reasoning.decode(out["content"][0]["signature"]) == "think"
    assert out["content"][1]["input"] == {}  # unparsable arguments become {}
    assert anthropic.to_response(reply(content=None), a_chat())["content"] == [{"type": "text", "text": ""}]


# -- Gemini ---------------------------------------------------------------------------------------
def g_chat(**extra):
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **extra}
    return gemini.to_chat(body, default_max_tokens=4096, path_model="gemini-2.5-pro")


G_TOOLS = [{"functionDeclarations": [
    {"name": "read_file", "parameters": {"type": "OBJECT", "properties": {
        "path": {"type": "STRING"}, "lines": {"type": "ARRAY", "items": {"type": "INTEGER"}}}}},
    {"name": "ls", "parametersJsonSchema": {"type": "object", "properties": {}}}]}]


@pytest.mark.parametrize("finish,expected", [
    ("stop", "STOP"), ("tool_calls", "STOP"), ("length", "MAX_TOKENS"), ("content_filter", "SAFETY")])
def test_gemini_finish_reason(finish: str, expected: str) -> None:
    out = gemini.to_response(reply(finish_reason=finish), g_chat())
    assert out["candidates"][0]["finishReason"] == expected


def test_gemini_usage_metadata() -> None:
    usage = gemini.to_response(reply(prompt_tokens=1000, cached_tokens=640, completion_tokens=33), g_chat())[
        "usageMetadata"]
    assert usage["promptTokenCount"] == 1000
    assert usage["candidatesTokenCount"] == 33
    assert usage["totalTokenCount"] == 1033
    assert usage["cachedContentTokenCount"] == 640


def test_gemini_schema_types_lowercased() -> None:
    tools = g_chat(tools=G_TOOLS).chat["tools"]
    params = tools[0]["function"]["parameters"]
    assert params["type"] == "object"
    assert params["properties"]["path"]["type"] == "string"
    assert params["properties"]["lines"] == {"type": "array", "items": {"type": "integer"}}
    assert tools[1]["function"]["name"] == "ls"
    config = {"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT", "properties": {
        "title": {"type": "STRING"}}}}
    schema = g_chat(generationConfig=config).chat["response_format"]["json_schema"]["schema"]
    assert schema == {"type": "object", "properties": {"title": {"type": "string"}}}


@pytest.mark.parametrize("config,expected", [
    ({"mode": "ANY", "allowedFunctionNames": ["ls"]}, {"type": "function", "function": {"name": "ls"}}),
    ({"mode": "ANY", "allowedFunctionNames": ["ls", "read_file"]}, "required"),
    ({"mode": "ANY"}, "required"),
    ({"mode": "VALIDATED"}, "required"),
    ({"mode": "NONE"}, "none"),
    ({"mode": "AUTO"}, "auto"),
])
def test_gemini_function_calling_config(config, expected) -> None:
    chat = g_chat(tools=G_TOOLS, toolConfig={"functionCallingConfig": config}).chat
    assert chat["tool_choice"] == expected


def test_gemini_generation_config_and_system() -> None:
    normalized = g_chat(systemInstruction={"parts": [{"text": "be terse"}]}, generationConfig={
        "maxOutputTokens": 300, "stopSequences": ["END"], "temperature": 0.2,
        "thinkingConfig": {"includeThoughts": True}})
    upstream = finalize(normalized, "m", False)
    assert upstream["messages"][0] == {"role": "system", "content": "be terse"}
    assert upstream["max_tokens"] == 300
    assert upstream["stop"] == ["END"]
    assert upstream["temperature"] == 0.2
    assert upstream["chat_template_kwargs"] == {"enable_thinking": True}
    assert normalized.requested_model == "gemini-2.5-pro"


@pytest.mark.parametrize("response,expected", [
    ({"id": "fc_1", "name": "ls", "response": {}}, "fc_1"),
    ({"call_id": "fc_2", "name": "ls", "response": {}}, "fc_2"),
    ({"name": "ls", "response": {}}, "ls"),
])
def test_gemini_function_response_id(response, expected: str) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                         {"role": "user", "parts": [{"functionResponse": response}]}]}
    messages = gemini.to_chat(body, default_max_tokens=1).chat["messages"]
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == expected


def test_gemini_response_part_order() -> None:
    out = gemini.to_response(reply(content="text", reasoning="thought", tool_calls=[CALL]), g_chat())
    parts = out["candidates"][0]["content"]["parts"]
    assert parts[0]["thought"] is True and parts[0]["text"] == "thought"
    assert reasoning.decode(parts[0]["thoughtSignature"]) == "thought"
    assert parts[1] == {"text": "text"}
    assert parts[2]["functionCall"] == {"name": "read_file", "args": {"path": "a.py"}, "id": "call_1"}
    assert out["modelVersion"] == "gemini-2.5-pro"


def test_gemini_cli_dropped_thought_signature_restores_reasoning() -> None:
    signature = reasoning.encode("my thought")
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}, "id": "c1"},
                                                      "thoughtSignature": signature}]}]}
    message = finalize(gemini.to_chat(body, default_max_tokens=1), "m", False)["messages"][1]
    assert message["reasoning"] == "my thought"
    body["contents"][1]["parts"][0]["thoughtSignature"] = "skip_thought_signature_validator"
    message = finalize(gemini.to_chat(body, default_max_tokens=1), "m", False)["messages"][1]
    assert "reasoning" not in message


# -- Responses --------------------------------------------------------------------------------------
def r_chat(items, **extra):
    return responses.to_chat({"model": "gpt-5-codex", "input": items, **extra}, default_max_tokens=4096)


def fc(call_id: str, name: str = "shell") -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps({"id": call_id})}


def out(call_id: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": f"out {call_id}"}


def rs(text: str) -> dict:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


USER = {"role": "user", "content": [{"type": "input_text", "text": "go"}]}


def test_responses_consecutive_calls_form_one_assistant_message() -> None:
    messages = r_chat([USER, fc("a"), fc("b"), out("a"), out("b"), fc("c"), out("c")]).chat["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert messages[1]["content"] is None
    assert [c["id"] for c in messages[4]["tool_calls"]] == ["c"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["a", "b", "c"]


def test_responses_reasoning_attaches_to_the_next_message() -> None:
    assistant_text = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
    messages = r_chat([USER, rs("plan A"), fc("a"), out("a"), rs("plan B"), assistant_text]).chat["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["reasoning_content"] == "plan A" and messages[1]["tool_calls"][0]["id"] == "a"
    assert messages[3]["reasoning_content"] == "plan B" and messages[3]["content"] == "done"


def test_responses_trailing_reasoning_gets_a_synthesized_message() -> None:
    messages = r_chat([USER, rs("only thinking")]).chat["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["reasoning_content"] == "only thinking"
    assert not messages[1]["content"] and not messages[1].get("tool_calls")


def test_responses_reasoning_text_sources() -> None:
    both = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "raw"}],
            "summary": [{"type": "summary_text", "text": "summary"}]}
    encrypted = {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encode("from signature")}
    codex_null = {"type": "reasoning", "summary": [], "encrypted_content": None}
    assert r_chat([USER, both]).chat["messages"][1]["reasoning_content"] == "raw"
    assert r_chat([USER, encrypted]).chat["messages"][1]["reasoning_content"] == "from signature"
    assert r_chat([USER, codex_null, fc("a")]).chat["messages"][1].get("reasoning_content") is None


def test_responses_tools() -> None:
    tools = [{"type": "function", "name": "apply_patch", "parameters": {"type": "object"}},
             {"type": "web_search"}, {"type": "web_search_preview"},
             {"type": "namespace", "name": "agents", "tools": [
                 {"type": "function", "name": "spawn", "input_schema": {"type": "object"}},
                 {"type": "function", "name": "wait", "inputSchema": {"type": "object"}}]}]
    chat = r_chat("hi", tools=tools, tool_choice="auto").chat
    assert [t["function"]["name"] for t in chat["tools"]] == ["apply_patch", "spawn", "wait"]
    assert all(t["type"] == "function" for t in chat["tools"])


def test_responses_parameters() -> None:
    normalized = r_chat("hi", instructions="sys", max_output_tokens=777, reasoning={"effort": "high"})
    upstream = finalize(normalized, "m", False)
    assert upstream["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert upstream["max_tokens"] == 777
    assert upstream["chat_template_kwargs"] == {"enable_thinking": True}
    assert r_chat("hi", reasoning={"effort": "none"}).thinking is False
    assert r_chat("hi").thinking is None


def test_responses_codex_developer_prompt_becomes_system() -> None:
    items = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "codex prompt"}]},
             USER]
    messages = finalize(r_chat(items), "m", False)["messages"]
    assert messages == [{"role": "system", "content": "codex prompt"}, {"role": "user", "content": "go"}]


def test_responses_length_is_incomplete() -> None:
    out_ = responses.to_response(reply(finish_reason="length"), r_chat("hi", max_output_tokens=5))
    assert out_["status"] == "incomplete"
    assert out_["incomplete_details"] == {"reason": "max_output_tokens"}
    done = responses.to_response(reply(), r_chat("hi"))
    assert done["status"] == "completed" and done["incomplete_details"] is None


def test_responses_output_order() -> None:
    out_ = responses.to_response(reply(content="text", reasoning="why", tool_calls=[CALL]), r_chat("hi"))
    kinds = [item["type"] for item in out_["output"]]
    assert kinds == ["reasoning", "message", "function_call"]
    assert reasoning.decode(out_["output"][0]["encrypted_content"]) == "why"
    call = out_["output"][2]
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_1", "read_file", '{"path": "a.py"}')
    assert call["id"].startswith("fc_")
    assert out_["model"] == "gpt-5-codex"


def test_responses_reasoning_never_crosses_a_user_message() -> None:
    messages = r_chat([USER, rs("unanswered thinking"), {"role": "user", "content": "next"}]).chat["messages"]
    assert [m["role"] for m in messages][-2:] == ["assistant", "user"]
    assert messages[-2]["reasoning_content"] == "unanswered thinking"
    assert messages[-1]["content"] == "next"


# -- Chat -------------------------------------------------------------------------------------------
def test_chat_max_completion_tokens_and_developer() -> None:
    body = {"model": "gpt-x", "max_completion_tokens": 99, "stop": "END", "messages": [
        {"role": "system", "content": "one"}, {"role": "user", "content": "hi"},
        {"role": "developer", "content": [{"type": "text", "text": "two"}]}]}
    upstream = finalize(openai_chat.to_chat(body, default_max_tokens=4096), "served", False)
    assert upstream["max_tokens"] == 99
    assert upstream["stop"] == ["END"]
    assert upstream["model"] == "served"
    assert upstream["messages"] == [{"role": "system", "content": "one\n\ntwo"}, {"role": "user", "content": "hi"}]


def test_chat_response_restores_model_and_renames_reasoning() -> None:
    normalized = openai_chat.to_chat({"model": "my-alias", "messages": [{"role": "user", "content": "q"}]},
                                     default_max_tokens=1)
    out_ = openai_chat.to_response(reply(reasoning="because", tool_calls=[CALL]), normalized)
    assert out_["model"] == "my-alias"
    message = out_["choices"][0]["message"]
    assert message["reasoning_content"] == "because"
    assert out_["choices"][0]["finish_reason"] == "tool_calls"
    assert out_["usage"] == {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                             "prompt_tokens_details": {"cached_tokens": 0}}


def test_chat_reasoning_content_reaches_engine_as_reasoning() -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "a", "reasoning_content": "r"}]}
    message = finalize(openai_chat.to_chat(body, default_max_tokens=1), "m", False)["messages"][1]
    assert message == {"role": "assistant", "content": "a", "reasoning": "r"}
