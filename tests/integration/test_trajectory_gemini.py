"""A Gemini CLI-style agent loop through the proxy with the official google-genai SDK, built into a trajectory.

Gemini CLI drops the model's thought parts from the history it sends back and signs the echoed function call
with ``skip_thought_signature_validator`` (docs: shared/reference/harnesses.md, gemini_cli History). Every
later call then continues a context without the reasoning the model sampled: the trajectory must report each
such break with its cause and still keep every sampled token. A client that echoes the thoughts (with the
proxy's own signature) keeps one append-only context: one trace, no breaks.
"""

from __future__ import annotations

import time

import pytest
from google import genai
from google.genai import types

from polar_jobs.sim.tokenizer import decode
from polar_jobs.trajectory import TrajectoryStatus, build_trajectory

pytestmark = pytest.mark.integration

SHELL = types.FunctionDeclaration(
    name="run_shell_command", description="Run a shell command and return its output.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}},
                            "required": ["command"]})
ROUND_TRIPS = 2
SKIP_SIGNATURE = b"skip_thought_signature_validator"


def _script(sim, marker: str) -> None:
    for index in range(ROUND_TRIPS):
        sim.rule({"kind": "reasoning_tool_call", "reasoning": f"Thinking about step {index}.",
                  "name": "run_shell_command", "arguments": {"command": f"step {index} of {marker}"}},
                 times=1, any_contains=marker)
    sim.rule({"kind": "text", "text": "All done."}, any_contains=marker)


def _ask(gemini, stream: bool, contents, config) -> types.Content:
    if not stream:
        reply = gemini.models.generate_content(model="gemini-2.5-pro", contents=contents, config=config)
        return reply.candidates[0].content
    chunks = list(gemini.models.generate_content_stream(model="gemini-2.5-pro", contents=contents, config=config))
    return types.Content(role="model", parts=[p for chunk in chunks for p in chunk.candidates[0].content.parts])


def _run_loop(proxy, sim, marker: str, echo_thoughts: bool, stream: bool = False):
    """Gemini CLI's loop: call, run the requested shell command, send the result back; until a text answer."""
    session_id, key = proxy.new_session()
    _script(sim, marker)
    gemini = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url))
    config = types.GenerateContentConfig(
        system_instruction=f"You are Gemini CLI, a coding agent ({marker}).",
        tools=[types.Tool(function_declarations=[SHELL])],
        thinking_config=types.ThinkingConfig(include_thoughts=True), temperature=1.0, top_p=0.95)
    contents = [types.Content(role="user", parts=[types.Part(text=f"Tidy the imports ({marker}).")])]
    answers = []
    for _ in range(ROUND_TRIPS + 3):
        content = _ask(gemini, stream, contents, config)
        thoughts = [part.text for part in content.parts if part.thought]
        calls = [part.function_call for part in content.parts if part.function_call]
        answers.append((thoughts, calls, "".join(p.text for p in content.parts if p.text and not p.thought)))
        if echo_thoughts:  # a well-behaved client: the model's content back as it came, signatures and all
            echoed, call_ids = list(content.parts), [call.id for call in calls]
        else:  # Gemini CLI: thought parts dropped; its own call ids; the validator-skipping signature
            echoed, call_ids = [], []
            for part in content.parts:
                if part.thought:
                    continue
                if part.function_call:
                    call_id = f"{part.function_call.name}_{int(time.time() * 1000)}_{len(call_ids)}"
                    call_ids.append(call_id)
                    echoed.append(types.Part(function_call=types.FunctionCall(
                        name=part.function_call.name, args=part.function_call.args, id=call_id),
                        thought_signature=SKIP_SIGNATURE))
                else:
                    echoed.append(types.Part(text=part.text))
        contents.append(types.Content(role="model", parts=echoed))
        if not calls:
            break
        contents.append(types.Content(role="user", parts=[
            types.Part(function_response=types.FunctionResponse(
                id=call_id, name=call.name, response={"output": f"$ {call.args['command']}\nok"}))
            for call, call_id in zip(calls, call_ids)]))
    return session_id, answers


