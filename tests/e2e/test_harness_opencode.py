"""The real ``opencode`` CLI (npm ``opencode-ai``, installed on first use by the preset's ``install()``).

1. Through the whole pipeline (intake, init/running/postrun workers, proxy, sim upstream) in the local
   runtime: the sim's scripted policy asks for a ``bash`` tool call that writes ``hello.txt``, then
   answers in text; the session is ``done`` with reward 1.0, every call carries token ids, and
   prefix_merge gives one ``main`` trace (the title call with no tools is a ``side`` trace).
2. Directly (preset setup/env/command in a LocalRuntime against the test proxy), with a hostile
   instruction: the model receives exactly the instruction text, and nothing reached a host other
   than loopback and the documented one.

What "nothing reached an outside host" checks (``audit_network``, shared with the pi tests):
- the harness log (stdout + stderr) and the CLI's own log files name no ``http(s)://`` host other
  than loopback and the documented hosts;
- when ``strace`` works here, every ``connect()`` of the CLI and its children (``strace -f``) goes to
  loopback, to a DNS resolver (port 53), or to an address of a documented host; and every DNS
  question it sent names a documented host. For opencode the documented host is
  ``registry.npmjs.org`` (its config-dir dependency check, which no setting turns off); for pi, none.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import requests

from polar_jobs.harnesses import HarnessContext, for_agent
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.schemas import AgentSpec
from polar_jobs.sim.policies import message_text
from tests.conftest import SIM_MODEL
from tests.integration.pipeline_stack import live, pipeline_stack  # noqa: F401

pytestmark = pytest.mark.e2e

OPENCODE_HOSTS = ("registry.npmjs.org",)  # documented: opencode's config-dir dependency check
HOSTILE = 'Write  "double" \'single\' $(touch pwned) `id` \\n\n\tnext line --help -m x @file --  '


# -- shared with test_harness_pi ---------------------------------------------------------------

def hello_rules(marker: str, arguments: dict) -> list[dict]:
    """A bash tool call that writes hello.txt, then a text answer; only for requests that offer
    ``bash`` and carry the marker (a title call has no tools, so it gets the sim's default reply)."""
    return [
        {"match": {"any_contains": marker, "tool": "bash", "last_role": "user"},
         "policy": {"kind": "tool_call", "name": "bash", "arguments": arguments}},
        {"match": {"any_contains": marker, "tool": "bash", "last_role": "tool"},
         "policy": {"kind": "text", "text": "Done: hello.txt contains polar."}},
    ]


def sim_requests(sim_url: str, marker: str) -> list[dict]:
    """The chat requests the sim upstream received that carry the marker."""
    bodies = requests.get(f"{sim_url}/sim/requests", timeout=10).json()
    return [b for b in bodies if any(marker in message_text(m) for m in b.get("messages") or [])]


def run_pipeline_task(live, harness: str, marker: str, arguments: dict, timeout: float = 90) -> dict:
    """Submit one hello.txt task for ``harness``, wait for it, and check what every harness shares;
    returns ``{"session", "view", "completions", "trajectory", "requests"}``."""
    live.rules(hello_rules(marker, arguments))
    instruction = f'Create hello.txt containing the word polar.  Say "done" when it\'s written. ({marker})'
    task = {"instruction": instruction, "num_samples": 1, "timeout_seconds": timeout,
            "agent": {"harness": harness, "model": SIM_MODEL},
            "evaluator": {"name": "output",
                          "config": {"checks": [{"kind": "file_content", "path": "hello.txt", "contains": "polar"}]}}}
    submitted = live.submit_ok(task)
    (session_id,) = submitted["session_ids"]
    live.wait_task(submitted["task_id"], timeout=timeout + 30)
    view = live.session(session_id)
    harness_result = view["result"]["harness"]
    assert view["status"] == "done", json.dumps(view, indent=1)[:4000]
    assert harness_result["exit_code"] == 0, harness_result
    assert (live.session_dir(session_id) / "workspace" / "hello.txt").read_text().strip() == "polar"
    assert view["result"]["evaluation"]["reward"] == 1.0 and view["reward"] == 1.0

    completions = live.get(f"/v1/sessions/{session_id}/completions").json()["completions"]
    assert completions and {c["status"] for c in completions} == {"ok"}
    for completion in completions:
        assert completion["prompt_token_ids"] and completion["token_ids"], completion

    trajectory = live.get(f"/v1/sessions/{session_id}/trajectory").json()
    assert trajectory["builder"] == "prefix_merge" and trajectory["status"] == "complete", trajectory.get("reasons")
    labels = [trace["label"] for trace in trajectory["traces"]]
    assert labels.count("main") == 1 and set(labels) <= {"main", "side"}, labels
    (main,) = [trace for trace in trajectory["traces"] if trace["label"] == "main"]
    assert main["finish_reason"] == "stop"

    # the model received exactly the instruction (quotes, double space and all) in the main calls
    bodies = sim_requests(live.sim_url, marker)
    tool_calls = [b for b in bodies if b.get("tools")]
    assert len(tool_calls) == 2, [len(b.get("tools") or []) for b in bodies]
    first_user = [m for m in tool_calls[0]["messages"] if m["role"] == "user"]
    assert message_text(first_user[-1]) == instruction
    return {"session": session_id, "view": view, "completions": completions, "trajectory": trajectory,
            "requests": bodies, "main": main}


_URL_HOST = re.compile(r"\bhttps?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)")
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}


