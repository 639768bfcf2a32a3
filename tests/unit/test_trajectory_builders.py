"""The trajectory builders on hand-built captures: small synthetic token ids, an explicit end-of-turn id
and a fake decoder. Every expected value is built from how the inputs were constructed: a prompt is
the previous prompt, the reply the model sampled (its end-of-turn token appended by the template when the
reply was truncated) and the interstitial the harness added."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory import (ChainBreak, InvariantViolation, TrajectoryStatus, build_trajectory)
from polar_jobs.trajectory.calls import usable
from polar_jobs.trajectory.per_request import build_per_request
from polar_jobs.trajectory.prefix_merge import build_prefix_merge

pytestmark = pytest.mark.unit

EOT = 7
_SPECIAL = {1: " ", 2: "\n", 3: "<think>", 4: "</think>", 5: "<|im_start|>", 6: "ab", EOT: "<|im_end|>"}


def decode(ids: list[int]) -> str:
    """A fake tokenizer: 10..35 are the letters, 6 is the merged pair "ab", 1 and 2 are whitespace."""
    return "".join(_SPECIAL.get(i) or (chr(ord("a") + i - 10) if 10 <= i <= 35 else f"<{i}>") for i in ids)


def ids(text: str) -> list[int]:
    """Letters only (no merges), the inverse of ``decode`` on a-z."""
    return [ord(ch) - ord("a") + 10 for ch in text]


def logprobs_for(completion_id: int, count: int) -> list[float]:
    """Distinct, non-zero logprobs per completion and position: misplaced ones cannot go unnoticed."""
    return [-(completion_id + (j + 1) / 1000) for j in range(count)]


def cc(cid: int, prompt: list[int], response: list[int], *, finish: str | None = None, status: str = "ok",
       received_at: float | None = None, logprobs: list[float] | None | str = "auto", policy_version: int | None = None,
       trainable: bool = True) -> CapturedCompletion:
    if finish is None:
        finish = "stop" if response[-1:] == [EOT] else "length"
    return CapturedCompletion(
        id=cid, session_id="s", provider="openai_chat", path="/v1/chat/completions", stream=False,
        requested_model="m", served_model="m", status=status, http_status=200 if status == "ok" else 500,
        error=None if status == "ok" else "upstream failed", finish_reason=finish, stop_reason=None,
        prompt_tokens=len(prompt), completion_tokens=len(response), trainable=trainable,
        policy_version=policy_version, prompt_ids=list(prompt), response_ids=list(response),
        logprobs=logprobs_for(cid, len(response)) if logprobs == "auto" else logprobs,
        received_at=float(cid) if received_at is None else received_at,
        upstream_started_at=None, upstream_finished_at=None, responded_at=None)


# -- synthetic conversations ----------------------------------------------------------------------
BODY = st.sampled_from([i for i in range(1, 41) if i != EOT])  # a reply's body never holds end-of-turn
ANY = st.integers(min_value=1, max_value=40)  # prompts and interstitials do (template glue, tool turns)


@dataclass
class Turn:
    reply: list[int]  # what the model sampled (ends with EOT unless truncated)
    truncated: bool
    interstitial: list[int]  # what the harness appended after the rendered reply


@dataclass
class Conversation:
    first: list[int]
    turns: list[Turn]

    def prompts(self) -> list[list[int]]:
        prompts, prompt = [], list(self.first)
        for turn in self.turns:
            prompts.append(prompt)
            rendered = turn.reply + ([EOT] if turn.truncated else [])  # the template closes a truncated reply
            prompt = prompt + rendered + turn.interstitial
        return prompts

    def glue(self, index: int) -> list[int]:
        """What a trace holds between reply ``index`` and the next: the closing EOT of a truncated reply, then
        the harness's interstitial."""
        turn = self.turns[index]
        return ([EOT] if turn.truncated else []) + turn.interstitial

    def expected_response(self) -> tuple[list[int], list[int]]:
        response, mask = [], []
        for index, turn in enumerate(self.turns):
            if index:
                glue = self.glue(index - 1)
                response += glue
                mask += [0] * len(glue)
            response += turn.reply
            mask += [1] * len(turn.reply)
        return response, mask


