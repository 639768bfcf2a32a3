"""Trajectories from sessions produced for real: SDK-driven agent loops through the proxy and the sim
upstream (real Qwen tokenization), built by both builders and checked against the captures."""

from __future__ import annotations

import openai
import pytest

from polar_jobs.sim.tokenizer import decode
from polar_jobs.trajectory import TrajectoryStatus, build_trajectory
from tests.integration.agents import ChatAgent, script_tool_loop

pytestmark = pytest.mark.integration


def _client(proxy):
    session_id, key = proxy.new_session()
    return session_id, openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


def _build(proxy, session_id, **kwargs):
    return build_trajectory(session_id, proxy.captures(session_id), decode=decode, **kwargs)


def test_append_only_agent_with_ten_tool_round_trips_is_one_trace(proxy, sim, marker):
    session_id, client = _client(proxy)
    script_tool_loop(sim, marker, round_trips=10, reasoning=True)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Fix the failing test.")
    assert agent.run() == 11
    trajectory = _build(proxy, session_id)
    assert trajectory.status is TrajectoryStatus.COMPLETE and trajectory.breaks == []
    (trace,) = trajectory.traces
    captured = proxy.captures(session_id)
    assert trace.completion_ids == [c.id for c in captured]
    assert trace.trained_tokens == sum(len(c.response_ids) for c in captured)
    assert trace.prompt_ids == captured[0].prompt_ids
    # the whole trace is the last call's context plus its reply, token for token
    assert trace.prompt_ids + trace.response_ids == captured[-1].prompt_ids + captured[-1].response_ids
    assert [m["role"] for m in trace.response_messages] == ["assistant", "tool"] * 10 + ["assistant"]
    per_request = _build(proxy, session_id, builder="per_request")
    assert len(per_request.traces) == 11


def test_interleaved_sub_agent_is_its_own_labelled_trace(proxy, sim, marker):
    session_id, client = _client(proxy)
    script_tool_loop(sim, f"{marker}-main", round_trips=6)
    script_tool_loop(sim, f"{marker}-sub", round_trips=2, final_text="Sub-task report: found it.")
    main = ChatAgent(client, f"You are the main agent ({marker}-main).", "Refactor the parser.")
    sub = ChatAgent(client, f"You are an explore sub-agent ({marker}-sub).", "Find where tokens are split.")
    for _ in range(3):
        main.step()
    assert sub.run() == 3  # the sub-agent's calls land between the main agent's
    main.say("The sub-agent reported: found it.")  # a harness may add a turn; the context stays append-only
    main.run()
    trajectory = _build(proxy, session_id)
    assert len(trajectory.traces) == 2 and trajectory.breaks == []
    by_label = {trace.label: trace for trace in trajectory.traces}
    assert set(by_label) == {"main", "side"}
    assert by_label["main"].num_turns == 7 and by_label["side"].num_turns == 3
    assert by_label["main"].system_hash != by_label["side"].system_hash
    captured = proxy.captures(session_id)
    assert sum(t.trained_tokens for t in trajectory.traces) == sum(len(c.response_ids) for c in captured)


def test_context_compaction_starts_a_new_trace_and_loses_nothing(proxy, sim, marker):
    session_id, client = _client(proxy)
    script_tool_loop(sim, marker, round_trips=6)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Port the module.")
    for _ in range(4):
        agent.step()
    agent.compact("ported two of five files")
    agent.run()
    trajectory = _build(proxy, session_id)
    assert [t.num_turns for t in trajectory.traces] == [4, 3]
    assert trajectory.breaks == []  # a fresh context, not a rewritten one
    captured = proxy.captures(session_id)
    assert sum(t.trained_tokens for t in trajectory.traces) == sum(len(c.response_ids) for c in captured)


def test_history_that_drops_reasoning_is_reported_with_its_cause(proxy, sim, marker):
    session_id, client = _client(proxy)
    script_tool_loop(sim, marker, round_trips=3, reasoning=True)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Tidy the imports.", echo_reasoning=False)
    agent.run()
    trajectory = _build(proxy, session_id)
    captured = proxy.captures(session_id)
    # every later call saw a history without the reasoning the model had sampled: nothing merges across it
    assert len(trajectory.traces) == 4 and len(trajectory.breaks) == 3
    for broken, completion in zip(trajectory.breaks, captured[1:]):
        assert broken.completion_id == completion.id
        assert broken.cause.startswith("reasoning dropped")
        assert "Thinking about step" in broken.expected and "Thinking about step" not in broken.found
    assert sum(t.trained_tokens for t in trajectory.traces) == sum(len(c.response_ids) for c in captured)


def test_new_user_turn_after_reasoning_is_a_reported_break(proxy, sim, marker):
    """Qwen's template drops <think> from turns before the latest user message: the old context ends there."""
    session_id, client = _client(proxy)
    script_tool_loop(sim, marker, round_trips=1, reasoning=True)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Add a test.")
    agent.run()
    agent.say("Now also update the changelog.")
    agent.step()
    trajectory = _build(proxy, session_id)
    assert [t.num_turns for t in trajectory.traces] == [2, 1]
    (broken,) = trajectory.breaks
    assert broken.broken_trace == 0 and broken.cause.startswith("reasoning dropped")
    assert "Thinking about step 0" in broken.expected


def test_timed_out_session_yields_a_partial_trajectory(proxy, sim, marker):
    session_id, client = _client(proxy)
    sim.rule({"kind": "error", "status": 500, "message": "engine restarting"}, times=1, any_contains=marker,
             last_role="tool")
    script_tool_loop(sim, marker, round_trips=8)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Upgrade the dependency.")
    agent.step()
    with pytest.raises(openai.InternalServerError):
        agent.step()  # the upstream failed once; the harness retries the same request
    agent.step()
    agent.step()  # ... and then the harness ran out of time
    trajectory = _build(proxy, session_id, session_status="timeout")
    assert trajectory.status is TrajectoryStatus.PARTIAL and trajectory.trainable
    assert "timeout" in trajectory.reasons[0]
    (trace,) = trajectory.traces
    assert trace.num_turns == 3 and trajectory.stats["failed_calls"] == 1


def test_calls_from_two_policy_versions_are_untrainable(proxy, sim, marker):
    session_id, client = _client(proxy)
    script_tool_loop(sim, marker, round_trips=2)
    agent = ChatAgent(client, f"You are a coding agent ({marker}).", "Rename the flag.")
    proxy.service.sessions.set_policy_version(session_id, 3)
    agent.step()
    proxy.service.sessions.set_policy_version(session_id, 4)
    agent.run()
    trajectory = _build(proxy, session_id)
    assert trajectory.status is TrajectoryStatus.UNTRAINABLE and not trajectory.trainable
    assert "[3, 4]" in trajectory.reasons[0]
