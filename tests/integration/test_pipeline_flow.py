"""A task through the real pipeline (redis-server, prefork workers per queue, proxy, sim upstream), as a
trainer sees it: submit, poll ``/v1/groups``, read rewards, advantages and token-level traces."""

from __future__ import annotations

import math
import uuid

import pytest
import redis
from celery import Celery
from sqlmodel import Session as DbSession
from sqlmodel import func, select

from polar_jobs.store.models import Session
from tests.integration.pipeline_stack import MINI_AGENT, live, pipeline_stack, tool_call, wait_for  # noqa: F401

pytestmark = pytest.mark.integration


def test_task_flows_end_to_end_and_a_trainer_polls_its_group(live, marker):
    # two samples write the right answer, two the wrong one: rewards 1, 1, 0, 0 in some order
    live.rules([
        {"match": {"any_contains": marker, "last_role": "user"}, "policy": tool_call("echo 42 > answer.txt"),
         "times": 2},
        {"match": {"any_contains": marker, "last_role": "user"}, "policy": tool_call("echo 41 > answer.txt")},
        {"match": {"any_contains": marker, "last_role": "tool"}, "policy": {"kind": "text", "text": "Done."}},
    ])
    task = {"instruction": f"Write 42 into answer.txt ({marker})", "num_samples": 4, "timeout_seconds": 60,
            "agent": {"harness": "shell", "command": MINI_AGENT},
            "evaluator": {"name": "output",
                          "config": {"checks": [{"kind": "file_content", "path": "answer.txt", "contains": "42"}]}}}
    submitted = live.submit_ok(task)
    assert submitted["created"] is True and len(submitted["session_ids"]) == 4

    group, cursor = live.poll_group(submitted["task_id"], timeout=90)
    assert live.groups(after=cursor)["groups"] == []  # nothing new after the cursor
    assert live.groups(after=cursor)["next"] == cursor

    samples = group["samples"]
    assert [s["sample_index"] for s in samples] == [0, 1, 2, 3]
    assert {s["session_id"] for s in samples} == set(submitted["session_ids"])
    assert {s["status"] for s in samples} == {"done"}
    rewards = [s["reward"] for s in samples]
    assert sorted(rewards) == [0.0, 0.0, 1.0, 1.0]
    # GRPO by hand: (r - mean) / (population std + 1e-6)
    mean = sum(rewards) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 4)
    assert mean == 0.5 and std == 0.5
    for sample in samples:
        assert sample["advantage"] == pytest.approx((sample["reward"] - mean) / (std + 1e-6), rel=1e-9)
        assert abs(sample["advantage"]) == pytest.approx(1.0, abs=1e-5)
    assert group["advantage"]["method"] == "grpo" and group["advantage"]["no_signal"] is False
    assert group["advantage"]["mean"] == pytest.approx(0.5) and group["advantage"]["std"] == pytest.approx(0.5)
    assert group["num_samples"] == 4 and group["mode"] == "rl"

    for sample in samples:
        # the reward follows what the scripted policy wrote into that sample's workspace
        written = (live.session_dir(sample["session_id"]) / "workspace" / "answer.txt").read_text()
        assert written.strip() == ("42" if sample["reward"] == 1.0 else "41")
        (trace,) = sample["traces"]  # two calls, one append-only context: one trace
        assert len(trace["prompt_ids"]) > 0
        assert len(trace["response_ids"]) == len(trace["loss_mask"]) > 0
        assert set(trace["loss_mask"]) == {0, 1}  # sampled tokens trained, the tool result not
        assert trace["response_logprobs"] is None or len(trace["response_logprobs"]) == len(trace["response_ids"])
        assert trace["label"] == "main" and trace["finish_reason"] == "stop"

        view = live.session(sample["session_id"])
        assert view["status"] == "done" and view["reward"] == sample["reward"]
        assert view["result"]["harness"]["exit_code"] == 0
        assert view["result"]["trajectory"]["status"] == "complete"
        assert view["result"]["evaluation"]["reward"] == sample["reward"]

        completions = live.get(f"/v1/sessions/{sample['session_id']}/completions").json()["completions"]
        assert len(completions) == 2 and {c["status"] for c in completions} == {"ok"}
        assert all(c["token_ids"] and c["prompt_token_ids"] for c in completions)
        trajectory = live.get(f"/v1/sessions/{sample['session_id']}/trajectory").json()
        assert trajectory["status"] == "complete" and trajectory["builder"] == "prefix_merge"
        (full,) = trajectory["traces"]
        assert full["prompt_ids"] == trace["prompt_ids"] and full["response_ids"] == trace["response_ids"]
        assert sum(full["loss_mask"]) == sum(len(c["token_ids"]) for c in completions)
        assert [span["completion_id"] for span in full["spans"]] == [c["id"] for c in completions]

    view = live.task(submitted["task_id"])
    assert view["status"] == "finalized" and view["done"] == 4 and view["counts"] == {"done": 4}


