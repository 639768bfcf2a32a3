"""Gemini generateContent ⇄ OpenAI Chat (pure): request in, response out, stream frames out."""

from __future__ import annotations

import json
from typing import Any, Iterator

from polar_jobs.proxy import reasoning
from polar_jobs.proxy.common import Normalized, check, function_tool, image_part, need, opt, tool_call
from polar_jobs.proxy.errors import ProxyError, bad_request, google_error
from polar_jobs.proxy.reply import Reply
from polar_jobs.proxy.sse import data_event

NAME = "gemini"
error_response = google_error

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_MODES = {"AUTO": "auto", "NONE": "none", "ANY": "required", "VALIDATED": "required"}


def _get(body: dict[str, Any], camel: str, snake: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """A field by its camelCase or snake_case name (the REST API accepts both)."""
    key = camel if camel in body else snake
    return opt(body, key, kind, where)


# -- request ------------------------------------------------------------------------------------
def to_chat(body: dict[str, Any], *, default_max_tokens: int, path_model: str | None = None,
            path_stream: bool = False) -> Normalized:
    if isinstance(body.get("generateContentRequest"), dict):  # countTokens' wrapped form
        body = body["generateContentRequest"]
    contents = need(body, "contents", list)
    if not contents:
        raise bad_request("contents: at least one content is required", param="contents")
    config = _get(body, "generationConfig", "generation_config", dict) or {}
    messages: list[dict[str, Any]] = []
    system = _get(body, "systemInstruction", "system_instruction", (dict, str)) or \
        _get(config, "systemInstruction", "system_instruction", (dict, str))
    if system:
        text = system if isinstance(system, str) else "\n".join(
            p.get("text", "") for p in system.get("parts") or [] if isinstance(p, dict))
        messages.append({"role": "system", "content": text})
    for index, content in enumerate(contents):
        messages.extend(_content(content, f"contents.{index}"))
    chat: dict[str, Any] = {"messages": messages}
    tools = _tools(_get(body, "tools", "tools", list) or [])
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(_get(body, "toolConfig", "tool_config", dict) or {})
        if choice is not None:
            chat["tool_choice"] = choice
    thinking = _generation(config, chat)
    stream = path_stream or bool(body.get("_streaming"))
    return Normalized(chat=chat, stream=stream, requested_model=path_model or body.get("model"), thinking=thinking)


def _generation(config: dict[str, Any], chat: dict[str, Any]) -> bool | None:
    where = "generationConfig."
    count = _get(config, "candidateCount", "candidate_count", int, where)
    if count not in (None, 1):
        raise bad_request(f"generationConfig.candidateCount: only 1 is supported (got {count})",
                          param="generationConfig.candidateCount")
    modalities = _get(config, "responseModalities", "response_modalities", list, where) or []
    if any(str(m).upper() in ("AUDIO", "IMAGE") for m in modalities):
        raise bad_request("generationConfig.responseModalities: only TEXT output is supported",
                          param="generationConfig.responseModalities")
    max_tokens = _get(config, "maxOutputTokens", "max_output_tokens", int, where)
    if max_tokens is not None:
        if max_tokens < 1:
            raise bad_request("generationConfig.maxOutputTokens: must be at least 1",
                              param="generationConfig.maxOutputTokens")
        chat["max_tokens"] = max_tokens
    for camel, snake, target in (("temperature", "temperature", "temperature"), ("topP", "top_p", "top_p"),
                                 ("topK", "top_k", "top_k"), ("seed", "seed", "seed"),
                                 ("presencePenalty", "presence_penalty", "presence_penalty"),
                                 ("frequencyPenalty", "frequency_penalty", "frequency_penalty")):
        value = _get(config, camel, snake, (int, float), where)
        if value is not None:
            chat[target] = value
    stops = _get(config, "stopSequences", "stop_sequences", list, where)
    if stops:
        chat["stop"] = [check(s, str, f"generationConfig.stopSequences.{i}") for i, s in enumerate(stops)]
    schema = _get(config, "responseJsonSchema", "response_json_schema", dict, where) or \
        _get(config, "responseSchema", "response_schema", dict, where)
    if schema and _get(config, "responseMimeType", "response_mime_type", str, where) == "application/json":
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "response",
                                                                          "schema": lower_types(schema)}}
    thinking = _get(config, "thinkingConfig", "thinking_config", dict, where)
    if thinking is None:
        return None
    return bool(thinking.get("includeThoughts", thinking.get("include_thoughts"))) or \
        bool(thinking.get("thinkingBudget", thinking.get("thinking_budget")))


def _content(content: Any, where: str) -> list[dict[str, Any]]:
    check(content, dict, where)
    role = opt(content, "role", str, f"{where}.", "user")
    parts = need(content, "parts", list, f"{where}.")
    if role == "model":
        return [_model_turn(parts, where)]
    if role not in ("user", "function", "tool"):
        raise bad_request(f"{where}.role: expected user or model, got {role!r}", param=f"{where}.role")
    out: list[dict[str, Any]] = []
    user_parts: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        at = f"{where}.parts.{j}"
        check(part, dict, at)
        response = part.get("functionResponse", part.get("function_response"))
        if response is not None:
            check(response, dict, f"{at}.functionResponse")
            name = need(response, "name", str, f"{at}.functionResponse.")
            call_id = response.get("id") or response.get("call_id") or name
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": json.dumps(response.get("response", {}), ensure_ascii=False)})
        elif "text" in part:
            user_parts.append({"type": "text", "text": check(part["text"], str, f"{at}.text")})
        elif "inlineData" in part or "inline_data" in part:
            data = check(part.get("inlineData", part.get("inline_data")), dict, f"{at}.inlineData")
            mime = need(data, "mimeType", str, f"{at}.inlineData.") if "mimeType" in data else \
                need(data, "mime_type", str, f"{at}.inlineData.")
            if not mime.startswith("image/"):
                raise bad_request(f"{at}.inlineData.mimeType: only images are supported, got {mime}",
                                  param=f"{at}.inlineData.mimeType")
            user_parts.append(image_part(f"data:{mime};base64,{need(data, 'data', str, f'{at}.inlineData.')}"))
        elif "fileData" in part or "file_data" in part:
            data = check(part.get("fileData", part.get("file_data")), dict, f"{at}.fileData")
            user_parts.append(image_part(data.get("fileUri") or data.get("file_uri") or ""))
        else:
            raise bad_request(f"{at}: unsupported part (expected text, inlineData or functionResponse)", param=at)
    if user_parts:
        only_text = all(p["type"] == "text" for p in user_parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in user_parts) if only_text else user_parts})
    return out


