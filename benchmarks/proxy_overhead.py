"""What the capture proxy costs: added latency, throughput, and storage for an append-only session.

    python benchmarks/proxy_overhead.py [--iterations N] [--concurrency 16] [--session-calls 50]

Starts ``polar-jobs sim-upstream`` and ``polar-jobs proxy --open`` as subprocesses on free loopback
ports (the proxy's database is a SQLite file in a temporary directory), then measures:

1. latency of Claude-Code-sized Anthropic and Codex-sized Responses requests, plain and streamed,
   through the proxy, interleaved call by call with direct calls to the sim of the exact normalized
   chat body the proxy sends upstream (read back from the proxy's own store);
2. throughput with ``--concurrency`` clients, through the proxy vs directly, in alternating rounds;
3. storage of a ``--session-calls``-call append-only Anthropic session against a naive baseline.

Everything is deterministic text (seeded), nothing is downloaded, all traffic stays on 127.0.0.1.
It prints plain-text tables and a markdown summary; it asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.words import CODE_TOKENS, WORDS  # noqa: E402
from polar_jobs.store import CaptureStore, SessionStore, make_engine

SIM_MODEL = "polar-sim-qwen3"
MAX_MODEL_LEN = 262144
HOST = "127.0.0.1"
CHECKPOINTS = (1, 5, 10, 20, 30, 40, 50)

# ------------------------------------------------------------------------------------------------
# deterministic text
# ------------------------------------------------------------------------------------------------



def prose(rng: random.Random, chars: int) -> str:
    """English-like sentences of about ``chars`` characters."""
    out: list[str] = []
    size = 0
    while size < chars:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        if rng.random() < 0.15:
            words.insert(rng.randrange(len(words)), f"`{rng.choice(CODE_TOKENS)}_{rng.randint(1, 99)}`")
        sentence = " ".join(words).capitalize() + rng.choice([".", ".", ".", ":", ";", "."])
        out.append(sentence)
        size += len(sentence) + 1
        if rng.random() < 0.12:
            out.append("\n\n- ")
    return " ".join(out)[:chars]


def code_lines(rng: random.Random, chars: int) -> str:
    """Python-looking source lines of about ``chars`` characters."""
    lines: list[str] = []
    size = 0
    indent = 0
    while size < chars:
        kind = rng.random()
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        if kind < 0.12:
            line = f"def {name}({rng.choice(WORDS)}, {rng.choice(WORDS)}={rng.randint(0, 99)}):"
            indent = 1
        elif kind < 0.2:
            line = f"    if {name} is not None and len({rng.choice(WORDS)}) > {rng.randint(1, 64)}:"
            indent = 2
        elif kind < 0.3:
            line = f"# {prose(rng, rng.randint(30, 70))}"
        else:
            line = "    " * indent + f"{name} = {rng.choice(CODE_TOKENS)}({rng.choice(WORDS)}, {rng.randint(0, 999)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# realistic payloads (shapes from /work/shared/reference/harnesses.md)
# ------------------------------------------------------------------------------------------------
CLAUDE_TOOLS = ("Agent", "Bash", "CronCreate", "CronDelete", "CronList", "Edit", "EnterWorktree", "ExitWorktree",
                "NotebookEdit", "Read", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill", "TaskCreate",
                "TaskGet", "TaskList", "TaskOutput", "TaskStop", "TaskUpdate", "WebFetch", "WebSearch", "Workflow",
                "Write")
# relative schema sizes: a few big tools (Agent, Bash, TaskCreate, Workflow), many small ones
_CLAUDE_WEIGHTS = {"Agent": 3.0, "Bash": 2.2, "TaskCreate": 1.8, "Workflow": 1.8, "Edit": 1.4, "NotebookEdit": 1.3,
                   "ReportFindings": 1.5, "CronCreate": 1.2, "SendMessage": 1.1, "TaskUpdate": 1.2}
CODEX_TOOLS = ("exec_command", "write_stdin", "request_user_input", "view_image", "get_goal", "create_goal",
               "update_goal")
CODEX_NESTED = ("spawn_agent", "send_input", "wait", "close_agent", "list_agents")


def _property(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kind = rng.choices(["string", "integer", "boolean", "enum", "array", "object"],
                       [5, 2, 2, 1.5, 1.5, 1 if depth == 0 else 0])[0]
    description = prose(rng, rng.randint(60, 320))
    if kind == "enum":
        return {"type": "string", "enum": [rng.choice(WORDS) + f"_{i}" for i in range(rng.randint(2, 6))],
                "description": description}
    if kind == "array":
        return {"type": "array", "items": {"type": "string"}, "description": description}
    if kind == "object":
        props = {f"{rng.choice(WORDS)}_{i}": _property(rng, depth + 1) for i in range(rng.randint(2, 4))}
        return {"type": "object", "properties": props, "required": list(props)[:1], "additionalProperties": False,
                "description": description}
    prop: dict[str, Any] = {"type": kind, "description": description}
    if kind == "integer" and rng.random() < 0.5:
        prop.update(minimum=0, maximum=rng.choice([600000, 2000, 100]))
    return prop


def _schema(rng: random.Random, target_bytes: int, claude: bool) -> dict[str, Any]:
    props: dict[str, Any] = {}
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": [], "additionalProperties": False}
    if claude:
        schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
    while len(json.dumps(schema)) < target_bytes:
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        props[name] = _property(rng)
        if rng.random() < 0.4:
            schema["required"].append(name)
    return schema


def _claude_system_prompt(rng: random.Random) -> str:
    sections = ["You are an interactive CLI tool that helps users with software engineering tasks. Use the "
                "instructions below and the tools available to you to assist the user."]
    for title in ("Tone and style", "Proactiveness", "Following conventions", "Code style", "Task management",
                  "Doing tasks", "Tool usage policy", "Code references"):
        sections.append(f"# {title}\n{prose(rng, 740)}")
    return "\n\n".join(sections)[:6000]


def claude_code_request(prompt: str, seed: int = 1) -> dict[str, Any]:
    """An Anthropic Messages request shaped like Claude Code 2.1's first call (`-p`), about 80 KB."""
    rng = random.Random(seed)
    total_weight = sum(_CLAUDE_WEIGHTS.get(name, 0.7) for name in CLAUDE_TOOLS)
    tools = []
    for name in CLAUDE_TOOLS:
        share = _CLAUDE_WEIGHTS.get(name, 0.7) / total_weight
        tools.append({"name": name, "description": prose(rng, rng.randint(250, 500)),
                      "input_schema": _schema(rng, int(58_000 * share), claude=True)})
    reminder = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
                "# claudeMd\nCodebase and user instructions are shown below. Be sure to adhere to these "
                "instructions.\n\nContents of /workspace/repo/CLAUDE.md (project instructions, checked into the "
                f"codebase):\n\n{prose(rng, 2200)}\n# currentDate\nToday's date is 2025-06-14.\n\n      IMPORTANT: "
                "this context may or may not be relevant to your tasks. You should not respond to this context "
                "unless it is highly relevant to your task.\n</system-reminder>\n")
    session_id = str(uuid.UUID(int=rng.getrandbits(128)))
    user_id = json.dumps({"device_id": "%064x" % rng.getrandbits(256), "account_uuid": "", "session_id": session_id})
    return {
        "model": SIM_MODEL,
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.%03x; cc_entrypoint=sdk-cli;"
                                     % rng.getrandbits(12)},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude, running within "
                                     "the Claude Agent SDK.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": _claude_system_prompt(rng), "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": reminder},
            {"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}},
        ]}],
        "tools": tools,
        "metadata": {"user_id": user_id},
        "thinking": {"type": "adaptive"},
        "stream": False,
    }


