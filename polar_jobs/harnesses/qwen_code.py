"""The ``qwen_code`` preset: Qwen Code (``@qwen-code/qwen-code``), headless, tools auto-approved.

It speaks OpenAI Chat (``POST /v1/chat/completions``) to ``OPENAI_BASE_URL`` with the session key as a
Bearer token and the model from ``OPENAI_MODEL`` (no ``--model`` as well: the two conflicted on
proxied backends in Polar's preset). Without ``--yolo`` the shell, edit and write tools are not even
declared. After a plain reply it may make a "memory extraction" side call (another system prompt,
four read-only tools): the trajectory labels that trace ``side``.
"""

from __future__ import annotations

import shlex
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env
from polar_jobs.harnesses.gemini_cli import deep_merge, write_json

PACKAGE = "@qwen-code/qwen-code"
BINARY = "qwen"
DEFAULT_VERSION = "0.15.10"


class QwenCode(NpmHarness):
    name = "qwen_code"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION


    def settings(self, context: HarnessContext) -> dict[str, Any]:
        """``~/.qwen/settings.json``: OpenAI-compatible auth, the model, no telemetry, statistics or update
        nags; ``AgentSpec.settings`` merged over it."""
        base = {
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": context.model},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": True},
        }
        return deep_merge(base, self.spec.settings)

    def setup(self, runtime, context: HarnessContext) -> None:
        write_json(runtime, f"{context.home}/.qwen/settings.json", self.settings(context))

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {
            **provider_env(context),
            "OPENAI_BASE_URL": f"{context.proxy_url}/v1",
            "OPENAI_API_KEY": context.api_key,
            "OPENAI_MODEL": context.model,
            **self.spec.env,
        }

    def command(self, instruction: str) -> str:
        """``qwen --yolo --prompt=<instruction>``, stdin closed (``--opt=value`` keeps a leading ``-`` a value)."""
        binary = self.install()
        return f"{shlex.quote(str(binary))} --yolo --prompt={shlex.quote(instruction)} </dev/null"
