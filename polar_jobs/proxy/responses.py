"""OpenAI Responses ⇄ OpenAI Chat (pure): Codex's API, request in, response out, stream events out."""

from __future__ import annotations

from typing import Any, Iterator

from polar_jobs.proxy import reasoning
from polar_jobs.proxy.common import Normalized, check, function_tool, image_part, need, number_in, opt, \
    positive_int, tool_call
from polar_jobs.proxy.errors import ProxyError, bad_request, openai_error
from polar_jobs.proxy.reply import Reply, ToolCall
from polar_jobs.proxy.responses_stream import stream_events
from polar_jobs.proxy.sse import named_event

NAME = "responses"
error_response = openai_error

_CALL_ITEMS = ("function_call", "local_shell_call", "shell_call", "custom_tool_call")
_OUTPUT_ITEMS = ("function_call_output", "local_shell_call_output", "shell_call_output", "custom_tool_call_output")
_HOSTED_TOOLS = ("web_search", "web_search_preview", "file_search", "mcp", "computer_use_preview", "computer_use",
                 "code_interpreter", "image_generation", "tool_search", "web_search_2025_08_26")
_SHELL_SCHEMA = {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}, "description": "argv of the command to run"},
    "workdir": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["command"]}
_CUSTOM_SCHEMA = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


# -- request ------------------------------------------------------------------------------------
def to_chat(body: dict[str, Any], *, default_max_tokens: int, path_model: str | None = None,
            path_stream: bool = False) -> Normalized:
    model = need(body, "model", str)
    if body.get("previous_response_id") is not None:
        raise bad_request("previous_response_id: this proxy stores no responses; send the whole input",
                          param="previous_response_id")
    if "input" not in body or body["input"] is None:
        raise bad_request("input: field required", param="input")
    messages: list[dict[str, Any]] = []
    instructions = opt(body, "instructions", str)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    raw_input = check(body["input"], (str, list), "input")
    messages.extend([{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else _items(raw_input))
    if not messages:
        raise bad_request("input: at least one item is required", param="input")
    tools, kinds = _tools(opt(body, "tools", list, default=[]))
    chat: dict[str, Any] = {"messages": messages}
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
    max_tokens = positive_int(body, "max_output_tokens")
    if max_tokens:
        chat["max_tokens"] = max_tokens
    chat["temperature"] = number_in(body, "temperature", 0, 2)
    chat["top_p"] = number_in(body, "top_p", 0, 1)
    text_format = (opt(body, "text", dict, default={}).get("format") or {})
    if text_format.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": text_format.get("name", "output"), "schema": text_format.get("schema", {}),
            "strict": bool(text_format.get("strict"))}}
    effort = (opt(body, "reasoning", dict) or {}).get("effort")
    thinking = None if "reasoning" not in body or body["reasoning"] is None else effort != "none"
    return Normalized(chat=chat, stream=bool(opt(body, "stream", bool, default=False)), requested_model=model,
                      thinking=thinking, context={"tool_kinds": kinds, "request": _echo_fields(body)})


def _items(items: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    pending_reasoning: list[str] = []
    open_turn: dict[str, Any] | None = None  # the assistant message that following calls join

    def assistant_turn(content: str | None) -> dict[str, Any]:
        turn: dict[str, Any] = {"role": "assistant", "content": content}
        if pending_reasoning:
            turn["reasoning_content"] = "\n".join(pending_reasoning)
            pending_reasoning.clear()
        messages.append(turn)
        return turn

    for index, item in enumerate(items):
        where = f"input.{index}"
        check(item, dict, where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = need(item, "role", str, f"{where}.")
            if role == "assistant":
                open_turn = assistant_turn(_text_of(item.get("content"), where))
            elif role in ("user", "system", "developer"):
                if pending_reasoning:  # reasoning the model ended its turn with stays before the next input
                    assistant_turn("")
                messages.append({"role": role, "content": _user_content(item.get("content"), where)})
                open_turn = None
            else:
                raise bad_request(f"{where}.role: unknown role {role!r}", param=f"{where}.role")
        elif kind in _CALL_ITEMS:
            if open_turn is None:
                open_turn = assistant_turn(None)
            open_turn.setdefault("tool_calls", []).append(_call(item, kind, where))
        elif kind in _OUTPUT_ITEMS:
            call_id = need(item, "call_id", str, f"{where}.")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _output_text(item.get("output"), where)})
            open_turn = None
        elif kind == "reasoning":
            text = _reasoning_text(item)
            if text:
                pending_reasoning.append(text)
            open_turn = None
        elif kind == "item_reference":
            raise bad_request(f"{where}: item_reference needs stored responses; send the item itself",
                              param=f"{where}.type")
        else:
            raise bad_request(f"{where}.type: unsupported input item type {kind!r}", param=f"{where}.type")
    if pending_reasoning:
        assistant_turn("")
    return messages


