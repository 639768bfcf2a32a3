"""The docker runtime against a real, private dockerd that this module starts itself (``scripts/dockerd.sh``),
on the slim base image it builds offline and imports (no registry is reachable).

Where ``dockerd`` is not installed (or we are not root) every test here skips with the reason. The daemon
is shared by every module of the run that asks for ``private_dockerd`` and torn down when pytest exits:
all containers removed, the daemon killed, its mounts unmounted, its directory removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from polar_jobs.runtimes import RuntimeError_
from polar_jobs.runtimes.docker import MANAGED_LABEL, SESSION_LABEL, DockerRuntime, cleanup, client
from tests.integration.pipeline_stack import processes_with, wait_gone

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dockerd.sh"
IMAGE = "localhost/polar-jobs/base:slim"


def dockerd_unavailable() -> str | None:
    """Why a private dockerd cannot run here, or None."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed (apt-get install docker.io, or scripts/dockerd.sh install)"
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    if shutil.which("curl") is None:
        return "curl is not installed (scripts/dockerd.sh talks to the daemon with it)"
    if not Path("/bin/busybox").exists() or shutil.which("node") is None:
        return "the offline base image needs /bin/busybox (busybox-static) and node"
    return None


class PrivateDockerd:
    """A dockerd with its socket, data and exec roots in a temporary directory; the base image loaded."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="polar-dockerd-"))
        self.env = {**os.environ, "POLAR_DOCKERD_DIR": str(self.dir), "POLAR_DOCKER_IMAGE": IMAGE}
        self.host = f"unix://{self.dir}/docker.sock"
        self.timings: dict[str, float] = {}

    def _script(self, command: str, timeout: float = 300) -> str:
        started = time.monotonic()
        done = subprocess.run(["bash", str(SCRIPT), command], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        self.timings[command] = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"scripts/dockerd.sh {command} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    def start(self) -> None:
        self._script("start", timeout=60)
        self._script("image")

    def stop(self) -> None:
        self._script("stop", timeout=120)


_SHARED: dict[str, PrivateDockerd] = {}


@pytest.fixture(scope="module")
def private_dockerd(request) -> PrivateDockerd:
    """The run's private dockerd (started on first use), with ``DOCKER_HOST`` pointing at it."""
    reason = dockerd_unavailable()
    if reason:
        pytest.skip(reason)
    if "daemon" not in _SHARED:
        daemon = PrivateDockerd()
        previous = os.environ.get("DOCKER_HOST")

        def stop() -> None:
            _SHARED.pop("daemon", None)
            try:
                daemon.stop()
            finally:
                if previous is None:
                    os.environ.pop("DOCKER_HOST", None)
                else:
                    os.environ["DOCKER_HOST"] = previous

        request.config.add_cleanup(stop)
        try:
            daemon.start()
        except Exception:
            stop()
            raise
        os.environ["DOCKER_HOST"] = daemon.host
        _SHARED["daemon"] = daemon
        print(f"\nprivate dockerd at {daemon.host}: " + ", ".join(f"{k} {v:.2f} s" for k, v in daemon.timings.items()),
              file=sys.stderr)
    return _SHARED["daemon"]


@pytest.fixture
def runtimes(private_dockerd, tmp_path):
    """Make runtimes under tmp_path; every one is stopped at the end of the test."""
    made: list[DockerRuntime] = []

    def make(session_id: str | None = None, **options) -> DockerRuntime:
        session_id = session_id or f"t{os.urandom(5).hex()}"
        runtime = DockerRuntime(tmp_path / "sessions", session_id, options.pop("image", IMAGE), **options)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.stop()


def _inspect(runtime: DockerRuntime) -> dict:
    return client().api.inspect_container(runtime.name)


def _container_processes(runtime: DockerRuntime) -> str:
    return runtime.exec(["ps", "-o", "pid,pgid,args"]).stdout


