"""The ``shell`` harness: any command, with ``{instruction}`` substituted (shell-quoted)."""

from __future__ import annotations

import shlex

from polar_jobs.harnesses.base import HarnessContext, provider_env
from polar_jobs.schemas import AgentSpec


class ShellHarness:
    name = "shell"

    def __init__(self, spec: AgentSpec):
        if not spec.command:
            raise ValueError("the shell harness needs agent.command")
        self.spec = spec

    def install(self) -> None:
        return None

    def setup(self, runtime, context: HarnessContext) -> None:
        return None

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {**provider_env(context), **self.spec.env}

    def command(self, instruction: str) -> str:
        """The command line run with ``bash -lc``; the instruction is one quoted word."""
        return self.spec.command.replace("{instruction}", shlex.quote(instruction))
