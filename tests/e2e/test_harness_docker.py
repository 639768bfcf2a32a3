"""Harnesses through the whole pipeline in the docker runtime: a private dockerd this run starts itself
(``private_dockerd``, from ``test_runtime_docker``), the slim base image it builds offline, one labelled
container per session (``runtime.kind = "docker"``), every step a ``docker exec``.

The real Claude Code and Codex CLIs run unmodified in the container: the host's npm cache of harness
CLIs is bind-mounted read-only at the same path, the image carries ``node``. The container shares the
host's network (``network_mode`` ``host``, chosen because the proxy listens on loopback), so the same
loopback tripwire as the local e2e tests (``assert_stayed_local``) sees any attempt to reach outside.

The stack here is this module's own (started after ``DOCKER_HOST`` points at the private daemon, so the
workers inherit it), not the run's shared one.
"""

from __future__ import annotations

import time

import pytest

from polar_jobs.runtimes.docker import SESSION_LABEL, client
from tests.conftest import SIM_MODEL
from tests.e2e.test_harness_claude_code import events, run_hello_task, tripwire  # noqa: F401
from tests.integration.pipeline_stack import LiveStack, dump_logs_if_failed, start_pipeline, wait_gone
from tests.integration.test_runtime_docker import IMAGE, private_dockerd  # noqa: F401

pytestmark = pytest.mark.e2e

DOCKER = {"kind": "docker", "image": IMAGE, "cpus": 1.5, "memory": "2g"}
IN_CONTAINER = "cat /etc/polar-image >> hello.txt"  # the image's marker file: the host has none

AGENT_MJS = """
const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: "POST",
  headers: {authorization: `Bearer ${process.env.OPENAI_API_KEY}`, "content-type": "application/json"},
  body: JSON.stringify({model: process.env.POLAR_MODEL, messages: [{role: "user", content: process.argv[2]}]}),
});
console.log((await response.json()).choices[0].message.content);
"""


class DockerLive:
    """The module's stack; every task it submits runs in the docker runtime."""

    def __init__(self, live: LiveStack):
        self._live = live

    def __getattr__(self, name):
        return getattr(self._live, name)

    def submit_ok(self, task: dict, headers: dict | None = None) -> dict:
        return self._live.submit_ok({"runtime": DOCKER, **task}, headers)


@pytest.fixture(scope="module")
def docker_stack(private_dockerd, sim):
    live = start_pipeline(sim.url)
    yield live
    live.stop()


@pytest.fixture
def live(docker_stack, request):
    failed_before = request.session.testsfailed
    yield DockerLive(docker_stack)
    dump_logs_if_failed(request, docker_stack, failed_before)


def _containers_of(session_id: str) -> list:
    return client().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={session_id}"})


def test_claude_code_writes_hello_in_a_container(live, tripwire, marker):
    started = time.monotonic()
    log = run_hello_task(live, tripwire, marker, "claude_code", "anthropic", "Bash",
                         {"command": f"echo polar > hello.txt && {IN_CONTAINER}", "description": "Write hello.txt"})
    print(f"claude_code in docker: {time.monotonic() - started:.1f} s")
    stream = events(log)
    init = next(event for event in stream if event.get("type") == "system" and event.get("subtype") == "init")
    assert init["cwd"] == "/workspace" and init["claude_code_version"] == "2.1.197"
    results = [block for event in stream if event.get("type") == "user"
               for block in event["message"]["content"] if block.get("type") == "tool_result"]
    assert [result["is_error"] for result in results] == [False]
    assert stream[-1]["type"] == "result" and stream[-1]["result"] == "Done."
    _assert_ran_in_a_container_that_is_gone(live, marker)


def test_codex_writes_hello_in_a_container(live, tripwire, marker):
    started = time.monotonic()
    log = run_hello_task(live, tripwire, marker, "codex", "responses", "exec_command",
                         {"cmd": f"echo polar > hello.txt && {IN_CONTAINER}"})
    print(f"codex in docker: {time.monotonic() - started:.1f} s")
    stream = events(log)
    commands = [event["item"] for event in stream
                if event.get("type") == "item.completed" and event["item"]["type"] == "command_execution"]
    assert [(item["exit_code"], item["status"]) for item in commands] == [(0, "completed")]
    assert stream[-1]["type"] == "turn.completed"
    _assert_ran_in_a_container_that_is_gone(live, marker)


def _assert_ran_in_a_container_that_is_gone(live, marker: str) -> None:
    """hello.txt (copied out of the container at stop) holds the image's marker; no container is left."""
    sessions = [path.name for path in live.settings.sessions_dir().iterdir()
                if (path / "workspace" / "hello.txt").exists()
                and marker in (path / "harness.log").read_text(errors="replace")]
    (session_id,) = sessions
    content = (live.session_dir(session_id) / "workspace" / "hello.txt").read_text()
    assert content.startswith("polar\n") and "polar-jobs slim base" in content, content
    assert not (live.session_dir(session_id) / "home").exists()  # HOME was the container's, not a host dir
    assert _containers_of(session_id) == []


def test_a_hanging_harness_is_killed_with_its_children_at_the_budget(live, marker):
    live.rules([{"match": {"any_contains": marker}, "policy": {"kind": "text", "text": "Thinking about it."}}])
    command = (f"node agent.mjs {{instruction}} && (bash -c 'sleep 300' {marker} &) ; "
               f"bash -c 'sleep 301' {marker}")
    task = {"instruction": f"Think, then hang ({marker})", "num_samples": 1, "timeout_seconds": 120,
            "agent_timeout": 6, "agent": {"harness": "shell", "command": command, "model": SIM_MODEL},
            "runtime": {**DOCKER, "files": {"agent.mjs": AGENT_MJS}}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    started = time.time()
    view = live.wait_task(submitted["task_id"], timeout=60)
    assert time.time() - started < 40
    session = live.session(session_id)
    assert session["status"] == "timeout" and view["counts"] == {"timeout": 1}, session
    harness = session["result"]["harness"]
    assert harness["timed_out"] is True and harness["exit_code"] is None
    assert 5 < harness["duration_s"] < 15
    assert "Thinking about it." in harness["stdout_tail"]  # the one call happened in the container
    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert trajectory["status"] == "partial"
    (trace,) = trajectory["traces"]
    (completion,) = live.get(f"/v1/sessions/{session_id}/completions").json()["completions"]
    assert trace["response_ids"] == completion["token_ids"]
    wait_gone(marker, timeout=10)  # both sleeps (the container's processes are this machine's too)
    assert _containers_of(session_id) == []


def test_a_missing_image_fails_the_session_at_init_with_a_clear_error(live, marker):
    task = {"instruction": f"Never runs ({marker})", "num_samples": 1, "timeout_seconds": 60,
            "agent": {"harness": "shell", "command": "true"},
            "runtime": {"kind": "docker", "image": "localhost/polar-jobs/absent:1"}}
    (session_id,) = live.submit_ok(task)["session_ids"]
    view = live.wait_session(session_id, {"done", "failed", "timeout", "cancelled"}, timeout=60)
    assert view["status"] == "failed" and view["result"]["stage"] == "init"
    assert "image localhost/polar-jobs/absent:1 is not present; build or load it: no registry is reachable" in \
        view["result"]["error"]
    assert _containers_of(session_id) == []
