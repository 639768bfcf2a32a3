"""API models: what a trainer or SFT farm submits (``TaskRequest``) and its parts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuntimeSpec(_Spec):
    """Where the session runs."""

    kind: Literal["local", "docker", "apptainer"] = "local"
    image: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory: str | None = None  # docker syntax: "4g"
    network_mode: str | None = None
    isolation: Literal["none", "bwrap"] = Field(
        default="none", description="local runtime: run each command in a bubblewrap sandbox (needs bwrap)")
    env: dict[str, str] = Field(default_factory=dict)
    prepare: list[str] = Field(default_factory=list, description="shell commands run in the workspace at init")
    repo: str | None = Field(default=None, description="a git repository (path or URL) cloned into the workspace")
    commit: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="path → content written into the workspace")

    @model_validator(mode="after")
    def _image_for_containers(self) -> "RuntimeSpec":
        if self.kind != "local" and not self.image:
            raise ValueError(f"runtime.image is required for the {self.kind} runtime")
        return self


class AgentSpec(_Spec):
    """Which harness runs, and how."""

    harness: str = "shell"  # claude_code | codex | gemini_cli | qwen_code | opencode | pi | shell
    command: str | None = Field(default=None, description="shell harness: the command; {instruction} is substituted")
    version: str | None = None
    model: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shell_needs_command(self) -> "AgentSpec":
        if self.harness == "shell" and not self.command:
            raise ValueError("agent.command is required for the shell harness")
        return self


class BuilderSpec(_Spec):
    kind: Literal["prefix_merge", "per_request"] = "prefix_merge"
    max_tokens: int | None = Field(default=None, gt=0)


class EvaluatorSpec(_Spec):
    """An evaluator by registry name (built-in, ``module:Class``, or entry point) and its config."""

    name: str = "session_completed"
    config: dict[str, Any] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=1800, gt=0)


class TaskRequest(_Spec):
    """One prompt, run ``num_samples`` times: the samples form one GRPO group."""

    instruction: str = Field(min_length=1)
    num_samples: int = Field(default=1, ge=1, le=1024)
    timeout_seconds: float = Field(default=3600, gt=0, description="the whole session, counted from init")
    agent_timeout: float | None = Field(default=None, gt=0, description="the harness alone, counted from its start")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    agent: AgentSpec
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    callback_url: HttpUrl | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=0, le=9)
    mode: Literal["rl", "sft"] = "rl"
