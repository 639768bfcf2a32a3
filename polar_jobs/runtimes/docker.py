"""The docker runtime: one labelled, long-lived container per session, every step a ``docker exec``.

The container (``polar-<session_id>``, labels ``polar_jobs.session=<id>`` and ``polar_jobs.managed=1``)
runs ``sleep infinity`` under docker's init (tini), with the spec's CPU, memory and network settings,
the workspace at ``/workspace`` and a private HOME at ``/home/agent``. It is found again by name from
any process (init, running and postrun run in different workers), so the runtime keeps no state of
its own beyond the host directory ``root`` (logs, and a copy of the workspace taken at ``stop``).

Each command runs as the leader of its own process group (``setsid`` where docker did not already make
it one), and records its pgid in the container; at its timeout, or when ``should_stop()`` says so,
another exec kills the whole group (``kill -KILL -<pgid>``), and a group's leftovers are killed when its
leader exits. ``stop`` force-removes the container, which kills everything still in it, from any
process. ``cleanup`` removes every container a label names (leftovers of crashed workers).

Networking: ``network_mode`` is ``"none"`` (only ``lo``) unless the spec says otherwise or the harness
must reach the proxy on this machine's loopback, in which case the caller passes ``"host"`` (see
``polar_jobs.runtimes.make_runtime``). ``bridge`` is refused: it would give the agent a NAT path out.

The client is the docker SDK, one ``DockerClient`` per process, API version pinned to 1.41 (no version
probe), ``base_url`` from ``$DOCKER_HOST``. Images are never pulled: no registry is reachable, so a
missing image is an error that says to build or load it (``scripts/dockerd.sh image``).
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from polar_jobs.runtimes.base import ExecResult, RuntimeError_

API_VERSION = "1.41"
MANAGED_LABEL = "polar_jobs.managed"
SESSION_LABEL = "polar_jobs.session"
WORKDIR = "/workspace"
HOME = "/home/agent"
_STATE_DIR = "/tmp/.polar-exec"  # pgid files of running commands, inside the container
_POLL_S = 0.25
_OUTPUT_LIMIT = 8 * 1024 * 1024
_DRAIN_S = 3.0  # after a kill, how long the output stream may take to end before it is cut
_REFUSED_NETWORKS = {"bridge", "default"}

# sh: record our pid (= the pgid once we lead a group), then become the command; setsid only when
# docker has not already made the exec a group leader (busybox setsid forks in that case).
_WRAPPER = ('echo $$ > "$0"; read -r _ _ _ _ pgrp _ < /proc/$$/stat; '
            'if [ "$pgrp" = "$$" ]; then exec "$@"; else exec setsid "$@"; fi')

_clients: dict[tuple[int, str], Any] = {}
_clients_lock = threading.Lock()


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def client(base_url: str | None = None):
    """This process's ``DockerClient`` for ``base_url`` (default ``$DOCKER_HOST``), API pinned to 1.41.

    Keyed by pid too: a client made before a fork (Celery prefork) would share the parent's sockets."""
    import docker

    url = base_url or docker_host()
    key = (os.getpid(), url)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = docker.DockerClient(base_url=url, version=API_VERSION, timeout=120)
        return _clients[key]


def container_name(session_id: str) -> str:
    return f"polar-{session_id}"


def parse_cpus(cpus: float | None) -> int | None:
    return None if cpus is None else int(round(cpus * 1e9))