@st.composite
def turns(draw) -> Turn:
    truncated = draw(st.integers(0, 4)) == 0
    body = draw(st.lists(BODY, min_size=1 if truncated else 0, max_size=6))
    return Turn(body if truncated else body + [EOT], truncated, draw(st.lists(ANY, max_size=6)))


@st.composite
def conversations(draw, head: int | None = None, max_turns: int = 6) -> Conversation:
    first = draw(st.lists(ANY, min_size=1, max_size=8))
    return Conversation(([head] if head is not None else []) + first,
                        draw(st.lists(turns(), min_size=1, max_size=max_turns)))


def captures_of(conversation: Conversation, start_id: int = 1) -> list[CapturedCompletion]:
    return [cc(start_id + k, prompt, turn.reply)
            for k, (prompt, turn) in enumerate(zip(conversation.prompts(), conversation.turns))]


def interleave(conversations_: list[Conversation], schedule: list[int]) -> list[tuple[int, CapturedCompletion]]:
    """Calls of several conversations in the order ``schedule`` picks (a conversation index per call)."""
    prompts = [c.prompts() for c in conversations_]
    cursor = [0] * len(conversations_)
    out = []
    for which in schedule:
        k = cursor[which]
        cursor[which] += 1
        cid = len(out) + 1
        out.append((which, cc(cid, prompts[which][k], conversations_[which].turns[k].reply)))
    return out


@st.composite
def schedules(draw, conversations_: list[Conversation]) -> list[int]:
    slots = [i for i, c in enumerate(conversations_) for _ in c.turns]
    return draw(st.permutations(slots))


# -- append-only: one trace ------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(conversations(), st.booleans())
def test_append_only_conversation_is_one_faithful_trace(conversation, with_decoder):
    captured = captures_of(conversation)
    last = captured[-1]
    merged = build_prefix_merge(captured, eot=EOT, decode=decode if with_decoder else None)
    assert merged.breaks == []
    (trace,) = merged.traces
    assert trace.prompt_ids == conversation.first
    assert trace.prompt_ids + trace.response_ids == last.prompt_ids + last.response_ids
    response, mask = conversation.expected_response()
    assert trace.response_ids == response and trace.loss_mask == mask
    expected_logprobs = []
    for index, (turn, completion) in enumerate(zip(conversation.turns, captured)):
        if index:
            expected_logprobs += [0.0] * len(conversation.glue(index - 1))
        expected_logprobs += logprobs_for(completion.id, len(turn.reply))
    assert trace.response_logprobs == expected_logprobs
    assert trace.trained_tokens == sum(len(turn.reply) for turn in conversation.turns)
    assert trace.completion_ids == [c.id for c in captured]
    assert trace.finish_reason == ("length" if conversation.turns[-1].truncated else "stop")
    assert trace.label == "main"

    per_request = build_per_request(captured, eot=EOT)
    assert len(per_request) == len(captured)
    for single, completion in zip(per_request, captured):
        assert single.prompt_ids == completion.prompt_ids and single.response_ids == completion.response_ids
        assert single.loss_mask == [1] * len(completion.response_ids)
        assert single.response_logprobs == completion.logprobs

    for builder in ("prefix_merge", "per_request"):
        trajectory = build_trajectory("s", captured, builder=builder, eot=EOT, decode=decode)  # checks invariants
        assert trajectory.status is TrajectoryStatus.COMPLETE and trajectory.breaks == []
        assert len(trajectory.traces) == (1 if builder == "prefix_merge" else len(captured))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_two_interleaved_conversations_are_two_traces_in_call_order(data):
    # distinct first tokens: neither conversation's prompt is a prefix of the other's
    pair = [data.draw(conversations(head=100)), data.draw(conversations(head=101))]
    calls = interleave(pair, data.draw(schedules(pair)))
    captured = [completion for _, completion in calls]
    trajectory = build_trajectory("s", captured, eot=EOT, decode=decode)
    assert trajectory.breaks == [] and len(trajectory.traces) == 2
    by_first = {trace.prompt_ids[0]: trace for trace in trajectory.traces}
    for which, conversation in enumerate(pair):
        trace = by_first[100 + which]
        assert trace.completion_ids == [c.id for w, c in calls if w == which]
        assert (trace.response_ids, trace.loss_mask) == conversation.expected_response()
        last = [c for w, c in calls if w == which][-1]
        assert trace.prompt_ids + trace.response_ids == last.prompt_ids + last.response_ids


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_nothing_sampled_is_lost_for_any_mix_of_conversations(data):
    # arbitrary first prompts: identical, prefixes of each other, continuations of each other
    shared = data.draw(st.lists(ANY, max_size=4))
    mix = [data.draw(conversations(max_turns=4)) for _ in range(data.draw(st.integers(1, 4)))]
    for conversation in mix:
        if data.draw(st.booleans()):
            conversation.first = shared + conversation.first
    calls = interleave(mix, data.draw(schedules(mix)))
    captured = [completion for _, completion in calls]
    sampled = sum(len(c.response_ids) for c in captured)
    for decoder in (decode, None):
        for builder in ("prefix_merge", "per_request"):
            trajectory = build_trajectory("s", captured, builder=builder, eot=EOT, decode=decoder)
            assert sum(t.trained_tokens for t in trajectory.traces) == sampled
            members = sorted(cid for trace in trajectory.traces for cid in trace.completion_ids)
            assert members == sorted(c.id for c in captured)  # each call in exactly one trace
            assert len(trajectory.breaks) <= len(captured) - 1
            for trace in trajectory.traces:
                assert len(trace.loss_mask) == len(trace.response_ids) == len(trace.response_logprobs)


