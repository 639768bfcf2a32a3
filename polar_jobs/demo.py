"""``polar-jobs demo``: the sim upstream and the proxy on one machine, one agent loop per provider API.

Each loop is what a harness does: ask, get a tool call, send the tool result, get the answer. Then
the captured calls are checked against the upstream's own tokenizer and summarized.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import click
import requests

from polar_jobs.proxy.app import create_proxy_app
from polar_jobs.serving import BackgroundServer
from polar_jobs.settings import Settings
from polar_jobs.sim import create_sim_app
from polar_jobs.store import SessionStatus

SIM_MODEL = "polar-sim-qwen3"
TOOL_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
               "required": ["path", "content"]}


def _anthropic(url: str, key: str) -> list[dict[str, Any]]:
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    body = {"model": "claude-demo", "max_tokens": 1024, "system": "You are a coding agent.",
            "tools": [{"name": "write_file", "description": "Write a file.", "input_schema": TOOL_SCHEMA}],
            "messages": [{"role": "user", "content": "demo-anthropic: write notes.txt"}]}
    first = _post(f"{url}/v1/messages?beta=true", headers, body)
    call = next(block for block in first["content"] if block["type"] == "tool_use")
    body["messages"] += [{"role": "assistant", "content": first["content"]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                       "content": "wrote 12 bytes"}]}]
    return [first, _post(f"{url}/v1/messages?beta=true", headers, body)]


def _chat(url: str, key: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "qwen-code-demo", "tools": [{"type": "function", "function": {
        "name": "write_file", "description": "Write a file.", "parameters": TOOL_SCHEMA}}],
            "messages": [{"role": "system", "content": "You are a coding agent."},
                         {"role": "user", "content": "demo-chat: write notes.txt"}]}
    first = _post(f"{url}/v1/chat/completions", headers, body)
    message = first["choices"][0]["message"]
    body["messages"] += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                   "content": "wrote 12 bytes"}]
    return [first, _post(f"{url}/v1/chat/completions", headers, body)]


def _responses(url: str, key: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "codex-demo", "store": False, "reasoning": {"effort": "medium"},
            "tools": [{"type": "function", "name": "write_file", "description": "Write a file.",
                       "parameters": TOOL_SCHEMA, "strict": False}],
            "input": [{"type": "message", "role": "developer", "content": "You are a coding agent."},
                      {"type": "message", "role": "user", "content": "demo-responses: write notes.txt"}]}
    first = _post(f"{url}/v1/responses", headers, body)
    call = next(item for item in first["output"] if item["type"] == "function_call")
    body["input"] += first["output"] + [{"type": "function_call_output", "call_id": call["call_id"],
                                         "output": "wrote 12 bytes"}]
    return [first, _post(f"{url}/v1/responses", headers, body)]


def _gemini(url: str, key: str) -> list[dict[str, Any]]:
    headers = {"x-goog-api-key": key}
    endpoint = f"{url}/v1beta/models/gemini-demo:generateContent"
    body = {"systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
            "tools": [{"functionDeclarations": [{"name": "write_file", "description": "Write a file.",
                                                 "parametersJsonSchema": TOOL_SCHEMA}]}],
            "contents": [{"role": "user", "parts": [{"text": "demo-gemini: write notes.txt"}]}]}
    first = _post(endpoint, headers, body)
    content = first["candidates"][0]["content"]
    call = next(part["functionCall"] for part in content["parts"] if "functionCall" in part)
    body["contents"] += [content, {"role": "user", "parts": [{"functionResponse": {
        "id": call["id"], "name": call["name"], "response": {"output": "wrote 12 bytes"}}}]}]
    return [first, _post(endpoint, headers, body)]


LOOPS: dict[str, Callable[[str, str], list[dict[str, Any]]]] = {
    "anthropic": _anthropic, "openai_chat": _chat, "responses": _responses, "gemini": _gemini}


def _post(url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(url, headers=headers, json=body, timeout=60)
    if response.status_code != 200:
        raise click.ClickException(f"{url} answered {response.status_code}: {response.text[:300]}")
    return response.json()


def _script(sim_url: str) -> None:
    rules = []
    for provider in LOOPS:
        marker = f"demo-{provider.split('_')[-1] if provider == 'openai_chat' else provider}"
        rules.append({"match": {"contains": marker, "last_role": "user"}, "policy": {
            "kind": "reasoning_tool_call", "reasoning": "The user wants a file; I will write it.",
            "name": "write_file", "arguments": {"path": "notes.txt", "content": "hello polar\n"}}})
        rules.append({"match": {"any_contains": marker, "last_role": "tool"},
                      "policy": {"kind": "text", "text": "I wrote notes.txt."}})
    requests.post(f"{sim_url}/sim/rules?replace=1", json=rules, timeout=10).raise_for_status()


def run_demo(keep: bool = False) -> int:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no per-request lines in the demo's output
    data_dir = Path(Settings().data_dir / "demo") if keep else Path(tempfile.mkdtemp(prefix="polar-demo-"))
    settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{data_dir / 'demo.db'}")
    with BackgroundServer(create_sim_app(model=SIM_MODEL, max_model_len=32768)) as sim:
        settings = settings.model_copy(update={"upstream_url": sim.url})
        app = create_proxy_app(settings)
        service = app.extensions["polar_proxy"]
        _script(sim.url)
        with BackgroundServer(app) as proxy:
            click.echo(f"sim upstream {sim.url} · proxy {proxy.url} · database {settings.resolved_database_url()}\n")
            rows, failures = [], 0
            for provider, loop in LOOPS.items():
                session = service.sessions.create(status=SessionStatus.RUNNING)
                started = time.perf_counter()
                loop(proxy.url, session.api_key)
                elapsed = time.perf_counter() - started
                captured = service.captures.load_session(session.id)
                faithful = sum(_faithful(sim.url, c) for c in captured)
                failures += len(captured) - faithful
                rows.append((provider, len(captured), [c.prompt_tokens for c in captured],
                             sum(c.completion_tokens for c in captured), captured[-1].finish_reason,
                             service.captures.stored_bytes(session.id)["total"], f"{faithful}/{len(captured)}",
                             f"{elapsed * 1000:.0f} ms"))
    _print_table(rows)
    click.echo(f"\n{'all captured calls match' if not failures else f'{failures} captured calls DO NOT match'} "
               "the upstream's own tokenization (prompt ids, sampled ids, logprobs).")
    if keep:
        click.echo(f"inspect them with: POLAR_DATABASE_URL={settings.resolved_database_url()} polar-jobs captures")
    return 0 if not failures else 1


def _faithful(sim_url: str, completion) -> bool:
    chat = completion.chat_request
    body = {key: chat[key] for key in ("model", "messages", "tools", "chat_template_kwargs") if key in chat}
    tokens = requests.post(f"{sim_url}/tokenize", json=body, timeout=30).json()["tokens"]
    choice = completion.upstream_response["choices"][0]
    return (completion.status == "ok" and tokens == completion.prompt_ids
            and completion.response_ids == choice["token_ids"]
            and completion.logprobs == [entry["logprob"] for entry in choice["logprobs"]["content"]])


def _print_table(rows: list[tuple]) -> None:
    header = ("provider API", "calls", "prompt tokens", "sampled", "last finish", "stored bytes", "faithful", "time")
    table = [header] + [tuple(json.dumps(v) if isinstance(v, list) else str(v) for v in row) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for index, row in enumerate(table):
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        if index == 0:
            click.echo("  ".join("-" * width for width in widths))
