"""The local runtime: a workspace and a private HOME per session on this machine.

Every command runs in its own process group (a new session), so a timeout or ``stop`` kills the
command with all its children; nothing a session started outlives it.

With ``isolation="bwrap"`` each command runs under bubblewrap: the system read-only, a private /tmp, and
a PID namespace; only the session directory (workspace, HOME, TMPDIR) is writable. bwrap stays in our
process group and its init (pid 1 of the namespace) dies with it (``--die-with-parent``), which takes
down every process in the namespace, including those that ``setsid()`` or double-fork out of the group.
The network namespace is shared (``--share-net``): harnesses must reach the proxy on the host's loopback,
which a private namespace would cut off, so "only loopback" relies on the host reaching nothing else.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from polar_jobs.runtimes.base import ExecResult, RuntimeError_

_KILL_GRACE_S = 2.0
_POLL_S = 0.5  # how often a running command checks whether it should stop
_OUTPUT_LIMIT = 8 * 1024 * 1024  # characters kept per stream; the log file gets everything


class LocalRuntime:
    def __init__(self, root: Path, session_id: str, *, base_env: Mapping[str, str] | None = None,
                 keep_files: bool = True, isolation: str = "none", ro_binds: Sequence[str] = ()):
        self.root = Path(root) / session_id
        self.workdir = str(self.root / "workspace")
        self.home = str(self.root / "home")
        self.keep_files = keep_files
        self.isolation = isolation
        self.ro_binds = list(ro_binds)  # host directories a bwrap sandbox sees read-only (the npm cache)
        self._base_env = dict(base_env) if base_env is not None else _minimal_env()
        self._groups: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        self._check_isolation()
        for path in (self.workdir, self.home, str(self.root / "tmp")):
            Path(path).mkdir(parents=True, exist_ok=True)

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(self._base_env, HOME=self.home, TMPDIR=str(self.root / "tmp"), PWD=self.workdir)
        env.update(extra or {})
        return env

    def exec(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
             timeout: float | None = None, log: Path | None = None,
             should_stop: Callable[[], bool] | None = None) -> ExecResult:
        """Run to completion, or kill the process group at ``timeout`` or when ``should_stop()`` says so."""
        if self._stopped:
            raise RuntimeError_(f"runtime {self.root} is stopped")
        self._check_isolation()
        argv = ["bash", "-lc", command] if isinstance(command, str) else list(command)
        cwd = cwd or self.workdir
        started = time.monotonic()
        try:
            process = subprocess.Popen(self._wrap(argv, cwd), cwd=cwd, env=self.environment(env),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True, text=True, errors="replace")
        except OSError as exc:
            return ExecResult(127, "", f"{argv[0]}: {exc}", time.monotonic() - started)
        with self._lock:
            self._groups[process.pid] = process
        self._remember_group(process.pid)
        timed_out = False
        deadline = None if timeout is None else started + timeout
        try:
            while True:
                wait = _POLL_S if should_stop is not None else None
                if deadline is not None:
                    wait = max(0.0, min(wait or deadline, deadline - time.monotonic()))
                try:
                    stdout, stderr = process.communicate(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    expired = deadline is not None and time.monotonic() >= deadline
                    if expired or (should_stop is not None and should_stop()):
                        timed_out = expired
                        _kill_group(process.pid, process=process)
                        stdout, stderr = process.communicate()
                        break
        finally:
            _kill_group(process.pid, grace=0)  # children left behind by a command that exited
            with self._lock:
                self._groups.pop(process.pid, None)
        if log is not None:
            _append_log(log, argv, stdout, stderr, None if timed_out else process.returncode)
        return ExecResult(None if timed_out else process.returncode, stdout[-_OUTPUT_LIMIT:], stderr[-_OUTPUT_LIMIT:],
                          time.monotonic() - started, timed_out)

    def _check_isolation(self) -> None:
        if self.isolation not in ("none", "bwrap"):
            raise RuntimeError_(f"unknown isolation {self.isolation!r} (none or bwrap)")
        if self.isolation == "bwrap" and shutil.which("bwrap") is None:
            raise RuntimeError_("runtime.isolation is 'bwrap' but bwrap is not installed "
                                "(apt-get install bubblewrap)")

    def _wrap(self, argv: list[str], cwd: str) -> list[str]:
        """``argv`` as run: unchanged, or inside a bwrap sandbox (see the module docstring).

        No ``--new-session``: the sandbox stays in our process group so ``killpg`` reaches it; stdin is
        /dev/null and there is no terminal to inject into. No ``--as-pid-1``: bwrap's own init is pid 1,
        and its death (at ``--die-with-parent``) is what kills everything left in the namespace.
        ``--cap-drop ALL``: run as root, bwrap would otherwise keep the capabilities to remount / writable."""
        if self.isolation != "bwrap":
            return argv
        root = str(self.root)
        wrapped = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in [*self.ro_binds, *_hidden_by_private_tmp()]:
            if os.path.isdir(path):
                wrapped += ["--ro-bind", path, path]
        return wrapped + ["--bind", root, root, "--unshare-pid", "--share-net", "--die-with-parent",
                          "--cap-drop", "ALL", "--chdir", cwd, "--", *argv]

    def _remember_group(self, pgid: int) -> None:
        """Record the group on disk, so a later process (postrun, the sweeper) can still kill it."""
        with open(self.root / "process-groups", "a", encoding="utf-8") as out:
            out.write(f"{pgid}\n")

    def _recorded_groups(self) -> list[int]:
        try:
            return [int(line) for line in (self.root / "process-groups").read_text().split()]
        except (OSError, ValueError):
            return []

    def upload(self, local: Path, remote: str) -> None:
        target = Path(remote if os.path.isabs(remote) else os.path.join(self.workdir, remote))
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, target, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(local, target)

    def download(self, remote: str, local: Path) -> None:
        source = Path(remote if os.path.isabs(remote) else os.path.join(self.workdir, remote))
        if not source.exists():
            raise RuntimeError_(f"{source} does not exist in the runtime")
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, local, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(source, local)

    def stop(self) -> None:
        """Kill every process group this session started, from this process or an earlier one."""
        self._stopped = True
        with self._lock:
            groups = dict(self._groups)
        for group in self._recorded_groups():
            groups.setdefault(group, None)
        for group, process in groups.items():
            _kill_group(group, process=process)
        if not self.keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _hidden_by_private_tmp() -> list[str]:
    """This interpreter's environment and the project's source, when they live under /tmp (a CI clone):
    the sandbox's private /tmp would otherwise hide the tools its commands run."""
    candidates = {sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2])}
    return sorted(path for path in candidates if path == "/tmp" or path.startswith("/tmp/"))


def _kill_group(pgid: int, grace: float = _KILL_GRACE_S, process: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole process group, wait up to ``grace`` for its leader, then SIGKILL what is left.

    A recorded group whose leader is gone is only signalled if it still exists (``killpg`` fails
    otherwise); process group ids are not reused while any member lives.
    """
    try:
        os.killpg(pgid, signal.SIGTERM if grace else signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    if grace and process is not None:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _minimal_env() -> dict[str, str]:
    """What commands need from this machine's environment, and nothing secret."""
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "SSL_CERT_FILE", "PYTHONPATH", "VIRTUAL_ENV")
    return {key: os.environ[key] for key in keep if key in os.environ}


def _append_log(log: Path, argv: list[str], stdout: str, stderr: str, exit_code: int | None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n{stdout}")
        if stderr:
            out.write(f"[stderr]\n{stderr}")
        out.write(f"[exit {'timeout' if exit_code is None else exit_code}]\n")