# -- truncation, retries, skipped calls -------------------------------------------------------------
def test_truncated_reply_leaves_its_end_of_turn_token_to_the_interstitial():
    system, user = [5, 20, 21, EOT, 2], [5, 22, 23, EOT, 2, 5, 10]
    cut = ids("halfwa")  # finish_reason "length": no end-of-turn token sampled
    tool = [EOT, 2, 5, 30, 31, EOT, 2, 5, 10]  # the template closes the reply, then a tool turn
    first = cc(1, system + user, cut, finish="length")
    second = cc(2, system + user + cut + tool, ids("done") + [EOT])
    trajectory = build_trajectory("s", [first, second], eot=EOT, decode=decode)
    (trace,) = trajectory.traces
    assert trace.response_ids[len(cut):len(cut) + len(tool)] == tool and tool[0] == EOT
    assert trace.loss_mask == [1] * len(cut) + [0] * len(tool) + [1] * 5
    assert trace.prompt_ids + trace.response_ids == second.prompt_ids + second.response_ids
    assert trace.response_logprobs[len(cut):len(cut) + len(tool)] == [0.0] * len(tool)


def test_retry_with_an_identical_prompt_starts_its_own_trace():
    prompt = [5, 20, EOT, 5, 21]
    first, retry = cc(1, prompt, ids("one") + [EOT]), cc(2, prompt, ids("two") + [EOT])
    trajectory = build_trajectory("s", [first, retry], eot=EOT, decode=decode)
    assert [t.completion_ids for t in trajectory.traces] == [[1], [2]] and trajectory.breaks == []
    assert sum(t.trained_tokens for t in trajectory.traces) == 8


def test_continuation_of_a_retried_call_joins_the_retry_it_continues():
    """Two calls with one prompt (a retry, a parallel sample): the next call follows the reply the harness kept,
    which is the retry's here. It extends that trace; the first attempt's different reply is not a rewrite."""
    prompt = [5, 20, EOT, 5, 21]
    first, retry = cc(1, prompt, ids("one") + [EOT]), cc(2, prompt, ids("two") + [EOT])
    inter = [2, 5, 22, EOT, 5, 21]
    follow = cc(3, prompt + ids("two") + [EOT] + inter, ids("ok") + [EOT])
    trajectory = build_trajectory("s", [first, retry, follow], eot=EOT, decode=decode)
    assert trajectory.breaks == []
    assert [t.completion_ids for t in trajectory.traces] == [[1], [2, 3]]


