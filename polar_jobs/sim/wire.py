"""Shape a `Completion` into vLLM's OpenAI JSON: the response body, SSE chunks, errors."""

from __future__ import annotations

import codecs
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from . import tokenizer
from .completion import Completion

STREAM_TOKENS_PER_CHUNK = 3


@dataclass(frozen=True)
class WireOptions:
    """The response-shaping flags of one request."""

    model: str
    request_id: str
    created: int
    return_token_ids: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    tokens_as_ids: bool = False
    include_usage: bool = False


def new_id(prefix: str) -> str:
    """A fresh vLLM-style id."""
    return f"{prefix}-{uuid.uuid4().hex}"


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    """vLLM's OpenAI error shape."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def usage(c: Completion) -> dict:
    """Token counts; the stop token counts as a completion token."""
    return {
        "prompt_tokens": len(c.prompt_ids),
        "completion_tokens": len(c.token_ids),
        "total_tokens": len(c.prompt_ids) + len(c.token_ids),
        "prompt_tokens_details": None,
    }


def logprob_entry(token_id: int, value: float, top: int, as_ids: bool) -> dict:
    """One `logprobs.content[i]`; the sampled token leads its own `top_logprobs`."""
    text = f"token_id:{token_id}" if as_ids else tokenizer.token_text(token_id)
    entry = {"token": text, "logprob": value, "bytes": list(text.encode("utf-8"))}
    alternatives = [dict(entry)]
    for rank in range(1, top):
        alt_id = (token_id + rank) % 248044
        alt = f"token_id:{alt_id}" if as_ids else tokenizer.token_text(alt_id)
        alternatives.append({"token": alt, "logprob": value - 1.0 - rank, "bytes": list(alt.encode("utf-8"))})
    entry["top_logprobs"] = alternatives[:top]
    return entry


def logprobs_block(c: Completion, opts: WireOptions, start: int, end: int) -> dict | None:
    """`choices[0].logprobs` for sampled positions [start, end), or None when not asked."""
    if not opts.logprobs:
        return None
    return {
        "content": [
            logprob_entry(c.token_ids[i], c.logprobs[i], opts.top_logprobs, opts.tokens_as_ids)
            for i in range(start, end)
        ]
    }


def tool_call_json(call: dict, index: int | None = None) -> dict:
    """One OpenAI tool call (with `index` when streaming)."""
    out = {"id": new_id("chatcmpl-tool"), "type": "function", "function": dict(call)}
    return out if index is None else {"index": index, **out}


def completion_body(c: Completion, opts: WireOptions) -> dict:
    """The non-streaming `chat.completion` response."""
    p = c.parsed
    message = {
        "role": "assistant",
        "content": p.content,
        "reasoning": p.reasoning,
        "tool_calls": [tool_call_json(call) for call in p.tool_calls],
    }
    choice = {
        "index": 0,
        "message": message,
        "logprobs": logprobs_block(c, opts, 0, len(c.token_ids)),
        "finish_reason": c.finish_reason,
        "stop_reason": c.stop_reason,
    }
    if opts.return_token_ids:
        choice["token_ids"] = list(c.token_ids)
    body = {
        "id": opts.request_id,
        "object": "chat.completion",
        "created": opts.created,
        "model": opts.model,
        "choices": [choice],
        "usage": usage(c),
    }
    if opts.return_token_ids:
        body["prompt_token_ids"] = list(c.prompt_ids)
    return body


def char_offsets(c: Completion) -> list[int]:
    """Visible-text offset after each sampled token (partial UTF-8 held back)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    seen, offsets = 0, []
    for tid in c.token_ids:
        seen += len(decoder.decode(tokenizer.token_bytes(tid)))
        offsets.append(min(seen, len(c.text)))
    return offsets


def span_piece(text: str, span: tuple[int, int] | None, a: int, b: int) -> str:
    """The part of `span` visible in [a, b)."""
    if span is None:
        return ""
    return text[max(a, span[0]) : min(b, span[1])]


def chunk(opts: WireOptions, choices: list, **extra) -> dict:
    """One `chat.completion.chunk` envelope."""
    out = {"id": opts.request_id, "object": "chat.completion.chunk", "created": opts.created,
           "model": opts.model, "choices": choices, **extra}
    if opts.include_usage:
        out.setdefault("usage", None)
    return out


def stream_chunks(c: Completion, opts: WireOptions) -> Iterator[dict]:
    """The chunks of a streamed response, ending with the usage chunk when asked."""
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    extra = {"prompt_token_ids": list(c.prompt_ids)} if opts.return_token_ids else {}
    yield chunk(opts, [first], **extra)
    offsets, ends = char_offsets(c), list(c.parsed.tool_call_ends)
    sent_calls, prev = 0, 0
    n = len(c.token_ids)
    for start in range(0, n, STREAM_TOKENS_PER_CHUNK):
        end = min(start + STREAM_TOKENS_PER_CHUNK, n)
        a, b = prev, offsets[end - 1]
        prev = b
        delta: dict = {}
        reasoning = span_piece(c.text, c.parsed.reasoning_span, a, b)
        content = span_piece(c.text, c.parsed.content_span, a, b)
        if reasoning:
            delta["reasoning"] = reasoning
        if content:
            delta["content"] = content
        calls = []
        while sent_calls < len(ends) and (ends[sent_calls] <= b or end == n):
            calls.append(tool_call_json(c.parsed.tool_calls[sent_calls], sent_calls))
            sent_calls += 1
        if calls:
            delta["tool_calls"] = calls
        last = end == n
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": logprobs_block(c, opts, start, end),
            "finish_reason": c.finish_reason if last else None,
        }
        if last:
            choice["stop_reason"] = c.stop_reason
        if opts.return_token_ids:
            choice["token_ids"] = c.token_ids[start:end]
        yield chunk(opts, [choice])
    if n == 0:
        yield chunk(opts, [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason,
                            "stop_reason": c.stop_reason}])
    if opts.include_usage:
        yield chunk(opts, [], usage=usage(c))


def sse(frames: Iterator[dict]) -> Iterator[str]:
    """SSE framing, closed with `data: [DONE]`."""
    for frame in frames:
        yield f"data: {json.dumps(frame, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"
