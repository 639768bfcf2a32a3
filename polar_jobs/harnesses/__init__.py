"""Harness presets: one module each; ``for_agent`` picks the preset an AgentSpec names.

A preset offers ``install()`` (once, in init: its pinned CLI into a shared cache), ``setup(runtime,
context)`` (its config files in the session's private HOME), ``env(context)`` (pointed at the proxy
with the session's key, telemetry and update checks off) and ``command(instruction)``.
"""

from __future__ import annotations

import importlib

from polar_jobs.harnesses.base import HarnessContext, provider_env
from polar_jobs.harnesses.shell import ShellHarness
from polar_jobs.schemas import AgentSpec

PRESETS = {
    "shell": "polar_jobs.harnesses.shell:ShellHarness",
    "claude_code": "polar_jobs.harnesses.claude_code:ClaudeCode",
    "codex": "polar_jobs.harnesses.codex:Codex",
    "gemini_cli": "polar_jobs.harnesses.gemini_cli:GeminiCli",
    "qwen_code": "polar_jobs.harnesses.qwen_code:QwenCode",
    "opencode": "polar_jobs.harnesses.opencode:OpenCode",
    "pi": "polar_jobs.harnesses.pi:Pi",
}


def for_agent(spec: AgentSpec):
    """The harness preset for an agent spec."""
    if spec.harness not in PRESETS:
        raise ValueError(f"unknown harness {spec.harness!r}; available: {', '.join(sorted(PRESETS))}")
    module, _, name = PRESETS[spec.harness].partition(":")
    return getattr(importlib.import_module(module), name)(spec)


__all__ = ["HarnessContext", "PRESETS", "ShellHarness", "for_agent", "provider_env"]
