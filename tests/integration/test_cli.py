"""The command line for real: `polar-jobs sim-upstream`, `polar-jobs proxy --open`, `polar-jobs captures`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
import requests

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "polar_jobs.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, process: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode}: {process.stderr.read()}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up within {seconds} s")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, POLAR_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.db'}", POLAR_DATA_DIR=str(tmp_path))


@pytest.fixture
def running(cli_env):
    sim_port, proxy_port = _free_port(), _free_port()
    processes = [subprocess.Popen(CLI + ["sim-upstream", "--port", str(sim_port), "--max-model-len", "8192"],
                                  env=cli_env, stderr=subprocess.PIPE, text=True)]
    _wait(f"http://127.0.0.1:{sim_port}/health", processes[0])
    processes.append(subprocess.Popen(CLI + ["proxy", "--host", "127.0.0.1", "--port", str(proxy_port), "--upstream",
                                             f"http://127.0.0.1:{sim_port}", "--open"],
                                      env=cli_env, stderr=subprocess.PIPE, text=True))
    _wait(f"http://127.0.0.1:{proxy_port}/healthz", processes[1])
    yield f"http://127.0.0.1:{proxy_port}", f"http://127.0.0.1:{sim_port}"
    for process in processes:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


def test_proxy_open_capture_and_captures_command(running, cli_env):
    proxy_url, sim_url = running
    models = requests.get(f"{proxy_url}/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["polar-sim-qwen3"]
    assert models["data"][0]["max_model_len"] == 8192
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="any-harness-key", max_retries=0)
    reply = client.chat.completions.create(model="whatever", messages=[{"role": "user", "content": "hello cli"}])
    assert reply.choices[0].message.content and reply.model == "whatever"

    lines = subprocess.run(CLI + ["captures"], env=cli_env, capture_output=True, text=True, check=True).stdout
    records = [json.loads(line) for line in lines.splitlines()]
    assert len(records) == 1
    record = records[0]
    assert record["provider"] == "openai_chat" and record["status"] == "ok"
    assert record["finish_reason"] == "stop"
    tokenized = requests.post(f"{sim_url}/tokenize", timeout=5, json={
        "model": "polar-sim-qwen3", "messages": [{"role": "user", "content": "hello cli"}]}).json()["tokens"]
    assert record["prompt_token_ids"] == tokenized
    assert len(record["logprobs"]) == len(record["token_ids"]) > 0

    detailed = subprocess.run(CLI + ["captures", "--session", record["session"], "--payloads"], env=cli_env,
                              capture_output=True, text=True, check=True).stdout
    payload = json.loads(detailed.splitlines()[0])
    assert json.loads(payload["raw_request"])["messages"] == [{"role": "user", "content": "hello cli"}]
    assert payload["chat_request"]["return_token_ids"] is True
    assert payload["upstream_response"]["choices"][0]["token_ids"] == record["token_ids"]


def test_closed_proxy_refuses_unknown_keys(cli_env):
    sim_port, proxy_port = _free_port(), _free_port()
    proxy = subprocess.Popen(CLI + ["proxy", "--port", str(proxy_port), "--upstream", f"http://127.0.0.1:{sim_port}"],
                             env=cli_env, stderr=subprocess.PIPE, text=True)
    try:
        _wait(f"http://127.0.0.1:{proxy_port}/healthz", proxy)
        response = requests.post(f"http://127.0.0.1:{proxy_port}/v1/messages", headers={"x-api-key": "nope"},
                                 json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=10)
