"""The real Gemini CLI through the whole pipeline (intake, init/running/postrun workers, proxy, sim upstream).

The sim's scripted policy answers the harness's first call with a ``run_shell_command`` call that writes
``hello.txt`` and the call after it with text. The CLI is installed by the preset's ``install()`` in the
init stage on first use (npm registry; about 15 s), then reused from the shared cache.

Offline check: the harness runs with a Node preload (``NODE_OPTIONS=--require=…`` via ``AgentSpec.env``,
inherited by the CLI's relaunched child) that records every ``net.Socket#connect`` (all TCP and TLS, undici's
fetch included) and every ``dns.lookup``, and refuses the non-loopback ones before any packet leaves; every
entry must be a loopback address or a Unix socket. The harness log (stdout and stderr) must also show no
failed-connection error (``ENOTFOUND``, ``EAI_AGAIN``, ``ECONNREFUSED``, ``getaddrinfo``, ``fetch failed``,
the preload's own ``EPOLARREFUSED``, …) and name no non-loopback http(s) host. The ``test_the_preload_catches…``
tests show the check is armed: with the base-URL variable removed, the real CLI's attempt on its vendor's
API host is recorded (and refused).

The helpers here are shared with ``test_harness_qwen_code.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from polar_jobs.harnesses import HarnessContext, for_agent
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.schemas import AgentSpec
from polar_jobs.store import CaptureStore
from tests.conftest import SIM_MODEL
from tests.integration.pipeline_stack import LiveStack, live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e

SHELL_TOOL = "run_shell_command"
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"}
NET_ERRORS = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH"
                        r"|getaddrinfo|fetch failed|socket hang up|EPOLARREFUSED|polar netlog")
URL_HOST = re.compile(r"https?://\[?([A-Za-z0-9._:-]+?)\]?(?::\d+)?(?:[/\s'\"),]|$)")

NETLOG_JS = r"""
// Preload: record every outgoing socket connect and DNS lookup of this Node process in $POLAR_NETLOG, and
// refuse (before any packet leaves) those that are not loopback or a Unix socket.
const fs = require('fs'), net = require('net'), dns = require('dns');
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '::ffff:127.0.0.1']);
const local = (host) => LOOPBACK.has(host) || host.startsWith('/');
const note = (kind, host, port) => {
  try {
    fs.appendFileSync(process.env.POLAR_NETLOG,
      JSON.stringify({pid: process.pid, kind, host, port: port == null ? null : String(port)}) + '\n');
  } catch (e) {}
};
const refused = (host) => Object.assign(new Error(`polar netlog: refused ${host}`), {code: 'EPOLARREFUSED'});
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  const target = Array.isArray(args[0]) ? args[0][0] : args[0];
  let host, port = null;
  if (target && typeof target === 'object') { host = target.path || target.host || 'localhost'; port = target.port; }
  else if (typeof target === 'string' && isNaN(Number(target))) host = target;
  else { host = typeof args[1] === 'string' ? args[1] : 'localhost'; port = target; }
  note('connect', String(host), port);
  if (!local(String(host))) { process.nextTick(() => this.destroy(refused(host))); return this; }
  return connect.apply(this, args);
};
const lookup = dns.lookup;
dns.lookup = function (host, ...rest) {
  note('lookup', String(host), null);
  const callback = rest[rest.length - 1];
  if (!local(String(host)) && typeof callback === 'function') { process.nextTick(callback, refused(host)); return {}; }
  return lookup.call(this, host, ...rest);
};
const lookupPromise = dns.promises.lookup;
dns.promises.lookup = function (host, ...rest) {
  note('lookup', String(host), null);
  return local(String(host)) ? lookupPromise.call(this, host, ...rest) : Promise.reject(refused(host));
};
"""


def netlog_env(directory: Path) -> tuple[dict[str, str], Path]:
    """Agent env that makes every Node process of the harness log its connections; and the log's path."""
    hook, log = directory / "netlog.js", directory / "net.jsonl"
    hook.write_text(NETLOG_JS)
    log.touch()
    return {"NODE_OPTIONS": f"--require={hook}", "POLAR_NETLOG": str(log)}, log


