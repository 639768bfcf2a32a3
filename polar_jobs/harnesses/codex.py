"""The ``codex`` harness: OpenAI's Codex CLI (``codex exec``), pointed at the proxy.

Codex speaks the OpenAI Responses API (``POST <base_url>/responses``, the key as a Bearer token read
from ``$LOCAL_API_KEY``). ``setup`` writes ``$CODEX_HOME/config.toml`` (``CODEX_HOME`` = the session
HOME's ``.codex``) with a ``local`` model provider at ``<proxy>/v1`` (``wire_api = "responses"``; "chat"
is a config error), approvals off, no sandbox, the hosted web_search tool dropped, and analytics,
feedback, update checks and the plugin/app lookups (GitHub, chatgpt.com) off, so it contacts nothing
but the proxy. The command runs ``codex exec`` with the JSONL event log (``--json``) on stdout.

``AgentSpec.settings``:

* ``config``: a table deep-merged into ``config.toml`` (e.g. ``{"model_context_window": 32768,
  "model_reasoning_effort": "low"}``).
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env
from polar_jobs.schemas import AgentSpec

PACKAGE = "@openai/codex"
DEFAULT_VERSION = "0.171.0"
BINARY = "codex"
PROVIDER = "local"
KEY_VARIABLE = "LOCAL_API_KEY"
_SETTINGS = {"config"}


class Codex(NpmHarness):
    name = "codex"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION

    def __init__(self, spec: AgentSpec):
        unknown = set(spec.settings) - _SETTINGS
        if unknown:
            raise ValueError(f"unknown codex settings {sorted(unknown)}; known: {sorted(_SETTINGS)}")
        if not isinstance(spec.settings.get("config", {}), dict):
            raise ValueError("codex settings.config must be an object")
        super().__init__(spec)


    @staticmethod
    def codex_home(context: HarnessContext) -> str:
        return f"{context.home.rstrip('/')}/.codex"

    def config(self, context: HarnessContext) -> dict[str, Any]:
        config: dict[str, Any] = {
            "model": context.model,
            "model_provider": PROVIDER,
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "check_for_update_on_startup": False,
            "web_search": "disabled",  # drops the hosted web_search tool
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            # check_for_update_on_startup alone does not stop the github.com / chatgpt.com lookups; these do
            "features": {"plugins": False, "remote_plugin": False, "apps": False},
            "model_providers": {PROVIDER: {"name": PROVIDER, "base_url": f"{context.proxy_url.rstrip('/')}/v1",
                                           "env_key": KEY_VARIABLE, "wire_api": "responses"}},
        }
        return _merge(config, self.spec.settings.get("config") or {})

    def setup(self, runtime, context: HarnessContext) -> None:
        """``$CODEX_HOME/config.toml``; TOML does not expand variables, so the proxy URL is written in."""
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False, encoding="utf-8") as handle:
            handle.write(to_toml(self.config(context)))
        try:
            runtime.upload(Path(handle.name), f"{self.codex_home(context)}/config.toml")
        finally:
            Path(handle.name).unlink(missing_ok=True)

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {**provider_env(context), "CODEX_HOME": self.codex_home(context), KEY_VARIABLE: context.api_key,
                **self.spec.env}

    def command(self, instruction: str) -> str:
        """``codex exec`` with the JSONL event log on stdout; the instruction after ``--``."""
        return shlex.join([str(self.install()), "exec", "--skip-git-repo-check", "--json", "--color", "never",
                           "--", instruction])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {type(value).__name__} to TOML")


def to_toml(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """A TOML document: the table's plain values first, then each sub-table under its ``[dotted.header]``."""
    lines = [f"{_key(key)} = {_value(value)}" for key, value in table.items() if not isinstance(value, dict)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, value in table.items():
        if isinstance(value, dict):
            path = (*prefix, key)
            header = f"[{'.'.join(_key(part) for part in path)}]\n"
            body = to_toml(value, path)
            # a table holding only sub-tables needs no header of its own
            own = any(not isinstance(v, dict) for v in value.values()) or not value
            out += ("\n" + header if own else "") + body
    return out
