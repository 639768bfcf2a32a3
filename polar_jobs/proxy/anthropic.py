"""Anthropic Messages ⇄ OpenAI Chat (pure): request in, response out, stream events out."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from polar_jobs.proxy import reasoning
from polar_jobs.proxy.common import (
    Normalized, check, content_text, function_tool, image_part, need, number_in, opt, positive_int, tool_call,
)
from polar_jobs.proxy.errors import ProxyError, anthropic_error, bad_request
from polar_jobs.proxy.reply import Reply
from polar_jobs.proxy.sse import named_event

NAME = "anthropic"
error_response = anthropic_error

_BILLING_LINE = re.compile(r"^x-anthropic-billing-header:[^\n]*\n?", re.M)
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


# -- request ------------------------------------------------------------------------------------
def to_chat(body: dict[str, Any], *, default_max_tokens: int, path_model: str | None = None,
            path_stream: bool = False) -> Normalized:
    model = need(body, "model", str)
    messages_in = need(body, "messages", list)
    if not messages_in:
        raise bad_request("messages: at least one message is required", param="messages")
    max_tokens = positive_int(body, "max_tokens") or default_max_tokens
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for index, message in enumerate(messages_in):
        messages.extend(_message(message, f"messages.{index}"))
    chat: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens}
    tools = [_tool(tool, f"tools.{i}") for i, tool in enumerate(opt(body, "tools", list, default=[]))]
    tools = [tool for tool in tools if tool is not None]
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(opt(body, "tool_choice", dict))
        if choice is not None:
            chat["tool_choice"] = choice
        if (body.get("tool_choice") or {}).get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    stops = opt(body, "stop_sequences", list, default=[])
    for i, stop in enumerate(stops):
        check(stop, str, f"stop_sequences.{i}")
    if stops:
        chat["stop"] = stops
    chat["temperature"] = number_in(body, "temperature", 0, 2)
    chat["top_p"] = number_in(body, "top_p", 0, 1)
    chat["top_k"] = opt(body, "top_k", int)
    thinking = opt(body, "thinking", dict)
    enabled = None if thinking is None else thinking.get("type") in ("enabled", "adaptive")
    return Normalized(chat=chat, stream=bool(opt(body, "stream", bool, default=False)), requested_model=model,
                      thinking=enabled, context={"stop_sequences": stops})


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return _BILLING_LINE.sub("", system)
    check(system, list, "system")
    texts = []
    for i, block in enumerate(system):
        check(block, dict, f"system.{i}")
        if block.get("type") != "text":
            raise bad_request(f"system.{i}.type: only text blocks are allowed in system", param=f"system.{i}.type")
        text = _BILLING_LINE.sub("", check(block.get("text"), str, f"system.{i}.text"))
        if text:
            texts.append(text)
    return "\n".join(texts)


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    check(message, dict, where)
    role = need(message, "role", str, f"{where}.")
    content = message.get("content")
    if role == "system":  # Claude Code's mid-conversation system message: merged into the top one
        return [{"role": "system", "content": _plain_text(content, where)}]
    if role not in ("user", "assistant"):
        raise bad_request(f'{where}.role: Unexpected role "{role}". The input message role must be one of '
                          '"user" or "assistant"', param=f"{where}.role")
    if content is None:
        raise bad_request(f"{where}.content: field required", param=f"{where}.content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    check(content, list, f"{where}.content")
    blocks = [check(block, dict, f"{where}.content.{i}") for i, block in enumerate(content)]
    return _assistant(blocks, where) if role == "assistant" else _user(blocks, where)


def _plain_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    check(content, list, f"{where}.content")
    return content_text(content)


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    follow_up_images: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        kind = block.get("type")
        at = f"{where}.content.{i}"
        if kind == "text":
            parts.append({"type": "text", "text": check(block.get("text"), str, f"{at}.text")})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_result":
            message, images = _tool_result(block, at)
            tool_messages.append(message)
            follow_up_images.extend(images)
        elif kind in ("document", "search_result"):
            parts.append({"type": "text", "text": _document_text(block, at)})
        else:
            raise bad_request(f"{at}.type: unsupported content block type {kind!r} in a user message",
                              param=f"{at}.type")
    out = list(tool_messages)
    if follow_up_images:
        out.append({"role": "user", "content": follow_up_images})
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if only_text and len(parts) == 1
                    else parts})
    return out


def _tool_result(block: dict[str, Any], at: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    call_id = need(block, "tool_use_id", str, f"{at}.")
    content = block.get("content")
    images: list[dict[str, Any]] = []
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        check(content, list, f"{at}.content")
        texts = []
        for j, item in enumerate(content):
            check(item, dict, f"{at}.content.{j}")
            if item.get("type") == "text":
                texts.append(check(item.get("text"), str, f"{at}.content.{j}.text"))
            elif item.get("type") == "image":
                images.append(_image(item, f"{at}.content.{j}"))
            elif item.get("type") in ("document", "search_result"):
                texts.append(_document_text(item, f"{at}.content.{j}"))
            else:
                raise bad_request(f"{at}.content.{j}.type: unsupported tool_result content {item.get('type')!r}",
                                  param=f"{at}.content.{j}.type")
        text = "\n".join(texts)
    if block.get("is_error"):
        text = "[Tool Error] " + text
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _image(block: dict[str, Any], at: str) -> dict[str, Any]:
    source = need(block, "source", dict, f"{at}.")
    if source.get("type") == "base64":
        media = need(source, "media_type", str, f"{at}.source.")
        data = need(source, "data", str, f"{at}.source.")
        return image_part(f"data:{media};base64,{data}")
    if source.get("type") == "url":
        return image_part(need(source, "url", str, f"{at}.source."))
    raise bad_request(f"{at}.source.type: unsupported image source {source.get('type')!r}", param=f"{at}.source.type")


def _document_text(block: dict[str, Any], at: str) -> str:
    source = block.get("source") or {}
    if block.get("type") == "search_result":
        return content_text(block.get("content"))
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return source["data"]
    raise bad_request(f"{at}.source: only plain-text documents are supported", param=f"{at}.source")


def _assistant(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        kind = block.get("type")
        at = f"{where}.content.{i}"
        if kind == "text":
            texts.append(check(block.get("text"), str, f"{at}.text"))
        elif kind == "thinking":
            thinking.append(check(block.get("thinking"), str, f"{at}.thinking"))
        elif kind == "redacted_thinking":
            decoded = reasoning.decode(block.get("data"))
            if decoded:
                thinking.append(decoded)
        elif kind == "tool_use":
            call_id = need(block, "id", str, f"{at}.")
            name = need(block, "name", str, f"{at}.")
            calls.append(tool_call(call_id, name, opt(block, "input", dict, f"{at}.", default={})))
        elif kind in ("server_tool_use", "web_search_tool_result"):
            continue  # hosted tools never reach the engine
        else:
            raise bad_request(f"{at}.type: unsupported content block type {kind!r} in an assistant message",
                              param=f"{at}.type")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if thinking:
        message["reasoning_content"] = "\n".join(thinking)
    if calls:
        message["tool_calls"] = calls
    if message["content"] is None and not calls:
        message["content"] = ""
    return [message]


def _tool(tool: Any, where: str) -> dict[str, Any] | None:
    check(tool, dict, where)
    if "input_schema" not in tool and tool.get("type") not in (None, "custom"):
        return None  # server tools (web_search_2025…, bash_2025…, …) are the provider's, not the model's
    schema = tool.get("input_schema")
    return function_tool(tool.get("name"), tool.get("description"), schema, where)


def _tool_choice(choice: dict[str, Any] | None) -> Any:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": need(choice, "name", str, "tool_choice.")}}
    raise bad_request(f"tool_choice.type: expected auto, any, none or tool, got {kind!r}", param="tool_choice.type")


# -- response -----------------------------------------------------------------------------------
def to_response(reply: Reply, normalized: Normalized) -> dict[str, Any]:
    stop_reason, stop_sequence = _stop(reply, normalized)
    return {
        "id": _message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": normalized.requested_model,
        "content": _content_blocks(reply),
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(reply),
    }


def _content_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": reasoning.encode(reply.reasoning)})
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments()})
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return blocks


def _stop(reply: Reply, normalized: Normalized) -> tuple[str, str | None]:
    if isinstance(reply.stop_reason, str) and reply.stop_reason in normalized.context.get("stop_sequences", []):
        return "stop_sequence", reply.stop_reason
    if reply.tool_calls and reply.finish_reason in ("stop", "tool_calls"):
        return "tool_use", None
    return _STOP_REASONS.get(reply.finish_reason, "end_turn"), None


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "input_tokens": reply.prompt_tokens - reply.cached_tokens,
        "output_tokens": reply.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reply.cached_tokens,
    }


def _message_id(reply: Reply) -> str:
    return "msg_" + reply.id.removeprefix("chatcmpl-")


def to_events(reply: Reply, normalized: Normalized) -> Iterator[bytes]:
    """The full Messages stream grammar, synthesized from one finished completion."""
    message = to_response(reply, normalized)
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    yield named_event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    yield named_event("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": message["usage"],
    })
    yield named_event("message_stop", {"type": "message_stop"})


def _block_events(index: int, block: dict[str, Any]) -> Iterator[bytes]:
    kind = block["type"]
    if kind == "thinking":
        opening, deltas = {"type": "thinking", "thinking": "", "signature": ""}, [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]}]
    elif kind == "tool_use":
        opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}]
    else:
        opening, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}] if block[
            "text"] else []
    yield named_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
    for change in deltas:
        yield named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": change})
    yield named_event("content_block_stop", {"type": "content_block_stop", "index": index})


def error_event(error: ProxyError) -> bytes:
    """An error in the middle of a stream (``event: error``)."""
    return named_event("error", anthropic_error(error)[1])
