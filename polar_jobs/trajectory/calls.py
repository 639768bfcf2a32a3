"""Captured completions as builders see them: usable ones in call order, their messages and reply."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

from polar_jobs.store import CapturedCompletion
from polar_jobs.store.delta import pack_ids

STOP_REASONS = frozenset({"stop", "tool_calls", "stop_sequence"})


def usable(completions: Iterable[CapturedCompletion]) -> list[CapturedCompletion]:
    """Successful calls that sampled at least one token, in call order (time, then id)."""
    return sorted((c for c in completions if c.status == "ok" and c.prompt_ids and c.response_ids),
                  key=lambda c: (c.received_at, c.id))


def infer_eot(completions: list[CapturedCompletion]) -> int | None:
    """The end-of-turn token: the last sampled token of the first call that stopped on its own."""
    for completion in completions:
        if completion.finish_reason in STOP_REASONS and completion.response_ids:
            return completion.response_ids[-1]
    return None


def system_hash(prompt_ids: list[int], eot: int | None) -> str:
    """A short hash of the prompt's first block (the system prompt up to its end-of-turn token)."""
    end = prompt_ids.index(eot) + 1 if eot is not None and eot in prompt_ids else min(len(prompt_ids), 64)
    return hashlib.sha256(pack_ids(prompt_ids[:end])).hexdigest()[:12]


def messages(completion: CapturedCompletion) -> list[dict[str, Any]]:
    return list((completion.chat_request or {}).get("messages") or [])


def tools(completion: CapturedCompletion) -> list[dict[str, Any]]:
    return list((completion.chat_request or {}).get("tools") or [])


def reply_message(completion: CapturedCompletion) -> dict[str, Any]:
    """The assistant message the engine returned, in OpenAI Chat form (reasoning as reasoning_content)."""
    choices = (completion.upstream_response or {}).get("choices") or [{}]
    message = dict(choices[0].get("message") or {"role": "assistant", "content": None})
    reasoning = message.pop("reasoning", None)
    if reasoning and not message.get("reasoning_content"):
        message["reasoning_content"] = reasoning
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
    return {key: value for key, value in message.items() if value is not None or key == "content"}
