"""``polar-jobs demo``: the whole job system on one machine, one GRPO group, end to end.

It starts what ``polar-jobs up --sim`` starts (the sim upstream, embedded Redis, SQLite, the intake
API, the proxy, one Celery worker per queue), scripts the sim so the four samples of one task act
differently (two write the right answer into a file, two a wrong one, each then answers in text),
submits the task through the API, follows it stage by stage, and prints the group: reward, GRPO
advantage, traces and tokens of every sample. Last, every captured model call is checked against
the upstream's own tokenizer. Everything is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import requests

from polar_jobs.settings import Settings
from polar_jobs.stack import Stack, free_port
from polar_jobs.store import CaptureStore, make_engine
from polar_jobs.submit import ApiClient, follow_task, group_rows, make_console, print_group, submit_task
from polar_jobs.up import SimUpstream, StopSignals, Stopped, children, create_schema, stop_all

NUM_SAMPLES = 4
INSTRUCTION = "What is 6 times 7? Write just the number into answer.txt."
ANSWER = "42"
DEADLINE_S = 90


def _shell(command: str, reasoning: str | None = None) -> dict[str, Any]:
    call = {"name": "run_shell", "arguments": {"command": command}}
    return {"kind": "reasoning_tool_call", "reasoning": reasoning, **call} if reasoning else {"kind": "tool_call", **call}


# What the sim "samples": the first turn of each sample takes the next option in turn (a choice
# policy in cycle mode, counted under the sim's lock), so 4 concurrent samples make 4 different moves.
RULES = [
    {"match": {"last_role": "user", "contains": "6 times 7"}, "policy": {"kind": "choice", "mode": "cycle", "options": [
        _shell("echo 42 > answer.txt", reasoning="6 times 7 is 42."),
        _shell("echo 48 > answer.txt", reasoning="6 times 8 is 48, so the answer is 48."),
        _shell("printf '42\\n' > answer.txt"),
        _shell("echo 54 > answer.txt"),
    ]}},
    {"match": {"last_role": "tool"}, "policy": {"kind": "choice", "mode": "cycle", "options": [
        {"kind": "text", "text": "Wrote answer.txt."},
        {"kind": "reasoning", "reasoning": "The file is written.", "text": "Done."},
    ]}},
]


def demo_task() -> dict[str, Any]:
    """The TaskRequest the demo submits (what a trainer would POST to /v1/tasks)."""
    return {
        "instruction": INSTRUCTION,
        "num_samples": NUM_SAMPLES,
        "timeout_seconds": 120,
        "agent": {"harness": "shell", "command": f"{sys.executable} -m polar_jobs.harnesses.mini_agent {{instruction}}"},
        "evaluator": {"name": "output", "config": {"checks": [
            {"kind": "file_content", "path": "answer.txt", "regex": rf"^\s*{ANSWER}\s*$"}]}},
        "metadata": {"source": "polar-jobs demo"},
    }


def run_demo(keep: bool = False) -> int:
    data_dir = Path(Settings().data_dir / "demo") if keep else Path(tempfile.mkdtemp(prefix="polar-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{data_dir / 'demo.db'}",
                       api_port=free_port(), proxy_port=free_port(), proxy_public_url=None)
    console = make_console()
    stack: Stack | None = None
    sim: SimUpstream | None = None
    signals = StopSignals()
    code = 1
    started = time.monotonic()
    try:
        create_schema(settings)
        with signals.deferred():  # a signal while starting is raised once every child is tracked
            sim = SimUpstream(data_dir / "logs", max_model_len=32768)
            sim.start()
            requests.post(f"{sim.url}/sim/rules?replace=1", json=RULES, timeout=10).raise_for_status()
            stack = Stack(settings, running_concurrency=NUM_SAMPLES, upstream=sim.url, log_dir=data_dir / "logs")
            stack.start()
        api = f"http://{settings.api_host}:{settings.api_port}"
        console.print(f"started in {time.monotonic() - started:.1f} s: sim upstream {sim.url} · proxy "
                      f"{settings.proxy_url()} · API {api}")
        console.print(f"      redis {stack.settings.broker_url} · a worker per queue (init, running, postrun) · "
                      f"SQLite {settings.resolved_database_url()}")
        console.print(f"task: {NUM_SAMPLES} samples of `python -m polar_jobs.harnesses.mini_agent {{instruction}}` "
                      "(shell harness)")
        console.print(f"      instruction {INSTRUCTION!r}")
        console.print(f"      evaluator `output`: answer.txt must hold {ANSWER}; the sim answers each sample "
                      "differently (a `choice` policy in cycle mode)")
        client = ApiClient(api)
        answer = submit_task(client, demo_task())
        console.print(f"submitted task {answer['task_id']}\n")
        view = follow_task(client, answer["task_id"], console, poll_s=0.25, timeout_s=DEADLINE_S)
        console.print()
        rows = group_rows(client, view)
        print_group(console, view, rows)
        code = _verdict(console, rows, _fidelity(console, settings, sim.url, answer["session_ids"]))
    except Stopped as exc:
        console.print(f"{exc}: stopping")
        code = 130
    except (click.ClickException, RuntimeError, requests.RequestException) as exc:
        console.print(f"error: {exc.format_message() if isinstance(exc, click.ClickException) else exc}")
    finally:
        stop_all(stack, sim)
        signals.restore()
    left = [f"{name} pid {p.pid}" for name, p in children(stack, sim) if p.poll() is None]
    console.print(f"stopped every process ({time.monotonic() - started:.1f} s in all)" if not left
                  else f"still running: {', '.join(left)}")
    if keep or code not in (0, 130):  # a failure keeps its logs; an interrupted run is cleaned up
        console.print(f"logs and database kept in {data_dir} (POLAR_DATABASE_URL={settings.resolved_database_url()} "
                      "polar-jobs captures)")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    return code


def _fidelity(console, settings: Settings, sim_url: str, session_ids: list[str]) -> tuple[int, int]:
    """(faithful, captured) over every call of every session: prompt ids equal the sim's /tokenize of
    the stored normalized request, and sampled ids and logprobs equal the upstream's answer."""
    captures = CaptureStore(make_engine(settings.resolved_database_url()))
    captured = [c for sid in session_ids for c in captures.load_session(sid)]
    faithful = sum(_faithful(sim_url, c) for c in captured)
    console.print(f"\nproxy capture fidelity: {faithful}/{len(captured)} captured calls match the upstream's own "
                  "tokenization\n  (prompt ids = the sim's /tokenize of the stored normalized request; sampled ids "
                  "and logprobs = the upstream's answer)")
    return faithful, len(captured)


