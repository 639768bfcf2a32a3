"""``max_tokens`` clamped to what the upstream context leaves (pure, with a tokenize callback).

Tokenizing costs a round trip, so it is done only when a cheap upper bound on the prompt's length
(every token covers at least one byte of the rendered text) says the request might not fit.
"""

from __future__ import annotations

from typing import Any, Callable

from polar_jobs.proxy.errors import ProxyError

_TEMPLATE_SLACK = 2048  # fixed template text: tool preamble, generation prompt
_PER_ITEM_SLACK = 64  # per message and per tool call: role markers, XML around parameters


def prompt_token_bound(chat: dict[str, Any], serialized_len: int) -> int:
    """An upper bound on the prompt's token count from the serialized request's size."""
    items = len(chat["messages"]) + sum(len(m.get("tool_calls") or []) for m in chat["messages"])
    return serialized_len + _TEMPLATE_SLACK + _PER_ITEM_SLACK * items


def clamp_max_tokens(chat: dict[str, Any], serialized_len: int, max_model_len: int | None,
                     count_tokens: Callable[[dict[str, Any]], int]) -> int | None:
    """Set ``chat['max_tokens']`` to at most what fits; returns the counted prompt length if it counted."""
    requested = chat.get("max_tokens")
    if max_model_len is None or requested is None:
        return None
    if requested + prompt_token_bound(chat, serialized_len) <= max_model_len:
        return None
    prompt_tokens = count_tokens(chat)
    room = max_model_len - prompt_tokens
    if room < 1:
        raise ProxyError(400, f"prompt is too long: {prompt_tokens} tokens > {max_model_len - 1} maximum "
                              f"(this model's maximum context length is {max_model_len} tokens)",
                         param="messages", code="context_length_exceeded")
    chat["max_tokens"] = min(requested, room)
    return prompt_tokens