def codex_request(prompt: str, seed: int = 2) -> dict[str, Any]:
    """An OpenAI Responses request shaped like Codex 0.171's first call (`exec`), about 40 KB."""
    rng = random.Random(seed)

    def function(name: str, size: int) -> dict[str, Any]:
        return {"type": "function", "name": name, "description": prose(rng, rng.randint(200, 700)),
                "strict": False, "parameters": _schema(rng, size, claude=False)}

    tools: list[dict[str, Any]] = [function(name, 2200 if name == "exec_command" else 1000) for name in CODEX_TOOLS]
    tools.append({"type": "namespace", "name": "multi_agent_v1", "description": prose(rng, 300),
                  "tools": [function(name, 500) for name in CODEX_NESTED]})
    environment = ("<environment_context>\n  <cwd>/workspace/repo</cwd>\n  <approval_policy>never</approval_policy>"
                   "\n  <sandbox_mode>danger-full-access</sandbox_mode>\n  <network_access>enabled</network_access>"
                   "\n  <shell>bash</shell>\n</environment_context>")

    def item(role: str, text: str) -> dict[str, Any]:
        return {"type": "message", "id": "msg_%024x" % rng.getrandbits(96), "role": role,
                "content": [{"type": "input_text", "text": text}]}

    return {
        "model": SIM_MODEL,
        "input": [item("developer", prose(rng, 17_000)), item("developer", prose(rng, 2_500)),
                  item("user", environment), item("user", prompt)],
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": str(uuid.UUID(int=rng.getrandbits(128))),
    }


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------------------------
# processes
# ------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def polar_jobs_command() -> list[str]:
    script = Path(sys.executable).parent / "polar-jobs"
    if script.exists():
        return [str(script)]
    found = shutil.which("polar-jobs")
    return [found] if found else [sys.executable, "-m", "polar_jobs.cli"]


