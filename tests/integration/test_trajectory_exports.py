"""Exports of real sessions (proxy + sim upstream) load back and still pass the trace invariants."""

from __future__ import annotations

import json

import datasets
import openai
import pytest

from polar_jobs.sim.tokenizer import decode
from polar_jobs.trajectory import build_trajectory
from polar_jobs.trajectory.exports import (
    sft_records, skyrl_output, slime_samples, truncate_causal, verl_rows, write_jsonl,
)
from tests.integration.agents import ChatAgent, script_tool_loop

pytestmark = pytest.mark.integration


@pytest.fixture
def trajectory(proxy, sim, marker):
    """A session with a main agent (3 tool round trips, reasoning) and an interleaved side agent."""
    session_id, key = proxy.new_session()
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
    script_tool_loop(sim, f"{marker}-main", round_trips=3, reasoning=True)
    script_tool_loop(sim, f"{marker}-side", round_trips=1)
    main = ChatAgent(client, f"You are the main agent ({marker}-main).", "Fix the bug in parse().")
    side = ChatAgent(client, f"You summarize ({marker}-side).", "Summarize the repository.")
    main.step()
    side.run()
    main.run()
    built = build_trajectory(session_id, proxy.captures(session_id), decode=decode)
    assert len(built.traces) == 2
    return built


def test_slime_samples_load_back_aligned(trajectory, tmp_path):
    path = tmp_path / "slime.jsonl"
    assert write_jsonl(slime_samples(trajectory, reward=1.0, group_index=4), path) == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row, trace in zip(rows, trajectory.traces):
        assert row["tokens"] == trace.prompt_ids + trace.response_ids
        assert len(row["loss_mask"]) == len(row["rollout_log_probs"]) == row["response_length"]
        assert sum(row["loss_mask"]) == trace.trained_tokens
        assert row["reward"] == {"reward": 1.0} and row["status"] == "completed" and row["group_index"] == 4
    assert {row["rollout_id"] for row in rows} == {trajectory.session_id}  # one rollout id per session
    assert [row["index"] for row in rows] == [0, 1]


def test_verl_and_skyrl_rows(trajectory):
    rows = verl_rows(trajectory, reward=[0.5, 0.25], uid="task-7")
    assert [row["reward_score"] for row in rows] == [0.5, 0.25] and {row["uid"] for row in rows} == {"task-7"}
    for row, trace in zip(rows, trajectory.traces):
        assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["response_logprobs"])
        assert row["num_turns"] == trace.num_turns
    output = skyrl_output([(trajectory, 1.0, "task-7", 3)])
    assert output["trajectory_ids"] == [{"instance_id": "task-7", "repetition_id": 3}] * 2
    assert output["rollout_metrics"]["trained_tokens"] == sum(t.trained_tokens for t in trajectory.traces)
    with pytest.raises(ValueError, match="3 trace rewards for 2 traces"):
        verl_rows(trajectory, reward=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        verl_rows(trajectory, reward=float("nan"))


def test_sft_jsonl_loads_with_datasets(trajectory, tmp_path):
    path = tmp_path / "sft.jsonl"
    write_jsonl(sft_records(trajectory), path)
    dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    assert dataset.num_rows == 2
    main = next(row for row in dataset if row["label"] == "main")
    roles = [message["role"] for message in main["messages"]]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert "Thinking about step 0." in main["messages"][2]["reasoning_content"]
    assert main["messages"][2]["tool_calls"][0]["function"]["name"] == "run_shell"
    assert json.loads(main["tools"])[0]["function"]["name"] == "run_shell"


def test_over_long_traces_are_cut_causally(trajectory):
    trace = max(trajectory.traces, key=lambda t: len(t.response_ids))
    limit = len(trace.prompt_ids) + len(trace.response_ids) // 2
    cut = truncate_causal(trace, limit)
    assert cut.prompt_ids == trace.prompt_ids  # the prompt is never trimmed
    assert cut.response_ids == trace.response_ids[: limit - len(trace.prompt_ids)]
    assert len(cut.loss_mask) == len(cut.response_logprobs) == len(cut.response_ids)
    assert cut.finish_reason == "length"
    assert truncate_causal(trace, len(trace.prompt_ids)) is None  # no room for a response: dropped
    rows = slime_samples(trajectory, max_tokens=limit)
    assert all(len(row["tokens"]) <= limit for row in rows)


def test_export_command_writes_every_format(trajectory, proxy, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from polar_jobs.cli import main

    monkeypatch.setenv("POLAR_DATABASE_URL", str(proxy.service.captures.engine.url))
    for fmt in ("slime", "verl", "skyrl", "sft"):
        out = tmp_path / f"{fmt}.jsonl"
        result = CliRunner().invoke(main, ["export", "--format", fmt, "--session", trajectory.session_id,
                                           "--out", str(out), "--reward", "1"])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == (1 if fmt == "skyrl" else 2)
        if fmt == "slime":
            assert [row["tokens"] for row in rows] == [t.prompt_ids + t.response_ids for t in trajectory.traces]
    bad = CliRunner().invoke(main, ["export", "--format", "parquet"])
    assert bad.exit_code == 2 and "parquet" in bad.output


def test_upstream_decoder_is_the_engines_tokenizer(sim):
    from polar_jobs.exporting import make_decoder
    from polar_jobs.settings import Settings
    from polar_jobs.sim.tokenizer import encode

    text = "<think>\nplan\n</think>\n\nhello wörld"
    upstream = make_decoder("upstream", Settings(upstream_url=sim.url))
    assert upstream(encode(text)) == text
    assert make_decoder("none", Settings()) is None
