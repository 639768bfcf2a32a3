"""The apptainer runtime by the commands it builds (apptainer is not installable on the CI machines), the
runtime factory, and the docker runtime's container config (no daemon needed).

``test_stand_in_*`` run the runtime end to end against a STAND-IN ``apptainer``: a small script that
records ``instance start``/``stop`` and runs ``exec``'s command on this machine with the instance's binds
mapped to host directories. It checks our side (env passing, binds, cwd, process-group kill, stop), not
apptainer. ``test_real_apptainer_*`` run where ``apptainer`` exists and ``POLAR_APPTAINER_IMAGE`` names a
local image; elsewhere they skip with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from polar_jobs.runtimes import (ApptainerRuntime, DockerRuntime, LocalRuntime, RuntimeError_, default_network,
                                 make_runtime)
from polar_jobs.runtimes.apptainer import instance_name
from polar_jobs.schemas import RuntimeSpec

pytestmark = pytest.mark.unit


def _runtime(tmp_path: Path, **options) -> ApptainerRuntime:
    return ApptainerRuntime(tmp_path / "sessions", "s-1", "/images/base.sif", **options)


def test_start_command_contains_binds_the_workspace_and_home(tmp_path):
    runtime = _runtime(tmp_path, binds={"/cache/npm": "/cache/npm"}, network_mode="none", cpus=2, memory="4g")
    session = tmp_path / "sessions" / "s-1"
    assert runtime.start_command() == [
        "apptainer", "instance", "start", "--containall", "--writable-tmpfs",
        "--home", f"{session}/home:/home/agent", "--bind", f"{session}/workspace:/workspace",
        "--bind", "/cache/npm:/cache/npm:ro", "--net", "--network", "none", "--cpus", "2", "--memory", "4g",
        "/images/base.sif", "polar-s-1"]


def test_host_network_and_no_limits_add_no_flags(tmp_path):
    for network in (None, "host"):
        argv = _runtime(tmp_path, network_mode=network).start_command()
        assert "--net" not in argv and "--network" not in argv
        assert "--cpus" not in argv and "--memory" not in argv
        assert argv[-2:] == ["/images/base.sif", "polar-s-1"]


def test_exec_command_runs_in_the_instance(tmp_path):
    runtime = _runtime(tmp_path)
    assert runtime.exec_command("echo hi && ls") == [
        "apptainer", "exec", "--pwd", "/workspace", "instance://polar-s-1", "bash", "-lc", "echo hi && ls"]
    assert runtime.exec_command(["git", "status"], cwd="/tmp") == [
        "apptainer", "exec", "--pwd", "/tmp", "instance://polar-s-1", "git", "status"]


def test_the_environment_travels_prefixed_not_on_the_command_line(tmp_path):
    runtime = _runtime(tmp_path, env={"FROM_SPEC": "1", "SHARED": "spec"})
    env = runtime.exec_env({"OPENAI_API_KEY": "secret", "SHARED": "call", "HOME": "/elsewhere"})
    assert env == {"APPTAINERENV_TMPDIR": "/tmp", "APPTAINERENV_FROM_SPEC": "1", "APPTAINERENV_SHARED": "call",
                   "APPTAINERENV_OPENAI_API_KEY": "secret"}
    assert not any("secret" in part for part in runtime.exec_command(["true"]))


def test_stop_command_and_instance_names(tmp_path):
    assert _runtime(tmp_path).stop_command() == ["apptainer", "instance", "stop", "--force", "polar-s-1"]
    assert instance_name("a b/c:d") == "polar-a-b-c-d"
    assert _runtime(tmp_path, binary="/opt/apptainer/bin/apptainer").stop_command()[0] == "/opt/apptainer/bin/apptainer"


def test_paths_inside_map_to_the_bound_host_directories(tmp_path):
    runtime = _runtime(tmp_path)
    session = tmp_path / "sessions" / "s-1"
    assert runtime.host_path("hello.txt") == session / "workspace" / "hello.txt"
    assert runtime.host_path("/workspace") == session / "workspace"
    assert runtime.host_path("/home/agent/.codex/config.toml") == session / "home" / ".codex" / "config.toml"
    for outside in ("/etc/passwd", "/workspace/../etc/passwd", "/home/agentx/a"):
        with pytest.raises(RuntimeError_, match="only paths under"):
            runtime.host_path(outside)


def test_start_refuses_a_missing_binary_a_registry_image_and_a_missing_file(tmp_path):
    with pytest.raises(RuntimeError_, match="not installed"):
        _runtime(tmp_path, binary="no-such-apptainer-binary").start()
    fake = _stand_in(tmp_path)
    with pytest.raises(RuntimeError_, match="image docker://debian:12 is not present; build or load it: no registry"):
        ApptainerRuntime(tmp_path, "s", "docker://debian:12", binary=str(fake)).start()
    with pytest.raises(RuntimeError_, match="image /nope.sif is not present"):
        ApptainerRuntime(tmp_path, "s", "/nope.sif", binary=str(fake)).start()


# -- the factory and the docker container config -------------------------------------------------------
def test_make_runtime_builds_the_kind_the_spec_names(tmp_path, monkeypatch):
    monkeypatch.setenv("POLAR_NPM_CACHE", str(tmp_path / "npm"))
    local = make_runtime(RuntimeSpec(), tmp_path, "s1", proxy_url="http://127.0.0.1:8080")
    assert isinstance(local, LocalRuntime) and local.root == tmp_path / "s1"

    spec = RuntimeSpec(kind="docker", image="img:1", cpus=2, memory="1g", env={"A": "1"})
    docker = make_runtime(spec, tmp_path, "s2", proxy_url="http://127.0.0.1:8080", keep_files=False)
    assert isinstance(docker, DockerRuntime)
    assert (docker.network_mode, docker.binds, docker.keep_files) == ("host", {}, False)  # no npm cache yet
    (tmp_path / "npm").mkdir()
    docker = make_runtime(spec, tmp_path, "s2")
    assert docker.network_mode == "none" and docker.binds == {str(tmp_path / "npm"): str(tmp_path / "npm")}
    config = docker.container_config()
    assert config["name"] == "polar-s2" and config["command"] == ["sleep", "infinity"] and config["init"] is True
    assert config["labels"] == {"polar_jobs.session": "s2", "polar_jobs.managed": "1"}
    assert (config["nano_cpus"], config["mem_limit"], config["network_mode"]) == (2_000_000_000, "1g", "none")
    assert config["environment"] == {"HOME": "/home/agent", "TMPDIR": "/tmp", "A": "1"}
    assert config["volumes"] == {str(tmp_path / "npm"): {"bind": str(tmp_path / "npm"), "mode": "ro"}}
    assert config["working_dir"] == "/workspace"

    chosen = RuntimeSpec(kind="docker", image="img:1", network_mode="none")
    assert make_runtime(chosen, tmp_path, "s3", proxy_url="http://127.0.0.1:8080").network_mode == "none"

    apptainer = make_runtime(RuntimeSpec(kind="apptainer", image="/i.sif"), tmp_path, "s4",
                             proxy_url="http://127.0.0.1:1")
    assert isinstance(apptainer, ApptainerRuntime) and apptainer.network_mode == "host"
    assert default_network(None) == "none"

    with pytest.raises(ValueError, match="bridge"):
        make_runtime(RuntimeSpec(kind="docker", image="img:1", network_mode="bridge"), tmp_path, "s5")


# -- a stand-in apptainer ----------------------------------------------------------------------------
_STAND_IN = r'''#!PYTHON
"""STAND-IN for apptainer (tests only): records instance start/stop, runs exec's command on this machine."""
import json, os, sys
state = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state")
os.makedirs(state, exist_ok=True)
args = sys.argv[1:]
with open(os.path.join(state, "calls.jsonl"), "a") as out:
    out.write(json.dumps(args) + "\n")
