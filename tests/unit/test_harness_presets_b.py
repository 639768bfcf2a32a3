"""The gemini_cli and qwen_code presets: settings files, environment, command line (no CLI is installed;
the command runs once through bash against a stub that reports its argv and stdin)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from polar_jobs.harnesses import HarnessContext, for_agent, npm
from polar_jobs.harnesses.gemini_cli import GeminiCli, deep_merge
from polar_jobs.harnesses.qwen_code import QwenCode
from polar_jobs.runtimes.local import LocalRuntime
from polar_jobs.schemas import AgentSpec

pytestmark = pytest.mark.unit

HOSTILE = """-h it's "quoted" $(touch pwned) `touch pwned` $HOME \\ ; && | > < --yolo --model x\nsecond line"""
STUB = "import json, sys; print(json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read()}))"


@pytest.fixture
def installs(monkeypatch, tmp_path) -> list[tuple[str, str, str]]:
    """``npm.install`` replaced by a recorder returning a stub CLI (in a directory with a space) that prints
    its arguments and stdin as JSON."""
    calls = []

    def fake_install(package: str, version: str, binary: str, timeout: float = 900) -> Path:
        calls.append((package, version, binary))
        stub = tmp_path / "bin dir" / binary
        stub.parent.mkdir(exist_ok=True)
        stub.write_text(f"#!{sys.executable}\n{STUB}\n")
        stub.chmod(0o755)
        return stub

    monkeypatch.setattr(npm, "install", fake_install)
    return calls


@pytest.fixture
def runtime(tmp_path) -> LocalRuntime:
    runtime = LocalRuntime(tmp_path / "sessions", "s1", base_env={"PATH": "/usr/bin:/bin"})
    runtime.start()
    return runtime


def context_for(runtime: LocalRuntime) -> HarnessContext:
    return HarnessContext(proxy_url="http://127.0.0.1:8080", api_key="sk-session-key", model="qwen3.5-test",
                          session_id="s1", task_id="t1", workdir=runtime.workdir, home=runtime.home)


def run_stub(runtime: LocalRuntime, command: str, tmp_path: Path) -> dict:
    """What the stub CLI received when bash ran the command line; no file was created by the instruction."""
    result = runtime.exec(command, timeout=30)
    assert result.exit_code == 0, result.stderr
    assert not list(Path(runtime.workdir).glob("pwned")) and not (tmp_path / "pwned").exists()
    return json.loads(result.stdout)


# -- gemini_cli ---------------------------------------------------------------------------------------------

def test_gemini_cli_is_registered_with_its_pinned_version_and_an_override(installs):
    preset = for_agent(AgentSpec(harness="gemini_cli"))
    assert isinstance(preset, GeminiCli) and preset.version == "0.61.0"
    preset.install()
    for_agent(AgentSpec(harness="gemini_cli", version="0.60.1")).install()
    assert installs == [("@google/gemini-cli", "0.61.0", "gemini"), ("@google/gemini-cli", "0.60.1", "gemini")]


def test_gemini_cli_settings_select_api_key_auth_and_switch_off_updates_and_telemetry(runtime):
    spec = AgentSpec(harness="gemini_cli", settings={"general": {"vimMode": True}, "model": {"maxSessionTurns": 9}})
    for_agent(spec).setup(runtime, context_for(runtime))
    settings = json.loads((Path(runtime.home) / ".gemini" / "settings.json").read_text())
    assert settings == {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "vimMode": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "model": {"name": "qwen3.5-test", "maxSessionTurns": 9},  # AgentSpec.settings merged in, not replacing
        "security": {"auth": {"selectedType": "gemini-api-key"}},
    }


