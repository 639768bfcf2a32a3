"""Harness presets: one module each; ``for_agent`` picks the preset an AgentSpec names."""

from polar_jobs.harnesses.base import HarnessContext, provider_env
from polar_jobs.harnesses.shell import ShellHarness
from polar_jobs.schemas import AgentSpec

PRESETS = {"shell": ShellHarness}


def for_agent(spec: AgentSpec):
    """The harness preset for an agent spec (presets for the six CLIs come with the runtimes issue)."""
    try:
        return PRESETS[spec.harness](spec)
    except KeyError:
        raise ValueError(f"unknown harness {spec.harness!r}; available: {', '.join(sorted(PRESETS))}") from None


__all__ = ["HarnessContext", "PRESETS", "ShellHarness", "for_agent", "provider_env"]
