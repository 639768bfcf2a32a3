"""Scripted policies, rule matching, and the render → parse round trip."""

import json
import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.sim.parser import parse_output
from polar_jobs.sim.policies import PolicyError, default_policy, render_policy, resolve_policy, validate_policy
from polar_jobs.sim.rules import RuleBook

pytestmark = pytest.mark.unit


def test_render_text_and_reasoning():
    assert render_policy({"kind": "text", "text": "Hi"}) == "Hi"
    assert render_policy({"kind": "reasoning", "reasoning": "R", "text": "T"}) == "<think>\nR\n</think>\n\nT"


def test_render_tool_call_with_preface_and_json_values():
    policy = {"kind": "tool_call", "name": "f", "arguments": {"p": "x", "n": 2, "o": {"k": True}}, "text": "Pre"}
    assert render_policy(policy) == (
        "Pre\n\n<tool_call>\n<function=f>\n<parameter=p>\nx\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
        '<parameter=o>\n{"k": true}\n</parameter>\n</function>\n</tool_call>'
    )


def test_render_parallel_and_reasoning_tool_call():
    calls = {"kind": "tool_calls", "calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": "v"}}]}
    assert render_policy(calls) == (
        "<tool_call>\n<function=a>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=b>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>"
    )
    rtc = {"kind": "reasoning_tool_call", "reasoning": "R", "name": "a", "arguments": {}}
    assert render_policy(rtc) == "<think>\nR\n</think>\n\n<tool_call>\n<function=a>\n</function>\n</tool_call>"


@pytest.mark.parametrize("policy", [
    {"kind": "nope"}, {"kind": "tool_call"}, {"kind": "tool_calls", "calls": []},
    {"kind": "reasoning", "text": "no reasoning"}, {"kind": "text", "text": 3}, {"kind": "error"},
])
def test_bad_policies_rejected(policy):
    with pytest.raises(PolicyError):
        render_policy(policy)


def request(text, role="user", tools=None, model="m"):
    return {"model": model, "messages": [{"role": "user", "content": "first"}, {"role": role, "content": text}],
            "tools": tools}


def test_first_matching_rule_wins_and_match_keys_combine():
    tools = [{"type": "function", "function": {"name": "bash"}}]
    book = RuleBook([
        {"match": {"contains": "deploy", "tool": "bash"}, "policy": {"kind": "text", "text": "A"}},
        {"match": {"any_contains": "first", "last_role": "tool"}, "policy": {"kind": "text", "text": "B"}},
        {"match": {"has_tools": False, "model": "m"}, "policy": {"kind": "text", "text": "C"}},
    ])
    assert book.select(request("please deploy", tools=tools))["text"] == "A"
    assert book.select(request("please deploy", role="tool", tools=tools))["text"] == "A"
    assert book.select(request("output", role="tool", tools=tools))["text"] == "B"
    assert book.select(request("deploy"))["text"] == "C"
    assert book.select(request("deploy", model="other"))["text"] == "Sim reply to: deploy"


def test_times_counts_down_and_removes_rule():
    book = RuleBook()
    book.add([{"match": {}, "policy": {"kind": "text", "text": "once"}, "times": 2}])
    book.add([{"match": {}, "policy": {"kind": "text", "text": "after"}}])
    assert [book.select(request("x"))["text"] for _ in range(3)] == ["once", "once", "after"]
    assert len(book.snapshot()) == 1
    book.add([{"match": {}, "policy": {"kind": "text", "text": "new"}}], replace=True)
    assert book.select(request("x"))["text"] == "new"
    book.clear()
    assert book.snapshot() == []


def test_bad_rules_rejected():
    with pytest.raises(PolicyError):
        RuleBook([{"match": {"colour": "red"}, "policy": {"kind": "text", "text": ""}}])
    with pytest.raises(PolicyError):
        RuleBook([{"match": {}, "policy": {"kind": "text", "text": ""}, "times": 0}])


def text(value):
    return {"kind": "text", "text": value}


def test_choice_cycle_takes_options_in_turn():
    book = RuleBook([{"match": {}, "policy": {"kind": "choice", "mode": "cycle",
                                              "options": [text("a"), text("b"), text("c")]}}])
    assert [book.select(request("x"))["text"] for _ in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]
    snapshot = book.snapshot()
    assert snapshot[0]["policy"]["kind"] == "choice" and "_state" not in snapshot[0]


def test_choice_cycle_is_the_default_mode_and_counts_per_rule():
    book = RuleBook([
        {"match": {"contains": "one"}, "policy": {"kind": "choice", "options": [text("1a"), text("1b")]}},
        {"match": {"contains": "two"}, "policy": {"kind": "choice", "options": [text("2a"), text("2b")]}},
    ])
    picks = [book.select(request(word))["text"] for word in ("one", "two", "two", "one", "two")]
    assert picks == ["1a", "2a", "2b", "1b", "2a"]


def test_choice_cycle_is_exact_under_concurrent_requests():
    options = [text(str(i)) for i in range(4)]
    book = RuleBook([{"match": {}, "policy": {"kind": "choice", "mode": "cycle", "options": options}}])
    picks: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        for _ in range(50):
            chosen = book.select(request("x"))["text"]
            with lock:
                picks.append(chosen)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(picks) == {str(i): 100 for i in range(4)}