def _call(item: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    call_id = need(item, "call_id", str, f"{where}.")
    if kind == "function_call":
        return tool_call(call_id, need(item, "name", str, f"{where}."), opt(item, "arguments", str, f"{where}.", "{}"))
    if kind == "custom_tool_call":
        return tool_call(call_id, need(item, "name", str, f"{where}."), {"input": opt(item, "input", str, f"{where}.", "")})
    action = need(item, "action", dict, f"{where}.")
    if kind == "shell_call":
        return tool_call(call_id, "shell", {"commands": action.get("commands", []),
                                            "timeout_ms": action.get("timeout_ms")})
    arguments = {"command": action.get("command", [])}
    if action.get("working_directory"):
        arguments["workdir"] = action["working_directory"]
    if action.get("timeout_ms"):
        arguments["timeout_ms"] = action["timeout_ms"]
    return tool_call(call_id, "local_shell", arguments)


def _reasoning_text(item: dict[str, Any]) -> str:
    for key in ("content", "summary"):
        texts = [part.get("text", "") for part in item.get(key) or [] if isinstance(part, dict)]
        if any(texts):
            return "\n".join(texts)
    return reasoning.decode(item.get("encrypted_content")) or ""


def _text_of(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    check(content, list, f"{where}.content")
    texts = []
    for j, part in enumerate(content):
        check(part, dict, f"{where}.content.{j}")
        texts.append(part.get("text") or part.get("refusal") or "")
    return "".join(texts)


def _user_content(content: Any, where: str) -> Any:
    if isinstance(content, str):
        return content
    check(content, list, f"{where}.content")
    parts = []
    for j, part in enumerate(content):
        at = f"{where}.content.{j}"
        check(part, dict, at)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": check(part.get("text"), str, f"{at}.text")})
        elif kind == "input_image":
            parts.append(image_part(need(part, "image_url", str, f"{at}.")))
        else:
            raise bad_request(f"{at}.type: unsupported content part {kind!r}", param=f"{at}.type")
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _output_text(output: Any, where: str) -> str:
    if output is None or isinstance(output, str):
        return output or ""
    if isinstance(output, list):
        return "\n".join(part.get("text", "") for part in output if isinstance(part, dict))
    raise bad_request(f"{where}.output: expected string or array", param=f"{where}.output")


def _tools(tools: list[Any], where: str = "tools") -> tuple[list[dict[str, Any]], dict[str, str]]:
    out: list[dict[str, Any]] = []
    kinds: dict[str, str] = {}
    for index, tool in enumerate(tools):
        at = f"{where}.{index}"
        check(tool, dict, at)
        kind = tool.get("type")
        if kind == "function":
            schema = tool.get("parameters", tool.get("input_schema", tool.get("inputSchema")))
            out.append(function_tool(tool.get("name"), tool.get("description"), schema, at))
            kinds[tool["name"]] = "function"
        elif kind == "namespace":  # Codex nests sub-agent tools; the engine sees them flat
            nested, nested_kinds = _tools(opt(tool, "tools", list, f"{at}.", []), f"{at}.tools")
            out.extend(nested)
            kinds.update(nested_kinds)
        elif kind == "custom":
            out.append(function_tool(tool.get("name"), tool.get("description"), _CUSTOM_SCHEMA, at))
            kinds[tool["name"]] = "custom"
        elif kind == "local_shell":
            out.append(function_tool("local_shell", "Run a shell command.", _SHELL_SCHEMA, at))
            kinds["local_shell"] = "local_shell"
        elif kind in _HOSTED_TOOLS or (isinstance(kind, str) and kind.startswith("web_search")):
            continue
        else:
            raise bad_request(f"{at}.type: unsupported tool type {kind!r}", param=f"{at}.type")
    return out, kinds


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": need(choice, "name", str, "tool_choice.")}}
    if isinstance(choice, dict) and choice.get("type") in ("allowed_tools",):
        return choice.get("mode", "auto")
    raise bad_request(f"tool_choice: unsupported value {choice!r}", param="tool_choice")


def _echo_fields(body: dict[str, Any]) -> dict[str, Any]:
    """Request fields a Responses object repeats back."""
    return {key: body.get(key) for key in ("instructions", "max_output_tokens", "parallel_tool_calls",
                                            "temperature", "top_p", "tool_choice", "tools", "metadata", "store",
                                            "reasoning", "text", "previous_response_id")}


# -- response -----------------------------------------------------------------------------------
def to_response(reply: Reply, normalized: Normalized) -> dict[str, Any]:
    return response_object(reply, normalized, output_items(reply, normalized), final=True)


def output_items(reply: Reply, normalized: Normalized) -> list[dict[str, Any]]:
    base = reply.id.removeprefix("chatcmpl-")
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append({"id": f"rs_{base}", "type": "reasoning", "status": "completed",
                      "summary": [{"type": "summary_text", "text": reply.reasoning}],
                      "content": [{"type": "reasoning_text", "text": reply.reasoning}],
                      "encrypted_content": reasoning.encode(reply.reasoning)})
    if reply.content or not (reply.tool_calls or reply.reasoning):
        items.append({"id": f"msg_{base}", "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.content or "", "annotations": [],
                                   "logprobs": []}]})
    kinds = normalized.context.get("tool_kinds", {})
    for call in reply.tool_calls:
        items.append(_call_item(call, kinds.get(call.name, "function")))
    return items


