"""The job system's command line for real: `polar-jobs demo`, `polar-jobs up --sim` + `submit --follow` +
`status` against it, SIGTERM stopping every child, and `submit`'s errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from polar_jobs.stack import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "polar_jobs.cli"]
ROW = re.compile(r"^│\s*(\d+)\s*│\s*([0-9a-f]{12})\s*│\s*(\w+)\s*│\s*(\S+)\s*│\s*(\S+)\s*│\s*(\w+)\s*│\s*(\d+)\s*│"
                 r"\s*(\d+) / (\d+) / (\d+)\s*│")
READY_LINE = "Ctrl-C (or SIGTERM) stops everything."


def sample_rows(output: str) -> list[dict]:
    rows = []
    for line in output.splitlines():
        match = ROW.match(line.strip())
        if match:
            index, session, status, reward, advantage, trajectory, traces, prompt, response, trained = match.groups()
            rows.append({"index": int(index), "session": session, "status": status, "reward": float(reward),
                         "advantage": float(advantage), "trajectory": trajectory, "traces": int(traces),
                         "prompt": int(prompt), "response": int(response), "trained": int(trained)})
    return rows


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group_members(pgid: int) -> set[int]:
    """Processes in a process group (a worker's prefork children live in the worker's group)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                members.add(int(entry.name))
    return members