def log_hosts(*paths: Path) -> set[str]:
    """Hosts of the http(s) URLs the given log files (or directories of them) mention."""
    hosts: set[str] = set()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.exists() else []
        for file in files:
            hosts.update(match.lower() for match in _URL_HOST.findall(file.read_text(errors="replace")))
    return hosts


def strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    try:
        return subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def traced(command: str, trace: Path) -> list[str]:
    """``command`` under ``strace -f``, recording connects and the datagrams sent (for DNS questions)."""
    return ["strace", "-f", "-qq", "-xx", "-s", "1024", "-e", "trace=connect,sendto,sendmsg,sendmmsg",
            "-o", str(trace), "bash", "-lc", command]


_CONNECT = re.compile(r'connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), '
                      r'(?:sin_addr=inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})+)"')


def _unhex(text: str) -> str:
    """A string as ``strace -xx`` prints it (every byte as ``\\xNN``), decoded."""
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def _dns_question(data: bytes) -> str | None:
    """The name asked for, if ``data`` is a DNS query with one question."""
    if len(data) < 17 or data[2] & 0x80 or int.from_bytes(data[4:6], "big") != 1:
        return None
    labels, at = [], 12
    while at < len(data) and data[at]:
        size = data[at]
        if size > 63 or at + 1 + size > len(data):
            return None
        labels.append(data[at + 1:at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    return ".".join(labels).lower() if labels and len(data) == at + 5 else None


def strace_findings(trace: Path) -> tuple[set[tuple[str, int]], set[str]]:
    """(every inet address:port connected to, every DNS name asked for) in an strace output file."""
    connects: set[tuple[str, int]] = set()
    names: set[str] = set()
    for line in trace.read_text(errors="replace").splitlines():
        found = _CONNECT.search(line)
        if found:
            connects.add((_unhex(found.group(2) or found.group(3)), int(found.group(1))))
        elif re.search(r"\bsend(to|msg|mmsg)\(", line):
            for blob in _HEX.findall(line):
                name = _dns_question(bytes.fromhex(blob.replace("\\x", "")))
                if name:
                    names.add(name)
    return connects, names


def _addresses(host: str) -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, 443)}
    except OSError:
        return set()


def audit_network(logs: list[Path], trace: Path | None, allowed_hosts: tuple[str, ...]) -> dict:
    """Assert the run reached only loopback and ``allowed_hosts`` (see the module doc); returns what was seen."""
    hosts = log_hosts(*logs) - _LOOPBACK_NAMES
    assert hosts <= set(allowed_hosts), f"the logs name outside hosts: {sorted(hosts - set(allowed_hosts))}"
    seen: dict = {"log_hosts": sorted(hosts)}
    if trace is None:
        return seen
    connects, names = strace_findings(trace)
    assert names <= set(allowed_hosts), f"DNS questions for undocumented hosts: {sorted(names - set(allowed_hosts))}"
    allowed_ips = set().union(*(_addresses(host) for host in allowed_hosts)) if allowed_hosts else set()
    outside = set()
    for address, port in connects:
        ip = ipaddress.ip_address(address)
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if ip.is_loopback or ip.is_unspecified or port == 53 or str(ip) in allowed_ips:
            continue
        outside.add(f"{address}:{port}")
    assert not outside, f"connections to outside hosts: {sorted(outside)} (DNS names asked: {sorted(names)})"
    seen.update(connects=sorted(f"{a}:{p}" for a, p in connects), dns_names=sorted(names))
    return seen


