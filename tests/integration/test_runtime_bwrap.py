"""The local runtime with ``isolation="bwrap"``: a read-only system, a private /tmp, a PID namespace that
takes daemonized children down with it, and the host's loopback still reachable (the proxy lives there).

Where ``bwrap`` is not installed (apt-get install bubblewrap), or cannot create namespaces here, every test
but the missing-bwrap one skips with the reason.
"""

from __future__ import annotations

import http.server
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from polar_jobs.runtimes import RuntimeError_, make_runtime
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.schemas import RuntimeSpec
from tests.integration.pipeline_stack import processes_with, wait_for, wait_gone

pytestmark = pytest.mark.integration


def bwrap_unavailable() -> str | None:
    """Why a bwrap sandbox cannot run here, or None."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip()}"
    return None


UNAVAILABLE = bwrap_unavailable()
needs_bwrap = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))
if UNAVAILABLE:
    print(f"tests/integration/test_runtime_bwrap.py: skipping the sandbox tests: {UNAVAILABLE}")


@pytest.fixture
def runtime(tmp_path):
    runtime = make_runtime(RuntimeSpec(isolation="bwrap"), tmp_path, f"s-{uuid.uuid4().hex[:8]}")
    runtime.start()
    yield runtime
    runtime.stop()


def daemon_command(marker: str) -> str:
    """Start a double-forked, setsid()ed ``sleep`` that names ``marker``, note that it started, then wait."""
    return (f"(setsid sh -c 'sleep 300; : {marker}' </dev/null >/dev/null 2>&1 &); "
            f"touch daemon-started; sleep 300")


@needs_bwrap
def test_make_runtime_passes_isolation_through(runtime):
    assert isinstance(runtime, LocalRuntime) and runtime.isolation == "bwrap"
    assert make_runtime(RuntimeSpec(), Path("/nonexistent"), "s").isolation == "none"


@needs_bwrap
def test_system_is_read_only(runtime):
    result = runtime.exec("touch /usr/polar-bwrap-probe")
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr
    assert not Path("/usr/polar-bwrap-probe").exists()
    remount = runtime.exec("mount -o remount,rw,bind /usr && touch /usr/polar-bwrap-probe")
    assert remount.exit_code != 0
    assert not Path("/usr/polar-bwrap-probe").exists()


@needs_bwrap
def test_tmp_is_private(runtime):
    name = f"polar-bwrap-{uuid.uuid4().hex}"
    result = runtime.exec(f"echo inside > /tmp/{name} && cat /tmp/{name}")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "inside\n"
    assert not Path("/tmp", name).exists()


@needs_bwrap
def test_workspace_home_and_tmpdir_are_writable_and_shared_with_the_host(runtime):
    result = runtime.exec('echo w > ws.txt && echo h > "$HOME/h.txt" && echo t > "$TMPDIR/t.txt" && pwd')
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == runtime.workdir
    assert Path(runtime.workdir, "ws.txt").read_text() == "w\n"
    assert Path(runtime.home, "h.txt").read_text() == "h\n"
    assert Path(runtime.root, "tmp", "t.txt").read_text() == "t\n"


@needs_bwrap
def test_pid_namespace_hides_host_processes(runtime):
    result = runtime.exec([sys.executable, "-c",
                           "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"])
    assert result.exit_code == 0, result.stderr
    pids = eval(result.stdout)  # noqa: S307 - our own print of a list of ints
    assert 1 in pids and len(pids) <= 4, pids  # bwrap's init, the command (and perhaps a shell)


@needs_bwrap
def test_daemonized_grandchild_is_killed_at_timeout(runtime):
    marker = f"polar-bwrap-timeout-{uuid.uuid4().hex}"
    result = runtime.exec(daemon_command(marker), timeout=3)
    assert result.timed_out
    assert Path(runtime.workdir, "daemon-started").exists()
    wait_gone(marker)


@needs_bwrap
def test_daemonized_grandchild_is_killed_at_stop(runtime):
    marker = f"polar-bwrap-stop-{uuid.uuid4().hex}"
    results = []
    worker = threading.Thread(target=lambda: results.append(runtime.exec(daemon_command(marker))), daemon=True)
    worker.start()
    # the daemon is live on the host, outside the command's process group, before we stop
    wait_for(lambda: [p for p in processes_with(marker) if p.name() == "sh"], bool, 15, f"the daemon {marker}")
    runtime.stop()
    worker.join(timeout=15)
    assert results and results[0].exit_code != 0
    wait_gone(marker)


@needs_bwrap
def test_stop_from_another_process_kills_the_sandbox(runtime, tmp_path):
    """Postrun and the sweeper stop a session through a fresh runtime object that only has the disk."""
    marker = f"polar-bwrap-later-{uuid.uuid4().hex}"
    worker = threading.Thread(target=lambda: runtime.exec(daemon_command(marker)), daemon=True)
    worker.start()
    wait_for(lambda: [p for p in processes_with(marker) if p.name() == "sh"], bool, 15, f"the daemon {marker}")
    make_runtime(RuntimeSpec(isolation="bwrap"), runtime.root.parent, runtime.root.name).stop()
    worker.join(timeout=15)
    wait_gone(marker)


@needs_bwrap
def test_host_loopback_is_reachable(runtime):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = b"proxy-ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        fetch = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
        result = runtime.exec([sys.executable, "-c", fetch], timeout=30)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == "proxy-ok"
    finally:
        server.shutdown()
        server.server_close()


def test_missing_bwrap_is_a_clear_error(tmp_path, monkeypatch):
    runtime = make_runtime(RuntimeSpec(isolation="bwrap"), tmp_path, "s-missing")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(RuntimeError_, match="bwrap is not installed"):
        runtime.start()
    with pytest.raises(RuntimeError_, match="bwrap is not installed"):
        runtime.exec("true")
    runtime.stop()  # stopping never needs bwrap: postrun must still be able to clean up


def test_isolation_is_validated():
    with pytest.raises(ValueError):
        RuntimeSpec(isolation="firejail")
