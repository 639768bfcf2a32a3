"""The real Claude Code CLI through the whole pipeline (intake, init/running/postrun workers, proxy, sim
upstream) in the local runtime: the sim's scripted policy calls the ``Bash`` tool to write hello.txt,
then answers with text.

The CLI is installed by the preset's ``install()`` on first use (npm registry, shared cache).

Outside-host check (``assert_stayed_local``): every session runs with ``HTTP(S)_PROXY``/``ALL_PROXY``
pointing at a loopback *tripwire* (``NO_PROXY`` = loopback), which records the target of every request
or CONNECT it receives and refuses it. Both CLIs honour these variables (with the preset's switches
removed, the tripwire sees ``CONNECT api.anthropic.com:443`` from claude and ``github.com``,
``api.github.com``, ``chatgpt.com`` from codex), so an attempt to reach any non-loopback host shows up
there even though this machine cannot reach it. In addition the harness log (stdout + stderr) is
scanned for non-loopback URLs and for DNS/connection error messages.
"""

from __future__ import annotations

import json
import re
import socketserver
import threading

import pytest

from polar_jobs.harnesses import for_agent
from polar_jobs.schemas import AgentSpec
from tests.conftest import SIM_MODEL
from tests.integration.pipeline_stack import LiveStack, live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0")
# messages a CLI prints when it could not resolve or reach a host (Node, Bun, reqwest/hyper)
CONNECTION_ERRORS = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|getaddrinfo|"
                               r"dns error|error sending request|failed to lookup address|Unable to connect",
                               re.IGNORECASE)
URL = re.compile(r"\b(?:https?|wss?)://\[?([A-Za-z0-9.\-:]+?)\]?(?::\d+)?(?=[/\"'\s)\\]|$)")


class Tripwire:
    """A loopback HTTP proxy that lets nothing through: it records each request line and answers 403."""

    def __init__(self):
        hits = self.hits = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline(4096).decode("latin-1", "replace").strip()
                if line:
                    hits.append(line)
                self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        loopback = "127.0.0.1,localhost,::1"
        return {"HTTP_PROXY": self.url, "HTTPS_PROXY": self.url, "ALL_PROXY": self.url, "http_proxy": self.url,
                "https_proxy": self.url, "all_proxy": self.url, "NO_PROXY": loopback, "no_proxy": loopback}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tripwire():
    wire = Tripwire()
    yield wire
    wire.stop()


def outside_urls(text: str) -> set[str]:
    return {host for host in URL.findall(text) if host.lower() not in LOOPBACK}


def assert_stayed_local(log: str, tripwire: Tripwire) -> None:
    assert tripwire.hits == [], f"the harness tried to reach outside hosts: {tripwire.hits}"
    assert outside_urls(log) == set(), f"non-loopback URLs in the harness log: {outside_urls(log)}"
    assert not CONNECTION_ERRORS.search(log), CONNECTION_ERRORS.search(log).group(0)