def test_invalid_request_gets_422_naming_every_field_and_enqueues_nothing(live):
    broker = redis.Redis.from_url(live.settings.broker_url)
    before = live.jobs.status_counts()
    bad = {"instruction": "", "num_samples": 0, "agent": {"harness": "shell"}, "evaluator": {"nme": "output"}}
    response = live.submit(bad)
    assert response.status_code == 422
    assert {f["field"] for f in response.json()["fields"]} == {"instruction", "num_samples", "agent",
                                                               "evaluator.nme"}
    assert live.jobs.status_counts() == before
    assert broker.llen("init") == 0


def test_same_idempotency_key_does_not_create_a_second_task(live, marker):
    task = {"instruction": f"idempotent {marker}", "num_samples": 2, "timeout_seconds": 30,
            "agent": {"harness": "shell", "command": "true"}}
    key = {"Idempotency-Key": f"key-{marker}"}
    first = live.submit(task, key)
    again = live.submit(task, key)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again.json()["session_ids"] == first.json()["session_ids"] and again.json()["created"] is False
    conflict = live.submit({**task, "num_samples": 3}, key)
    assert conflict.status_code == 409
    live.wait_task(first.json()["task_id"], timeout=30)
    again_later = live.submit(task, key)  # after the group finished, too
    assert again_later.status_code == 200 and again_later.json()["task_id"] == first.json()["task_id"]
    with DbSession(live.jobs.engine) as db:
        sessions_of_task = db.exec(select(func.count()).select_from(Session).where(
            Session.task_id == first.json()["task_id"])).one()
    assert sessions_of_task == 2
    groups = [g for g in live.groups(after=0, limit=100, traces=False)["groups"]
              if g["task_id"] == first.json()["task_id"]]
    assert len(groups) == 1


def test_redelivered_stage_messages_do_not_run_a_stage_twice(live, marker):
    task = {"instruction": f"redelivery {marker}", "num_samples": 1, "timeout_seconds": 30,
            "agent": {"harness": "shell", "command": f"echo ran >> {live.settings.data_dir}/{marker}.runs"}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    live.wait_task(submitted["task_id"], timeout=30)
    before = live.session(session_id)
    assert before["status"] == "done"

    app = Celery("redeliver", broker=live.settings.broker_url)
    ids = {}
    for stage in ("init", "running", "postrun"):
        ids[stage] = f"redeliver-{stage}-{uuid.uuid4().hex[:8]}"
        app.send_task(f"polar_jobs.{stage}", args=[session_id], queue=stage, task_id=ids[stage])

    def outcomes() -> dict[str, str | None]:
        found = {}
        for stage, task_id in ids.items():
            text = (live.settings.data_dir / "logs" / f"worker-{stage}.log").read_text(errors="replace")
            found[stage] = next((line for line in text.splitlines() if f"[{task_id}] succeeded" in line), None)
        return found

    lines = wait_for(outcomes, lambda found: all(found.values()), 30, "the redelivered stages to finish")
    assert "'skipped'" in lines["init"] and "'skipped'" in lines["running"]
    after = live.session(session_id)
    assert after["status"] == "done" and after["updated_at"] == before["updated_at"]
    assert after["result"] == before["result"]
    assert (live.settings.data_dir / f"{marker}.runs").read_text() == "ran\n"  # the harness ran once
    assert live.task(submitted["task_id"])["done"] == 1
