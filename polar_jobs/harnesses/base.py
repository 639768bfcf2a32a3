"""What every harness preset provides: its environment (pointed at the proxy) and its command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from polar_jobs.harnesses import npm
from polar_jobs.schemas import AgentSpec


@dataclass(frozen=True)
class HarnessContext:
    """Where the harness's model calls go, and as which session."""

    proxy_url: str  # origin, e.g. http://127.0.0.1:8080 (no /v1)
    api_key: str  # the session's secret key
    model: str
    session_id: str
    task_id: str
    workdir: str
    home: str


def provider_env(context: HarnessContext) -> dict[str, str]:
    """The base URL and key of all three provider families, plus the session's identity."""
    return {
        "ANTHROPIC_BASE_URL": context.proxy_url, "ANTHROPIC_API_KEY": context.api_key,
        "OPENAI_BASE_URL": f"{context.proxy_url}/v1", "OPENAI_API_KEY": context.api_key,
        "GOOGLE_API_URL": context.proxy_url, "GOOGLE_GEMINI_BASE_URL": context.proxy_url,
        "GOOGLE_API_KEY": context.api_key, "GEMINI_API_KEY": context.api_key,
        "POLAR_MODEL": context.model, "SESSION_ID": context.session_id, "TASK_ID": context.task_id,
    }


class NpmHarness:
    """A preset whose CLI comes from the npm registry: a pinned version (``AgentSpec.version`` overrides
    it), installed once per machine into the shared cache."""

    name: ClassVar[str]
    package: ClassVar[str]
    binary: ClassVar[str]
    default_version: ClassVar[str]

    def __init__(self, spec: AgentSpec):
        self.spec = spec
        self.version = spec.version or self.default_version

    def install(self) -> Path:
        return npm.install(self.package, self.version, self.binary)
