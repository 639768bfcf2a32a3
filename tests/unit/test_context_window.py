"""max_tokens clamped to the room the context leaves; tokenize only when the cheap bound says it may not fit."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.proxy.context_window import clamp_max_tokens, prompt_token_bound
from polar_jobs.proxy.errors import ProxyError

pytestmark = pytest.mark.unit


class Counter:
    """A tokenize stub that records its calls and answers a fixed prompt length."""

    def __init__(self, tokens: int):
        self.tokens = tokens
        self.calls = 0

    def __call__(self, chat: dict) -> int:
        self.calls += 1
        return self.tokens


def _chat(max_tokens: int | None, text: str = "hello") -> dict:
    chat = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    return chat


def _size(chat: dict) -> int:
    return len(json.dumps(chat).encode())


def test_fits_by_the_bound_no_tokenize() -> None:
    chat = _chat(1000)
    counter = Counter(10)
    assert clamp_max_tokens(chat, _size(chat), 32768, counter) is None
    assert counter.calls == 0
    assert chat["max_tokens"] == 1000


def test_nothing_to_do_without_limits() -> None:
    counter = Counter(10)
    for chat, limit in ((_chat(None), 100), (_chat(10**9), None)):
        before = dict(chat)
        assert clamp_max_tokens(chat, _size(chat), limit, counter) is None
        assert chat == before
    assert counter.calls == 0


def test_clamped_to_the_room_left() -> None:
    chat = _chat(32000)
    counter = Counter(5000)
    assert clamp_max_tokens(chat, _size(chat), 32768, counter) == 5000
    assert counter.calls == 1
    assert chat["max_tokens"] == 32768 - 5000


def test_counted_and_fits_keeps_the_request() -> None:
    chat = _chat(32000)  # the bound says maybe not; the count says it fits
    assert clamp_max_tokens(chat, _size(chat), 32768, Counter(700)) == 700
    assert chat["max_tokens"] == 32000


@pytest.mark.parametrize("prompt_tokens", [32768, 40000])
def test_prompt_alone_overflows(prompt_tokens: int) -> None:
    chat = _chat(100, "x" * 40000)
    with pytest.raises(ProxyError) as info:
        clamp_max_tokens(chat, _size(chat), 32768, Counter(prompt_tokens))
    assert info.value.status == 400
    assert info.value.code == "context_length_exceeded"
    assert "32768" in info.value.message


def test_one_token_of_room_is_enough() -> None:
    chat = _chat(500, "x" * 40000)
    assert clamp_max_tokens(chat, _size(chat), 32768, Counter(32767)) == 32767
    assert chat["max_tokens"] == 1


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), calls=st.integers(0, 4), requested=st.integers(1, 100_000),
       limit=st.integers(1, 200_000), true_tokens=st.integers(1, 200_000))
def test_bound_is_an_upper_bound_and_clamp_is_sound(text, calls, requested, limit, true_tokens) -> None:
    chat = _chat(requested, text)
    if calls:
        chat["messages"].append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in range(calls)]})
    size = _size(chat)
    true_tokens = min(true_tokens, size)  # every token covers at least one byte of the request text
    assert prompt_token_bound(chat, size) >= size
    counter = Counter(true_tokens)
    try:
        clamp_max_tokens(chat, size, limit, counter)
    except ProxyError as error:
        assert error.code == "context_length_exceeded"
        assert true_tokens >= limit and counter.calls == 1
        return
    assert 1 <= chat["max_tokens"] <= requested
    assert chat["max_tokens"] + true_tokens <= limit  # never asks for more than the context holds
    if counter.calls == 0:
        assert chat["max_tokens"] == requested
