"""The ``opencode`` and ``pi`` presets without running them: config content, env, command quoting
(every instruction must reach the CLI's prompt intact), version override."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.harnesses import HarnessContext, for_agent, npm, opencode, pi, provider_env
from polar_jobs.schemas import AgentSpec

pytestmark = pytest.mark.unit

FAKE_BIN = "/cache/npm/some dir/node_modules/.bin/cli"
HOSTILE = ["plain", "two  spaces", "  lead and trail  ", '"double" \'single\' $(rm -rf /) `id` $HOME \\n',
           "line\nbreak\ttab", "--help", "-m x", "--", "-", "@file", "@@--x", "-- x", "---yaml", "/help now",
           "ünïcødé ✓", "a'b\"c", " ", "x --format json"]
CONTEXT = HarnessContext(proxy_url="http://127.0.0.1:8123", api_key="sess-key-1", model="org/model:v1",
                         session_id="sid", task_id="tid", workdir="/w/workspace", home="/w/home")


@pytest.fixture(autouse=True)
def fake_install(monkeypatch):
    """npm.install records its arguments and installs nothing."""
    calls = []

    def install(package, version, binary, timeout=900):
        calls.append((package, version, binary))
        return Path(FAKE_BIN)

    monkeypatch.setattr(npm, "install", install)
    return calls


class FakeRuntime:
    """Records what ``upload`` would put where."""

    def __init__(self):
        self.files: dict[str, str] = {}

    def upload(self, local: Path, remote: str) -> None:
        self.files[remote] = Path(local).read_text(encoding="utf-8")


def preset(harness: str, **spec):
    return for_agent(AgentSpec(harness=harness, **spec))


def opencode_message(command: str) -> str:
    """What ``opencode run`` makes of the command line: the words after ``--``, joined with spaces, a
    word holding a space wrapped in double quotes (its quoting gotcha)."""
    argv = shlex.split(command)
    assert argv[:3] == [FAKE_BIN, "run", "--"] and argv[-2:] == ["<", "/dev/null"], argv
    return " ".join(f'"{word}"' if " " in word else word for word in argv[3:-2])


def pi_message(command: str) -> str:
    """What pi makes of the command line: stdin (trimmed) followed by the argument after ``-p``, which
    pi only takes as the message when it starts with neither ``-`` nor ``@``."""
    argv = shlex.split(command)
    stdin = ""
    if argv[0] == "printf":
        assert argv[1] == "%s" and argv[3] == "|", argv
        stdin, argv = argv[2], argv[4:]
        assert stdin and stdin == stdin.strip(), "the stdin part is never empty and survives pi's trim"
    else:
        assert argv[-2:] == ["<", "/dev/null"], argv
        argv = argv[:-2]
    assert argv[:2] == [FAKE_BIN, "-p"] and len(argv) <= 3, argv
    message = argv[2] if len(argv) == 3 else ""
    assert not message.startswith(("-", "@")), message
    return stdin + message


# -- registry and versions -------------------------------------------------------------------

def test_registry_maps_both_presets():
    assert isinstance(preset("opencode"), opencode.OpenCode)
    assert isinstance(preset("pi"), pi.Pi)


def test_pinned_versions_install_through_npm(fake_install):
    assert preset("opencode").install() == Path(FAKE_BIN)
    preset("pi").install()
    assert fake_install == [("opencode-ai", "1.18.33", "opencode"),
                            ("@mariozechner/pi-coding-agent", "0.73.1", "pi")]


def test_version_override(fake_install):
    preset("opencode", version="1.4.6").install()
    preset("pi", version="0.67.68").command("hi")
    assert fake_install == [("opencode-ai", "1.4.6", "opencode"), ("@mariozechner/pi-coding-agent", "0.67.68", "pi")]


# -- opencode --------------------------------------------------------------------------------

def test_opencode_config_points_at_the_proxy_and_allows_everything():
    config = preset("opencode").config(CONTEXT)
    assert config["model"] == config["small_model"] == "local/org/model:v1"
    assert config["autoupdate"] is False and config["share"] == "disabled"
    provider = config["provider"]["local"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8123/v1", "apiKey": "{env:LOCAL_API_KEY}"}
    assert provider["models"] == {"org/model:v1": {"name": "org/model:v1",
                                                   "limit": {"context": 32768, "output": 8192}}}
    assert set(config["permission"]) >= {"bash", "edit", "read", "webfetch", "external_directory", "doom_loop"}
    assert set(config["permission"].values()) == {"allow"}
    assert "sess-key-1" not in json.dumps(config)  # the key comes from the environment


def test_opencode_limits_come_from_settings():
    config = preset("opencode", settings={"context_window": 131072, "max_tokens": 2048}).config(CONTEXT)
    assert config["provider"]["local"]["models"]["org/model:v1"]["limit"] == {"context": 131072, "output": 2048}


def test_opencode_setup_writes_the_config_into_the_session_home():
    runtime = FakeRuntime()
    harness = preset("opencode")
    harness.setup(runtime, CONTEXT)
    assert list(runtime.files) == ["/w/home/.config/opencode/opencode.json"]
    assert json.loads(runtime.files["/w/home/.config/opencode/opencode.json"]) == harness.config(CONTEXT)


def test_opencode_env():
    env = preset("opencode", env={"EXTRA": "1", "OPENCODE_DISABLE_SHARE": "0"}).env(CONTEXT)
    assert env.items() >= provider_env(CONTEXT).items()
    assert env["LOCAL_API_KEY"] == "sess-key-1"
    for switch in ("OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_DEFAULT_PLUGINS",
                   "OPENCODE_DISABLE_LSP_DOWNLOAD"):
        assert env[switch] == "1"
    assert env["EXTRA"] == "1" and env["OPENCODE_DISABLE_SHARE"] == "0"  # AgentSpec.env wins


@pytest.mark.parametrize("instruction", HOSTILE)
def test_opencode_command_passes_the_exact_instruction(instruction):
    command = preset("opencode").command(instruction)
    assert opencode_message(command) == instruction


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1))
def test_opencode_command_round_trips_any_text(instruction):
    assert opencode_message(opencode.OpenCode(AgentSpec(harness="opencode")).command(instruction)) == instruction


# -- pi --------------------------------------------------------------------------------------

def test_pi_models_json_uses_the_chat_api_at_the_proxy():
    models = preset("pi").models(CONTEXT)
    provider = models["providers"]["local"]
    assert provider["baseUrl"] == "http://127.0.0.1:8123/v1" and provider["api"] == "openai-completions"
    assert provider["apiKey"] == "LOCAL_API_KEY"  # an environment variable's name, not the key
    assert provider["models"] == [{"id": "org/model:v1", "name": "org/model:v1", "contextWindow": 32768,
                                   "maxTokens": 8192}]
    assert provider["compat"] == {"supportsDeveloperRole": False, "supportsReasoningEffort": False,
                                  "supportsStore": False, "maxTokensField": "max_tokens"}


@pytest.mark.parametrize("api,base", [("anthropic-messages", "http://127.0.0.1:8123"),
                                      ("openai-responses", "http://127.0.0.1:8123/v1"),
                                      ("google-generative-ai", "http://127.0.0.1:8123/v1beta")])
def test_pi_other_apis_get_their_base_url(api, base):
    provider = preset("pi", settings={"api": api, "max_tokens": 1024}).models(CONTEXT)["providers"]["local"]
    assert provider["api"] == api and provider["baseUrl"] == base and "compat" not in provider
    assert provider["models"][0]["maxTokens"] == 1024


def test_pi_rejects_an_unknown_api():
    with pytest.raises(ValueError, match="settings.api"):
        preset("pi", settings={"api": "bedrock"})


def test_pi_setup_writes_models_and_settings_into_the_session_home():
    runtime = FakeRuntime()
    harness = preset("pi")
    harness.setup(runtime, CONTEXT)
    assert sorted(runtime.files) == ["/w/home/.pi/agent/models.json", "/w/home/.pi/agent/settings.json"]
    assert json.loads(runtime.files["/w/home/.pi/agent/models.json"]) == harness.models(CONTEXT)
    assert json.loads(runtime.files["/w/home/.pi/agent/settings.json"]) == {
        "defaultProvider": "local", "defaultModel": "org/model:v1", "enableInstallTelemetry": False}


def test_pi_env():
    env = preset("pi", env={"PI_TELEMETRY": "1"}).env(CONTEXT)
    assert env.items() >= provider_env(CONTEXT).items()
    assert env["LOCAL_API_KEY"] == "sess-key-1"
    assert env["PI_OFFLINE"] == "1" and env["PI_SKIP_VERSION_CHECK"] == "1"
    assert env["PI_TELEMETRY"] == "1"  # AgentSpec.env wins


@pytest.mark.parametrize("instruction", HOSTILE)
def test_pi_command_passes_the_exact_instruction(instruction):
    command = preset("pi").command(instruction)
    assert pi_message(command) == instruction
    assert "--model" not in command  # the model is the configured default: no pattern parsing


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1))
def test_pi_command_round_trips_any_text(instruction):
    assert pi_message(pi.Pi(AgentSpec(harness="pi")).command(instruction)) == instruction
