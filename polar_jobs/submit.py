"""The intake API's client side: ``polar-jobs submit`` (and ``--follow``), ``polar-jobs status``.

Plain HTTP against the routes in ``polar_jobs/intake/app.py``; ``rich`` draws the progress bars
and tables. Everything here raises ``click.ClickException`` with a message a user can act on.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import click
import requests
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from polar_jobs.settings import Settings

STAGES = ("pending", "init", "ready", "running", "postrun", "done")
END_STATES = ("failed", "timeout", "cancelled")  # shown once a session reaches them
METRIC_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$')


def default_api_url() -> str:
    """``POLAR_API_URL``, else the intake API of this machine's settings (``POLAR_API_HOST``/``PORT``)."""
    if os.environ.get("POLAR_API_URL"):
        return os.environ["POLAR_API_URL"].rstrip("/")
    settings = Settings()
    return f"http://{settings.api_host}:{settings.api_port}"


def make_console(stderr: bool = False) -> Console:
    """A console; when it is not a terminal (a log, a pipe) it is wide enough that ids never fold."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    return console


class ApiClient:
    """The intake API at ``base_url``, with ``POLAR_API_TOKEN`` as a bearer token when set."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30):
        self.base_url = base_url.rstrip("/")
        self.token = token if token is not None else os.environ.get("POLAR_API_TOKEN") or None
        self.timeout = timeout
        self.http = requests.Session()

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = f"{self.base_url}{path}"
        try:
            response = self.http.request(method, url, headers=headers, timeout=self.timeout, **kwargs)
        except requests.ConnectionError:
            raise click.ClickException(
                f"cannot reach the intake API at {self.base_url} (is `polar-jobs up` running? "
                "set --api or POLAR_API_URL)") from None
        except requests.Timeout:
            raise click.ClickException(f"the intake API at {self.base_url} did not answer {method} {path} "
                                       f"within {self.timeout:.0f} s") from None
        if response.status_code == 401:
            raise click.ClickException(f"the intake API refused the request (401): "
                                       f"{_error_text(response)}; set POLAR_API_TOKEN")
        return response

    def get_json(self, path: str) -> Any:
        response = self.request("GET", path)
        if response.status_code != 200:
            raise click.ClickException(f"GET {path} answered {response.status_code}: {_error_text(response)}")
        return response.json()