if args[:2] == ["instance", "start"]:
    binds = {}
    rest = args[2:]
    for flag, value in zip(rest, rest[1:]):
        if flag in ("--bind", "--home"):
            host, inside = value.split(":")[:2]
            binds[inside] = host
    with open(os.path.join(state, rest[-1] + ".json"), "w") as out:
        json.dump(binds, out)
    sys.exit(0)
if args[:2] == ["instance", "stop"]:
    sys.exit(0)
assert args[0] == "exec", args
pwd = args[args.index("--pwd") + 1]
target = next(i for i, a in enumerate(args) if a.startswith("instance://"))
binds = json.load(open(os.path.join(state, args[target][len("instance://"):] + ".json")))
def host(path):
    for inside, outside in binds.items():
        if path == inside or path.startswith(inside + "/"):
            return outside + path[len(inside):]
    return path
env = {"PATH": os.environ["PATH"], "HOME": host("/home/agent")}
env.update({k[len("APPTAINERENV_"):]: v for k, v in os.environ.items() if k.startswith("APPTAINERENV_")})
os.chdir(host(pwd))
os.execvpe(args[target + 1], args[target + 1:], env)
'''


def _stand_in(tmp_path: Path) -> Path:
    directory = tmp_path / "stand-in"
    directory.mkdir(exist_ok=True)
    script = directory / "apptainer"
    script.write_text(_STAND_IN.replace("PYTHON", sys.executable, 1))
    script.chmod(0o755)
    return script


def _calls(fake: Path) -> list[list[str]]:
    return [json.loads(line) for line in (fake.parent / "state" / "calls.jsonl").read_text().splitlines()]


@pytest.mark.integration
def test_stand_in_start_exec_files_and_stop(tmp_path):
    fake = _stand_in(tmp_path)
    image = tmp_path / "base.sif"
    image.write_text("")
    runtime = ApptainerRuntime(tmp_path / "sessions", "s-1", str(image), binary=str(fake), env={"SPEC": "yes"},
                               keep_files=False)
    runtime.start()
    assert _calls(fake)[0] == runtime.start_command()[1:]
    result = runtime.exec("echo $SPEC $KEY > out.txt; pwd", env={"KEY": "k"})
    assert result.ok, result
    assert result.stdout.strip() == str(tmp_path / "sessions" / "s-1" / "workspace")  # the stand-in maps binds
    assert (tmp_path / "sessions" / "s-1" / "workspace" / "out.txt").read_text() == "yes k\n"
    source = tmp_path / "config.json"
    source.write_text("{}")
    runtime.upload(source, "/home/agent/.codex/config.json")
    assert (tmp_path / "sessions" / "s-1" / "home" / ".codex" / "config.json").read_text() == "{}"
    runtime.download("out.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_text() == "yes k\n"
    runtime.stop()
    assert _calls(fake)[-1] == runtime.stop_command()[1:]
    assert not (tmp_path / "sessions" / "s-1").exists()
    with pytest.raises(RuntimeError_):
        runtime.exec(["true"])


@pytest.mark.integration
def test_stand_in_timeout_kills_the_exec_with_its_children(tmp_path):
    from tests.integration.pipeline_stack import processes_with, wait_gone

    fake = _stand_in(tmp_path)
    image = tmp_path / "base.sif"
    image.write_text("")
    runtime = ApptainerRuntime(tmp_path / "sessions", "s-2", str(image), binary=str(fake))
    runtime.start()
    marker = "m" + os.urandom(6).hex()
    started = time.monotonic()
    result = runtime.exec(f"echo before; (bash -c 'sleep 300' {marker} &); bash -c 'sleep 301' {marker}", timeout=1)
    assert result.timed_out and result.exit_code is None and result.stdout == "before\n"
    assert time.monotonic() - started < 6
    wait_gone(marker, timeout=5)
    assert not processes_with(marker)
    runtime.stop()


_REAL_IMAGE = os.environ.get("POLAR_APPTAINER_IMAGE")
if shutil.which("apptainer") is None:
    _NO_REAL = "apptainer is not installed here (no Debian package); its commands are unit tested above"
elif not _REAL_IMAGE:
    _NO_REAL = "set POLAR_APPTAINER_IMAGE to a local .sif or sandbox directory (no registry is reachable)"
else:
    _NO_REAL = ""


@pytest.mark.integration
@pytest.mark.skipif(bool(_NO_REAL), reason=_NO_REAL or "-")
def test_real_apptainer_runs_commands_in_an_instance(tmp_path):
    runtime = ApptainerRuntime(tmp_path, "real-1", _REAL_IMAGE, network_mode="host")
    runtime.start()
    try:
        result = runtime.exec("echo $HOME $PWD > where.txt; echo ok", env={"A": "1"})
        assert result.ok and result.stdout == "ok\n", result
        assert (tmp_path / "real-1" / "workspace" / "where.txt").read_text() == "/home/agent /workspace\n"
        started = time.monotonic()
        hung = runtime.exec("sleep 300 & sleep 301", timeout=2)
        assert hung.timed_out and time.monotonic() - started < 10
    finally:
        runtime.stop()
