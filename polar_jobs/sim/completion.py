"""One simulated chat completion: prompt ids, sampled ids, finish reason, logprobs.

Pure functions over a request body; the HTTP layer only shapes the result.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from . import tokenizer
from .parser import ParsedOutput, parse_output
from .policies import render_policy
from .template import TemplateError, render_chat


class SimError(Exception):
    """A request error returned in the OpenAI error shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param


@dataclass(frozen=True)
class Completion:
    """The sampled result of one request."""

    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    stop_reason: str | None
    parsed: ParsedOutput
    logprobs: list[float]


def thinking_enabled(body: dict) -> bool:
    """`chat_template_kwargs.enable_thinking`, default true."""
    kwargs = body.get("chat_template_kwargs") or {}
    return kwargs.get("enable_thinking", True) is not False


def prompt_text(body: dict) -> str:
    """The rendered chat prompt of a chat-completion or chat-tokenize body."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SimError(400, "messages: a non-empty list of messages is required", param="messages")
    try:
        return render_chat(
            messages,
            tools=body.get("tools") or None,
            add_generation_prompt=bool(body.get("add_generation_prompt", True)),
            enable_thinking=thinking_enabled(body),
            continue_final_message=bool(body.get("continue_final_message", False)),
        )
    except TemplateError as exc:
        raise SimError(400, str(exc)) from exc


def prompt_ids(body: dict) -> list[int]:
    """Prompt token ids; `/tokenize` (chat form) and chat completions share this."""
    return tokenizer.encode(prompt_text(body))


def max_tokens(body: dict, prompt_len: int, max_model_len: int) -> int:
    """The completion budget, checked against the context window like vLLM."""
    requested = body.get("max_completion_tokens")
    if requested is None:
        requested = body.get("max_tokens")
    if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool) or requested < 1):
        raise SimError(400, "max_tokens must be a positive integer", param="max_tokens")
    if prompt_len >= max_model_len:
        raise SimError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{prompt_len} input tokens. Please reduce the length of the input messages.",
        )
    if requested is None:
        return max_model_len - prompt_len
    if prompt_len + requested > max_model_len:
        raise SimError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_len + requested} tokens ({prompt_len} in the messages, {requested} in the completion). "
            "Please reduce the length of the messages or completion.",
        )
    return requested


def stop_strings(body: dict) -> list[str]:
    """The request's stop strings as a list."""
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise SimError(400, "stop must be a string or a list of strings", param="stop")


def first_stop(text: str, stops: list[str]) -> tuple[int, str] | None:
    """(char index, stop string) of the earliest stop string in text."""
    hits = [(text.find(s), -len(s), s) for s in stops if s in text]
    if not hits:
        return None
    index, _, stop = min(hits)
    return index, stop


def tokens_covering(ids: list[int], byte_count: int) -> int:
    """Smallest k such that the first k tokens cover `byte_count` bytes."""
    total = 0
    for k, tid in enumerate(ids, start=1):
        total += len(tokenizer.token_bytes(tid))
        if total >= byte_count:
            return k
    return len(ids)


def sample(text: str, budget: int, stops: list[str]) -> tuple[list[int], str, str, str | None]:
    """(token ids, visible text, finish_reason, stop_reason) for a scripted text."""
    body_ids = tokenizer.encode(text)
    text = tokenizer.decode(body_ids)
    hit = first_stop(text, stops)
    if hit is not None:
        index, stop = hit
        k = tokens_covering(body_ids, len(text[: index + len(stop)].encode("utf-8")))
        if k <= budget:
            return body_ids[:k], text[:index], "stop", stop
    ids = body_ids + [tokenizer.IM_END_ID]
    if len(ids) > budget:
        ids = ids[:budget]
        return ids, tokenizer.decode(ids), "length", None
    return ids, text, "stop", None


def logprob(seed: bytes, position: int, token_id: int) -> float:
    """A deterministic pseudo-random logprob in [-4, 0)."""
    digest = hashlib.blake2b(seed + struct.pack("<QQ", position, token_id), digest_size=8).digest()
    unit = int.from_bytes(digest, "little") / 2**64
    return -4.0 + 4.0 * unit


def logprobs_for(prompt: list[int], ids: list[int]) -> list[float]:
    """One logprob per sampled id, seeded from the prompt ids and position."""
    seed = hashlib.blake2b(struct.pack(f"<{len(prompt)}I", *prompt), digest_size=16).digest()
    return [logprob(seed, i, tid) for i, tid in enumerate(ids)]


def complete(body: dict, policy: dict[str, Any], max_model_len: int) -> Completion:
    """Run one scripted completion for a validated chat request body."""
    prompt = prompt_ids(body)
    budget = max_tokens(body, len(prompt), max_model_len)
    ids, text, finish, stop_reason = sample(render_policy(policy), budget, stop_strings(body))
    parsed = parse_output(text, body.get("tools") or None, thinking_enabled(body))
    if parsed.tool_calls:  # vLLM reports tool_calls whenever the parser found calls
        finish = "tool_calls"
    return Completion(prompt, ids, text, finish, stop_reason, parsed, logprobs_for(prompt, ids))
