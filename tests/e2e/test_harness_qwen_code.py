"""The real Qwen Code CLI through the whole pipeline (intake, init/running/postrun workers, proxy, sim upstream).

Same task and checks as ``test_harness_gemini_cli.py`` (whose helpers this uses): a scripted
``run_shell_command`` call writes ``hello.txt``, then a text answer; loopback-only traffic. Qwen Code may
add a "managed memory extraction" side call after its reply (its own system prompt, read-only tools, no
shell tool): it matches neither scripted rule, gets the sim's default text answer, and its trace must be
labelled ``side``.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e import test_harness_gemini_cli as common
from tests.integration.pipeline_stack import live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e


def test_qwen_code_writes_a_file_through_the_pipeline(live, marker, tmp_path):
    run = common.run_harness_task(live, "qwen_code", marker, tmp_path)
    main, = (t for t in run["trajectory"]["traces"] if t["label"] == "main")
    assert main["finish_reason"] == "stop" and set(main["loss_mask"]) == {0, 1}

    first, second = (json.loads(c.raw_request) for c in run["captures"][:2])
    assert first["max_tokens"] == 8000 and first["messages"][-1]["role"] == "user"  # OpenAI Chat, as sent
    call = second["messages"][-2]["tool_calls"][0]["function"]
    assert call["name"] == common.SHELL_TOOL and json.loads(call["arguments"]) == {"command": "echo polar > hello.txt"}
    result = second["messages"][-1]
    assert result["role"] == "tool" and "Exit Code: 0" in json.dumps(result["content"])


def test_the_preload_catches_qwen_code_reaching_out_without_the_base_url(tmp_path):
    # without OPENAI_BASE_URL the CLI calls OpenAI's (and DashScope's) API: the check must see (and refuse) it
    tried = common.outside_attempts_without("qwen_code", ("OPENAI_BASE_URL",), tmp_path)
    assert "api.openai.com" in tried


def test_qwen_code_memory_extraction_after_a_plain_reply_is_a_side_trace(live, marker, tmp_path):
    # a plain text reply (no tool run) is followed by Qwen Code's memory-extraction call, which here finds
    # nothing to save. (prefix_merge calls "main" the system prompt that sampled the most tokens, so the
    # side call's reply is kept shorter than the agent's.)
    live.rules([
        {"match": {"tool": common.SHELL_TOOL, "contains": marker, "last_role": "user"}, "times": 1,
         "policy": {"kind": "text", "text": "Hello! What would you like to work on in this repository today?"}},
        {"match": {"contains": "Managed memory directory", "any_contains": marker}, "times": 1,
         "policy": {"kind": "text", "text": "Nothing to save."}},
    ])
    env, netlog = common.netlog_env(tmp_path)
    submitted = live.submit_ok({"instruction": f"Say hello ({marker}).", "num_samples": 1, "timeout_seconds": 120,
                                "agent": {"harness": "qwen_code", "model": common.SIM_MODEL, "env": env}})
    (session_id,) = submitted["session_ids"]
    live.wait_task(submitted["task_id"], timeout=150)
    view = live.session(session_id)
    assert view["status"] == "done" and view["result"]["harness"]["exit_code"] == 0, view

    captures = common.CaptureStore(live.jobs.engine).load_session(session_id)
    main, side_ids = common.split_main(captures)
    side = [c for c in captures if c.id in side_ids]
    assert len(main) == 1 and side, [(c.id, common.system_prompt(c)[:80]) for c in captures]
    assert all(c.status == "ok" and c.prompt_ids and c.response_ids for c in captures)
    assert any("memory" in json.dumps(c.chat_request["messages"][-1]).lower() for c in side)

    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    labels = {tuple(common.completion_ids(t)): t["label"] for t in trajectory["traces"]}
    assert labels[tuple(main)] == "main"
    assert [label for ids, label in labels.items() if ids != tuple(main)] == ["side"] * (len(labels) - 1)
    assert sorted(i for ids in labels for i in ids) == sorted(main + [c.id for c in side])
    common.assert_loopback_only(netlog, (live.session_dir(session_id) / "harness.log").read_text(errors="replace"))
