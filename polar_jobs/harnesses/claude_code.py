"""The ``claude_code`` harness: Anthropic's Claude Code CLI (``claude -p``), pointed at the proxy.

Claude Code speaks the Anthropic Messages API (``POST $ANTHROPIC_BASE_URL/v1/messages?beta=true``, the
session key as ``x-api-key``). ``setup`` seeds ``~/.claude.json`` (onboarding done, the key approved,
the workspace trusted) and ``~/.claude/settings.json`` (the allowed tools); ``env`` turns off every
non-essential request (telemetry, update checks, error reports, the title side call), so the CLI
contacts nothing but the proxy. The command runs print mode with the stream-json event log on stdout.

We run as root, where ``--dangerously-skip-permissions`` refuses to start, so tools are approved with
``--allowedTools`` instead (print mode denies any tool not listed). ``AgentSpec.settings``:

* ``allowed_tools``: tool names approved without asking (default ``DEFAULT_ALLOWED_TOOLS``: the local
  ones, not WebFetch/WebSearch);
* ``max_turns``: passed as ``--max-turns``;
* ``max_output_tokens``: ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``;
* ``claude_settings``: merged into ``~/.claude/settings.json``;
* ``mcp_servers``: written as ``mcpServers`` into ``~/.claude.json``.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env
from polar_jobs.schemas import AgentSpec

PACKAGE = "@anthropic-ai/claude-code"
DEFAULT_VERSION = "2.1.197"
BINARY = "claude"
DEFAULT_ALLOWED_TOOLS = ("Bash", "Edit", "Write", "Read", "Glob", "Grep", "NotebookEdit", "TodoWrite", "Task",
                         "Agent")
_SETTINGS = {"allowed_tools", "max_turns", "max_output_tokens", "claude_settings", "mcp_servers"}


class ClaudeCode(NpmHarness):
    name = "claude_code"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION

    def __init__(self, spec: AgentSpec):
        unknown = set(spec.settings) - _SETTINGS
        if unknown:
            raise ValueError(f"unknown claude_code settings {sorted(unknown)}; known: {sorted(_SETTINGS)}")
        super().__init__(spec)
        tools = spec.settings.get("allowed_tools", DEFAULT_ALLOWED_TOOLS)
        if isinstance(tools, str) or not all(isinstance(tool, str) and tool for tool in tools):
            raise ValueError("claude_code settings.allowed_tools must be a list of tool names")
        self.allowed_tools = list(tools)
        self.max_turns = spec.settings.get("max_turns")
        if self.max_turns is not None and (not isinstance(self.max_turns, int) or self.max_turns < 1):
            raise ValueError("claude_code settings.max_turns must be a positive integer")


    def setup(self, runtime, context: HarnessContext) -> None:
        """``~/.claude.json`` (onboarding, key approval, workspace trust) and ``~/.claude/settings.json``."""
        home = context.home.rstrip("/")
        _put(runtime, f"{home}/.claude.json", self.state(context))
        _put(runtime, f"{home}/.claude/settings.json", self.settings())

    def state(self, context: HarnessContext) -> dict[str, Any]:
        """The global config file: without it a fresh HOME shows onboarding and trust dialogs."""
        state: dict[str, Any] = {
            "hasCompletedOnboarding": True, "autoUpdates": False,
            "customApiKeyResponses": {"approved": [context.api_key[-20:]], "rejected": []},
            "projects": {context.workdir: {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
        }
        if self.spec.settings.get("mcp_servers"):
            state["mcpServers"] = self.spec.settings["mcp_servers"]
        return state

    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"permissions": {"allow": self.allowed_tools}, "includeCoAuthoredBy": False}
        extra = self.spec.settings.get("claude_settings") or {}
        if not isinstance(extra, dict):
            raise ValueError("claude_code settings.claude_settings must be an object")
        return {**settings, **extra}

    def env(self, context: HarnessContext) -> dict[str, str]:
        model = context.model
        env = {
            **provider_env(context),
            "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # without it, -p calls api.anthropic.com
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",  # no per-prompt billing-header block in the system prompt
            "IS_SANDBOX": "1",
        }
        if self.spec.settings.get("max_output_tokens"):
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(int(self.spec.settings["max_output_tokens"]))
        return {**env, **self.spec.env}

    def command(self, instruction: str) -> str:
        """Print mode, the stream-json event log on stdout, the allowed tools; the instruction after ``--``."""
        argv = [str(self.install()), "-p", "--output-format", "stream-json", "--verbose",
                "--allowedTools", ",".join(self.allowed_tools)]  # the model comes from ANTHROPIC_MODEL
        if self.max_turns:
            argv += ["--max-turns", str(self.max_turns)]
        return shlex.join([*argv, "--", instruction])


def _put(runtime, path: str, value: Any) -> None:
    """A JSON file at an absolute path in the runtime (through ``upload``, so containers work too)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)
    try:
        runtime.upload(Path(handle.name), path)
    finally:
        Path(handle.name).unlink(missing_ok=True)
