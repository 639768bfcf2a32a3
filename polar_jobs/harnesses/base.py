"""What every harness preset provides: its environment (pointed at the proxy) and its command."""

from __future__ import annotations

from dataclasses import dataclass


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
