"""The ``gemini_cli`` preset: Google's Gemini CLI (``@google/gemini-cli``), headless, tools auto-approved.

It speaks the Gemini API (``POST /v1beta/models/{m}:streamGenerateContent?alt=sse``) to
``GOOGLE_GEMINI_BASE_URL`` with the session key as ``x-goog-api-key``. Two settings are required, not
cosmetic: ``security.auth.selectedType="gemini-api-key"`` (else a custom base URL selects the
``gateway`` auth type and the CLI exits 41) and a trusted workspace (else it exits 55 in headless mode).
``--approval-mode=yolo`` declares and auto-approves the write and shell tools (``run_shell_command``).
"""

from __future__ import annotations

import copy
import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env

PACKAGE = "@google/gemini-cli"
BINARY = "gemini"
DEFAULT_VERSION = "0.61.0"


class GeminiCli(NpmHarness):
    name = "gemini_cli"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION


    def settings(self, context: HarnessContext) -> dict[str, Any]:
        """``~/.gemini/settings.json``: API-key auth, the model, no updates, statistics or telemetry;
        ``AgentSpec.settings`` merged over it."""
        base = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "model": {"name": context.model},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        return deep_merge(base, self.spec.settings)

    def setup(self, runtime, context: HarnessContext) -> None:
        write_json(runtime, f"{context.home}/.gemini/settings.json", self.settings(context))

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {
            **provider_env(context),
            "GOOGLE_GEMINI_BASE_URL": context.proxy_url,  # no /v1beta: the client appends it
            "GEMINI_API_KEY": context.api_key,
            "GEMINI_MODEL": context.model,
            "GEMINI_TELEMETRY_ENABLED": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            **self.spec.env,
        }

    def command(self, instruction: str) -> str:
        """``gemini --approval-mode=yolo --model=M --prompt=<instruction>``, stdin closed.

        ``--opt=value`` keeps an instruction that starts with ``-`` a value, not a flag."""
        binary = self.install()
        model = self.spec.model or "default"
        return (f"{shlex.quote(str(binary))} --approval-mode=yolo --model={shlex.quote(model)} "
                f"--prompt={shlex.quote(instruction)} </dev/null")


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: nested objects merged key by key, anything else replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def write_json(runtime, path: str, data: dict[str, Any]) -> None:
    """A JSON file at an absolute path in the runtime (through ``upload``, so containers work too)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    try:
        runtime.upload(Path(handle.name), path)
    finally:
        Path(handle.name).unlink(missing_ok=True)
