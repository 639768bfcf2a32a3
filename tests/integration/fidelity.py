"""The token-fidelity check every SDK test ends with."""

from __future__ import annotations


def assert_token_fidelity(proxy, sim, session_id: str, expected_calls: int) -> list:
    """Every captured call: prompt ids equal the upstream's /tokenize of the stored normalized request,
    sampled ids decode to the upstream's text, logprobs pair 1:1 with sampled ids."""
    captured = proxy.captures(session_id)
    assert len(captured) == expected_calls, [c.summary() for c in captured]
    for completion in captured:
        assert completion.status == "ok", completion.error
        assert completion.prompt_ids == sim.tokenize_chat(completion.chat_request)
        assert completion.prompt_ids == completion.upstream_response["prompt_token_ids"]
        choice = completion.upstream_response["choices"][0]
        assert completion.response_ids == choice["token_ids"]
        decoded = sim.detokenize(completion.response_ids)
        message = choice["message"]
        for text in (message.get("content"), message.get("reasoning")):
            if text:
                assert text in decoded
        for call in message.get("tool_calls") or []:
            assert f"<function={call['function']['name']}>" in decoded
        assert completion.logprobs is not None
        assert len(completion.logprobs) == len(completion.response_ids)
        assert completion.logprobs == [entry["logprob"] for entry in choice["logprobs"]["content"]]
        assert completion.prompt_tokens == len(completion.prompt_ids)
    return captured