def test_failed_calls_and_empty_replies_are_skipped():
    prompt = [5, 20, EOT, 5, 21]
    ok = cc(1, prompt, ids("run") + [EOT])
    failed = cc(2, prompt + ids("run") + [EOT] + [5, 22], [], status="failed", logprobs=None, finish=None)
    empty = cc(3, prompt + ids("run") + [EOT] + [5, 22], [], finish="stop", logprobs=[])
    then = cc(4, prompt + ids("run") + [EOT] + [5, 22], ids("x") + [EOT])
    assert [c.id for c in usable([then, empty, failed, ok])] == [1, 4]
    trajectory = build_trajectory("s", [ok, failed, empty, then], eot=EOT, decode=decode)
    (trace,) = trajectory.traces
    assert trace.completion_ids == [1, 4]
    assert trajectory.stats["failed_calls"] == 1 and trajectory.stats["usable"] == 2
    assert trajectory.status is TrajectoryStatus.COMPLETE  # a transient upstream failure keeps the session


def test_usable_orders_by_time_then_id():
    a, b, c, d = (cc(i, [5, 20 + i], [10, EOT], received_at=t) for i, t in ((4, 1.0), (2, 2.0), (3, 1.0), (1, 3.0)))
    assert [x.id for x in usable([a, b, c, d])] == [3, 4, 2, 1]


# -- breaks and re-segmentation ---------------------------------------------------------------------
SYSTEM = [5, 30, 31, EOT, 2, 5, 32, 33, EOT, 2, 5, 10]  # system turn, user turn, generation prompt
INTER = [2, 5, 34, 35, EOT, 2, 5, 10]  # a tool turn and the next generation prompt


def test_rewritten_reply_is_a_break_and_the_rest_is_re_segmented():
    sampled, rewritten = ids("abcd"), ids("axyz")  # differ from the second token on, also as text
    first = cc(1, SYSTEM, sampled + [EOT])
    second = cc(2, SYSTEM + rewritten + [EOT] + INTER, ids("next") + [EOT])
    third = cc(3, second.prompt_ids + second.response_ids + INTER, ids("end") + [EOT])
    trajectory = build_trajectory("s", [first, second, third], eot=EOT, decode=decode)
    (broken,) = trajectory.breaks
    assert broken == ChainBreak(completion_id=2, broken_trace=0, position=len(SYSTEM) + 1, cause=broken.cause,
                                expected=broken.expected, found=broken.found)
    assert broken.cause.startswith("history rewritten")
    assert broken.expected == "abcd" and broken.found == "axyz"
    assert [t.completion_ids for t in trajectory.traces] == [[1], [2, 3]]
    assert sum(t.trained_tokens for t in trajectory.traces) == 5 + 5 + 4
    assert trajectory.stats["breaks"] == 1


def test_rewritten_reply_without_a_decoder_is_trusted():
    """Without a decoder there is nothing to judge a re-rendering by: the template is trusted (as Polar does)."""
    first = cc(1, SYSTEM, ids("abcd") + [EOT])
    second = cc(2, SYSTEM + ids("axyz") + [EOT] + INTER, ids("next") + [EOT])
    trajectory = build_trajectory("s", [first, second], eot=EOT)
    assert trajectory.breaks == [] and [t.completion_ids for t in trajectory.traces] == [[1, 2]]


@pytest.mark.parametrize("rendered", [
    [10, 1, 11, 2, 12],  # "a b\nc": whitespace re-serialization
    [6, 12],  # "ab" + "c": a BPE merge across the re-rendered reply
    [3, 4, 10, 11, 12],  # an empty think block the template adds
    [3, 2, 2, 4, 2, 2, 10, 11, 12],  # "<think>\n\n</think>\n\n" as Qwen renders it
], ids=["whitespace", "bpe-merge", "empty-think", "empty-think-newlines"])
def test_rerendering_that_is_the_same_conversation_merges(rendered):
    sampled = ids("abc") + [EOT]
    first = cc(1, SYSTEM, sampled)
    second = cc(2, SYSTEM + rendered + [EOT] + INTER, ids("ok") + [EOT])
    trajectory = build_trajectory("s", [first, second], eot=EOT, decode=decode)
    assert trajectory.breaks == []
    (trace,) = trajectory.traces
    # the trace keeps the ids the model sampled, not the re-rendering, and the new prompt's interstitial
    assert trace.response_ids == sampled + INTER + ids("ok") + [EOT]
    assert trace.loss_mask == [1] * 4 + [0] * len(INTER) + [1] * 3


