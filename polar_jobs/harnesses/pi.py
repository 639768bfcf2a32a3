"""The ``pi`` harness: ``pi -p`` (npm ``@mariozechner/pi-coding-agent``) on a custom provider at the proxy.

pi has no base-URL environment variable, so setup writes ``~/.pi/agent/models.json`` into the
session HOME: one provider ``local`` speaking the OpenAI Chat API (``openai-completions``, the
default; ``settings.api`` may pick ``anthropic-messages``, ``openai-responses`` or
``google-generative-ai``) at the proxy, its key read from ``LOCAL_API_KEY``, with the agent's model
and its limits; and ``~/.pi/agent/settings.json`` naming that model the default (so no ``--model``
pattern is parsed: pi would read ``name:high`` as a thinking level) with install telemetry off.
``PI_OFFLINE=1`` stops pi's startup network operations (version check, package updates).

Observed with 0.73.1 (loopback only, fresh HOME): 4 tools (read, bash, edit, write; ``bash`` takes
``{"command", "timeout"?}``), no approval prompts, no side calls, and no connection to any host
other than the proxy.

Quoting: pi takes the word after ``-p`` as the message unless it starts with ``-`` or ``@`` (a flag
or an ``@file``), and has no ``--``. An instruction that starts with those characters is split: that
leading run (no whitespace in it, so pi's trim of stdin leaves it whole) goes through stdin, the rest
after ``-p``; pi prepends stdin to the message, so the model receives exactly the instruction.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env
from polar_jobs.schemas import AgentSpec

PACKAGE = "@mariozechner/pi-coding-agent"
BINARY = "pi"
DEFAULT_VERSION = "0.73.1"
PROVIDER = "local"
KEY_ENV = "LOCAL_API_KEY"
DEFAULT_CONTEXT = 32768
DEFAULT_OUTPUT = 8192
DEFAULT_API = "openai-completions"
APIS = {  # pi api → the base URL it needs under the proxy origin
    "openai-completions": "/v1",
    "openai-responses": "/v1",
    "anthropic-messages": "",
    "google-generative-ai": "/v1beta",
}
# Chat API: a plain system message, no reasoning_effort/store, and the classic max_tokens field
CHAT_COMPAT = {"supportsDeveloperRole": False, "supportsReasoningEffort": False, "supportsStore": False,
               "maxTokensField": "max_tokens"}
SWITCHES = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}


class Pi(NpmHarness):
    name = "pi"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION

    def __init__(self, spec: AgentSpec):
        super().__init__(spec)
        self.api = str(spec.settings.get("api", DEFAULT_API))
        if self.api not in APIS:
            raise ValueError(f"pi settings.api {self.api!r} is not one of {', '.join(APIS)}")


    def models(self, context: HarnessContext) -> dict[str, Any]:
        """The content of ``models.json``."""
        settings = self.spec.settings
        provider: dict[str, Any] = {
            "baseUrl": context.proxy_url.rstrip("/") + APIS[self.api],
            "api": self.api,
            "apiKey": KEY_ENV,  # an environment variable's name
            "models": [{"id": context.model, "name": context.model,
                        "contextWindow": int(settings.get("context_window", DEFAULT_CONTEXT)),
                        "maxTokens": int(settings.get("max_tokens", DEFAULT_OUTPUT))}],
        }
        if self.api == "openai-completions":
            provider["compat"] = dict(CHAT_COMPAT)
        return {"providers": {PROVIDER: provider}}

    def settings(self, context: HarnessContext) -> dict[str, Any]:
        """The content of ``settings.json``: the default provider and model, install telemetry off."""
        return {"defaultProvider": PROVIDER, "defaultModel": context.model, "enableInstallTelemetry": False}

    def setup(self, runtime, context: HarnessContext) -> None:
        agent_dir = PurePosixPath(context.home) / ".pi" / "agent"
        _upload_text(runtime, json.dumps(self.models(context), indent=2) + "\n", str(agent_dir / "models.json"))
        _upload_text(runtime, json.dumps(self.settings(context), indent=2) + "\n", str(agent_dir / "settings.json"))

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {**provider_env(context), **SWITCHES, KEY_ENV: context.api_key, **self.spec.env}

    def command(self, instruction: str) -> str:
        """``pi -p <instruction>`` with stdin /dev/null (the model is the configured default; see the module
        doc for instructions that start with ``-`` or ``@``)."""
        base = f"{shlex.quote(str(self.install()))} -p"
        rest = instruction.lstrip("-@")
        lead = instruction[:len(instruction) - len(rest)]
        if not lead:
            return f"{base} {shlex.quote(rest)} < /dev/null"
        return f"printf %s {shlex.quote(lead)} | {base}" + (f" {shlex.quote(rest)}" if rest else "")


def _upload_text(runtime, text: str, remote: str) -> None:
    """A text file into the runtime at an absolute path (through ``upload``, so containers work too)."""
    with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8", suffix=".json") as handle:
        handle.write(text)
    try:
        runtime.upload(Path(handle.name), remote)
    finally:
        Path(handle.name).unlink(missing_ok=True)