def test_gemini_cli_env_points_at_the_proxy_and_trusts_the_workspace(runtime):
    spec = AgentSpec(harness="gemini_cli", env={"GEMINI_TELEMETRY_ENABLED": "true", "EXTRA": "1"})
    env = for_agent(spec).env(context_for(runtime))
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8080"  # origin: the client appends /v1beta
    assert env["GEMINI_API_KEY"] == env["GOOGLE_API_KEY"] == "sk-session-key"
    assert env["GEMINI_MODEL"] == "qwen3.5-test" and env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8080/v1" and env["SESSION_ID"] == "s1"  # provider_env
    assert env["GEMINI_TELEMETRY_ENABLED"] == "true" and env["EXTRA"] == "1"  # AgentSpec.env wins


def test_gemini_cli_command_passes_a_hostile_instruction_as_one_value(installs, runtime, tmp_path):
    command = for_agent(AgentSpec(harness="gemini_cli", model="m'x")).command(HOSTILE)
    assert shlex.split(command)[1:] == ["--approval-mode=yolo", "--model=m'x", f"--prompt={HOSTILE}", "</dev/null"]
    received = run_stub(runtime, command, tmp_path)
    assert received == {"argv": ["--approval-mode=yolo", "--model=m'x", f"--prompt={HOSTILE}"], "stdin": ""}


def test_gemini_cli_command_without_a_model_names_the_pipelines_default():
    preset = GeminiCli(AgentSpec(harness="gemini_cli"))
    preset.install = lambda: Path("/opt/gemini")
    assert preset.command("hi") == "/opt/gemini --approval-mode=yolo --model=default --prompt=hi </dev/null"


# -- qwen_code ----------------------------------------------------------------------------------------------

def test_qwen_code_is_registered_with_its_pinned_version_and_an_override(installs):
    preset = for_agent(AgentSpec(harness="qwen_code"))
    assert isinstance(preset, QwenCode) and preset.version == "0.15.10"
    preset.install()
    for_agent(AgentSpec(harness="qwen_code", version="0.14.5")).install()
    assert installs == [("@qwen-code/qwen-code", "0.15.10", "qwen"), ("@qwen-code/qwen-code", "0.14.5", "qwen")]


def test_qwen_code_settings_select_openai_auth_and_switch_off_telemetry_and_nags(runtime):
    spec = AgentSpec(harness="qwen_code", settings={"general": {"disableUpdateNag": False}})
    for_agent(spec).setup(runtime, context_for(runtime))
    settings = json.loads((Path(runtime.home) / ".qwen" / "settings.json").read_text())
    assert settings == {
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": "qwen3.5-test"},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": False},
    }


def test_qwen_code_env_points_openai_at_the_proxy(runtime):
    env = for_agent(AgentSpec(harness="qwen_code", env={"OPENAI_MODEL": "other"})).env(context_for(runtime))
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8080/v1" and env["OPENAI_API_KEY"] == "sk-session-key"
    assert env["OPENAI_MODEL"] == "other"  # AgentSpec.env wins
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8080" and env["TASK_ID"] == "t1"  # provider_env
    assert QwenCode(AgentSpec(harness="qwen_code")).env(context_for(runtime))["OPENAI_MODEL"] == "qwen3.5-test"


def test_qwen_code_command_passes_a_hostile_instruction_as_one_value(installs, runtime, tmp_path):
    command = for_agent(AgentSpec(harness="qwen_code", model="ignored")).command(HOSTILE)
    assert shlex.split(command)[1:] == ["--yolo", f"--prompt={HOSTILE}", "</dev/null"]  # no --model: OPENAI_MODEL
    assert run_stub(runtime, command, tmp_path) == {"argv": ["--yolo", f"--prompt={HOSTILE}"], "stdin": ""}


# -- shared -------------------------------------------------------------------------------------------------

def test_deep_merge_merges_objects_and_replaces_everything_else():
    base = {"a": {"b": 1, "c": [1]}, "d": 1}
    merged = deep_merge(base, {"a": {"c": [2], "e": {"f": 1}}, "d": {"x": 1}})
    assert merged == {"a": {"b": 1, "c": [2], "e": {"f": 1}}, "d": {"x": 1}}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 1}  # inputs untouched
