"""The apptainer runtime: one ``apptainer instance`` per session, every step an ``apptainer exec`` into it.

The instance (``polar-<session_id>``) starts with ``--containall`` (own PID, IPC and mount namespaces, a
clean environment, no host HOME or /tmp) and ``--writable-tmpfs`` (the image stays read-only; writes
outside the binds go to a tmpfs that dies with the instance). The session's host directories are bound
in: ``<root>/workspace`` at ``/workspace`` and ``<root>/home`` as HOME at ``/home/agent``; extra binds
(the harness CLI cache) are read-only. Since both are binds, ``upload``/``download`` are host copies.

Each ``apptainer exec`` runs on this machine in its own process group through ``LocalRuntime``, so a
timeout or ``stop`` kills it with its children, and its pgid is recorded on disk for a later process;
``stop`` also stops the instance (``instance stop --force``: SIGKILL to everything in it).

The command's environment travels as ``APPTAINERENV_<NAME>`` variables of the ``apptainer`` process
(not as ``--env`` arguments, which would put the session's API key in the host's process list).
``network_mode`` ``"none"`` adds ``--net --network none`` (needs root or a configured fakeroot network);
``"host"`` or unset shares the host's network, apptainer's default. ``cpus``/``memory`` become
``--cpus``/``--memory`` (they need cgroup support: root, or rootless on cgroup v2 with systemd).

Apptainer is not installable on the CI machines; the command construction is unit tested, and the
runtime runs where ``apptainer`` exists.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Mapping, Sequence

from polar_jobs.runtimes.base import ExecResult, RuntimeError_
from polar_jobs.runtimes.local import LocalRuntime

WORKDIR = "/workspace"
HOME = "/home/agent"
_REGISTRY_SCHEMES = ("docker://", "library://", "oras://", "shub://", "https://", "http://")
_START_TIMEOUT_S = 300


def instance_name(session_id: str) -> str:
    """Apptainer instance names: letters, digits, ``-``, ``_`` and ``.``."""
    return "polar-" + re.sub(r"[^A-Za-z0-9_.-]", "-", session_id)


class ApptainerRuntime:
    def __init__(self, root: Path, session_id: str, image: str, *, cpus: float | None = None,
                 memory: str | None = None, network_mode: str | None = None, env: Mapping[str, str] | None = None,
                 binds: Mapping[str, str] | None = None, keep_files: bool = True, binary: str = "apptainer"):
        self.root = Path(root) / session_id
        self.session_id = session_id
        self.image = image
        self.instance = instance_name(session_id)
        self.workdir = WORKDIR
        self.home = HOME
        self.cpus = cpus
        self.memory = memory
        self.network_mode = network_mode
        self.env = dict(env or {})
        self.binds = dict(binds or {})  # host path -> container path, read-only
        self.keep_files = keep_files
        self.binary = binary
        # the host side: the session's directories and the process groups of its `apptainer exec`s
        self._host = LocalRuntime(root, session_id, keep_files=True)
        self._stopped = False

    @property
    def host_workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def host_home(self) -> Path:
        return self.root / "home"

    # -- the commands -------------------------------------------------------------------------------
    def start_command(self) -> list[str]:
        argv = [self.binary, "instance", "start", "--containall", "--writable-tmpfs",
                "--home", f"{self.host_home}:{self.home}", "--bind", f"{self.host_workspace}:{self.workdir}"]
        for host, inside in self.binds.items():
            argv += ["--bind", f"{host}:{inside}:ro"]
        if self.network_mode and self.network_mode != "host":
            argv += ["--net", "--network", self.network_mode]
        if self.cpus is not None:
            argv += ["--cpus", f"{self.cpus:g}"]
        if self.memory is not None:
            argv += ["--memory", self.memory]
        return [*argv, self.image, self.instance]

    def exec_command(self, command: Sequence[str] | str, cwd: str | None = None) -> list[str]:
        argv = ["bash", "-lc", command] if isinstance(command, str) else list(command)
        return [self.binary, "exec", "--pwd", cwd or self.workdir, f"instance://{self.instance}", *argv]

    def exec_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The ``apptainer`` process's extra environment: the container's variables, prefixed."""
        merged = {"TMPDIR": "/tmp", **self.env, **(env or {})}
        merged.pop("HOME", None)  # set by --home; apptainer refuses APPTAINERENV_HOME
        return {f"APPTAINERENV_{name}": value for name, value in merged.items()}

    def stop_command(self) -> list[str]:
        return [self.binary, "instance", "stop", "--force", self.instance]

    # -- the runtime ----------------------------------------------------------------------------------
    def start(self) -> None:
        if shutil.which(self.binary) is None:
            raise RuntimeError_(f"{self.binary} is not installed on this machine")
        if self.image.startswith(_REGISTRY_SCHEMES):
            raise RuntimeError_(f"image {self.image} is not present; build or load it: no registry is reachable "
                                "(give a local .sif file or sandbox directory)")
        if not Path(self.image).exists():
            raise RuntimeError_(f"image {self.image} is not present; build or load it: no registry is reachable")
        self._host.start()
        for host in self.binds:
            if not Path(host).exists():
                raise RuntimeError_(f"bind source {host} does not exist")
        try:
            done = subprocess.run(self.start_command(), capture_output=True, text=True, timeout=_START_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, env=_host_env())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError_(f"apptainer instance start {self.instance} failed: {exc}") from None
        if done.returncode != 0 and "already exists" not in done.stderr:
            raise RuntimeError_(f"apptainer instance start {self.instance} failed (exit {done.returncode}): "
                                f"{done.stderr.strip()[-1000:]}")

    def exec(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
             timeout: float | None = None, log: Path | None = None,
             should_stop: Callable[[], bool] | None = None) -> ExecResult:
        if self._stopped:
            raise RuntimeError_(f"runtime {self.instance} is stopped")
        return self._host.exec(self.exec_command(command, cwd), env=self.exec_env(env), cwd=str(self.root),
                               timeout=timeout, log=log, should_stop=should_stop)

    def host_path(self, remote: str) -> Path:
        """Where a path inside the instance lives on this machine (only the bound workspace and HOME)."""
        inside = posixpath.normpath(remote if posixpath.isabs(remote) else posixpath.join(self.workdir, remote))
        for mount, host in ((self.workdir, self.host_workspace), (self.home, self.host_home)):
            if inside == mount or inside.startswith(mount + "/"):
                return host / os.path.relpath(inside, mount)
        raise RuntimeError_(f"{remote}: only paths under {self.workdir} and {self.home} can be copied "
                            "(the instance's other files are read-only or on its tmpfs)")

    def upload(self, local: Path, remote: str) -> None:
        self._host.upload(local, str(self.host_path(remote)))

    def download(self, remote: str, local: Path) -> None:
        self._host.download(str(self.host_path(remote)), local)

    def stop(self) -> None:
        """Kill this session's ``apptainer exec`` groups, then the instance; idempotent."""
        self._stopped = True
        self._host.stop()
        if shutil.which(self.binary) is not None:
            try:
                subprocess.run(self.stop_command(), capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                               env=_host_env())
            except (OSError, subprocess.TimeoutExpired):
                pass
        if not self.keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _host_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "HOME", "USER", "XDG_RUNTIME_DIR", "APPTAINER_CACHEDIR",
            "APPTAINER_TMPDIR")
    return {key: os.environ[key] for key in keep if key in os.environ}