def test_dropped_reasoning_is_a_break_with_its_cause():
    thought = [3, 2] + ids("plan") + [2, 4, 2, 2]  # "<think>\nplan\n</think>\n\n"
    first = cc(1, SYSTEM, thought + ids("run") + [EOT])
    second = cc(2, SYSTEM + ids("run") + [EOT] + INTER, ids("ok") + [EOT])  # history without the reasoning
    trajectory = build_trajectory("s", [first, second], eot=EOT, decode=decode)
    (broken,) = trajectory.breaks
    assert (broken.completion_id, broken.broken_trace, broken.position) == (2, 0, len(SYSTEM))
    assert broken.cause.startswith("reasoning dropped")
    assert "plan" in broken.expected and "<think>" in broken.expected
    assert "plan" not in broken.found and broken.found.startswith("run")
    assert [t.completion_ids for t in trajectory.traces] == [[1], [2]]


def _three_calls(rerender_first: list[int]) -> tuple[CapturedCompletion, ...]:
    """Call 3's prompt carries reply 1 re-rendered as ``rerender_first`` (the tip, call 2's prompt, is no prefix)."""
    reply1, reply2 = ids("abc") + [EOT], ids("de") + [EOT]
    first = cc(1, SYSTEM, reply1)
    second = cc(2, SYSTEM + reply1 + INTER, reply2)
    third = cc(3, SYSTEM + rerender_first + [EOT] + INTER + reply2 + INTER, ids("f") + [EOT])
    return first, second, third


def test_template_that_re_renders_earlier_turns_still_extends_the_trace():
    first, second, third = _three_calls([10, 1, 11, 1, 12])  # "a b c": same conversation
    trajectory = build_trajectory("s", [first, second, third], eot=EOT, decode=decode)
    assert trajectory.breaks == []
    (trace,) = trajectory.traces
    assert trace.completion_ids == [1, 2, 3]
    assert trace.response_ids == first.response_ids + INTER + second.response_ids + INTER + third.response_ids


def test_prompt_rewriting_an_earlier_turn_is_a_break_when_the_old_context_stops():
    first, second, third = _three_calls(ids("abx"))
    trajectory = build_trajectory("s", [first, second, third], eot=EOT, decode=decode)
    (broken,) = trajectory.breaks
    assert (broken.completion_id, broken.broken_trace, broken.position) == (3, 0, len(SYSTEM) + 2)
    assert broken.cause.startswith("history rewritten")
    assert [t.completion_ids for t in trajectory.traces] == [[1, 2], [3]]


def test_prompt_rewriting_an_earlier_turn_is_no_break_when_the_old_context_goes_on():
    """A second context that shares the first prompt (a fork, a sub-agent) is no rewrite if the original goes on."""
    first, second, fork = _three_calls(ids("abx"))
    goes_on = cc(4, second.prompt_ids + second.response_ids + INTER, ids("g") + [EOT])
    trajectory = build_trajectory("s", [first, second, fork, goes_on], eot=EOT, decode=decode)
    assert trajectory.breaks == []
    assert [t.completion_ids for t in trajectory.traces] == [[1, 2, 4], [3]]


# -- labels -----------------------------------------------------------------------------------------
def test_side_calls_under_another_system_prompt_are_labelled_side():
    main_system, side_system = [5, 30, EOT, 5, 31], [5, 32, EOT, 5, 31]
    main1 = cc(1, main_system, ids("abcdef") + [EOT])
    title = cc(2, side_system, ids("title") + [EOT])
    main2 = cc(3, main_system + ids("abcdef") + [EOT] + INTER, ids("gh") + [EOT])
    trajectory = build_trajectory("s", [main1, title, main2], eot=EOT, decode=decode)
    labels = {tuple(t.completion_ids): t.label for t in trajectory.traces}
    assert labels == {(1, 3): "main", (2,): "side"}