def _error_text(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason
    return str(body.get("error", body)) if isinstance(body, dict) else str(body)


# -- submit ---------------------------------------------------------------------------------------------

def load_task_file(path: str | Path) -> dict[str, Any]:
    """A TaskRequest from a .json, .yaml or .yml file (anything else: JSON, then YAML)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            body = json.loads(text)
        elif path.suffix.lower() in (".yaml", ".yml"):
            body = yaml.safe_load(text)
        else:
            try:
                body = json.loads(text)
            except ValueError:
                body = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise click.ClickException(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") \
            from None
    if not isinstance(body, dict):
        raise click.ClickException(f"{path} must hold one task object (a mapping), not {type(body).__name__}")
    return body


def submit_task(client: ApiClient, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
    """POST /v1/tasks; the answer ``{task_id, created, session_ids}``. A 422 lists every invalid field."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    response = client.request("POST", "/v1/tasks", json=body, headers=headers)
    if response.status_code in (200, 202):
        return response.json()
    if response.status_code == 422:
        try:
            fields = response.json().get("fields") or []
        except ValueError:
            fields = []
        lines = [f"  {item.get('field', '?')}: {item.get('message', '')}" for item in fields]
        raise click.ClickException("the task is invalid (422):\n" + ("\n".join(lines) or f"  {_error_text(response)}"))
    raise click.ClickException(f"POST /v1/tasks answered {response.status_code}: {_error_text(response)}")


# -- follow ---------------------------------------------------------------------------------------------

def follow_task(client: ApiClient, task_id: str, console: Console, poll_s: float = 0.5,
                timeout_s: float | None = None) -> dict[str, Any]:
    """Poll ``GET /v1/tasks/{id}`` with one progress bar per stage until the group is finalized.

    Returns the final task view. On a console that is not a terminal the bars are drawn once at the
    end, and each change of the counts is printed as a line as it happens.
    """
    view = client.get_json(f"/v1/tasks/{task_id}")
    total = max(1, int(view["num_samples"]))
    started = time.monotonic()
    progress = Progress(TextColumn("{task.description:>9}"), BarColumn(bar_width=40), MofNCompleteColumn(),
                        TextColumn("{task.fields[note]}"), console=console, transient=False)
    bars = {stage: progress.add_task(stage, total=total, note="") for stage in STAGES}
    last_counts: dict[str, int] | None = None
    live = console.is_terminal
    with progress:
        while True:
            counts = view.get("counts") or {}
            for state in END_STATES:
                if counts.get(state) and state not in bars:
                    bars[state] = progress.add_task(state, total=total, note="")
            for state, bar in bars.items():
                progress.update(bar, completed=counts.get(state, 0),
                                note=f"{time.monotonic() - started:5.1f} s" if state == "done" else "")
            if counts != last_counts and not live:
                summary = " · ".join(f"{state} {counts[state]}" for state in (*STAGES, *END_STATES)
                                     if counts.get(state))
                console.print(f"[{time.monotonic() - started:5.1f} s] {summary or 'waiting'}")
                last_counts = dict(counts)
            if view.get("status") == "finalized":
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise click.ClickException(f"task {task_id} was not finalized within {timeout_s:.0f} s "
                                           f"(counts: {counts})")
            time.sleep(poll_s)
            view = client.get_json(f"/v1/tasks/{task_id}")
    return view


# -- the group ------------------------------------------------------------------------------------------

def group_rows(client: ApiClient, view: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per sample of a finalized task: status, reward, advantage, traces and token counts."""
    group = view.get("group") or {}
    rows = []
    for sample in sorted(group.get("samples") or [], key=lambda s: s.get("sample_index", 0)):
        summary = sample.get("trajectory") or {}
        row = {"sample": sample.get("sample_index"), "session_id": sample["session_id"], "status": sample["status"],
               "reward": sample.get("reward"), "advantage": sample.get("advantage"),
               "trajectory": summary.get("status"), "traces": summary.get("traces", 0),
               "prompt_tokens": 0, "response_tokens": 0, "trained_tokens": summary.get("trained_tokens", 0),
               "actions": [], "error": sample.get("error")}
        if summary:
            response = client.request("GET", f"/v1/sessions/{sample['session_id']}/trajectory")
            if response.status_code == 200:
                traces = response.json().get("traces") or []
                row["traces"] = len(traces)
                row["prompt_tokens"] = sum(len(t["prompt_ids"]) for t in traces)
                row["response_tokens"] = sum(len(t["response_ids"]) for t in traces)
                row["trained_tokens"] = sum(sum(t["loss_mask"]) for t in traces)
                row["actions"] = [action for t in traces if t.get("label", "main") == "main"
                                  for action in assistant_actions(t.get("response_messages") or [])]
        rows.append(row)
    return rows


def assistant_actions(messages: list[dict[str, Any]]) -> list[str]:
    """What the model did, turn by turn: each tool call (a shell command as itself), else its answer text."""
    actions = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        for call in calls:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = function.get("arguments")
            if isinstance(arguments, dict) and set(arguments) == {"command"}:
                actions.append(f"$ {arguments['command']}")
            else:
                actions.append(f"{function.get('name')}({json.dumps(arguments, ensure_ascii=False)})")
        content = message.get("content")
        if not calls and isinstance(content, str) and content.strip():
            actions.append(repr(content.strip()))
    return actions


def print_group(console: Console, view: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    group = view.get("group") or {}
    advantage = group.get("advantage") or {}
    wide = console.width >= 100  # narrow terminals: no session column (the sessions are listed below)
    table = Table(title=f"group of task {view['task_id']}", title_justify="left")
    headers = [("#", "right"), ("session", "left"), ("status", "left"), ("reward", "right"), ("advantage", "right"),
               ("trajectory", "left"), ("traces", "right"), ("tokens prompt/resp/trained", "right")]
    if not wide:
        short = {"advantage": "adv", "tokens prompt/resp/trained": "tokens p/r/t"}
        headers = [(short.get(h, h), j) for h, j in headers if h != "session"]
    for header, justify in headers:
        table.add_column(header, justify=justify, no_wrap=True, min_width=1 if header == "#" else None)
    for row in rows:
        cells = [str(row["sample"]), row["session_id"][:12], row["status"], _number(row["reward"], 3),
                 _number(row["advantage"], 3, signed=True), row["trajectory"] or "-", str(row["traces"]),
                 f"{row['prompt_tokens']} / {row['response_tokens']} / {row['trained_tokens']}"]
        table.add_row(*(cells if wide else cells[:1] + cells[2:]))
    console.print(table)
    if any(row["actions"] for row in rows):
        console.print("what the model did:")
        for row in rows:
            console.print(f"  {row['sample']:>2}  {row['session_id']}  " + (" → ".join(row["actions"]) or "-"),
                          overflow="ellipsis", no_wrap=True, soft_wrap=False)
    mean, std = advantage.get("mean"), advantage.get("std")
    console.print(f"advantages: {advantage.get('method', '?')}, reward mean {_number(mean, 3)}, std {_number(std, 3)}"
                  f"{' (no signal: every reward equal)' if advantage.get('no_signal') else ''}")
    for row in rows:
        if row["error"]:
            console.print(f"sample {row['sample']} ({row['status']}): {row['error']}")


def _number(value: float | None, digits: int, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


# -- status ---------------------------------------------------------------------------------------------

def parse_metrics(text: str) -> dict[str, dict[str, float]]:
    """Prometheus text → {metric name: {label string: value}} (label string '' when unlabelled)."""
    metrics: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = METRIC_LINE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        metrics.setdefault(match["name"], {})[match["labels"] or ""] = value
    return metrics


def _label(labels: str, key: str) -> str:
    found = re.search(rf'{key}="([^"]*)"', labels)
    return found.group(1) if found else labels


def show_status(client: ApiClient, console: Console, limit: int = 10) -> dict[str, Any]:
    """Recent tasks with their session counts, then sessions by state, queues and groups (from /metrics)."""
    tasks = client.get_json(f"/v1/tasks?limit={limit}")["tasks"]
    table = Table(title=f"recent tasks at {client.base_url} (newest first)", title_justify="left")
    for header in ("task", "status", "done", "sessions by state", "created"):
        table.add_column(header, no_wrap=header in ("task", "created"))
    views = []
    for task in tasks:
        view = client.get_json(f"/v1/tasks/{task['task_id']}")
        views.append(view)
        counts = view.get("counts") or {}
        order = [*STAGES, *END_STATES]
        table.add_row(task["task_id"], view["status"] + (" (cancelled)" if view.get("cancelled") else ""),
                      f"{view['done']}/{view['num_samples']}",
                      " ".join(f"{state}={counts[state]}" for state in sorted(counts, key=_order_key(order))),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(task["created_at"])))
    if tasks:
        console.print(table)
    else:
        console.print(f"no tasks yet at {client.base_url}")
    response = client.request("GET", "/metrics")
    metrics = parse_metrics(response.text) if response.status_code == 200 else {}
    sessions = {_label(labels, "state"): int(v) for labels, v in metrics.get("polar_sessions", {}).items()}
    if not sessions:  # no /metrics: count what the recent tasks show
        for view in views:
            for state, n in (view.get("counts") or {}).items():
                sessions[state] = sessions.get(state, 0) + n
    console.print("sessions by state: " + " · ".join(f"{state} {n}" for state, n in sessions.items()))
    queues = {_label(labels, "queue"): int(v) for labels, v in metrics.get("polar_queue_length", {}).items()}
    if queues:
        console.print("queue lengths: " + " · ".join(f"{queue} {n}" for queue, n in queues.items()))
    groups = {_label(labels, "state"): int(v) for labels, v in metrics.get("polar_groups", {}).items()}
    if groups:
        console.print("groups: " + " · ".join(f"{state} {n}" for state, n in groups.items()))
    return {"tasks": views, "sessions": sessions, "queues": queues, "groups": groups}


def _order_key(order: list[str]):
    return lambda state: order.index(state) if state in order else len(order)
