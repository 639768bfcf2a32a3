"""Upstream failure modes against the real server, turned into each provider's error shape and recorded."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.e2e.vllm_tier import vllm, vproxy  # noqa: F401

pytestmark = pytest.mark.e2e


def test_prompt_longer_than_the_context(vproxy, vllm):
    session_id, key = vproxy.new_session()
    huge = "lorem " * 40_000  # > --max-model-len 32768 tokens
    claude = anthropic.Anthropic(base_url=vproxy.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.create(model="c", max_tokens=16, messages=[{"role": "user", "content": huge}])
    assert raised.value.body["type"] == "error" and raised.value.body["error"]["type"] == "invalid_request_error"
    oai = openai.OpenAI(base_url=f"{vproxy.url}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised_chat:
        oai.chat.completions.create(model="m", max_tokens=16, messages=[{"role": "user", "content": huge}])
    assert raised_chat.value.code == "context_length_exceeded"
    failed = vproxy.captures(session_id)
    assert len(failed) == 2 and all(c.status == "failed" and not c.trainable for c in failed)
    assert all("context" in (c.error or "").lower() for c in failed)