# -- status -----------------------------------------------------------------------------------------
def _session(**overrides) -> list[CapturedCompletion]:
    first = cc(1, SYSTEM, ids("ab") + [EOT], policy_version=overrides.get("v1"))
    second = cc(2, SYSTEM + ids("ab") + [EOT] + INTER, ids("cd") + [EOT], finish=overrides.get("finish"),
                policy_version=overrides.get("v2"))
    return [first, second]


def test_aborted_completion_makes_the_trajectory_untrainable():
    trajectory = build_trajectory("s", _session(finish="abort"), eot=EOT, decode=decode)
    assert trajectory.status is TrajectoryStatus.UNTRAINABLE and not trajectory.trainable
    assert "abort" in trajectory.reasons[0] and "[2]" in trajectory.reasons[0]


def test_two_policy_versions_make_the_trajectory_untrainable():
    trajectory = build_trajectory("s", _session(v1=3, v2=4), eot=EOT, decode=decode)
    assert trajectory.status is TrajectoryStatus.UNTRAINABLE and "[3, 4]" in trajectory.reasons[0]
    same = build_trajectory("s", _session(v1=4, v2=4), eot=EOT, decode=decode)
    assert same.status is TrajectoryStatus.COMPLETE


def test_untokenized_completion_makes_the_trajectory_untrainable():
    served = cc(3, [], [], trainable=False, logprobs=None, finish="stop")  # served without token ids
    trajectory = build_trajectory("s", _session() + [served], eot=EOT, decode=decode)
    assert trajectory.status is TrajectoryStatus.UNTRAINABLE and "[3]" in trajectory.reasons[0]
    assert len(trajectory.traces) == 1 and trajectory.traces[0].completion_ids == [1, 2]


@pytest.mark.parametrize("session_status", ["timeout", "failed", "cancelled"])
def test_timed_out_or_failed_session_is_partial(session_status):
    trajectory = build_trajectory("s", _session(), session_status=session_status, eot=EOT, decode=decode)
    assert trajectory.status is TrajectoryStatus.PARTIAL and trajectory.trainable
    assert session_status in trajectory.reasons[0]


def test_untrainable_wins_over_partial():
    trajectory = build_trajectory("s", _session(finish="abort"), session_status="timeout", eot=EOT)
    assert trajectory.status is TrajectoryStatus.UNTRAINABLE


@pytest.mark.parametrize("session_status", [None, "completed", "running"])
def test_otherwise_complete(session_status):
    trajectory = build_trajectory("s", _session(), session_status=session_status, eot=EOT, decode=decode,
                                  rollout_id="r1")
    assert trajectory.status is TrajectoryStatus.COMPLETE and trajectory.reasons == []
    assert trajectory.rollout_id == "r1" and trajectory.session_id == "s" and trajectory.builder == "prefix_merge"


def test_unknown_builder_is_rejected():
    with pytest.raises(ValueError, match="unknown builder"):
        build_trajectory("s", _session(), builder="message_keys", eot=EOT)


def test_eot_is_inferred_from_the_first_call_that_stopped():
    # no eot passed: the first "stop" reply's last token (EOT) is the end-of-turn token, so call 2 merges
    trajectory = build_trajectory("s", _session(), decode=decode)
    assert [t.completion_ids for t in trajectory.traces] == [[1, 2]]


def test_missing_logprobs_drop_the_traces_logprobs():
    first, second = _session()
    second.logprobs = None
    (trace,) = build_trajectory("s", [first, second], eot=EOT, decode=decode).traces
    assert trace.response_logprobs is None and trace.completion_ids == [1, 2]


def test_invariant_violation_is_raised_not_trained_on(monkeypatch):
    """build_trajectory checks every trace: a builder that produced an unfaithful trace raises."""
    from polar_jobs.trajectory import build as build_module

    real = build_module.build_prefix_merge

    def tampered(*args, **kwargs):
        result = real(*args, **kwargs)
        result.traces[0].loss_mask[0] = 0
        return result

    monkeypatch.setattr(build_module, "build_prefix_merge", tampered)
    with pytest.raises(InvariantViolation, match="loss_mask"):
        build_trajectory("s", _session(), eot=EOT, decode=decode)
