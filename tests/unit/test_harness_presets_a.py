"""The claude_code and codex presets: config files, environment, command line (no CLI is run or installed)."""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from polar_jobs.harnesses import HarnessContext, for_agent, npm
from polar_jobs.harnesses.claude_code import ClaudeCode
from polar_jobs.harnesses.codex import Codex, to_toml
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.schemas import AgentSpec

pytestmark = pytest.mark.unit

HOSTILE = """it's "quoted" $(touch pwned) `touch pwned` $HOME \\ ; && | > < --model x\nsecond line"""


@pytest.fixture
def installs(monkeypatch, tmp_path) -> list[tuple[str, str, str]]:
    """``npm.install`` replaced by a recorder that returns a fake binary path (nothing is downloaded)."""
    calls = []

    def fake_install(package: str, version: str, binary: str, timeout: float = 900) -> Path:
        calls.append((package, version, binary))
        return tmp_path / "bin dir" / f"{package}@{version}" / binary

    monkeypatch.setattr(npm, "install", fake_install)
    return calls


@pytest.fixture
def runtime(tmp_path) -> LocalRuntime:
    runtime = LocalRuntime(tmp_path / "sessions", "s1", base_env={"PATH": "/usr/bin:/bin"})
    runtime.start()
    return runtime


def context_for(runtime: LocalRuntime, key: str = "sk-session-0123456789abcdefghijKLMN") -> HarnessContext:
    return HarnessContext(proxy_url="http://127.0.0.1:8080", api_key=key, model="qwen3.5-test", session_id="s1",
                          task_id="t1", workdir=runtime.workdir, home=runtime.home)


def argv_of(command: str) -> list[str]:
    """The argv bash would run for a command line (the words, not a shell evaluation)."""
    return shlex.split(command)


# -- claude_code --------------------------------------------------------------------------------------------

def test_claude_code_is_registered_with_its_pinned_version_and_override(installs):
    preset = for_agent(AgentSpec(harness="claude_code"))
    assert isinstance(preset, ClaudeCode) and preset.version == "2.1.197"
    preset.install()
    for_agent(AgentSpec(harness="claude_code", version="2.1.332")).install()
    assert installs == [("@anthropic-ai/claude-code", "2.1.197", "claude"),
                        ("@anthropic-ai/claude-code", "2.1.332", "claude")]


def test_claude_code_setup_seeds_onboarding_trust_key_approval_and_settings(runtime):
    context = context_for(runtime)
    ClaudeCode(AgentSpec(harness="claude_code", settings={
        "claude_settings": {"model": "x"}, "mcp_servers": {"m": {"command": "srv"}}})).setup(runtime, context)
    state = json.loads((Path(runtime.home) / ".claude.json").read_text())
    assert state["hasCompletedOnboarding"] is True
    assert state["customApiKeyResponses"]["approved"] == ["0123456789abcdefghijKLMN"[-20:]]
    assert state["projects"][runtime.workdir]["hasTrustDialogAccepted"] is True
    assert state["mcpServers"] == {"m": {"command": "srv"}}
    settings = json.loads((Path(runtime.home) / ".claude" / "settings.json").read_text())
    assert settings["permissions"]["allow"] == ["Bash", "Edit", "Write", "Read", "Glob", "Grep", "NotebookEdit",
                                                "TodoWrite", "Task", "Agent"]
    assert "WebFetch" not in settings["permissions"]["allow"] and settings["model"] == "x"


def test_claude_code_env_points_at_the_proxy_with_the_session_key_and_quiets_the_cli(runtime):
    context = context_for(runtime)
    env = ClaudeCode(AgentSpec(harness="claude_code", env={"DISABLE_TELEMETRY": "0", "EXTRA": "1"},
                               settings={"max_output_tokens": 4096})).env(context)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8080"  # no /v1: the CLI appends /v1/messages
    assert env["ANTHROPIC_API_KEY"] == context.api_key and "ANTHROPIC_AUTH_TOKEN" not in env
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                 "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert env[name] == "qwen3.5-test"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0" and env["IS_SANDBOX"] == "1"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    assert env["DISABLE_TELEMETRY"] == "0" and env["EXTRA"] == "1"  # AgentSpec.env wins
    assert env["SESSION_ID"] == "s1" and env["OPENAI_BASE_URL"] == "http://127.0.0.1:8080/v1"