def run_direct(proxy, sim, tmp_path: Path, harness_name: str, instruction: str, marker: str, arguments: dict,
               timeout: float = 60) -> dict:
    """The preset's own install/setup/env/command in a LocalRuntime against the test proxy (under strace
    when it works); returns the runtime, the exec result, the trace path (or None) and the sim requests."""
    session_id, key = proxy.new_session()
    runtime = LocalRuntime(tmp_path / "sessions", session_id)
    runtime.start()
    harness = for_agent(AgentSpec(harness=harness_name, model=SIM_MODEL))
    harness.install()
    context = HarnessContext(proxy_url=proxy.url, api_key=key, model=SIM_MODEL, session_id=session_id,
                             task_id="direct", workdir=runtime.workdir, home=runtime.home)
    harness.setup(runtime, context)
    requests.post(f"{sim.url}/sim/rules", json=hello_rules(marker, arguments), timeout=5).raise_for_status()
    trace = tmp_path / "strace.txt" if strace_works() else None
    if trace is None:
        warnings.warn("strace is not usable here: the connect()/DNS audit is skipped, the log scan still runs")
    command = harness.command(instruction)
    started = time.monotonic()
    result = runtime.exec(traced(command, trace) if trace else command, env=harness.env(context), timeout=timeout,
                          log=runtime.root / "harness.log")
    try:
        assert result.exit_code == 0, (result.exit_code, result.stdout[-2000:], result.stderr[-2000:])
        assert (Path(runtime.workdir) / "hello.txt").read_text().strip() == "polar"
        assert proxy.captures(session_id), "no call reached the proxy"
        for completion in proxy.captures(session_id):
            assert completion.prompt_ids and completion.response_ids
    finally:
        runtime.stop()
    return {"runtime": runtime, "result": result, "trace": trace, "requests": sim_requests(sim.url, marker),
            "seconds": time.monotonic() - started}


def first_user_text(bodies: list[dict]) -> str:
    """The last user message of the first request that offers tools (the main agent's prompt)."""
    main = [b for b in bodies if b.get("tools")]
    assert main, "no main-agent request reached the sim"
    return message_text([m for m in main[0]["messages"] if m["role"] == "user"][-1])


# -- the tests ---------------------------------------------------------------------------------

def test_opencode_writes_hello_through_the_pipeline(live, marker):
    done = run_pipeline_task(live, "opencode", marker, {"command": "printf polar > hello.txt"})
    # three calls: the title side call (no tools) and the two calls of the main agent
    assert len(done["completions"]) == 3
    titles = [b for b in done["requests"] if not b.get("tools")]
    assert len(titles) == 1 and "title" in message_text(titles[0]["messages"][0]).lower()
    labels = sorted(trace["label"] for trace in done["trajectory"]["traces"])
    assert labels == ["main", "side"]
    assert len(done["main"]["spans"]) == 2  # both main calls merged into one trace
    home = live.session_dir(done["session"]) / "home"
    config = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    assert config["provider"]["local"]["options"]["baseURL"] == f"{live.settings.proxy_url()}/v1"
    audit_network([live.session_dir(done["session"]) / "harness.log", home / ".local" / "share" / "opencode" / "log"],
                  None, OPENCODE_HOSTS)


def test_opencode_gets_the_exact_instruction_and_stays_on_loopback(proxy, sim, tmp_path, marker):
    instruction = f"--help  {HOSTILE}{marker}"
    done = run_direct(proxy, sim, tmp_path, "opencode", instruction, marker, {"command": "printf polar > hello.txt"})
    assert first_user_text(done["requests"]) == instruction
    assert not (Path(done["runtime"].workdir) / "pwned").exists()  # nothing in it ran in a shell
    home = Path(done["runtime"].home)
    seen = audit_network([done["runtime"].root / "harness.log", home / ".local" / "share" / "opencode" / "log"],
                         done["trace"], OPENCODE_HOSTS)
    print("network seen:", seen)
    if done["trace"] is not None:  # the audit does see the documented registry check: it is not blind
        outside = [c for c in seen["connects"] if not c.startswith(("127.", "::1", "[::1]"))]
        assert seen["dns_names"] or outside, seen
        with pytest.raises(AssertionError, match="outside hosts|undocumented hosts"):
            audit_network([], done["trace"], ())