def test_demo_runs_a_group_end_to_end(tmp_path):
    started = time.monotonic()
    done = subprocess.run(CLI + ["demo"], capture_output=True, text=True, timeout=150,
                          env=dict(os.environ, COLUMNS="200"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    rows = sample_rows(output)
    assert [row["index"] for row in rows] == [0, 1, 2, 3], output
    assert all(row["status"] == "done" and row["trajectory"] == "complete" for row in rows), output
    assert sorted(row["reward"] for row in rows) == [0.0, 0.0, 1.0, 1.0], output
    assert all(row["advantage"] != 0 for row in rows), output
    for row in rows:  # the right answer is pushed up, the wrong one down
        assert (row["advantage"] > 0) == (row["reward"] == 1.0), output
        assert row["traces"] == 1 and row["prompt"] > 0 and 0 < row["trained"] < row["response"], output
    assert "proxy capture fidelity: 8/8 captured calls match" in output, output
    assert "demo OK" in output and "stopped every process" in output, output
    assert time.monotonic() - started < 120


@pytest.fixture(scope="module")
def up_stack(tmp_path_factory):
    """`polar-jobs up --sim` in its own data dir and process group; its log, parsed."""
    data_dir = tmp_path_factory.mktemp("up-data")
    env = dict(os.environ, POLAR_DATA_DIR=str(data_dir), POLAR_API_PORT=str(free_port()),
               POLAR_PROXY_PORT=str(free_port()), COLUMNS="200")
    env.pop("POLAR_BROKER_URL", None)
    env.pop("POLAR_DATABASE_URL", None)
    env.pop("POLAR_API_TOKEN", None)
    log_path = data_dir / "up.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(CLI + ["up", "--sim", "--running-concurrency", "2"], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 90
    while READY_LINE not in log_path.read_text():
        if process.poll() is not None or time.time() > deadline:
            os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
            pytest.fail(f"polar-jobs up did not come up (rc {process.poll()}):\n{log_path.read_text()}")
        time.sleep(0.2)
    text = log_path.read_text()
    handle = {"process": process, "env": env, "log": log_path, "data_dir": data_dir,
              "api": re.search(r"API\s+(http://\S+)", text).group(1),
              "sim": re.search(r"upstream\s+(http://\S+)", text).group(1),
              "pids": {name: int(pid) for name, pid in re.findall(r"([\w-]+) pid (\d+)", text)}}
    yield handle
    if process.poll() is None:  # a test failed before the SIGTERM test: stop it, then everything left
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    for pid in handle["pids"].values():
        for member in group_members(pid) | {pid}:
            if alive(member):
                os.kill(member, signal.SIGKILL)


def test_up_starts_every_child(up_stack):
    assert set(up_stack["pids"]) == {"sim-upstream", "redis", "api", "proxy", "worker-init", "worker-running",
                                     "worker-postrun"}
    assert all(alive(pid) for pid in up_stack["pids"].values())
    assert requests.get(f"{up_stack['api']}/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{up_stack['sim']}/health", timeout=5).status_code == 200


def test_submit_yaml_and_follow_to_the_group(up_stack, tmp_path):
    requests.post(f"{up_stack['sim']}/sim/rules?replace=1", timeout=10, json=[
        {"match": {"last_role": "user", "contains": "answer.txt"}, "policy": {"kind": "choice", "options": [
            {"kind": "tool_call", "name": "run_shell", "arguments": {"command": "echo 42 > answer.txt"}},
            {"kind": "tool_call", "name": "run_shell", "arguments": {"command": "echo 7 > answer.txt"}}]}},
        {"match": {"last_role": "tool"}, "policy": {"kind": "text", "text": "Written."}},
    ]).raise_for_status()
    task = tmp_path / "task.yaml"
    task.write_text(f"""\
instruction: Write 42 into answer.txt
num_samples: 2
timeout_seconds: 90
agent:
  harness: shell
  command: {sys.executable} -m polar_jobs.harnesses.mini_agent {{instruction}}
evaluator:
  name: output
  config:
    checks:
      - kind: file_content
        path: answer.txt
        contains: "42"
""")
    done = subprocess.run(CLI + ["submit", str(task), "--api", up_stack["api"], "--follow", "--timeout", "90",
                                 "--idempotency-key", "cli-stack-1"],
                          capture_output=True, text=True, timeout=150, env=up_stack["env"])
    output = done.stdout + done.stderr
    assert done.returncode == 0, output + up_stack["log"].read_text()
    task_id = done.stdout.splitlines()[0].strip()
    assert re.fullmatch(r"[0-9a-f]{32}", task_id), output
    assert f"group of task {task_id}" in output and "done" in output and "2/2" in output, output
    rows = sample_rows(output)
    assert len(rows) == 2 and sorted(row["reward"] for row in rows) == [0.0, 1.0], output
    assert sorted(row["advantage"] for row in rows) == [-1.0, 1.0], output
    assert all(row["trained"] > 0 for row in rows), output
    view = requests.get(f"{up_stack['api']}/v1/tasks/{task_id}", timeout=10).json()
    assert view["status"] == "finalized" and view["counts"] == {"done": 2}
    up_stack["task_id"] = task_id

    again = subprocess.run(CLI + ["submit", str(task), "--api", up_stack["api"], "--idempotency-key", "cli-stack-1"],
                           capture_output=True, text=True, timeout=60, env=up_stack["env"])
    assert again.returncode == 0 and again.stdout.strip() == task_id, again.stdout + again.stderr
    assert "already submitted" in again.stderr


def test_status_lists_tasks_and_session_counts(up_stack):
    done = subprocess.run(CLI + ["status", "--api", up_stack["api"]], capture_output=True, text=True, timeout=60,
                          env=up_stack["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    task_id = up_stack.get("task_id")
    if task_id:
        line = next(line for line in done.stdout.splitlines() if task_id in line)
        assert "finalized" in line and "2/2" in line and "done=2" in line, done.stdout
        assert re.search(r"sessions by state: .*done 2", done.stdout), done.stdout
        assert re.search(r"groups: open 0 · finalized 1", done.stdout), done.stdout
    assert "queue lengths: init 0 · running 0 · postrun 0" in done.stdout, done.stdout


def test_submit_invalid_task_prints_every_field(up_stack, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"instruction": "", "num_samples": 0, "agent": {"harness": "shell"}, "colour": "red"}')
    done = subprocess.run(CLI + ["submit", str(bad), "--api", up_stack["api"]], capture_output=True, text=True,
                          timeout=60, env=up_stack["env"])
    assert done.returncode != 0
    assert "422" in done.stderr
    for field in ("instruction:", "num_samples:", "agent:", "colour:"):
        assert f"  {field}" in done.stderr, done.stderr
    assert done.stdout == ""


def test_sigterm_stops_up_and_every_child(up_stack):
    process = up_stack["process"]
    pids = set(up_stack["pids"].values())
    members = set().union(*(group_members(pid) for pid in pids)) | pids
    assert len(members) > len(pids)  # the prefork pools are there too
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=45) == 0, up_stack["log"].read_text()
    log = up_stack["log"].read_text()
    assert "SIGTERM: stopping" in log and "every child process has exited" in log, log
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(pid) for pid in members):
        time.sleep(0.2)
    assert [pid for pid in members if alive(pid)] == [], log
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{up_stack['api']}/healthz", timeout=2)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{up_stack['sim']}/health", timeout=2)


def test_submit_without_an_api_says_so(tmp_path):
    task = tmp_path / "task.json"
    task.write_text('{"instruction": "x", "agent": {"harness": "shell", "command": "true"}}')
    done = subprocess.run(CLI + ["submit", str(task), "--api", f"http://127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "cannot reach the intake API" in done.stderr


def test_submit_rejects_a_file_that_is_not_a_task(tmp_path):
    broken = tmp_path / "task.yaml"
    broken.write_text("instruction: [unclosed\n")
    done = subprocess.run(CLI + ["submit", str(broken)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "not valid YAML" in done.stderr