def _faithful(sim_url: str, completion) -> bool:
    chat = completion.chat_request
    body = {key: chat[key] for key in ("model", "messages", "tools", "chat_template_kwargs") if key in chat}
    tokens = requests.post(f"{sim_url}/tokenize", json=body, timeout=30).json()["tokens"]
    choice = completion.upstream_response["choices"][0]
    return (completion.status == "ok" and tokens == completion.prompt_ids
            and completion.response_ids == choice["token_ids"]
            and completion.logprobs == [entry["logprob"] for entry in choice["logprobs"]["content"]])


def _verdict(console, rows: list[dict[str, Any]], fidelity: tuple[int, int]) -> int:
    faithful, captured = fidelity
    problems = []
    if len(rows) != NUM_SAMPLES:
        problems.append(f"the group has {len(rows)} samples, not {NUM_SAMPLES}")
    problems += [f"sample {r['sample']} ended {r['status']}" for r in rows if r["status"] != "done"]
    problems += [f"sample {r['sample']} has no reward" for r in rows if r["reward"] is None]
    if captured == 0 or faithful != captured:
        problems.append(f"{captured - faithful} of {captured} captured calls do not match the upstream")
    if problems:
        console.print("demo FAILED: " + "; ".join(problems))
        return 1
    rewards = sorted({r["reward"] for r in rows})
    console.print(f"demo OK: {len(rows)} samples, rewards {rewards}, "
                  f"{sum(r['trained_tokens'] for r in rows)} trained tokens in {sum(r['traces'] for r in rows)} traces")
    return 0