def run_hello_task(live: LiveStack, tripwire: Tripwire, marker: str, harness: str, provider: str, shell_tool: str,
                   arguments: dict) -> str:
    """Submit the hello.txt task for ``harness``, with the sim scripted to call ``shell_tool`` once and
    then answer; wait for it and check what every preset must deliver. Returns the harness log."""
    for_agent(AgentSpec(harness=harness)).install()  # what init does; done first, so the 60 s are the run's
    live.rules([
        {"match": {"any_contains": marker, "tool": shell_tool, "last_role": "user"},
         "policy": {"kind": "tool_call", "name": shell_tool, "arguments": arguments}, "times": 1},
        {"match": {"any_contains": marker, "last_role": "tool"}, "policy": {"kind": "text", "text": "Done."}},
    ])
    task = {"instruction": f"Create hello.txt containing the word polar. ({marker})", "num_samples": 1,
            "timeout_seconds": 120, "agent_timeout": 60,
            "agent": {"harness": harness, "model": SIM_MODEL, "env": tripwire.env()},
            "evaluator": {"name": "output",
                          "config": {"checks": [{"kind": "file_content", "path": "hello.txt", "contains": "polar"}]}}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    view = live.wait_session(session_id, {"done", "failed", "timeout", "cancelled"}, timeout=90)
    log_path = live.session_dir(session_id) / "harness.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    assert view["status"] == "done", (view, log[-4000:])
    assert view["result"]["harness"]["exit_code"] == 0
    assert view["reward"] == 1.0 and view["result"]["evaluation"]["reward"] == 1.0
    assert "polar" in (live.session_dir(session_id) / "workspace" / "hello.txt").read_text()

    completions = live.get(f"/v1/sessions/{session_id}/completions").json()["completions"]
    assert len(completions) >= 2 and {c["status"] for c in completions} == {"ok"}
    assert all(c["prompt_token_ids"] and c["token_ids"] for c in completions)
    assert all(c["trainable"] for c in completions)
    assert {c["provider"] for c in completions} == {provider}

    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert trajectory["builder"] == "prefix_merge" and trajectory["status"] == "complete", trajectory.get("reasons")
    labels = [trace["label"] for trace in trajectory["traces"]]
    assert labels.count("main") == 1 and set(labels) <= {"main", "side"}, labels
    (main,) = [trace for trace in trajectory["traces"] if trace["label"] == "main"]
    assert len(main["spans"]) >= 2  # the tool call and the answer, in one append-only context
    assert main["finish_reason"] == "stop"
    assert set(main["loss_mask"]) == {0, 1}  # sampled tokens trained, the tool result not

    assert_stayed_local(log, tripwire)
    return log


def outside_attempts_without_switches(live: LiveStack, marker: str, agent: dict) -> list[str]:
    """The detector's own check: the same task with the preset's offline switches undone (``agent``), under a
    fresh tripwire; returns what the tripwire saw (the session may end either way)."""
    wire = Tripwire()
    try:
        task = {"instruction": f"Say hello. ({marker})", "num_samples": 1, "timeout_seconds": 120,
                "agent_timeout": 60, "agent": {**agent, "model": SIM_MODEL, "env": {**agent.get("env", {}),
                                                                                    **wire.env()}}}
        (session_id,) = live.submit_ok(task)["session_ids"]
        live.wait_session(session_id, {"done", "failed", "timeout", "cancelled"}, timeout=90)
        return list(wire.hits)
    finally:
        wire.stop()


def events(log: str) -> list[dict]:
    """The JSON event lines the CLI printed on stdout."""
    found = []
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def test_claude_code_writes_hello_through_the_pipeline(live, tripwire, marker):
    log = run_hello_task(live, tripwire, marker, "claude_code", "anthropic", "Bash",
                               {"command": "echo polar > hello.txt", "description": "Write hello.txt"})
    stream = events(log)
    init = next(event for event in stream if event.get("type") == "system" and event.get("subtype") == "init")
    assert init["claude_code_version"] == "2.1.197" and "Bash" in init["tools"]
    uses = [block for event in stream if event.get("type") == "assistant"
            for block in event["message"]["content"] if block.get("type") == "tool_use"]
    assert [(use["name"], use["input"]["command"]) for use in uses] == [("Bash", "echo polar > hello.txt")]
    results = [block for event in stream if event.get("type") == "user"
               for block in event["message"]["content"] if block.get("type") == "tool_result"]
    assert [result["is_error"] for result in results] == [False]  # approved by --allowedTools, not denied
    final = stream[-1]
    assert final["type"] == "result" and final["subtype"] == "success" and final["result"] == "Done."
    assert final["permission_denials"] == []


def test_tripwire_sees_claude_code_reach_out_when_nonessential_traffic_is_allowed(live, marker):
    hits = outside_attempts_without_switches(live, marker, {
        "harness": "claude_code", "env": {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": ""}})  # "0" still counts as set
    assert any("api.anthropic.com" in hit for hit in hits), hits
