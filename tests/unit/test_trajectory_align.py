"""Turn-by-turn alignment, the re-rendering judge and the trace invariants, on small synthetic token ids
(end-of-turn 7) and a fake decoder. Positions are computed from how each prompt was put together."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory.align import Turn, align
from polar_jobs.trajectory.invariants import violations
from polar_jobs.trajectory.prefix_merge import build_prefix_merge
from polar_jobs.trajectory.rerender import classify, first_difference, same_conversation, squash, window

pytestmark = pytest.mark.unit

EOT = 7
_SPECIAL = {1: " ", 2: "\n", 3: "<think>", 4: "</think>", 5: "<|im_start|>", 6: "ab", EOT: "<|im_end|>"}


def decode(ids: list[int]) -> str:
    return "".join(_SPECIAL.get(i) or (chr(ord("a") + i - 10) if 10 <= i <= 35 else f"<{i}>") for i in ids)


def ids(text: str) -> list[int]:
    return [ord(ch) - ord("a") + 10 for ch in text]


FIRST = [5, 30, 31, EOT, 2, 5, 32, EOT, 2, 5, 10]  # system, user, generation prompt
S1, I1 = ids("hello") + [EOT], [2, 5, 33, EOT, 2, 5, 10]  # a reply, then a tool turn and the next generation prompt
S2 = ids("bye") + [EOT]
NEW = [2, 5, 34, EOT, 2, 5, 10]
TURNS = [Turn(S1, I1), Turn(S2, None)]
PROMPT = FIRST + S1 + I1 + S2 + NEW


# -- align: matches ---------------------------------------------------------------------------------
@pytest.mark.parametrize("decoder", [decode, None])
def test_a_prompt_that_continues_the_trace_matches_where_the_new_interstitial_starts(decoder):
    result = align(FIRST, TURNS, PROMPT, EOT, decoder)
    assert result.matched and result.rest == len(FIRST + S1 + I1 + S2)
    assert PROMPT[result.rest:] == NEW


def test_skipping_turns_known_to_match():
    start = len(FIRST + S1 + I1)
    result = align(FIRST, TURNS, PROMPT, EOT, decode, start_turn=1, start=start)
    assert result.matched and result.rest == start + len(S2)


def test_a_truncated_reply_leaves_the_end_of_turn_token_to_what_follows():
    cut = ids("hel")  # no end-of-turn token sampled
    prompt = FIRST + cut + [EOT] + NEW
    result = align(FIRST, [Turn(cut, None)], prompt, EOT, decode)
    assert result.matched and result.rest == len(FIRST + cut) and prompt[result.rest] == EOT


def test_a_re_rendering_of_the_same_text_matches_with_a_decoder():
    rendered = [10, 1, 11, 2, 12]  # "a b\nc" for the sampled "abc"
    prompt = FIRST + rendered + [EOT] + NEW
    result = align(FIRST, [Turn(ids("abc") + [EOT], None)], prompt, EOT, decode)
    assert result.matched and result.rest == len(FIRST) + len(rendered) + 1


@settings(max_examples=200, deadline=None)
@given(first=st.lists(st.integers(1, 40), min_size=1, max_size=8),
       turns=st.lists(st.tuples(st.lists(st.integers(8, 40), max_size=6), st.lists(st.integers(1, 40), max_size=6)),
                      min_size=1, max_size=5),
       tail=st.lists(st.integers(1, 40), max_size=6))
def test_any_prompt_built_from_the_turns_matches(first, turns, tail):
    prompt, trace_turns = list(first), []
    for index, (body, interstitial) in enumerate(turns):
        last = index == len(turns) - 1
        trace_turns.append(Turn(body + [EOT], None if last else interstitial))
        prompt += body + [EOT] + ([] if last else interstitial)
    rest = len(prompt)
    result = align(first, trace_turns, prompt + tail, EOT, decode)
    assert result.matched and result.rest == rest


# -- align: mismatches --------------------------------------------------------------------------------
def test_a_different_first_prompt_fails_before_any_turn():
    prompt = FIRST[:4] + [99] + FIRST[5:] + S1 + I1 + S2 + NEW
    result = align(FIRST, TURNS, prompt, EOT, decode)
    assert not result.matched and result.turn == -1 and result.position == 4


def test_a_rewritten_reply_fails_at_its_first_changed_token():
    prompt = FIRST + ids("help") + [EOT] + I1 + S2 + NEW  # "hello" came back as "help"
    result = align(FIRST, TURNS, prompt, EOT, decode)
    assert not result.matched and result.turn == 0 and result.position == len(FIRST) + 3
    assert result.cause.startswith("history rewritten")
    assert result.expected == "hello" and result.found == "help"


def test_a_rewritten_reply_is_trusted_without_a_decoder():
    prompt = FIRST + ids("help") + [EOT] + I1 + S2 + NEW
    assert align(FIRST, TURNS, prompt, EOT, None).matched


def test_a_changed_interstitial_fails_where_it_changes():
    changed = I1[:2] + [40] + I1[3:]  # the tool result differs
    prompt = FIRST + S1 + changed + S2 + NEW
    result = align(FIRST, TURNS, prompt, EOT, decode)
    assert not result.matched and result.turn == 0 and result.position == len(FIRST + S1) + 2


def test_a_later_reply_that_changed_names_its_turn():
    prompt = FIRST + S1 + I1 + ids("bxe") + [EOT] + NEW
    result = align(FIRST, TURNS, prompt, EOT, decode)
    assert not result.matched and result.turn == 1 and result.position == len(FIRST + S1 + I1) + 1


def test_a_reply_that_never_ends_fails():
    prompt = FIRST + ids("hello world")[:5]  # no end-of-turn token after the reply
    result = align(FIRST, TURNS, prompt, EOT, decode)
    assert not result.matched and result.turn == 0 and result.position == len(FIRST)
    assert "never ends" in result.cause


def test_dropped_reasoning_fails_with_its_cause():
    sampled = [3, 2] + ids("plan") + [2, 4, 2, 2] + ids("run") + [EOT]
    prompt = FIRST + ids("run") + [EOT] + NEW
    result = align(FIRST, [Turn(sampled, None)], prompt, EOT, decode)
    assert not result.matched and result.position == len(FIRST)
    assert result.cause.startswith("reasoning dropped")
    assert "plan" in result.expected and "plan" not in result.found


# -- rerender -------------------------------------------------------------------------------------------
def test_classify_names_dropped_reasoning():
    assert classify("<think>\nplan\n</think>\n\nrun", "run").startswith("reasoning dropped")
    assert classify("<think>\nplan", "run").startswith("reasoning dropped")  # a window cut inside the block
    assert classify("<think>plan</think>run", "<think>\n\n</think>run").startswith("reasoning dropped")


def test_classify_names_re_rendered_reasoning():
    assert classify("<think>plan A</think>x", "<think>plan B</think>x").startswith("reasoning re-rendered")


def test_classify_names_rewritten_history():
    assert classify("hello", "help").startswith("history rewritten")
    assert classify("<think></think>hello", "help").startswith("history rewritten")  # no reasoning to drop
    assert classify("<think>plan</think>hello", "<think> plan </think>help").startswith("history rewritten")


def test_squash_and_same_conversation():
    assert squash(" a\tb\n<think></think>c ") == "abc"
    assert squash("<think>\n\n</think>\n\nx") == "x"
    assert same_conversation([10, 11], [6], decode)  # "ab" both ways
    assert not same_conversation([10, 11], [10, 12], decode)
    assert same_conversation([10, 11], [10, 12], None)


def test_first_difference_and_window():
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([], [1]) == 0
    long = ids("abcdefghijklmnopqrstuvwxyz") * 4
    assert window(long, 20, decode) == decode(long[8:68])
    assert window([10, 11], 0, None) == "10 11"


# -- invariants ---------------------------------------------------------------------------------------
def _cc(cid: int, prompt: list[int], response: list[int]) -> CapturedCompletion:
    return CapturedCompletion(
        id=cid, session_id="s", provider="openai_chat", path="/v1/chat/completions", stream=False,
        requested_model="m", served_model="m", status="ok", http_status=200, error=None, finish_reason="stop",
        stop_reason=None, prompt_tokens=len(prompt), completion_tokens=len(response), trainable=True,
        policy_version=None, prompt_ids=list(prompt), response_ids=list(response),
        logprobs=[-(cid + j / 100) for j in range(1, len(response) + 1)], received_at=float(cid),
        upstream_started_at=None, upstream_finished_at=None, responded_at=None)


@pytest.fixture
def merged():
    calls = [_cc(1, FIRST, S1), _cc(2, FIRST + S1 + I1, S2), _cc(3, FIRST + S1 + I1 + S2 + NEW, ids("ok") + [EOT])]
    (trace,) = build_prefix_merge(calls, eot=EOT, decode=decode).traces
    assert trace.completion_ids == [1, 2, 3]
    return trace, {c.id: c for c in calls}


# positions in the trace's response, from how it was put together: S1, I1, S2, NEW, "ok" + EOT
SAMPLED_2 = len(S1 + I1)  # first token of the second reply
INTER_1 = len(S1) + 2  # a token inside the first interstitial


def test_a_faithful_trace_has_no_violations(merged):
    trace, by_id = merged
    assert violations(trace, by_id, EOT, decode) == [] and violations(trace, by_id, EOT, None) == []


@pytest.mark.parametrize("position", [0, SAMPLED_2, INTER_1], ids=["sampled-first", "sampled-second", "interstitial"])
def test_a_flipped_mask_bit_is_reported(merged, position):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.loss_mask[position] ^= 1
    assert "loss_mask is not 1 exactly on the sampled positions" in violations(tampered, by_id, EOT, decode)


def test_a_changed_sampled_token_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.response_ids[SAMPLED_2] = 40
    problems = violations(tampered, by_id, EOT, decode)
    assert "completion 2: sampled ids differ from the captured ones" in problems


def test_a_dropped_logprob_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    del tampered.response_logprobs[SAMPLED_2]
    problems = violations(tampered, by_id, EOT, decode)
    length = len(trace.response_ids)
    assert f"response_logprobs has {length - 1} entries for {length} tokens" in problems
    assert "completion 2: logprobs differ from the captured ones" in problems


def test_a_changed_logprob_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.response_logprobs[0] = 0.0
    assert "completion 1: logprobs differ from the captured ones" in violations(tampered, by_id, EOT, decode)


def test_a_changed_interstitial_token_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.response_ids[INTER_1] = 40
    problems = violations(tampered, by_id, EOT, decode)
    assert "completion 2: the interstitial is not the rest of its prompt" in problems


def test_a_mask_of_the_wrong_length_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.loss_mask.append(0)
    length = len(trace.response_ids)
    assert f"loss_mask has {length + 1} entries for {length} response tokens" in violations(tampered, by_id, EOT)


def test_a_changed_prompt_is_reported(merged):
    trace, by_id = merged
    tampered = copy.deepcopy(trace)
    tampered.prompt_ids[0] = 40
    assert "the trace's prompt is not its first completion's prompt" in violations(tampered, by_id, EOT, decode)