def test_the_container_is_labelled_limited_and_has_no_network(runtimes):
    runtime = runtimes(cpus=1.5, memory="256m")
    started = time.monotonic()
    runtime.start()
    assert time.monotonic() - started < 20
    info = _inspect(runtime)
    assert info["Name"] == f"/polar-{runtime.session_id}"
    assert info["Config"]["Labels"][SESSION_LABEL] == runtime.session_id
    assert info["Config"]["Labels"][MANAGED_LABEL] == "1"
    assert info["HostConfig"]["NanoCpus"] == 1_500_000_000
    assert info["HostConfig"]["Memory"] == 256 * 1024 * 1024
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert info["HostConfig"]["Init"] is True
    assert info["Config"]["WorkingDir"] == "/workspace"
    interfaces = runtime.exec(["ls", "/sys/class/net"]).stdout.split()
    assert interfaces == ["lo"]
    runtime.start()  # again: the same container
    assert _inspect(runtime)["Id"] == info["Id"]


def test_exec_exit_codes_streams_env_cwd_and_home(runtimes, tmp_path):
    runtime = runtimes(env={"FROM_SPEC": "spec"})
    runtime.start()
    result = runtime.exec("echo out; echo err >&2; echo $HOME $PWD $FROM_SPEC $EXTRA; exit 7", env={"EXTRA": "x y"})
    assert result.exit_code == 7 and not result.ok and not result.timed_out
    assert result.stdout == "out\n/home/agent /workspace spec x y\n"
    assert result.stderr == "err\n"
    assert runtime.exec(["pwd"], cwd="/tmp").stdout == "/tmp\n"
    assert runtime.exec(["true"]).ok
    missing = runtime.exec(["no-such-binary"])
    assert missing.exit_code == 127
    log = tmp_path / "log.txt"
    runtime.exec(["sh", "-c", "echo logged"], log=log)
    assert log.read_text() == "$ sh -c 'echo logged'\nlogged\n[exit 0]\n"
    big = runtime.exec("head -c 3000000 /dev/zero | tr '\\0' a")
    assert big.ok and len(big.stdout) == 3_000_000


def test_upload_and_download_files_and_directories(runtimes, tmp_path):
    runtime = runtimes()
    runtime.start()
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha")
    (tree / "sub" / "b.txt").write_text("beta")
    runtime.upload(tree, "project")  # relative: under the workspace
    runtime.upload(tree / "a.txt", "/home/agent/.config/deep/a.json")
    listing = runtime.exec("cd /workspace/project && find . -type f | sort; cat /home/agent/.config/deep/a.json")
    assert listing.stdout == "./a.txt\n./sub/b.txt\nalpha"
    runtime.exec("echo made inside > /workspace/project/sub/c.txt")
    runtime.download("project", tmp_path / "back")
    assert sorted(p.relative_to(tmp_path / "back").as_posix() for p in (tmp_path / "back").rglob("*.txt")) == [
        "a.txt", "sub/b.txt", "sub/c.txt"]
    runtime.download("/workspace/project/sub/c.txt", tmp_path / "one.txt")
    assert (tmp_path / "one.txt").read_text() == "made inside\n"
    with pytest.raises(RuntimeError_, match="does not exist"):
        runtime.download("nope.txt", tmp_path / "nope.txt")


def test_timeout_kills_the_command_with_all_its_children_and_keeps_its_output(runtimes):
    runtime = runtimes()
    runtime.start()
    started = time.monotonic()
    result = runtime.exec("echo before; (sleep 300 &); sleep 301 & sleep 302; echo never", timeout=1.5)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code is None and not result.ok
    assert result.stdout == "before\n"
    assert 1.4 < elapsed < 6, elapsed
    processes = _container_processes(runtime)
    assert "sleep 30" not in processes, processes


def test_should_stop_kills_the_command(runtimes):
    runtime = runtimes()
    runtime.start()
    started = time.monotonic()
    result = runtime.exec("sleep 300", should_stop=lambda: time.monotonic() - started > 1)
    assert not result.timed_out and result.exit_code not in (0, None)
    assert time.monotonic() - started < 6
    assert "sleep 300" not in _container_processes(runtime)


