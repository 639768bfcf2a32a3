"""The upstream's answer, parsed once into what every provider converter needs (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from polar_jobs.proxy.common import arguments_text
from polar_jobs.proxy.errors import ProxyError


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the engine produced

    def parsed_arguments(self) -> dict[str, Any]:
        """Arguments as an object; ``{}`` when the engine produced invalid JSON."""
        try:
            value = json.loads(self.arguments) if self.arguments else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Reply:
    """One upstream chat completion (choice 0) with its token-level capture."""

    id: str
    created: int
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    stop_reason: str | int | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    logprobs_content: list[dict[str, Any]] | None = None  # the engine's own entries, for clients that ask

    @property
    def tokenized(self) -> bool:
        return bool(self.prompt_ids) and bool(self.response_ids)


def parse_upstream(response: Any) -> Reply:
    """Parse a vLLM-style ``chat.completion``; a shape it cannot read is a 502 naming the problem."""
    try:
        choice = response["choices"][0]
        message = choice.get("message") or {}
        usage = response.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        response_ids = list(choice.get("token_ids") or [])
        tool_calls = [
            ToolCall(id=str(call.get("id") or f"call_{index}"), name=call["function"]["name"],
                     arguments=arguments_text(call["function"].get("arguments")))
            for index, call in enumerate(message.get("tool_calls") or [])
        ]
        content = message.get("content")
        if tool_calls and isinstance(content, str) and not content.strip():
            content = None  # the glue between </think> and <tool_call> is not a reply to show
        return Reply(
            id=str(response.get("id") or "chatcmpl-polar"),
            created=int(response.get("created") or 0),
            content=content,
            reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
            tool_calls=tool_calls,
            finish_reason=choice.get("finish_reason") or "stop",
            stop_reason=choice.get("stop_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or len(response.get("prompt_token_ids") or [])),
            completion_tokens=int(usage.get("completion_tokens") or len(response_ids)),
            cached_tokens=int(details.get("cached_tokens") or 0),
            prompt_ids=list(response.get("prompt_token_ids") or choice.get("prompt_token_ids") or []),
            response_ids=response_ids,
            logprobs=aligned_logprobs(choice.get("logprobs"), response_ids),
            logprobs_content=(choice.get("logprobs") or {}).get("content"),
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ProxyError(502, f"upstream returned an unreadable chat completion ({exc!r})") from exc


def aligned_logprobs(logprobs: Any, token_ids: list[int]) -> list[float] | None:
    """Sampled-token logprobs, only when they pair 1:1 with the sampled ids (else None)."""
    content = (logprobs or {}).get("content") if isinstance(logprobs, dict) else None
    if not content or len(content) != len(token_ids):
        return None
    values = []
    for entry in content:
        value = entry.get("logprob")
        if not isinstance(value, (int, float)):
            return None
        values.append(float(value))
    return values