def _reasoning(message: dict) -> str:
    """The reasoning an assistant message carries upstream (the proxy may name it ``reasoning``)."""
    return message.get("reasoning") or message.get("reasoning_content") or ""


def _sanity(answers, marker: str) -> None:
    """The scripted conversation happened: reasoning + a call per round trip, then the text answer."""
    assert len(answers) == ROUND_TRIPS + 1
    for index, (thoughts, calls, _) in enumerate(answers[:-1]):
        assert [t.strip() for t in thoughts] == [f"Thinking about step {index}."]
        assert [(c.name, c.args) for c in calls] == [("run_shell_command", {"command": f"step {index} of {marker}"})]
    assert answers[-1][1] == [] and answers[-1][2].strip() == "All done."


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_history_that_drops_reasoning_is_reported_with_its_cause(proxy, sim, marker, stream):
    session_id, answers = _run_loop(proxy, sim, marker, echo_thoughts=False, stream=stream)
    _sanity(answers, marker)
    captured = proxy.captures(session_id)
    assert len(captured) == ROUND_TRIPS + 1 and all(c.status == "ok" for c in captured)
    for completion in captured[1:]:  # what the harness sent: model turns without their reasoning
        echoed = [m for m in completion.chat_request["messages"] if m["role"] == "assistant"]
        assert echoed and not any(_reasoning(m) for m in echoed)

    trajectory = build_trajectory(session_id, captured, decode=decode)  # raises if an invariant fails
    assert trajectory.status is TrajectoryStatus.COMPLETE
    # each later call saw its predecessor's reply without the sampled reasoning: one break per later call
    assert len(trajectory.breaks) == len(captured) - 1 == ROUND_TRIPS
    assert len(trajectory.traces) == len(captured)
    for index, broken in enumerate(trajectory.breaks):
        assert broken.completion_id == captured[index + 1].id
        assert broken.broken_trace == index  # the trace the previous call opened
        assert broken.cause.startswith("reasoning dropped")
        assert f"Thinking about step {index}" in broken.expected
        assert "Thinking about step" not in broken.found
    # nothing sampled is lost: every call's tokens are trained, in exactly one trace
    assert sorted(cid for t in trajectory.traces for cid in t.completion_ids) == [c.id for c in captured]
    assert sum(t.trained_tokens for t in trajectory.traces) == sum(len(c.response_ids) for c in captured)
    for trace in trajectory.traces:
        (completion,) = [c for c in captured if c.id == trace.completion_ids[0]]
        assert trace.prompt_ids + trace.response_ids == completion.prompt_ids + completion.response_ids


def test_history_that_keeps_reasoning_is_one_trace(proxy, sim, marker):
    session_id, answers = _run_loop(proxy, sim, marker, echo_thoughts=True)
    _sanity(answers, marker)
    captured = proxy.captures(session_id)
    assert len(captured) == ROUND_TRIPS + 1
    last_history = [m for m in captured[-1].chat_request["messages"] if m["role"] == "assistant"]
    assert [_reasoning(m).strip() for m in last_history] == [
        f"Thinking about step {index}." for index in range(ROUND_TRIPS)]

    trajectory = build_trajectory(session_id, captured, decode=decode)
    assert trajectory.status is TrajectoryStatus.COMPLETE and trajectory.breaks == []
    (trace,) = trajectory.traces
    assert trace.completion_ids == [c.id for c in captured]
    assert trace.trained_tokens == sum(len(c.response_ids) for c in captured)
    assert trace.prompt_ids + trace.response_ids == captured[-1].prompt_ids + captured[-1].response_ids
    assert trace.response_logprobs is not None and len(trace.response_logprobs) == len(trace.response_ids)