def _call_item(call: ToolCall, kind: str) -> dict[str, Any]:
    if kind == "custom":
        return {"id": f"ctc_{call.id}", "type": "custom_tool_call", "status": "completed", "call_id": call.id,
                "name": call.name, "input": str(call.parsed_arguments().get("input", ""))}
    if kind == "local_shell":
        args = call.parsed_arguments()
        command = args.get("command") or []
        return {"id": f"lsh_{call.id}", "type": "local_shell_call", "status": "completed", "call_id": call.id,
                "action": {"type": "exec", "command": command if isinstance(command, list) else [str(command)],
                           "working_directory": args.get("workdir"), "timeout_ms": args.get("timeout_ms"),
                           "env": {}, "user": None}}
    return {"id": f"fc_{call.id}", "type": "function_call", "status": "completed", "call_id": call.id,
            "name": call.name, "arguments": call.arguments}


def response_object(reply: Reply, normalized: Normalized, output: list[dict[str, Any]], final: bool) -> dict[str, Any]:
    request = normalized.context.get("request", {})
    truncated = reply.finish_reason == "length"
    status = ("incomplete" if truncated else "completed") if final else "in_progress"
    return {
        "id": "resp_" + reply.id.removeprefix("chatcmpl-"),
        "object": "response",
        "created_at": reply.created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated and final else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": normalized.requested_model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": bool(request.get("store")),
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "metadata": request.get("metadata") or {},
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        } if final else None,
    }


def to_events(reply: Reply, normalized: Normalized) -> Iterator[bytes]:
    return stream_events(response_object(reply, normalized, [], final=False), output_items(reply, normalized),
                         to_response(reply, normalized))


def error_event(error: ProxyError) -> bytes:
    return named_event("error", {"type": "error", "code": error.code, "message": error.message, "param": error.param,
                                 "sequence_number": 0})
