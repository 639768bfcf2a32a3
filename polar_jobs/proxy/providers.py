"""The provider registry: each provider module offers the same pure functions."""

from __future__ import annotations

from types import ModuleType

from polar_jobs.proxy import anthropic, gemini, openai_chat, responses

PROVIDERS: dict[str, ModuleType] = {
    module.NAME: module for module in (anthropic, openai_chat, responses, gemini)
}
"""name → module with ``to_chat``, ``to_response``, ``to_events``, ``error_response``, ``error_event``."""