def wait_healthy(url: str, process: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# ------------------------------------------------------------------------------------------------
# statistics and tables
# ------------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def table(headers: list[str], rows: list[list[Any]], title: str | None = None) -> None:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if title:
        print(f"\n{title}")
    for index, row in enumerate(cells):
        print("  ".join(cell.rjust(width) if index and _numeric(cell) else cell.ljust(width)
                        for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _numeric(cell: str) -> bool:
    return bool(cell) and cell.lstrip("+-").replace(",", "").replace(".", "").replace("x", "").replace("%", "") \
        .isdigit()


def kb(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


# ------------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------------
@dataclass
class Env:
    sim_url: str
    proxy_url: str
    db_url: str
    engine: Any = field(init=False)

    def __post_init__(self) -> None:
        self.engine = make_engine(self.db_url)
        self.sessions = SessionStore(self.engine)
        self.captures = CaptureStore(self.engine)

    def session_id(self, key: str) -> str:
        session = self.sessions.by_key(key)
        if session is None:
            raise RuntimeError(f"no session for key {key}")
        return session.id


@dataclass
class Row:
    name: str
    path: str
    headers: dict[str, str]
    body: bytes
    stream: bool
    done_marker: bytes | None


def _anthropic_headers(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json",
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
            "user-agent": "claude-cli/2.1.197 (external, sdk-cli)", "x-app": "cli"}


def _codex_headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "content-type": "application/json", "originator": "codex_exec",
            "session-id": str(uuid.uuid4()), "user-agent": "codex_exec/0.171.0"}


def post(http: requests.Session, url: str, body: bytes, headers: dict[str, str]) -> requests.Response:
    response = http.post(url, data=body, headers=headers, timeout=300)
    _ = response.content  # the whole body (for SSE: every event)
    return response


def check_ok(response: requests.Response, what: str, done_marker: bytes | None = None) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"{what} answered {response.status_code}: {response.text[:500]}")
    if done_marker is not None and done_marker not in response.content:
        raise RuntimeError(f"{what}: stream ended without {done_marker!r}: {response.content[-300:]!r}")


def latency(env: Env, rows: list[Row], iterations: int, warmup: int) -> list[dict[str, Any]]:
    results = []
    for row in rows:
        http_proxy, http_direct = requests.Session(), requests.Session()
        proxy_url = env.proxy_url + row.path
        direct_url = env.sim_url + "/v1/chat/completions"
        first = post(http_proxy, proxy_url, row.body, row.headers)
        check_ok(first, f"proxy {row.name}", row.done_marker)
        key = row.headers.get("x-api-key") or row.headers["authorization"][7:]
        captured = env.captures.load_session(env.session_id(key))[0]
        chat = dumps(captured.chat_request)
        direct_headers = {"content-type": "application/json"}
        proxy_ms: list[float] = []
        direct_ms: list[float] = []
        for i in range(warmup + iterations):
            order = ("proxy", "direct") if i % 2 == 0 else ("direct", "proxy")
            for which in order:
                started = time.perf_counter()
                if which == "proxy":
                    response = post(http_proxy, proxy_url, row.body, row.headers)
                else:
                    response = post(http_direct, direct_url, chat, direct_headers)
                elapsed = (time.perf_counter() - started) * 1000
                check_ok(response, f"{which} {row.name}", row.done_marker if which == "proxy" else None)
                if i >= warmup:
                    (proxy_ms if which == "proxy" else direct_ms).append(elapsed)
        paired = [p - d for p, d in zip(proxy_ms, direct_ms)]
        timed = env.captures.load_session(env.session_id(key), with_payloads=False)[-len(proxy_ms):]
        inside = [(c.upstream_started_at - c.received_at, c.upstream_finished_at - c.upstream_started_at,
                   c.responded_at - c.upstream_finished_at, c.responded_at - c.received_at) for c in timed]
        results.append({
            "row": row.name, "request_bytes": len(row.body), "upstream_bytes": len(chat),
            "prompt_tokens": captured.prompt_tokens, "n": len(proxy_ms),
            "direct_p50": percentile(direct_ms, 0.5), "direct_p99": percentile(direct_ms, 0.99),
            "proxy_p50": percentile(proxy_ms, 0.5), "proxy_p99": percentile(proxy_ms, 0.99),
            "paired_p50": percentile(paired, 0.5),
            "before_upstream": percentile([t[0] * 1000 for t in inside], 0.5),
            "upstream_seen": percentile([t[1] * 1000 for t in inside], 0.5),
            "after_upstream": percentile([t[2] * 1000 for t in inside], 0.5),
            "outside": percentile([ms - t[3] * 1000 for ms, t in zip(proxy_ms, inside)], 0.5),
        })
        print(f"  {row.name}: {len(proxy_ms)} + {len(direct_ms)} timed calls done", flush=True)
    for r in results:
        r["added_p50"] = r["proxy_p50"] - r["direct_p50"]
        r["added_p99"] = r["proxy_p99"] - r["direct_p99"]
    return results


def _load(url: str, bodies: list[bytes], headers: list[dict[str, str]], seconds: float,
          max_requests: int) -> tuple[int, int, float, list[float]]:
    """``len(bodies)`` clients posting until the deadline or the request cap; (ok, errors, elapsed, ms)."""
    concurrency = len(bodies)
    sessions = [requests.Session() for _ in range(concurrency)]
    for http, body, head in zip(sessions, bodies, headers):  # untimed: connections, ad-hoc sessions
        check_ok(post(http, url, body, head), url)
    lock = threading.Lock()
    counts = {"issued": 0, "ok": 0, "errors": 0}
    latencies: list[float] = []
    barrier = threading.Barrier(concurrency + 1)
    deadline = [0.0]

    def client(index: int) -> None:
        barrier.wait()
        while True:
            with lock:
                if time.perf_counter() >= deadline[0] or counts["issued"] >= max_requests:
                    return
                counts["issued"] += 1
            started = time.perf_counter()
            try:
                response = post(sessions[index], url, bodies[index], headers[index])
                good = response.status_code == 200
            except requests.RequestException:
                good = False
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                counts["ok" if good else "errors"] += 1
                latencies.append(elapsed)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    return counts["ok"], counts["errors"], time.perf_counter() - started, latencies


def throughput(env: Env, body: dict[str, Any], concurrency: int, seconds: float, max_requests: int,
               rounds: int = 2) -> dict[str, Any]:
    proxy_bodies, proxy_headers = [], []
    for i in range(concurrency):
        proxy_bodies.append(dumps(body))
        proxy_headers.append(_anthropic_headers(f"bench-tput-{i}-{uuid.uuid4().hex[:8]}"))
    first = post(requests.Session(), env.proxy_url + "/v1/messages?beta=true", proxy_bodies[0], proxy_headers[0])
    check_ok(first, "proxy throughput")
    sid = env.session_id(proxy_headers[0]["x-api-key"])
    chat = dumps(env.captures.load_session(sid)[0].chat_request)
    direct_bodies = [chat] * concurrency
    direct_headers = [{"content-type": "application/json"}] * concurrency
    totals = {mode: {"ok": 0, "errors": 0, "elapsed": 0.0, "ms": []} for mode in ("direct", "proxy")}
    for round_index in range(rounds):
        order = ("direct", "proxy") if round_index % 2 == 0 else ("proxy", "direct")
        for mode in order:
            if mode == "direct":
                ok, errors, elapsed, ms = _load(env.sim_url + "/v1/chat/completions", direct_bodies, direct_headers,
                                                seconds / rounds, max_requests // rounds)
            else:
                ok, errors, elapsed, ms = _load(env.proxy_url + "/v1/messages?beta=true", proxy_bodies,
                                                proxy_headers, seconds / rounds, max_requests // rounds)
            totals[mode]["ok"] += ok
            totals[mode]["errors"] += errors
            totals[mode]["elapsed"] += elapsed
            totals[mode]["ms"] += ms
            print(f"  round {round_index + 1} {mode}: {ok} ok, {errors} errors in {elapsed:.1f} s", flush=True)
    out: dict[str, Any] = {"concurrency": concurrency}
    for mode, t in totals.items():
        out[mode] = {"ok": t["ok"], "errors": t["errors"], "elapsed": t["elapsed"],
                     "rps": t["ok"] / t["elapsed"] if t["elapsed"] else 0.0,
                     "p50": percentile(t["ms"], 0.5), "p99": percentile(t["ms"], 0.99)}
    out["ratio"] = out["proxy"]["rps"] / out["direct"]["rps"] if out["direct"]["rps"] else float("nan")
    return out


# -- storage -------------------------------------------------------------------------------------
_SESSION_TOOLS = ("Bash", "Read", "Edit", "Bash", "Read", "Write")


def session_rules(marker: str, calls: int, rng: random.Random) -> list[dict[str, Any]]:
    """One scripted reply per call: reasoning, then a tool call (varied), in order."""
    rules = []
    for index in range(calls):
        name = _SESSION_TOOLS[index % len(_SESSION_TOOLS)]
        target = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{index}.py"
        arguments = {
            "Bash": {"command": f"python -m pytest tests/test_{rng.choice(WORDS)}.py -x -q",
                     "description": prose(rng, 40)},
            "Read": {"file_path": f"/workspace/repo/{target}"},
            "Edit": {"file_path": f"/workspace/repo/{target}", "old_string": code_lines(rng, 120),
                     "new_string": code_lines(rng, 160)},
            "Write": {"file_path": f"/workspace/repo/{target}", "content": code_lines(rng, 400)},
        }[name]
        rules.append({"match": {"any_contains": marker}, "times": 1, "policy": {
            "kind": "reasoning_tool_call", "reasoning": prose(rng, rng.randint(120, 480)), "name": name,
            "arguments": arguments}})
    return rules


def tool_output(rng: random.Random, index: int) -> str:
    """1–2 KB of varied tool output: test runs, file reads, listings, edit confirmations."""
    size = rng.randint(1024, 2048)
    kind = index % 4
    if kind == 0:
        lines = [f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(WORDS)}_{rng.choice(WORDS)} "
                 f"{rng.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED'])} [{rng.randint(1, 99):3d}%]"
                 for _ in range(size // 70 + 1)]
        return ("\n".join(lines))[:size] + f"\n{rng.randint(3, 40)} passed, {rng.randint(0, 3)} failed in " \
                                           f"{rng.random() * 9:.2f}s"
    if kind == 1:
        return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(code_lines(rng, size).split("\n"), start=1))
    if kind == 2:
        return (f"The file has been updated. Here's the result of running `cat -n` on a snippet:\n"
                f"{code_lines(rng, size - 90)}")
    return "\n".join(f"-rw-r--r-- 1 agent agent {rng.randint(100, 99999):6d} Jun 14 {rng.randint(10, 23)}:"
                     f"{rng.randint(10, 59)} {rng.choice(WORDS)}_{rng.choice(WORDS)}.py"
                     for _ in range(size // 60 + 1))[:size]


def _move_cache_control(messages: list[dict[str, Any]]) -> None:
    """As Claude Code does: only the newest block carries cache_control."""
    for message in messages:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    last = messages[-1]["content"]
    if isinstance(last, list) and last:
        last[-1]["cache_control"] = {"type": "ephemeral"}


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def storage(env: Env, calls: int) -> dict[str, Any]:
    rng = random.Random(7)
    marker = f"bench-session-{uuid.uuid4().hex[:8]}"
    requests.post(f"{env.sim_url}/sim/rules", json=session_rules(marker, calls, rng), timeout=10).raise_for_status()
    body = claude_code_request(f"Fix the failing tests in the `{rng.choice(WORDS)}` package and keep the public "
                               f"API unchanged. ({marker})", seed=1)
    key = f"bench-storage-{uuid.uuid4().hex[:8]}"
    headers = _anthropic_headers(key)
    http = requests.Session()
    sent: list[bytes] = []
    stored: list[dict[str, int]] = []
    sid = None
    started = time.perf_counter()
    for index in range(1, calls + 1):
        raw = dumps(body)
        response = post(http, env.proxy_url + "/v1/messages?beta=true", raw, headers)
        check_ok(response, f"session call {index}")
        sent.append(raw)
        sid = sid or env.session_id(key)
        stored.append(env.captures.stored_bytes(sid))
        reply = response.json()
        calls_made = [block for block in reply["content"] if block["type"] == "tool_use"]
        body["messages"].append({"role": "assistant", "content": reply["content"]})
        if calls_made:
            body["messages"].append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call["id"], "content": tool_output(rng, index)}
                for call in calls_made]})
        else:
            body["messages"].append({"role": "user", "content": [{"type": "text", "text": tool_output(rng, index)}]})
        _move_cache_control(body["messages"])
    elapsed = time.perf_counter() - started
    completions = env.captures.load_session(sid)
    faithful = sum(c.raw_request == raw for c, raw in zip(completions, sent))
    prompts = [c.prompt_ids for c in completions]
    new_prompt = [len(p) - (_shared_prefix(p, prompts[i - 1]) if i else 0) for i, p in enumerate(prompts)]
    return {
        "calls": calls, "elapsed": elapsed, "sent": [len(raw) for raw in sent], "stored": stored,
        "prompt_tokens": [c.prompt_tokens for c in completions],
        "sampled_tokens": [c.completion_tokens for c in completions],
        "new_prompt": new_prompt,
        "chat_bytes": [len(dumps(c.chat_request)) for c in completions],
        "response_bytes": [len(dumps({k: v for k, v in c.upstream_response.items() if k != "prompt_token_ids"}))
                           for c in completions],
        "faithful": faithful, "statuses": sorted({c.status for c in completions}),
        "clamped": sum((c.chat_request or {}).get("max_tokens") != body["max_tokens"] for c in completions),
    }


# ------------------------------------------------------------------------------------------------
# reporting
# ------------------------------------------------------------------------------------------------
def report_latency(results: list[dict[str, Any]]) -> None:
    table(["request", "body", "upstream body", "prompt tok", "n", "direct p50", "direct p99", "proxy p50",
           "proxy p99", "added p50", "added p99", "paired Δ p50"],
          [[r["row"], kb(r["request_bytes"]), kb(r["upstream_bytes"]), r["prompt_tokens"], r["n"], r["direct_p50"],
            r["direct_p99"], r["proxy_p50"], r["proxy_p99"], f"{r['added_p50']:+.2f}", f"{r['added_p99']:+.2f}",
            f"{r['paired_p50']:+.2f}"] for r in results],
          title="Latency (ms). direct = the sim serving the exact normalized chat body the proxy sends upstream "
                "(never streamed);\nproxy = the harness request through the proxy (streamed rows: whole SSE body "
                "read). Calls interleaved one by one.\n'paired Δ p50' = median of (proxy − direct) over "
                "back-to-back pairs.")
    table(["request", "direct p50", "proxy p50", "parse+normalize", "upstream (as proxy saw it)",
           "parse reply", "rest"],
          [[r["row"], r["direct_p50"], r["proxy_p50"], r["before_upstream"], r["upstream_seen"], r["after_upstream"],
            r["outside"]] for r in results],
          title="Where the proxy's time goes (medians, ms, from the store's own timestamps: received → upstream "
                "started → upstream finished → responded).\n'rest' = client time outside received→responded: "
                "HTTP in and out, the SQLite write, the conversion back (and SSE synthesis).")


def report_http_floor(env: Env, iterations: int) -> None:
    """The cost of any HTTP round trip here (no body, no work): the floor under one extra hop."""
    http = requests.Session()
    rows = []
    for name, url in (("GET /health (sim)", f"{env.sim_url}/health"), ("GET /healthz (proxy)", f"{env.proxy_url}/healthz")):
        times = []
        for _ in range(iterations):
            started = time.perf_counter()
            http.get(url, timeout=10).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
        rows.append([name, iterations, f"{percentile(times, 0.50):.2f}", f"{percentile(times, 0.99):.2f}"])
    table(["empty round trip", "n", "p50 ms", "p99 ms"], rows,
          "HTTP floor: an empty request/response with the same client and server stack (the proxy adds one such hop).")


def report_throughput(t: dict[str, Any], body_bytes: int) -> None:
    table(["target", "clients", "ok", "errors", "seconds", "req/s", "p50 ms", "p99 ms"],
          [[mode, t["concurrency"], t[mode]["ok"], t[mode]["errors"], t[mode]["elapsed"], t[mode]["rps"],
            t[mode]["p50"], t[mode]["p99"]] for mode in ("direct", "proxy")],
          title=f"Throughput: {t['concurrency']} concurrent clients, the {kb(body_bytes)} Anthropic request (plain), "
                f"alternating rounds")
    print(f"proxy / direct throughput: {t['ratio']:.3f}")


def report_storage(s: dict[str, Any]) -> dict[str, Any]:
    stored, prompt, sampled, new = s["stored"], s["prompt_tokens"], s["sampled_tokens"], s["new_prompt"]
    rows = []
    for k in sorted({c for c in CHECKPOINTS if c <= s["calls"]} | {s["calls"]}):
        i = k - 1
        naive = sum(s["sent"][:k]) + 4 * sum(prompt[:k])
        this_call = stored[i]["total"] - (stored[i - 1]["total"] if i else 0)
        rows.append([k, kb(s["sent"][i]), prompt[i], sum(prompt[:k]), new[i], stored[i]["tokens"], stored[i]["payloads"],
                     stored[i]["total"], this_call, stored[i]["total"] // k, naive,
                     f"{naive / stored[i]['total']:.1f}x"])
    table(["call", "request", "context tok", "cum prompt tok", "new prompt tok", "tokens B", "payloads B", "total B",
           "B this call", "B/call avg", "naive B", "naive/stored"], rows,
          title=f"Storage: one {s['calls']}-call append-only Anthropic session (Claude-Code-shaped; each call "
                f"appends the proxy's reply + a 1–2 KB tool_result).\nnew prompt tok = tokens after the prefix "
                f"shared with the previous call's prompt. naive = every request body in full + every prompt's ids "
                f"as uint32.\nstored = what the proxy keeps (prompt tails, sampled ids, logprobs, and delta-encoded "
                f"raw request, chat request and upstream response).")
    n = s["calls"]
    full_naive = (sum(s["sent"]) + sum(s["chat_bytes"]) + sum(s["response_bytes"]) + 4 * sum(prompt)
                  + 4 * sum(sampled) + 8 * sum(sampled))
    print(f"all three payloads + prompt and sampled ids + logprobs in full would be {full_naive:,} B "
          f"({full_naive / stored[-1]['total']:.1f}x what is stored).")
    print(f"raw requests reconstructed byte-identical from the store: {s['faithful']}/{n}; statuses: "
          f"{', '.join(s['statuses'])}; max_tokens clamped (an extra /tokenize) on {s['clamped']}/{n} calls; "
          f"session took {s['elapsed']:.1f} s.")

    def span(first: int, last: int) -> list[Any]:  # calls first..last, 1-based, inclusive
        before = stored[first - 2]["total"] if first > 1 else 0
        grown = stored[last - 1]["total"] - before
        new_tokens = sum(new[first - 1:last]) + sum(sampled[first - 1:last])
        context = sum(prompt[first - 1:last])
        return [f"{first}–{last}", sum(new[first - 1:last]), sum(sampled[first - 1:last]), grown,
                grown / new_tokens, context, grown / context, grown // (last - first + 1)]

    half = n // 2
    spans = [span(1, half), span(half + 1, n)] + ([span(2, half)] if half > 2 else [])
    table(["calls", "new prompt tok", "sampled tok", "stored B", "B / new tok", "context tok seen",
           "B / context tok", "B per call"], spans,
          title="Growth: stored bytes ÷ new (prompt + sampled) tokens, per half of the session. Constant B/new tok "
                "with falling B/context tok = linear in new tokens, not in context.\nThe last row leaves out call 1 "
                "(the whole first prompt, stored once as uint32 ids and compressed payloads).")
    return {"spans": spans, "rows": rows, "full_naive": full_naive}


def summary(payloads: dict[str, int], lat: list[dict[str, Any]], tput: dict[str, Any], st: dict[str, Any],
            stored: dict[str, Any], args: argparse.Namespace) -> None:
    print("\n## Summary (markdown)\n")
    print(f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}; sim upstream `{SIM_MODEL}` and the "
          f"proxy as subprocesses on loopback, SQLite store; {args.iterations} timed calls per row after "
          f"{args.warmup} warm-up, interleaved with direct calls.\n")
    print("| request | direct p50 / p99 (ms) | proxy p50 / p99 (ms) | added p50 / p99 (ms) | paired Δ p50 (ms) |")
    print("|---|---|---|---|---|")
    for r in lat:
        print(f"| {r['row']} | {r['direct_p50']:.1f} / {r['direct_p99']:.1f} | {r['proxy_p50']:.1f} / "
              f"{r['proxy_p99']:.1f} | {r['added_p50']:+.1f} / {r['added_p99']:+.1f} | {r['paired_p50']:+.1f} |")
    print(f"\n| throughput ({tput['concurrency']} clients, {kb(payloads['anthropic'])} Anthropic) | req/s |\n|---|---|")
    print(f"| direct to the sim | {tput['direct']['rps']:.1f} |")
    print(f"| through the proxy | {tput['proxy']['rps']:.1f} |")
    print(f"| proxy / direct | {tput['ratio']:.2f} |")
    last = stored["rows"][-1]
    n = st["calls"]
    print(f"\n| {n}-call append-only session | value |\n|---|---|")
    print(f"| prompt tokens seen (sum over calls) | {sum(st['prompt_tokens']):,} |")
    print(f"| context at call {n} | {st['prompt_tokens'][-1]:,} tokens |")
    print(f"| stored (tokens + payloads) | {last[7]:,} B ({last[5]:,} + {last[6]:,}) |")
    print(f"| naive (bodies + prompt ids in full) | {last[10]:,} B ({last[11]} stored) |")
    print(f"| everything in full (3 payloads + prompt/sampled ids + logprobs) | {stored['full_naive']:,} B "
          f"({stored['full_naive'] / last[7]:.1f}x stored) |")
    for span in stored["spans"]:
        print(f"| B per new (prompt + sampled) token, calls {span[0]} | {span[4]:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200, help="timed calls per latency row (and as many direct)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per latency row first")
    parser.add_argument("--concurrency", type=int, default=16, help="throughput clients")
    parser.add_argument("--throughput-seconds", type=float, default=20.0,
                        help="seconds per target, split into alternating rounds")
    parser.add_argument("--throughput-requests", type=int, default=0, help="request cap per target (0: none)")
    parser.add_argument("--throughput-rounds", type=int, default=4, help="alternating direct/proxy rounds")
    parser.add_argument("--session-calls", type=int, default=50, help="calls in the storage session")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="polar-bench-"))
    db_url = f"sqlite:///{workdir / 'proxy.db'}"
    sim_port, proxy_port = free_port(), free_port()
    while proxy_port == sim_port:
        proxy_port = free_port()
    sim_url, proxy_url = f"http://{HOST}:{sim_port}", f"http://{HOST}:{proxy_port}"
    command = polar_jobs_command()
    env = dict(os.environ, POLAR_DATABASE_URL=db_url, POLAR_DATA_DIR=str(workdir))
    sim = proxy = None
    try:
        sim_log, proxy_log = workdir / "sim.log", workdir / "proxy.log"
        with open(sim_log, "wb") as sim_out:
            sim = subprocess.Popen(command + ["sim-upstream", "--host", HOST, "--port", str(sim_port), "--model",
                                              SIM_MODEL, "--max-model-len", str(MAX_MODEL_LEN)],
                                   stdout=sim_out, stderr=subprocess.STDOUT, env=env)
        wait_healthy(f"{sim_url}/health", sim, sim_log)
        with open(proxy_log, "wb") as proxy_out:
            proxy = subprocess.Popen(command + ["proxy", "--host", HOST, "--port", str(proxy_port), "--upstream",
                                                sim_url, "--open"],
                                     stdout=proxy_out, stderr=subprocess.STDOUT, env=env)
        wait_healthy(f"{proxy_url}/healthz", proxy, proxy_log)
        print(f"sim upstream {sim_url} (pid {sim.pid}) · proxy {proxy_url} (pid {proxy.pid}) · database {db_url}")
        print(f"{os.cpu_count()} CPUs · Python {platform.python_version()} · {' '.join(command)}")
        bench = Env(sim_url, proxy_url, db_url)

        # the scripted reply for latency/throughput: reasoning + one tool call, like a real agent turn
        reply = {"kind": "reasoning_tool_call", "reasoning": prose(random.Random(3), 300)}
        rules = [
            {"match": {"contains": "bench-latency-anthropic"}, "policy": dict(reply, name="Bash", arguments={
                "command": "python -m pytest -x -q", "description": "Run the test suite"})},
            {"match": {"contains": "bench-latency-codex"}, "policy": dict(reply, name="exec_command", arguments={
                "cmd": "python -m pytest -x -q"})},
        ]
        requests.post(f"{sim_url}/sim/rules?replace=1", json=rules, timeout=10).raise_for_status()

        anthropic = claude_code_request("Run the tests and fix whatever fails. (bench-latency-anthropic)")
        codex = codex_request("Run the tests and fix whatever fails. (bench-latency-codex)")
        payloads = {"anthropic": len(dumps(anthropic)), "responses": len(dumps(codex))}
        schema_bytes = sum(len(dumps(t["input_schema"])) for t in anthropic["tools"])
        print("\nPayloads")
        print(f"  anthropic (Claude Code shape): {payloads['anthropic']:,} B; {len(anthropic['tools'])} tools, "
              f"input_schemas {schema_bytes:,} B; system blocks {[len(b['text']) for b in anthropic['system']]} "
              f"chars")
        print(f"  responses (Codex shape):       {payloads['responses']:,} B; {len(codex['tools'])} tool entries "
              f"({len(codex['tools']) - 1} functions + a namespace of {len(CODEX_NESTED)}), developer items "
              f"{[len(i['content'][0]['text']) for i in codex['input'] if i['role'] == 'developer']} chars")

        rows = []
        for name, body, path, headers, marker in (
                ("anthropic", anthropic, "/v1/messages?beta=true", _anthropic_headers, b"event: message_stop"),
                ("responses", codex, "/v1/responses", _codex_headers, b"event: response.completed")):
            for stream in (False, True):
                key = f"bench-lat-{name}-{'sse' if stream else 'json'}-{uuid.uuid4().hex[:8]}"
                rows.append(Row(f"{name} {kb(payloads[name])} {'streamed' if stream else 'plain'}", path,
                                headers(key), dumps(dict(body, stream=stream)), stream, marker if stream else None))
        print(f"\nLatency: {args.iterations} timed calls per row after {args.warmup} warm-up ...", flush=True)
        lat = latency(bench, rows, args.iterations, args.warmup)
        report_latency(lat)
        report_http_floor(bench, args.iterations)

        cap = f" or {args.throughput_requests} requests" if args.throughput_requests else ""
        print(f"\nThroughput: {args.concurrency} clients, {args.throughput_seconds:.0f} s{cap} per target in "
              f"{args.throughput_rounds} alternating rounds ...", flush=True)
        tput = throughput(bench, dict(anthropic, stream=False), args.concurrency, args.throughput_seconds,
                          args.throughput_requests or 10**9, args.throughput_rounds)
        report_throughput(tput, payloads["anthropic"])

        print(f"\nStorage: a {args.session_calls}-call session ...", flush=True)
        st = storage(bench, args.session_calls)
        stored = report_storage(st)
        summary(payloads, lat, tput, st, stored, args)
    finally:
        stop(proxy)
        stop(sim)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
