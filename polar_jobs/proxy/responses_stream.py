"""The OpenAI Responses stream grammar, synthesized from finished output items (pure)."""

from __future__ import annotations

import itertools
from typing import Any, Iterator

from polar_jobs.proxy.sse import named_event


def stream_events(initial: dict[str, Any], items: list[dict[str, Any]], final: dict[str, Any]) -> Iterator[bytes]:
    """response.created … per-item events … response.completed (or response.incomplete)."""
    sequence = itertools.count()

    def emit(kind: str, **fields: Any) -> bytes:
        return named_event(kind, {"type": kind, "sequence_number": next(sequence), **fields})

    yield emit("response.created", response=initial)
    yield emit("response.in_progress", response=initial)
    for index, item in enumerate(items):
        kind = item["type"]
        if kind == "reasoning":
            yield from _reasoning(emit, index, item)
        elif kind == "message":
            yield from _message(emit, index, item)
        elif kind == "function_call":
            yield from _function_call(emit, index, item)
        else:  # custom_tool_call, local_shell_call: announced and finished whole
            yield emit("response.output_item.added", output_index=index, item=item)
            yield emit("response.output_item.done", output_index=index, item=item)
    yield emit("response.completed" if final["status"] == "completed" else "response.incomplete", response=final)


def _reasoning(emit, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    text = item["summary"][0]["text"]
    item_id = item["id"]
    yield emit("response.output_item.added", output_index=index,
               item={"id": item_id, "type": "reasoning", "summary": [], "status": "in_progress"})
    yield emit("response.reasoning_summary_part.added", item_id=item_id, output_index=index, summary_index=0,
               part={"type": "summary_text", "text": ""})
    yield emit("response.reasoning_summary_text.delta", item_id=item_id, output_index=index, summary_index=0,
               delta=text)
    yield emit("response.reasoning_summary_text.done", item_id=item_id, output_index=index, summary_index=0,
               text=text)
    yield emit("response.reasoning_summary_part.done", item_id=item_id, output_index=index, summary_index=0,
               part={"type": "summary_text", "text": text})
    yield emit("response.output_item.done", output_index=index, item=item)


def _message(emit, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    part = item["content"][0]
    item_id = item["id"]
    yield emit("response.output_item.added", output_index=index,
               item={"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []})
    yield emit("response.content_part.added", item_id=item_id, output_index=index, content_index=0,
               part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
    if part["text"]:
        yield emit("response.output_text.delta", item_id=item_id, output_index=index, content_index=0,
                   delta=part["text"], logprobs=[])
    yield emit("response.output_text.done", item_id=item_id, output_index=index, content_index=0,
               text=part["text"], logprobs=[])
    yield emit("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part)
    yield emit("response.output_item.done", output_index=index, item=item)


def _function_call(emit, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    item_id = item["id"]
    yield emit("response.output_item.added", output_index=index,
               item=dict(item, arguments="", status="in_progress"))
    yield emit("response.function_call_arguments.delta", item_id=item_id, output_index=index,
               delta=item["arguments"])
    yield emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
               name=item["name"], arguments=item["arguments"])
    yield emit("response.output_item.done", output_index=index, item=item)