class DockerRuntime:
    def __init__(self, root: Path, session_id: str, image: str, *, cpus: float | None = None,
                 memory: str | None = None, network_mode: str | None = None, env: Mapping[str, str] | None = None,
                 binds: Mapping[str, str] | None = None, keep_files: bool = True, base_url: str | None = None,
                 pids_limit: int | None = 4096, labels: Mapping[str, str] | None = None):
        network_mode = network_mode or "none"
        if network_mode in _REFUSED_NETWORKS:
            raise ValueError(f"network_mode {network_mode!r} is refused: a bridge gives the agent a path out; "
                             "use 'none', or 'host' to reach a proxy on this machine's loopback")
        self.root = Path(root) / session_id
        self.session_id = session_id
        self.name = container_name(session_id)
        self.image = image
        self.workdir = WORKDIR
        self.home = HOME
        self.cpus = cpus
        self.memory = memory
        self.network_mode = network_mode
        self.env = dict(env or {})
        self.binds = dict(binds or {})  # host path -> container path, read-only
        self.keep_files = keep_files
        self.base_url = base_url
        self.pids_limit = pids_limit
        self.labels = {SESSION_LABEL: session_id, MANAGED_LABEL: "1", **(labels or {})}
        self._stopped = False

    # -- the container ----------------------------------------------------------------------------
    @property
    def api(self):
        return client(self.base_url).api

    def container_config(self) -> dict[str, Any]:
        """The keyword arguments of ``containers.create`` (unit-testable without a daemon)."""
        config: dict[str, Any] = {
            "image": self.image, "command": ["sleep", "infinity"], "name": self.name, "labels": self.labels,
            "detach": True, "init": True, "working_dir": self.workdir, "network_mode": self.network_mode,
            "environment": {"HOME": self.home, "TMPDIR": "/tmp", **self.env},
            "volumes": {host: {"bind": inside, "mode": "ro"} for host, inside in self.binds.items()},
        }
        if self.cpus is not None:
            config["nano_cpus"] = parse_cpus(self.cpus)
        if self.memory is not None:
            config["mem_limit"] = self.memory
        if self.pids_limit:
            config["pids_limit"] = self.pids_limit
        return config

    def start(self) -> None:
        """Create and start the session's container (again: a no-op when it already runs)."""
        import docker.errors

        self.root.mkdir(parents=True, exist_ok=True)
        docker_client = client(self.base_url)
        try:
            docker_client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise RuntimeError_(f"image {self.image} is not present; build or load it: no registry is reachable "
                                f"(for the slim base image: scripts/dockerd.sh image)") from None
        except docker.errors.DockerException as exc:
            raise RuntimeError_(f"docker at {self.base_url or docker_host()} is not usable: {exc}") from None
        try:
            container = docker_client.containers.get(self.name)
            if container.status != "running":
                container.start()
        except docker.errors.NotFound:
            try:
                docker_client.containers.run(**self.container_config())
            except docker.errors.APIError as exc:
                raise RuntimeError_(f"cannot start container {self.name} from {self.image}: {exc}") from None
        made = self._exec_plain(["mkdir", "-p", self.workdir, self.home, _STATE_DIR])
        if made[0] != 0:
            raise RuntimeError_(f"cannot prepare {self.name}: {made[2].strip()}")

    def _exec_plain(self, argv: Sequence[str]) -> tuple[int | None, str, str]:
        """A short helper command, run to completion: (exit code, stdout, stderr)."""
        import docker.errors

        try:
            exec_id = self.api.exec_create(self.name, list(argv), stdout=True, stderr=True)["Id"]
            stdout, stderr = self.api.exec_start(exec_id, demux=True)
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        except docker.errors.NotFound:
            raise RuntimeError_(f"container {self.name} does not exist (not started, or stopped)") from None
        except docker.errors.APIError as exc:
            raise RuntimeError_(f"exec in {self.name} failed: {exc}") from None
        return code, _text(stdout), _text(stderr)

    # -- commands ---------------------------------------------------------------------------------
    def exec(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
             timeout: float | None = None, log: Path | None = None,
             should_stop: Callable[[], bool] | None = None) -> ExecResult:
        """Run to completion, or kill the command's process group at ``timeout`` / when ``should_stop()``."""
        import docker.errors

        if self._stopped:
            raise RuntimeError_(f"runtime {self.name} is stopped")
        argv = ["bash", "-lc", command] if isinstance(command, str) else list(command)
        pgid_file = f"{_STATE_DIR}/{uuid.uuid4().hex}"
        started = time.monotonic()
        try:
            exec_id = self.api.exec_create(self.name, ["sh", "-c", _WRAPPER, pgid_file, *argv], stdout=True,
                                           stderr=True, environment=dict(env or {}), workdir=cwd or self.workdir)["Id"]
            stream = self.api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.NotFound:
            raise RuntimeError_(f"container {self.name} does not exist (not started, or stopped)") from None
        except docker.errors.APIError as exc:
            raise RuntimeError_(f"exec in {self.name} failed: {exc}") from None
        out, err = _Buffer(), _Buffer()
        reader = threading.Thread(target=_pump, args=(stream, out, err), daemon=True)
        reader.start()
        deadline = None if timeout is None else started + timeout
        timed_out = killed = False
        while reader.is_alive():
            wait = _POLL_S
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            reader.join(wait)
            if not reader.is_alive():
                break
            expired = deadline is not None and time.monotonic() >= deadline
            if expired or (should_stop is not None and should_stop()):
                timed_out, killed = expired, True
                self._kill_group(pgid_file)
            elif not self._running(exec_id):
                # the command ended but a child still holds its output open: docker would wait ~2 s
                self._kill_group(pgid_file, wait_for_pgid=False)
            else:
                continue
            reader.join(_DRAIN_S)
            if reader.is_alive():  # something outside the group holds the output open
                stream.close()
                reader.join(1.0)
            break
        code = self._exit_code(exec_id)
        self._kill_group(pgid_file, wait_for_pgid=False)  # children a command that exited left behind
        if killed:
            code = None if timed_out else (code if code is not None else 137)
        elif code is None:  # the container went away under the command (stopped from another process)
            code = 137
            err.add(b"\n[polar_jobs] the container was removed while the command ran\n")
        stdout, stderr = out.text(), err.text()
        if log is not None:
            _append_log(log, argv, stdout, stderr, code)
        return ExecResult(code, stdout[-_OUTPUT_LIMIT:], stderr[-_OUTPUT_LIMIT:], time.monotonic() - started,
                          timed_out)

    def _running(self, exec_id: str) -> bool:
        import docker.errors

        try:
            return bool(self.api.exec_inspect(exec_id).get("Running"))
        except docker.errors.APIError:
            return False

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code once docker says it ended (None: it did not, or the container is gone)."""
        import docker.errors

        for _ in range(40):
            try:
                state = self.api.exec_inspect(exec_id)
            except docker.errors.APIError:
                return None
            if not state.get("Running"):
                return state.get("ExitCode")
            time.sleep(0.05)
        return None

    def _kill_group(self, pgid_file: str, wait_for_pgid: bool = True) -> None:
        """SIGKILL the process group whose id the command recorded, and forget it. ``wait_for_pgid``: the
        command may not have written its pgid yet (a deadline right at its start), so retry briefly."""
        script = (f'p=$(cat {pgid_file} 2>/dev/null) && [ -n "$p" ] || exit 3; '
                  f'kill -KILL -"$p" 2>/dev/null; rm -f {pgid_file}; true')
        for _ in range(20 if wait_for_pgid else 1):
            try:
                code, _, _ = self._exec_plain(["sh", "-c", script])
            except RuntimeError_:
                return  # the container is gone: nothing is left to kill
            if code != 3:
                return
            time.sleep(0.05)

    # -- files ------------------------------------------------------------------------------------
    def _inside(self, remote: str) -> str:
        return posixpath.normpath(remote if posixpath.isabs(remote) else posixpath.join(self.workdir, remote))

    def upload(self, local: Path, remote: str) -> None:
        """A file or a directory (its contents) to ``remote`` (relative: under the workspace)."""
        import docker.errors

        target = self._inside(remote)
        parent, name = posixpath.split(target)
        code, _, stderr = self._exec_plain(["mkdir", "-p", parent])
        if code != 0:
            raise RuntimeError_(f"cannot create {parent} in {self.name}: {stderr.strip()}")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(str(local), arcname=name)
        try:
            if not self.api.put_archive(self.name, parent, buffer.getvalue()):
                raise RuntimeError_(f"copying {local} to {self.name}:{target} failed")
        except docker.errors.APIError as exc:
            raise RuntimeError_(f"copying {local} to {self.name}:{target} failed: {exc}") from None

    def download(self, remote: str, local: Path) -> None:
        """``remote`` (a file, or a directory's contents) to ``local``."""
        import docker.errors

        source = self._inside(remote)
        local = Path(local)
        try:
            chunks, _stat = self.api.get_archive(self.name, source)
        except docker.errors.NotFound:
            raise RuntimeError_(f"{source} does not exist in the runtime") from None
        except docker.errors.APIError as exc:
            raise RuntimeError_(f"copying {self.name}:{source} failed: {exc}") from None
        with tempfile.TemporaryDirectory(prefix="polar-download-") as tmp:
            archive_path = Path(tmp) / "archive.tar"
            with open(archive_path, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
            unpacked = Path(tmp) / "out"
            unpacked.mkdir()
            with tarfile.open(archive_path) as archive:
                _extract(archive, unpacked)
            (top,) = list(unpacked.iterdir()) or [None]
            if top is None:
                raise RuntimeError_(f"{source}: empty archive")
            local.parent.mkdir(parents=True, exist_ok=True)
            if top.is_dir() and not top.is_symlink():
                shutil.copytree(top, local, dirs_exist_ok=True, symlinks=True)
            else:
                if local.is_dir() and not local.is_symlink():
                    shutil.rmtree(local)
                shutil.move(str(top), str(local))

    # -- the end ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Remove the container (force: everything in it is killed); idempotent, from any process.

        With ``keep_files`` the workspace is first copied to ``root/workspace`` (best effort)."""
        import docker.errors

        self._stopped = True
        try:
            container = client(self.base_url).containers.get(self.name)
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException:
            return
        if self.keep_files:
            try:
                self.download(self.workdir, self.root / "workspace")
            except (RuntimeError_, OSError):
                pass
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass


def cleanup(label: str | None = None, *, base_url: str | None = None) -> list[str]:
    """Force-remove every container carrying ``label`` (``key`` or ``key=value``; default: all the
    containers polar_jobs manages). Returns their names."""
    import docker.errors

    docker_client = client(base_url)
    removed = []
    for container in docker_client.containers.list(all=True, filters={"label": label or f"{MANAGED_LABEL}=1"}):
        try:
            container.remove(force=True, v=True)
            removed.append(container.name)
        except docker.errors.NotFound:
            continue
    return removed


class _Buffer:
    """One stream's output; keeps the last ``_OUTPUT_LIMIT``-ish bytes in memory."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        while self.size > 2 * _OUTPUT_LIMIT and len(self.chunks) > 1:
            self.size -= len(self.chunks.pop(0))

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _pump(stream: Iterable, out: _Buffer, err: _Buffer) -> None:
    try:
        for stdout, stderr in stream:
            if stdout:
                out.add(stdout)
            if stderr:
                err.add(stderr)
    except Exception:  # noqa: BLE001 - a cut stream ends the output, the exit code says the rest
        pass


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _extract(archive: tarfile.TarFile, target: Path) -> None:
    """Extract nothing outside ``target``: the ``tar`` filter, members it refuses skipped."""

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.tar_filter(member, path)
        except tarfile.FilterError:
            return None

    archive.extractall(target, filter=keep)


def _append_log(log: Path, argv: list[str], stdout: str, stderr: str, exit_code: int | None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(argv)}\n{stdout}")
        if stderr:
            out.write(f"[stderr]\n{stderr}")
        out.write(f"[exit {'timeout' if exit_code is None else exit_code}]\n")