def assert_loopback_only(netlog: Path, harness_log: str) -> list[dict]:
    """Every recorded connect/lookup is loopback (or a Unix socket); the log shows no outside host."""
    entries = [json.loads(line) for line in netlog.read_text().splitlines() if line.strip()]
    outside = [e for e in entries if e["host"] not in LOOPBACK and not e["host"].startswith("/")]
    assert not outside, f"the harness tried to reach non-loopback hosts: {outside}"
    assert any(e["kind"] == "connect" for e in entries), "the preload recorded nothing: the check is not armed"
    failures = [line for line in harness_log.splitlines() if NET_ERRORS.search(line)]
    assert not failures, f"connection errors in the harness log: {failures[:5]}"
    hosts = {host for host in URL_HOST.findall(harness_log) if host not in LOOPBACK}
    assert not hosts, f"the harness log names non-loopback hosts: {sorted(hosts)}"
    return entries


def outside_attempts_without(harness: str, removed: tuple[str, ...], tmp_path: Path, timeout: float = 8) -> set[str]:
    """Run ``harness`` by itself (no pipeline) with its preset's env minus ``removed``, under the preload;
    the non-loopback hosts it tried (the preload refused them, so nothing left the machine)."""
    env, netlog = netlog_env(tmp_path)
    runtime = LocalRuntime(tmp_path / "runtime", "tripwire")
    runtime.start()
    preset = for_agent(AgentSpec(harness=harness, model=SIM_MODEL, env=env))
    context = HarnessContext(proxy_url="http://127.0.0.1:9", api_key="tripwire", model=SIM_MODEL,
                             session_id="tripwire", task_id="tripwire", workdir=runtime.workdir, home=runtime.home)
    preset.setup(runtime, context)
    env = {key: value for key, value in preset.env(context).items() if key not in removed}
    try:
        runtime.exec(preset.command("Say hello."), env=env, timeout=timeout)
    finally:
        runtime.stop()
    entries = [json.loads(line) for line in netlog.read_text().splitlines() if line.strip()]
    return {e["host"] for e in entries if e["host"] not in LOOPBACK and not e["host"].startswith("/")}


def script_write_then_answer(live: LiveStack, marker: str, tool: str = SHELL_TOOL) -> None:
    """The main agent's calls get: a shell call writing hello.txt, then text.

    The first rule needs the instruction (with ``marker``) as the *last* message, the second a tool result
    last: Qwen Code's memory-extraction side call (which also offers ``run_shell_command`` and ends with its
    own user instruction) matches neither."""
    live.rules([
        {"match": {"tool": tool, "contains": marker, "last_role": "user"}, "times": 1,
         "policy": {"kind": "tool_call", "name": tool, "arguments": {"command": "echo polar > hello.txt"}}},
        {"match": {"tool": tool, "any_contains": marker, "last_role": "tool"}, "times": 1,
         "policy": {"kind": "text", "text": "Created hello.txt containing polar."}},
    ])