def test_choice_random_with_seed_is_reproducible_and_uses_every_option():
    policy = {"kind": "choice", "mode": "random", "seed": 7, "options": [text("a"), text("b"), text("c")]}
    first, second = RuleBook([{"match": {}, "policy": policy}]), RuleBook([{"match": {}, "policy": policy}])
    draws = [first.select(request("x"))["text"] for _ in range(60)]
    assert draws == [second.select(request("x"))["text"] for _ in range(60)]
    assert set(draws) == {"a", "b", "c"}
    assert draws != ["a", "b", "c"] * 20  # drawn, not cycled
    other = RuleBook([{"match": {}, "policy": {**policy, "seed": 8}}])
    assert [other.select(request("x"))["text"] for _ in range(60)] != draws


def test_choice_unseeded_random_picks_only_options():
    book = RuleBook([{"match": {}, "policy": {"kind": "choice", "mode": "random", "options": [text("a"), text("b")]}}])
    assert {book.select(request("x"))["text"] for _ in range(40)} <= {"a", "b"}


def test_choice_nested_options_resolve_recursively():
    inner = {"kind": "choice", "options": [text("i1"), text("i2")]}
    book = RuleBook([{"match": {}, "policy": {"kind": "choice", "options": [inner, text("o")]}}])
    assert [book.select(request("x"))["text"] for _ in range(6)] == ["i1", "o", "i2", "o", "i1", "o"]


def test_choice_resolves_tool_calls_and_keeps_times_and_delay():
    call = {"kind": "tool_call", "name": "run_shell", "arguments": {"command": "echo 42"}}
    book = RuleBook([{"match": {}, "times": 2,
                      "policy": {"kind": "choice", "delay_ms": 5, "options": [call, text("no")]}}])
    first, second, third = (book.select(request("x")) for _ in range(3))
    assert first == {**call, "delay_ms": 5} and "<function=run_shell>" in render_policy(first)
    assert second == {"kind": "text", "text": "no", "delay_ms": 5}
    assert third["text"] == "Sim reply to: x"  # the rule was used up


def test_resolve_policy_leaves_plain_policies_alone():
    state: dict = {}
    assert resolve_policy(text("t"), state) == text("t") and state == {}


@pytest.mark.parametrize("policy", [
    {"kind": "choice"},
    {"kind": "choice", "options": []},
    {"kind": "choice", "options": text("a")},
    {"kind": "choice", "options": [text("a"), {"kind": "tool_call"}]},
    {"kind": "choice", "options": [{"kind": "choice", "options": [{"kind": "nope"}]}]},
    {"kind": "choice", "options": [text("a")], "mode": "shuffle"},
    {"kind": "choice", "options": [text("a")], "mode": "random", "seed": "7"},
    {"kind": "choice", "options": [text("a")], "mode": "random", "seed": True},
])
def test_bad_choice_policies_rejected(policy):
    with pytest.raises(PolicyError):
        validate_policy(policy)
    with pytest.raises(PolicyError):
        RuleBook([{"match": {}, "policy": policy}])


def test_unresolved_choice_has_no_text():
    with pytest.raises(PolicyError):
        render_policy({"kind": "choice", "options": [text("a")]})


def test_default_replies():
    long = "x" * 100
    assert default_policy([{"role": "user", "content": long}]) == {"kind": "text", "text": "Sim reply to: " + "x" * 40}
    tool_reply = default_policy([{"role": "user", "content": "q"}, {"role": "tool", "content": "42 files"}])
    assert tool_reply["kind"] == "text" and "42 files" in tool_reply["text"]


SAFE = st.text(alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=30)
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
VALUES = st.one_of(SAFE, st.integers(-10**6, 10**6), st.booleans(),
                   st.lists(st.integers(0, 9), max_size=3), st.dictionaries(NAMES, st.integers(0, 9), max_size=2))
ARGS = st.dictionaries(NAMES, VALUES, max_size=4)
CALLS = st.lists(st.fixed_dictionaries({"name": NAMES, "arguments": ARGS}), min_size=1, max_size=3)
POLICIES = st.one_of(
    st.builds(lambda t: {"kind": "text", "text": t}, SAFE),
    st.builds(lambda r, t: {"kind": "reasoning", "reasoning": r, "text": t}, SAFE, SAFE),
    st.builds(lambda c, t: {"kind": "tool_calls", "calls": c, "text": t}, CALLS, SAFE),
    st.builds(lambda r, c: {"kind": "reasoning_tool_call", "reasoning": r, **c}, SAFE, CALLS.map(lambda cs: cs[0])),
)


def schema_for(calls):
    """A tool list typing every argument by its Python type."""
    kinds = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "object"}
    return [{"type": "function", "function": {"name": c["name"], "parameters": {"type": "object", "properties": {
        k: {"type": kinds[type(v)]} for k, v in c["arguments"].items()}}}} for c in calls]


@settings(max_examples=200, deadline=None)
@given(POLICIES)
def test_parse_recovers_rendered_policy(policy):
    if "name" in policy:
        calls = [{"name": policy["name"], "arguments": policy["arguments"]}]
    else:
        calls = policy.get("calls", [])
    tools = schema_for(calls[:1]) if len({c["name"] for c in calls}) == len(calls) else None
    out = parse_output(render_policy(policy), tools)
    assert (out.reasoning or "").strip() == policy.get("reasoning", "").strip()
    if "reasoning" in policy:
        assert out.reasoning == "\n" + policy["reasoning"] + "\n"
    expected_text = policy.get("text", "")
    assert (out.content or "").strip() == expected_text.strip()
    assert [c["name"] for c in out.tool_calls] == [c["name"] for c in calls]
    for got, want, position in zip(out.tool_calls, calls, range(len(calls))):
        args = json.loads(got["arguments"])
        if tools and position == 0:
            assert args == want["arguments"]
        else:
            assert args == {k: v if isinstance(v, str) else json.dumps(v) for k, v in want["arguments"].items()}
