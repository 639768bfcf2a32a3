"""``polar-jobs up``: the whole job system on one machine, in the foreground, stopped by PID on exit.

``Stack`` (``polar_jobs/stack.py``) brings up Redis (embedded unless ``POLAR_BROKER_URL`` is set), the
intake API, the proxy and one worker per queue; ``--sim`` adds the simulated upstream as one more
child process and points the proxy at it. The demo uses the same two pieces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import requests

from polar_jobs.settings import Settings
from polar_jobs.stack import Stack, free_port


class Stopped(Exception):
    """SIGTERM (or SIGINT) asked the foreground process to stop."""


class SimUpstream:
    """``polar-jobs sim-upstream`` as a child process on a free loopback port (its own process group)."""

    def __init__(self, log_dir: Path, port: int | None = None, max_model_len: int | None = None):
        self.log_dir = log_dir
        self.port = port or free_port()
        self.max_model_len = max_model_len
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 60) -> "SimUpstream":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "polar_jobs.cli", "sim-upstream", "--host", "127.0.0.1",
                   "--port", str(self.port)]
        if self.max_model_len:
            command += ["--max-model-len", str(self.max_model_len)]
        with open(self.log_dir / "sim-upstream.log", "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the sim upstream exited with {self.process.returncode}; "
                                   f"see {self.log_dir / 'sim-upstream.log'}")
            try:
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the sim upstream did not answer on {self.url} within {wait_s:.0f} s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        except ProcessLookupError:
            pass


def children(stack: Stack | None, sim: SimUpstream | None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Every child process, by name."""
    if sim and sim.process:
        yield "sim-upstream", sim.process
    if stack and stack.redis and stack.redis.process:
        yield "redis", stack.redis.process
    if stack:
        yield from stack.processes.items()


def stop_all(stack: Stack | None, sim: SimUpstream | None) -> None:
    """Stop the stack (workers drain, then Redis) and the sim; no signal interrupts this."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if stack:
            stack.stop()
        if sim:
            sim.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class StopSignals:
    """SIGTERM and SIGINT raise ``Stopped`` in the main thread, so ``finally`` blocks stop the children.

    Inside ``deferred()`` (while children are being started and not yet all tracked) a signal is
    only noted, and raised when the block ends: nothing is started that the cleanup cannot see.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.pending: str | None = None
        self._deferring = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self._deferring:
            self.pending = self.pending or name
            return
        raise Stopped(name)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.pending:
            raise Stopped(self.pending)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def create_schema(settings: Settings) -> None:
    """Create the tables once, here, before the API, the proxy and the workers all start at the same moment
    (each creates them if missing; on a fresh SQLite file two of them racing makes one fail)."""
    from polar_jobs.store import make_engine

    make_engine(settings.resolved_database_url()).dispose()


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def run_up(settings: Settings, *, running_concurrency: int = 4, upstream: str | None = None, sim: bool = False,
           echo: Callable[[str], None] = print) -> int:
    """Start everything, print where it is, wait for a signal (or a child's death), stop everything."""
    for name, port in (("the intake API", settings.api_port), ("the proxy", settings.proxy_port)):
        if port_in_use(port):
            echo(f"error: port {port} for {name} is in use (set POLAR_API_PORT / POLAR_PROXY_PORT)")
            return 2
    log_dir = settings.data_dir / "logs"
    stack: Stack | None = None
    simulator: SimUpstream | None = None
    signals = StopSignals()
    code = 0
    try:
        create_schema(settings)
        with signals.deferred():
            if sim:
                simulator = SimUpstream(log_dir)
                simulator.start()
                upstream = simulator.url
            stack = Stack(settings, running_concurrency=running_concurrency,
                          upstream=upstream or settings.upstream_url, log_dir=log_dir)
            stack.start()
        broker = stack.settings.broker_url
        api = f"http://{settings.api_host}:{settings.api_port}"
        echo(f"polar-jobs up (data {settings.data_dir}, database {settings.resolved_database_url()})")
        echo(f"  API      {api}        polar-jobs submit TASK.yaml --api {api} --follow")
        echo(f"  proxy    {settings.proxy_url()}        harnesses get it as their model base URL")
        echo(f"  upstream {stack.upstream}{'  (sim: polar-jobs sim-upstream, scripted over POST /sim/rules)' if sim else ''}")
        echo(f"  broker   {broker}{'  (embedded redis-server)' if stack.redis else ''}")
        echo(f"  Flower   POLAR_BROKER_URL={broker} polar-jobs flower --port 5555   → http://127.0.0.1:5555")
        echo(f"  logs     {log_dir}")
        echo("  pids     " + ", ".join(f"{name} pid {process.pid}" for name, process in children(stack, simulator)))
        echo("Ctrl-C (or SIGTERM) stops everything.")
        while True:
            for name, process in children(stack, simulator):
                if process.poll() is not None:
                    echo(f"error: {name} (pid {process.pid}) exited with {process.returncode}; "
                         f"see {log_dir / (name + '.log')}")
                    code = 1
            if code:
                break
            time.sleep(0.5)
    except Stopped as exc:
        echo(f"{exc}: stopping")
    except RuntimeError as exc:
        echo(f"error: {exc}")
        code = 1
    finally:
        stop_all(stack, simulator)
        signals.restore()
    still = [f"{name} pid {process.pid}" for name, process in children(stack, simulator) if process.poll() is None]
    echo("stopped" + (f"; still running: {', '.join(still)}" if still else " (every child process has exited)"))
    return code