def test_claude_code_command_is_print_mode_stream_json_allowed_tools_without_root_refused_flags(installs):
    command = ClaudeCode(AgentSpec(harness="claude_code", settings={"max_turns": 7})).command("Say hi.")
    argv = argv_of(command)
    assert argv[0].endswith("@anthropic-ai/claude-code@2.1.197/claude")
    assert argv[1:] == ["-p", "--output-format", "stream-json", "--verbose", "--allowedTools",
                        "Bash,Edit,Write,Read,Glob,Grep,NotebookEdit,TodoWrite,Task,Agent", "--max-turns", "7",
                        "--", "Say hi."]
    assert "--dangerously-skip-permissions" not in command and "bypassPermissions" not in command


def test_claude_code_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown claude_code settings"):
        ClaudeCode(AgentSpec(harness="claude_code", settings={"allowed_tool": ["Bash"]}))
    with pytest.raises(ValueError, match="allowed_tools"):
        ClaudeCode(AgentSpec(harness="claude_code", settings={"allowed_tools": "Bash"}))
    with pytest.raises(ValueError, match="max_turns"):
        ClaudeCode(AgentSpec(harness="claude_code", settings={"max_turns": 0}))


# -- codex --------------------------------------------------------------------------------------------------

def test_codex_is_registered_with_its_pinned_version_and_override(installs):
    preset = for_agent(AgentSpec(harness="codex"))
    assert isinstance(preset, Codex) and preset.version == "0.171.0"
    preset.install()
    for_agent(AgentSpec(harness="codex", version="0.170.0")).install()
    assert installs == [("@openai/codex", "0.171.0", "codex"), ("@openai/codex", "0.170.0", "codex")]


def test_codex_setup_writes_config_toml_with_the_local_responses_provider(runtime):
    context = context_for(runtime)
    Codex(AgentSpec(harness="codex", settings={"config": {
        "model_context_window": 32768, "model_providers": {"local": {"request_max_retries": 2}}}})).setup(
        runtime, context)
    config = tomllib.loads((Path(runtime.home) / ".codex" / "config.toml").read_text())
    assert config["model"] == "qwen3.5-test" and config["model_provider"] == "local"
    assert config["model_providers"]["local"] == {
        "name": "local", "base_url": "http://127.0.0.1:8080/v1", "env_key": "LOCAL_API_KEY",
        "wire_api": "responses", "request_max_retries": 2}
    assert config["approval_policy"] == "never" and config["sandbox_mode"] == "danger-full-access"
    assert config["web_search"] == "disabled" and config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False} and config["feedback"] == {"enabled": False}
    assert config["features"] == {"plugins": False, "remote_plugin": False, "apps": False}
    assert config["model_context_window"] == 32768


def test_codex_env_sets_codex_home_and_the_provider_key(runtime):
    context = context_for(runtime)
    env = Codex(AgentSpec(harness="codex", env={"RUST_LOG": "warn"})).env(context)
    assert env["CODEX_HOME"] == f"{runtime.home}/.codex"
    assert env["LOCAL_API_KEY"] == context.api_key and env["OPENAI_API_KEY"] == context.api_key
    assert env["RUST_LOG"] == "warn" and env["TASK_ID"] == "t1"


def test_codex_command_is_exec_json_skip_git_check(installs):
    argv = argv_of(Codex(AgentSpec(harness="codex")).command("Say hi."))
    assert argv[0].endswith("@openai/codex@0.171.0/codex")
    assert argv[1:] == ["exec", "--skip-git-repo-check", "--json", "--color", "never", "--", "Say hi."]


def test_toml_writer_round_trips_awkward_keys_and_strings():
    table = {"a": 1, "b": 2.5, "c": True, "d": "q\"uo\\te\nline ☃", "e": ["x", 1],
             "t": {"inline": {"k": "v"}, "deep": {"x y": {"z": False}}}, "empty": {}}
    assert tomllib.loads(to_toml(table)) == table
    with pytest.raises(ValueError):
        to_toml({"x": object()})


def test_codex_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown codex settings"):
        Codex(AgentSpec(harness="codex", settings={"model_context_window": 1}))
    with pytest.raises(ValueError, match="config"):
        Codex(AgentSpec(harness="codex", settings={"config": "x"}))


# -- both: a hostile instruction is one argument, never evaluated -------------------------------------------

@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_hostile_instruction_reaches_the_cli_as_one_literal_argument(harness, installs, tmp_path):
    command = for_agent(AgentSpec(harness=harness)).command(HOSTILE)
    assert argv_of(command)[-2:] == ["--", HOSTILE]
    # what bash -lc really passes: replace the binary with printf and look at the last argument
    binary = argv_of(command)[0]
    probe = command.replace(shlex.quote(binary), "printf '%s\\0'", 1)
    done = subprocess.run(["bash", "-c", probe], capture_output=True, cwd=tmp_path, timeout=10)
    assert done.returncode == 0
    assert done.stdout.decode().split("\0")[-2] == HOSTILE
    assert not (tmp_path / "pwned").exists()
