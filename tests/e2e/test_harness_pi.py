"""The real ``pi`` CLI (npm ``@mariozechner/pi-coding-agent``, installed on first use by ``install()``).

The same two checks as ``test_harness_opencode`` (see its module doc for what the network audit
checks): the hello.txt task through the whole pipeline, and a direct run with hostile instructions
(one that starts with ``--``, which pi would otherwise read as a flag) that must reach the model
exactly, with no connection to any host but loopback (pi documents none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polar_jobs.sim.policies import message_text
from tests.e2e.test_harness_opencode import HOSTILE, audit_network, first_user_text, run_direct, run_pipeline_task
from tests.integration.pipeline_stack import live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e

PI_HOSTS: tuple[str, ...] = ()


def test_pi_writes_hello_through_the_pipeline(live, marker):
    done = run_pipeline_task(live, "pi", marker, {"command": "printf polar > hello.txt"})
    assert len(done["completions"]) == 2  # no side calls
    assert [trace["label"] for trace in done["trajectory"]["traces"]] == ["main"]
    assert len(done["main"]["spans"]) == 2
    tools = {tool["function"]["name"] for tool in done["requests"][0]["tools"]}
    assert tools == {"read", "bash", "edit", "write"}
    home = live.session_dir(done["session"]) / "home"
    models = json.loads((home / ".pi" / "agent" / "models.json").read_text())
    assert models["providers"]["local"]["baseUrl"] == f"{live.settings.proxy_url()}/v1"
    audit_network([live.session_dir(done["session"]) / "harness.log"], None, PI_HOSTS)


@pytest.mark.parametrize("lead", ["", "--", "@"])
def test_pi_gets_the_exact_instruction_and_stays_on_loopback(proxy, sim, tmp_path, marker, lead):
    instruction = f"{lead}{HOSTILE}{marker}"
    done = run_direct(proxy, sim, tmp_path, "pi", instruction, marker, {"command": "printf polar > hello.txt"})
    assert first_user_text(done["requests"]) == instruction
    assert not (Path(done["runtime"].workdir) / "pwned").exists()  # nothing in it ran in a shell
    assert all(b.get("tools") for b in done["requests"])  # no side calls
    seen = audit_network([done["runtime"].root / "harness.log"], done["trace"], PI_HOSTS)
    print("network seen:", seen)
    assert message_text(done["requests"][0]["messages"][0])  # the system prompt arrived as a message
