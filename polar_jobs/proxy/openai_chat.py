"""OpenAI Chat Completions ⇄ the upstream's Chat Completions: a checked near-passthrough (pure)."""

from __future__ import annotations

from typing import Any, Iterator

from polar_jobs.proxy.common import Normalized, check, need, number_in, opt, positive_int
from polar_jobs.proxy.errors import ProxyError, bad_request, openai_error
from polar_jobs.proxy.reply import Reply
from polar_jobs.proxy.sse import data_event

NAME = "openai_chat"
error_response = openai_error

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_PART_TYPES = ("text", "image_url")
_PASSED = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
           "repetition_penalty", "response_format", "parallel_tool_calls", "logit_bias", "chat_template_kwargs",
           "min_tokens", "ignore_eos", "skip_special_tokens")


def to_chat(body: dict[str, Any], *, default_max_tokens: int, path_model: str | None = None,
            path_stream: bool = False) -> Normalized:
    model = need(body, "model", str)
    messages = need(body, "messages", list)
    if not messages:
        raise bad_request("messages: at least one message is required", param="messages")
    n = opt(body, "n", int, default=1)
    if n != 1:
        raise bad_request(f"n: only n=1 is supported (got {n}); send separate requests", param="n")
    modalities = opt(body, "modalities", list, default=[])
    if "audio" in modalities or body.get("audio") is not None:
        raise bad_request("audio output is not supported by this proxy", param="modalities")
    chat: dict[str, Any] = {"messages": [_message(m, f"messages.{i}") for i, m in enumerate(messages)]}
    max_tokens = positive_int(body, "max_completion_tokens") or positive_int(body, "max_tokens")
    if max_tokens:
        chat["max_tokens"] = max_tokens
    tools = opt(body, "tools", list, default=[])
    for i, tool in enumerate(tools):
        check(tool, dict, f"tools.{i}")
        if tool.get("type") != "function":
            raise bad_request(f"tools.{i}.type: only function tools are supported", param=f"tools.{i}.type")
        need(need(tool, "function", dict, f"tools.{i}."), "name", str, f"tools.{i}.function.")
    if tools:
        chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = check(body["tool_choice"], (str, dict), "tool_choice")
    stop = body.get("stop")
    if stop is not None:
        chat["stop"] = [stop] if isinstance(check(stop, (str, list), "stop"), str) else stop
    number_in(body, "temperature", 0, 2)
    number_in(body, "top_p", 0, 1)
    for key in _PASSED:
        if body.get(key) is not None:
            chat[key] = body[key]
    stream = bool(opt(body, "stream", bool, default=False))
    options = opt(body, "stream_options", dict, default={})
    return Normalized(chat=chat, stream=stream, requested_model=model, context={
        "include_usage": bool(options.get("include_usage")),
        "logprobs": bool(body.get("logprobs")),
        "return_token_ids": bool(body.get("return_token_ids")),
    })


def _message(message: Any, where: str) -> dict[str, Any]:
    check(message, dict, where)
    role = need(message, "role", str, f"{where}.")
    if role not in _ROLES:
        raise bad_request(f"{where}.role: unknown role {role!r}", param=f"{where}.role")
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            check(part, dict, f"{where}.content.{j}")
            if part.get("type") not in _PART_TYPES:
                raise bad_request(f"{where}.content.{j}.type: unsupported content part {part.get('type')!r}",
                                  param=f"{where}.content.{j}.type")
    elif content is not None:
        check(content, str, f"{where}.content")
    if role == "tool":
        need(message, "tool_call_id", str, f"{where}.")
    for k, call in enumerate(opt(message, "tool_calls", list, f"{where}.", default=[])):
        check(call, dict, f"{where}.tool_calls.{k}")
        function = need(call, "function", dict, f"{where}.tool_calls.{k}.")
        need(function, "name", str, f"{where}.tool_calls.{k}.function.")
    return message


def to_response(reply: Reply, normalized: Normalized) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = _tool_calls(reply)
    choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                              "finish_reason": _finish(reply)}
    if normalized.context.get("logprobs") and reply.logprobs_content is not None:
        choice["logprobs"] = {"content": reply.logprobs_content}
    response: dict[str, Any] = {
        "id": reply.id, "object": "chat.completion", "created": reply.created, "model": normalized.requested_model,
        "choices": [choice], "usage": _usage(reply),
    }
    if normalized.context.get("return_token_ids"):
        choice["token_ids"] = reply.response_ids
        response["prompt_token_ids"] = reply.prompt_ids
    return response


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls and reply.finish_reason == "stop" else reply.finish_reason


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls]


def _usage(reply: Reply) -> dict[str, Any]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}


def to_events(reply: Reply, normalized: Normalized) -> Iterator[bytes]:
    """``chat.completion.chunk`` frames, the separate usage chunk when asked for, then ``[DONE]``."""
    include_usage = normalized.context.get("include_usage", False)

    def frame(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": reply.id, "object": "chat.completion.chunk", "created": reply.created,
            "model": normalized.requested_model,
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                                  "finish_reason": finish}],
        }
        if include_usage:
            body["usage"] = None
        return body

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return data_event(frame(delta, finish))

    yield chunk({"role": "assistant", "content": ""})
    if reply.reasoning:
        yield chunk({"reasoning_content": reply.reasoning})
    if reply.content:
        yield chunk({"content": reply.content})
    for index, call in enumerate(_tool_calls(reply)):
        yield chunk({"tool_calls": [dict(call, index=index)]})
    yield chunk({}, finish=_finish(reply))
    if include_usage:
        yield data_event(frame(None) | {"usage": _usage(reply)})
    yield data_event("[DONE]")


def error_event(error: ProxyError) -> bytes:
    return data_event(openai_error(error)[1])