def test_children_left_behind_by_a_finished_command_are_killed(runtimes):
    runtime = runtimes()
    runtime.start()
    started = time.monotonic()
    result = runtime.exec("(sleep 303 &); echo done")
    assert result.ok and result.stdout == "done\n"
    assert time.monotonic() - started < 1.5  # not docker's ~2 s wait for the orphan's output pipe
    assert "sleep 303" not in _container_processes(runtime)


def test_stop_from_another_runtime_object_kills_everything_and_is_idempotent(runtimes, tmp_path):
    runtime = runtimes()
    runtime.start()
    runtime.exec("echo kept > kept.txt")
    results = []
    thread = threading.Thread(target=lambda: results.append(runtime.exec("sleep 30417", timeout=120)))
    thread.start()
    time.sleep(1.0)
    assert processes_with("30417")  # the container's processes are this machine's too
    other = DockerRuntime(tmp_path / "sessions", runtime.session_id, IMAGE)  # as postrun would, in another process
    other.stop()
    thread.join(15)
    assert not thread.is_alive()
    (result,) = results
    assert not result.ok and not result.timed_out
    assert client().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={runtime.session_id}"}) == []
    assert (tmp_path / "sessions" / runtime.session_id / "workspace" / "kept.txt").read_text() == "kept\n"
    wait_gone("30417", timeout=5)
    other.stop()
    runtime.stop()
    with pytest.raises(RuntimeError_):
        runtime.exec(["true"])
    with pytest.raises(RuntimeError_, match="does not exist"):
        DockerRuntime(tmp_path / "sessions", runtime.session_id, IMAGE).exec(["true"])


def test_memory_limit_is_enforced(runtimes):
    runtime = runtimes(memory="64m")
    runtime.start()
    result = runtime.exec(["node", "-e", "const a = []; for (;;) a.push(Buffer.alloc(1 << 24, 1));"], timeout=60)
    assert result.exit_code == 137, result  # the OOM killer, not the timeout


def test_a_missing_image_is_a_clear_error(runtimes):
    runtime = runtimes(image="localhost/polar-jobs/absent:1")
    with pytest.raises(RuntimeError_, match="image localhost/polar-jobs/absent:1 is not present; build or load it: "
                                            "no registry is reachable"):
        runtime.start()


def test_bridge_networking_is_refused(tmp_path):
    with pytest.raises(ValueError, match="bridge"):
        DockerRuntime(tmp_path, "s", IMAGE, network_mode="bridge")


def test_host_network_reaches_a_loopback_server(runtimes):
    import http.server

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        runtime = runtimes(network_mode="host")
        runtime.start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        result = runtime.exec(["node", "-e", f"fetch('{url}').then(r => console.log(r.status))"], timeout=30)
        assert result.stdout.strip() == "200", result
        isolated = runtimes()
        isolated.start()
        refused = isolated.exec(["node", "-e", f"fetch('{url}').then(r => console.log(r.status))"], timeout=30)
        assert refused.exit_code != 0
    finally:
        server.shutdown()


def test_cleanup_by_label_and_the_cli(runtimes, private_dockerd):
    first, second, third = runtimes(), runtimes(), runtimes(labels={"polar_jobs.batch": "b1"})
    for runtime in (first, second, third):
        runtime.start()
    assert cleanup("polar_jobs.batch=b1") == [third.name]
    env = {**os.environ, "DOCKER_HOST": private_dockerd.host}
    listed = subprocess.run([sys.executable, "-m", "polar_jobs.cli", "cleanup", "--dry-run"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == sorted([first.name, second.name])
    done = subprocess.run([sys.executable, "-m", "polar_jobs.cli", "cleanup", "--label",
                           f"{SESSION_LABEL}={first.session_id}"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [first.name] and "removed 1 container(s)" in done.stderr
    names = [c.name for c in client().containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=1"})]
    assert names == [second.name]
    done = subprocess.run([sys.executable, "-m", "polar_jobs.cli", "cleanup"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == [second.name]
    assert client().containers.list(all=True) == []