def _model_turn(parts: list[Any], where: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        at = f"{where}.parts.{j}"
        check(part, dict, at)
        call = part.get("functionCall", part.get("function_call"))
        if call is not None:
            check(call, dict, f"{at}.functionCall")
            name = need(call, "name", str, f"{at}.functionCall.")
            calls.append(tool_call(call.get("id") or name, name, opt(call, "args", dict, f"{at}.functionCall.", {})))
        elif part.get("thought"):
            thoughts.append(check(part.get("text", ""), str, f"{at}.text"))
        elif "text" in part:
            texts.append(check(part["text"], str, f"{at}.text"))
        signed = reasoning.decode(part.get("thoughtSignature", part.get("thought_signature")))
        if signed and not thoughts:  # a client that dropped the thought part but kept our signature
            thoughts.append(signed)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else (None if calls else "")}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        check(tool, dict, f"tools.{i}")
        declarations = tool.get("functionDeclarations", tool.get("function_declarations")) or []
        check(declarations, list, f"tools.{i}.functionDeclarations")
        for k, declaration in enumerate(declarations):
            at = f"tools.{i}.functionDeclarations.{k}"
            check(declaration, dict, at)
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))
            if schema is None and declaration.get("parameters") is not None:
                schema = lower_types(declaration["parameters"])
            out.append(function_tool(declaration.get("name"), declaration.get("description"), schema, at))
    return out  # googleSearch, codeExecution and other hosted tools are dropped


def lower_types(schema: Any) -> Any:
    """Gemini's OpenAPI-subset schemas say ``OBJECT``/``STRING``; JSON Schema says ``object``/``string``."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [lower_types(item) for item in schema]
    return schema


def _tool_choice(config: dict[str, Any]) -> Any:
    calling = config.get("functionCallingConfig", config.get("function_calling_config")) or {}
    mode = str(calling.get("mode", "AUTO")).upper()
    if mode not in _MODES:
        raise bad_request(f"toolConfig.functionCallingConfig.mode: unknown mode {mode!r}",
                          param="toolConfig.functionCallingConfig.mode")
    allowed = calling.get("allowedFunctionNames", calling.get("allowed_function_names")) or []
    if _MODES[mode] == "required" and len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0]}}
    return _MODES[mode]


# -- response -----------------------------------------------------------------------------------
def _parts(reply: Reply, thoughts: bool, text: bool, calls: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    signature = reasoning.encode(reply.reasoning) if reply.reasoning else None
    if thoughts and reply.reasoning:
        parts.append({"text": reply.reasoning, "thought": True, "thoughtSignature": signature})
    if text and reply.content:
        parts.append({"text": reply.content})
    if calls:
        for index, call in enumerate(reply.tool_calls):
            part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.parsed_arguments(), "id": call.id}}
            if index == 0 and signature:
                part["thoughtSignature"] = signature
            parts.append(part)
    return parts


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return candidate


def _usage(reply: Reply) -> dict[str, Any]:
    usage = {"promptTokenCount": reply.prompt_tokens, "candidatesTokenCount": reply.completion_tokens,
             "totalTokenCount": reply.prompt_tokens + reply.completion_tokens}
    if reply.cached_tokens:
        usage["cachedContentTokenCount"] = reply.cached_tokens
    return usage


def to_response(reply: Reply, normalized: Normalized) -> dict[str, Any]:
    parts = _parts(reply, thoughts=True, text=True, calls=True) or [{"text": ""}]
    return {"candidates": [_candidate(parts, _FINISH.get(reply.finish_reason, "STOP"))],
            "usageMetadata": _usage(reply), "modelVersion": normalized.requested_model,
            "responseId": reply.id}


def to_events(reply: Reply, normalized: Normalized) -> Iterator[bytes]:
    """``data:`` frames: thought, text, then the function calls with the finish reason and usage."""
    finish = _FINISH.get(reply.finish_reason, "STOP")
    frames = [p for p in (_parts(reply, True, False, False), _parts(reply, False, True, False)) if p]
    last = _parts(reply, False, False, True)
    if not last and frames:
        last = frames.pop()
    for parts in frames:
        yield data_event({"candidates": [_candidate(parts, None)], "usageMetadata": _usage(reply),
                          "modelVersion": normalized.requested_model, "responseId": reply.id})
    yield data_event({"candidates": [_candidate(last or [{"text": ""}], finish)], "usageMetadata": _usage(reply),
                      "modelVersion": normalized.requested_model, "responseId": reply.id})


def error_event(error: ProxyError) -> bytes:
    return data_event(google_error(error)[1])
