"""Faults on the real pipeline: a harness past its timeout, a SIGKILLed running worker (its pool child, then
the whole worker), and a cancel while samples are pending and running."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.integration.pipeline_stack import (  # noqa: F401
    MINI_AGENT, TERMINAL, live, pipeline_stack, processes_with, sleeper, wait_for, wait_gone,
)

pytestmark = pytest.mark.integration


def _harness(marker: str) -> psutil.Process:
    """The sleeping harness process of a test (the python that carries the marker, not its bash)."""
    def find():
        return [p for p in processes_with(marker) if "-c" in p.cmdline() and "bash" not in p.name()]
    (process,) = wait_for(find, lambda found: len(found) == 1, 30, f"the harness of {marker}")
    return process


def _pool_child(harness: psutil.Process, worker: psutil.Process) -> psutil.Process:
    """The worker's pool process that runs this harness: the harness's ancestor whose parent is the worker."""
    for ancestor in harness.parents():
        if ancestor.ppid() == worker.pid:
            return ancestor
    raise AssertionError(f"{harness} does not run under the worker {worker.pid}")


def test_harness_timeout_yields_a_partial_trajectory(live, marker):
    live.rules([{"match": {"any_contains": marker}, "policy": {"kind": "text", "text": "Thinking about it."}}])
    command = f"{MINI_AGENT} --max-steps 1 && {sleeper(marker, 30)}"
    task = {"instruction": f"Think, then hang ({marker})", "num_samples": 1, "timeout_seconds": 60,
            "agent_timeout": 2, "agent": {"harness": "shell", "command": command}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    started = time.time()
    view = live.wait_task(submitted["task_id"], timeout=30)
    assert time.time() - started < 20  # the 2 s agent timeout cut the 30 s sleep short
    session = live.session(session_id)
    assert session["status"] == "timeout" and view["counts"] == {"timeout": 1}
    harness = session["result"]["harness"]
    assert harness["timed_out"] is True and harness["exit_code"] is None
    assert 1.5 < harness["duration_s"] < 10
    assert "Thinking about it." in harness["stdout_tail"]  # the one call happened before the hang
    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert trajectory["status"] == "partial"
    (trace,) = trajectory["traces"]
    completions = live.get(f"/v1/sessions/{session_id}/completions").json()["completions"]
    assert len(completions) == 1
    assert trace["response_ids"] == completions[0]["token_ids"] and sum(trace["loss_mask"]) == len(trace["loss_mask"])
    assert session["reward"] == 0.0  # session_completed: a timed-out harness did not complete
    wait_gone(marker, timeout=5)


def test_sigkill_of_the_running_pool_child_ends_the_sample_and_the_group_finalizes(live, marker):
    # the first sample to take the lock hangs; the other one finishes at once
    lock = live.settings.data_dir / f"{marker}.lock"
    command = f"if mkdir {lock} 2>/dev/null; then {sleeper(marker, 120)}; else true; fi"
    task = {"instruction": f"Hang once ({marker})", "num_samples": 2, "timeout_seconds": 120,
            "agent": {"harness": "shell", "command": command}}
    submitted = live.submit_ok(task)
    harness = _harness(marker)
    worker = live.worker("running")
    child = _pool_child(harness, worker)
    children_before = len(worker.children())
    (hung,) = [sid for sid in submitted["session_ids"] if harness.cwd() == str(live.session_dir(sid) / "workspace")]
    assert live.session(hung)["status"] == "running"

    os.kill(child.pid, signal.SIGKILL)
    view = live.wait_task(submitted["task_id"], timeout=30)  # far less than the 120 s budget
    ended = live.session(hung)
    assert ended["status"] == "failed"
    assert "lost" in ended["result"]["harness"]["error"]
    assert ended["result"]["trajectory"]["status"] == "partial"  # still post-processed
    other = next(s for s in view["sessions"] if s["session_id"] != hung)
    assert other["status"] == "done" and other["reward"] == 1.0
    assert view["done"] == 2
    wait_gone(marker, timeout=10)  # postrun stopped the orphaned harness
    assert worker.is_running()  # the worker replaced its pool child and goes on
    wait_for(lambda: len(worker.children()), lambda n: n == children_before, 20, "the pool to be refilled")
    group, _ = live.poll_group(submitted["task_id"])
    assert sorted(s["status"] for s in group["samples"]) == ["done", "failed"]


def test_cancel_stops_running_samples_and_cancels_pending_ones(live, marker):
    # READY cap 3 and two running slots: of 8 samples, 2 run, up to 3 wait in init/ready, the rest pending
    task = {"instruction": f"Cancel me ({marker})", "num_samples": 8, "timeout_seconds": 120,
            "agent": {"harness": "shell", "command": sleeper(marker, 120)}}
    submitted = live.submit_ok(task)
    live.wait_task(submitted["task_id"], timeout=30, until=lambda v: v["counts"].get("running", 0) == 2)
    # a second task queued behind the first one never leaves pending; cancelled, its group still finalizes
    behind = live.submit_ok({**task, "num_samples": 2, "instruction": f"Cancel me too ({marker})"})
    assert live.task(behind["task_id"])["counts"] == {"pending": 2}
    assert live.http.delete(f"{live.api}/v1/tasks/{behind['task_id']}", timeout=10).status_code == 202
    behind_view = live.wait_task(behind["task_id"], timeout=15)
    assert behind_view["counts"] == {"cancelled": 2}
    assert not any(live.session_dir(sid).exists() for sid in behind["session_ids"])  # no runtime was started
    running = [s["session_id"] for s in live.task(submitted["task_id"])["sessions"] if s["status"] == "running"]
    response = live.http.delete(f"{live.api}/v1/tasks/{submitted['task_id']}", timeout=10)
    assert response.status_code == 202
    at_cancel = response.json()
    assert at_cancel["cancelled"] is True
    assert at_cancel["counts"].get("cancelled", 0) >= 3  # the pending ones, at once
    assert at_cancel["counts"].get("pending", 0) == 0

    view = live.wait_task(submitted["task_id"], timeout=30)
    assert view["counts"] == {"cancelled": 8} and view["done"] == 8
    for session_id in running:
        session = live.session(session_id)
        assert session["result"]["harness"]["cancelled"] is True
        assert session["result"]["trajectory"]["status"] == "partial"  # post-processed after the stop
        assert live.get(f"/v1/sessions/{session_id}/trajectory").status_code == 200
    never_ran = [s["session_id"] for s in view["sessions"] if s["session_id"] not in running]
    for session_id in never_ran:  # cancelled before their harness started: it never did
        assert not (live.session_dir(session_id) / "harness.log").exists(), session_id
    wait_gone(marker, timeout=10)
    group, _ = live.poll_group(submitted["task_id"])
    assert {s["status"] for s in group["samples"]} == {"cancelled"}


def test_sigkill_of_the_whole_running_worker_ends_the_sample_via_the_sweeper(live, marker):
    task = {"instruction": f"Lose my worker ({marker})", "num_samples": 1, "timeout_seconds": 6,
            "agent": {"harness": "shell", "command": sleeper(marker, 120)}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    harness = _harness(marker)
    worker = live.worker("running")
    _pool_child(harness, worker)
    try:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its pool; the harness is in its own group
        worker.wait(timeout=10)
        assert harness.is_running()
        session = live.wait_session(session_id, TERMINAL, timeout=30)
        assert session["status"] == "timeout"
        assert "lost" in session["result"]["harness"]["error"]
        assert session["result"]["trajectory"]["status"] == "partial"
        wait_gone(marker, timeout=10)
        live.wait_task(submitted["task_id"], timeout=15)
    finally:
        live.stack.restart_worker("running", live.stack.running_concurrency)
    # the new worker takes new work
    after = live.submit_ok({"instruction": f"after the restart ({marker})", "num_samples": 1,
                            "timeout_seconds": 60, "agent": {"harness": "shell", "command": "true"}})
    assert live.wait_task(after["task_id"], timeout=60)["counts"] == {"done": 1}
