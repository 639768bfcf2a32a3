"""The real Codex CLI through the whole pipeline (intake, init/running/postrun workers, proxy, sim upstream)
in the local runtime: the sim's scripted policy calls codex's shell tool ``exec_command`` (argument
``cmd``) to write hello.txt, then answers with text.

The CLI is installed by the preset's ``install()`` on first use. The outside-host check (loopback
tripwire proxy + harness-log scan) is described in ``test_harness_claude_code``.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_harness_claude_code import (  # noqa: F401
    events, outside_attempts_without_switches, run_hello_task, tripwire)
from tests.integration.pipeline_stack import live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e


def test_codex_writes_hello_through_the_pipeline(live, tripwire, marker):
    log = run_hello_task(live, tripwire, marker, "codex", "responses", "exec_command",
                         {"cmd": "echo polar > hello.txt"})
    stream = events(log)
    assert stream[0]["type"] == "thread.started"
    commands = [event["item"] for event in stream
                if event.get("type") == "item.completed" and event["item"]["type"] == "command_execution"]
    assert [(item["command"], item["exit_code"], item["status"]) for item in commands] == [
        ("/bin/bash -lc 'echo polar > hello.txt'", 0, "completed")]
    messages = [event["item"]["text"] for event in stream
                if event.get("type") == "item.completed" and event["item"]["type"] == "agent_message"]
    assert messages == ["Done."]
    assert stream[-1]["type"] == "turn.completed"


def test_tripwire_sees_codex_reach_out_when_plugins_are_on(live, marker):
    hits = outside_attempts_without_switches(live, marker, {
        "harness": "codex", "settings": {"config": {"features": {"plugins": True, "remote_plugin": True,
                                                                 "apps": True}}}})
    assert any("github.com" in hit or "chatgpt.com" in hit for hit in hits), hits