def run_harness_task(live: LiveStack, harness: str, marker: str, tmp_path: Path, timeout: float = 180) -> dict:
    """One sample of a hello.txt task with ``harness``, checked end to end; returns what the test may inspect."""
    script_write_then_answer(live, marker)
    env, netlog = netlog_env(tmp_path)
    task = {"instruction": f"Create hello.txt containing the word polar ({marker}).", "num_samples": 1,
            "timeout_seconds": timeout, "agent": {"harness": harness, "model": SIM_MODEL, "env": env},
            "evaluator": {"name": "output",
                          "config": {"checks": [{"kind": "file_content", "path": "hello.txt", "contains": "polar"}]}}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    live.wait_task(submitted["task_id"], timeout=timeout + 30)
    view = live.session(session_id)
    harness_log_path = live.session_dir(session_id) / "harness.log"
    harness_log = harness_log_path.read_text(errors="replace") if harness_log_path.exists() else ""
    assert view["status"] == "done", (view, harness_log[-4000:])
    assert view["result"]["harness"]["exit_code"] == 0
    assert (live.session_dir(session_id) / "workspace" / "hello.txt").read_text().strip() == "polar"
    assert view["reward"] == 1.0 and view["result"]["evaluation"]["reward"] == 1.0

    captures = CaptureStore(live.jobs.engine).load_session(session_id)
    assert captures, "no model call was captured"
    for capture in captures:
        assert capture.status == "ok", (capture.id, capture.status, capture.error)
        assert capture.prompt_ids and capture.response_ids, capture.id
    main, side = split_main(captures)
    assert len(main) == 2, [(c.id, system_prompt(c)[:80]) for c in captures]

    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert trajectory["builder"] == "prefix_merge" and trajectory["status"] == "complete", trajectory["reasons"]
    mains = [t for t in trajectory["traces"] if t["label"] == "main"]
    assert len(mains) == 1, [(t["label"], completion_ids(t)) for t in trajectory["traces"]]
    assert completion_ids(mains[0]) == main
    assert all(t["label"] == "side" and set(completion_ids(t)) <= set(side)
               for t in trajectory["traces"] if t is not mains[0])
    assert sorted(i for t in trajectory["traces"] for i in completion_ids(t)) == sorted(main + side)

    entries = assert_loopback_only(netlog, harness_log)
    return {"session_id": session_id, "view": view, "captures": captures, "trajectory": trajectory,
            "harness_log": harness_log, "netlog": entries}


def split_main(captures: list) -> tuple[list[int], list[int]]:
    """Completion ids of the main agent (the first call's system prompt, shell tool offered) and the rest."""
    main = [c.id for c in captures
            if system_prompt(c) == system_prompt(captures[0]) and SHELL_TOOL in tool_names(c.chat_request)]
    return main, [c.id for c in captures if c.id not in main]


def system_prompt(capture) -> str:
    first = ((capture.chat_request or {}).get("messages") or [{}])[0]
    return json.dumps(first.get("content")) if first.get("role") == "system" else ""


def completion_ids(trace: dict) -> list[int]:
    return [span["completion_id"] for span in trace["spans"]]


def tool_names(chat_request: dict | None) -> set[str]:
    return {t.get("function", t).get("name") for t in (chat_request or {}).get("tools") or []}


def test_gemini_cli_writes_a_file_through_the_pipeline(live, marker, tmp_path):
    run = run_harness_task(live, "gemini_cli", marker, tmp_path)
    main, = (t for t in run["trajectory"]["traces"] if t["label"] == "main")
    assert len(run["trajectory"]["traces"]) == 1  # Gemini CLI makes no side calls
    assert main["finish_reason"] == "stop" and set(main["loss_mask"]) == {0, 1}

    first, second = (json.loads(c.raw_request) for c in run["captures"])
    assert first["generationConfig"]["temperature"] == 1  # the Gemini API, as the CLI sent it
    call = second["contents"][-2]["parts"][-1]["functionCall"]
    assert call["name"] == SHELL_TOOL and call["args"] == {"command": "echo polar > hello.txt"}
    answer = second["contents"][-1]["parts"][0]["functionResponse"]
    assert answer["name"] == SHELL_TOOL and "<untrusted_context>" in answer["response"]["output"]


def test_the_preload_catches_gemini_cli_reaching_out_without_the_base_url(tmp_path):
    # without GOOGLE_GEMINI_BASE_URL the CLI calls Google's API: the check must see (and refuse) it
    tried = outside_attempts_without("gemini_cli", ("GOOGLE_GEMINI_BASE_URL", "GOOGLE_API_URL"), tmp_path)
    assert "generativelanguage.googleapis.com" in tried
