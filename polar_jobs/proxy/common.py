"""Shared normalization into the one OpenAI Chat request served upstream, and input checks (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from polar_jobs import jsonio
from polar_jobs.proxy.errors import bad_request

_HUGE_BOUND = 9007199254740991  # ±2^53-1 bounds in Claude/opencode schemas break grammar decoding
_BOUND_KEYS = frozenset({"minimum", "maximum"})
MAX_SCHEMA_DEPTH = 64
CAPTURE_FIELDS = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}


@dataclass
class Normalized:
    """A provider request rewritten as OpenAI Chat, plus what the response converter needs."""

    chat: dict[str, Any]
    stream: bool
    requested_model: str | None
    thinking: bool | None = None  # what the harness asked for; None when it said nothing
    context: dict[str, Any] = field(default_factory=dict)
    prepared: bool = False  # shared rules applied to ``chat`` (see ``prepare``)


# -- input checks that name the offending field --------------------------------------------------
def need(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``body[key]``, required and of ``kind``; a 400 naming the field otherwise."""
    name = f"{where}{key}"
    if key not in body or body[key] is None:
        raise bad_request(f"{name}: field required", param=name)
    return check(body[key], kind, name)


def opt(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "", default: Any = None) -> Any:
    """``body[key]`` if present (and not null), checked to be of ``kind``; else ``default``."""
    if key not in body or body[key] is None:
        return default
    return check(body[key], kind, f"{where}{key}")


def check(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:  # True is an int in Python, not in JSON
        raise bad_request(f"{name}: expected {_kind_names(kinds)}, got boolean", param=name)
    if not isinstance(value, kinds):
        raise bad_request(f"{name}: expected {_kind_names(kinds)}, got {_json_type(value)}", param=name)
    return value


def positive_int(body: dict[str, Any], key: str, where: str = "") -> int | None:
    value = opt(body, key, int, where)
    if value is not None and value < 1:
        raise bad_request(f"{where}{key}: must be at least 1, got {value}", param=f"{where}{key}")
    return value


def number_in(body: dict[str, Any], key: str, low: float, high: float, where: str = "") -> float | None:
    value = opt(body, key, (int, float), where)
    if value is not None and not low <= value <= high:
        raise bad_request(f"{where}{key}: must be between {low} and {high}, got {value}", param=f"{where}{key}")
    return value


def _kind_names(kinds: tuple[type, ...]) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _json_type(value: Any) -> str:
    return {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


# -- shared rules -------------------------------------------------------------------------------
def prepare(normalized: Normalized) -> None:
    """The shared message and tool rules, applied once in place; a 400 for schemas nested absurdly deep.

    Runs before anything is recorded, so input it rejects leaves the store unchanged.
    """
    if normalized.prepared:
        return
    chat = normalized.chat
    chat["messages"] = upstream_messages(chat["messages"])
    if not chat.get("tools"):
        chat.pop("tools", None)
        chat.pop("tool_choice", None)
    else:
        chat["tools"] = [clean_tool(tool, f"tools.{index}") for index, tool in enumerate(chat["tools"])]
    normalized.prepared = True


def finalize(normalized: Normalized, served_model: str, force_no_thinking: bool) -> dict[str, Any]:
    """The request sent upstream: shared rules, served model, thinking switch and capture fields."""
    prepare(normalized)
    chat = dict(normalized.chat)
    chat["model"] = served_model
    kwargs = dict(chat.get("chat_template_kwargs") or {})
    if force_no_thinking:
        kwargs["enable_thinking"] = False
    elif normalized.thinking is not None:
        kwargs["enable_thinking"] = normalized.thinking
    if kwargs:
        chat["chat_template_kwargs"] = kwargs
    chat.pop("stream", None)
    chat.pop("stream_options", None)
    chat.update(CAPTURE_FIELDS)
    return {key: value for key, value in chat.items() if value is not None}


def upstream_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """developer→system, every system message merged into one at the top, reasoning_content→reasoning."""
    system_parts: list[str] = []
    rest: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = content_text(message.get("content"))
            if text:
                system_parts.append(text)
            continue
        if "reasoning_content" in message:
            message = {k: v for k, v in message.items() if k != "reasoning_content"} | {
                "reasoning": message["reasoning_content"]}
        rest.append(message)
    if system_parts:
        rest.insert(0, {"role": "system", "content": "\n\n".join(system_parts)})
    return rest


def content_text(content: Any) -> str:
    """Plain text of a Chat content (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("text"))


def clean_tool(tool: dict[str, Any], where: str = "tools") -> dict[str, Any]:
    """A Chat tool with its schema cleaned; memoized, since a harness resends the same tools every call.

    The returned object is shared between calls: treat it as read-only.
    """
    try:
        serialized = jsonio.dumps(tool)
    except jsonio.JSONEncodeError:  # parsed JSON always serializes, unless it is nested too deeply
        raise bad_request(f"{where}.function.parameters: nested deeper than {MAX_SCHEMA_DEPTH} levels",
                          param=f"{where}.function.parameters") from None
    return _clean_tool(serialized, where)


@lru_cache(maxsize=2048)
def _clean_tool(serialized: bytes, where: str) -> dict[str, Any]:
    tool = jsonio.loads(serialized)
    function = dict(tool["function"])
    if "parameters" in function:
        function["parameters"] = clean_schema(function["parameters"], f"{where}.function.parameters")
    return {"type": "function", "function": function}


def clean_schema(schema: Any, where: str = "schema", depth: int = 0) -> Any:
    """Drop ``$schema`` and ±2^53 integer bounds, recursively (recursing only into containers: hot path)."""
    if depth > MAX_SCHEMA_DEPTH:
        raise bad_request(f"{where}: nested deeper than {MAX_SCHEMA_DEPTH} levels", param=where)
    if isinstance(schema, list):
        return [clean_schema(item, where, depth + 1) if isinstance(item, (dict, list)) else item for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned = {}
    for key, value in schema.items():
        if key == "$schema" or (key in _BOUND_KEYS and isinstance(value, int) and abs(value) >= _HUGE_BOUND):
            continue
        cleaned[key] = clean_schema(value, where, depth + 1) if isinstance(value, (dict, list)) else value
    return cleaned


def function_tool(name: Any, description: Any, parameters: Any, where: str) -> dict[str, Any]:
    """A Chat function tool, with the name and schema checked."""
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.name: a non-empty string is required", param=f"{where}.name")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    check(parameters, dict, f"{where}.parameters")
    function: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        function["description"] = description
    function["parameters"] = parameters
    return {"type": "function", "function": function}


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """A Chat assistant tool call; object arguments are serialized compactly as the engine expects."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments_text(arguments)}}


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as JSON text: strings kept verbatim, objects serialized, None as ``{}``."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}
