"""Is a re-rendered span the same conversation as what the model sampled? (pure, given a decoder)

A harness echoes the model's reply back in its own serialization, and the chat template renders it
again: token ids can differ (BPE merges across the boundary, whitespace in re-serialized JSON, an
empty think block the template adds) while the conversation is the same. A dropped or rewritten reasoning block, or changed content,
is a different conversation: a trace built across it would not be what the model saw.
"""

from __future__ import annotations

import re
from typing import Callable

Decoder = Callable[[list[int]], str]

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_EMPTY_THINK = re.compile(r"<think></think>")
_WINDOW_BEFORE, _WINDOW_AFTER = 12, 48


def squash(text: str) -> str:
    """Text without whitespace and without empty think blocks: the comparison that tolerates re-serialization
    and the empty ``<think></think>`` a Qwen template adds to a turn that had no reasoning."""
    return _EMPTY_THINK.sub("", "".join(text.split()))


def same_conversation(sampled: list[int], rendered: list[int], decode: Decoder | None) -> bool:
    """Token-equal, or (with a decoder) text-equal up to whitespace."""
    if sampled == rendered:
        return True
    if decode is None:
        return True  # nothing to judge with: trust the template, as Polar does
    return squash(decode(sampled)) == squash(decode(rendered))


def first_difference(a: list[int], b: list[int]) -> int:
    limit = min(len(a), len(b))
    for index in range(limit):
        if a[index] != b[index]:
            return index
    return limit


def window(ids: list[int], position: int, decode: Decoder | None) -> str:
    """Decoded text around a token position (or the raw ids without a decoder)."""
    piece = ids[max(0, position - _WINDOW_BEFORE): position + _WINDOW_AFTER]
    return decode(piece) if decode is not None else " ".join(map(str, piece))


def classify(expected: str, found: str) -> str:
    """Why two renderings of the same turn differ, in words a user can act on."""
    before, after = _THINK.search(expected), _THINK.search(found)
    if before and before.group(1).strip() and not (after and after.group(1).strip()):
        return ("reasoning dropped: the history no longer carries the model's reasoning (the harness did not "
                "send it back, or the chat template strips <think> from earlier turns)")
    if before and after and squash(before.group(1)) != squash(after.group(1)):
        return "reasoning re-rendered differently from what the model sampled"
    return "history rewritten: earlier turns came back changed (edited, compacted or re-serialized content)"
