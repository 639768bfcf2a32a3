"""The ``opencode`` harness: ``opencode run`` (npm ``opencode-ai``) on an OpenAI-Chat provider at the proxy.

Setup writes ``~/.config/opencode/opencode.json`` into the session HOME: one provider ``local``
(``@ai-sdk/openai-compatible``, bundled in the binary) at ``<proxy>/v1`` whose key is read from
``LOCAL_API_KEY``, the agent's model as both ``model`` and ``small_model`` (the title side call goes
to the proxy too), context/output limits, every permission ``"allow"`` (``run`` is non-interactive:
an ``"ask"`` would block), autoupdate and sharing off.

Observed with 1.18.33 (loopback only, fresh HOME): 10 tools (bash, edit, glob, grep, read, skill,
task, todowrite, webfetch, write; ``bash`` takes ``{"command", "timeout"?, "workdir"?,
"description"?}``), a title call with no tools at the start of every new session, and one attempt to
reach ``registry.npmjs.org`` (the config-dir dependency check: ``@opencode-ai/plugin``,
``@opentui/core``) that no setting turns off; it is not fatal and the registry is reachable in CI.

Quoting: ``opencode run`` joins its message words with spaces and wraps any word that contains a
space in double quotes, so the instruction is passed as its space-separated pieces (none of which
holds a space) after ``--``; opencode joins them back into exactly the instruction text.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from polar_jobs.harnesses.base import NpmHarness, HarnessContext, provider_env

PACKAGE = "opencode-ai"
BINARY = "opencode"
DEFAULT_VERSION = "1.18.33"
PROVIDER = "local"
KEY_ENV = "LOCAL_API_KEY"
DEFAULT_CONTEXT = 32768
DEFAULT_OUTPUT = 8192
# the permission keys opencode 1.18 knows (its built-in config docs); all allowed
PERMISSIONS = ("read", "edit", "glob", "grep", "list", "bash", "task", "external_directory", "todowrite",
               "question", "webfetch", "websearch", "lsp", "doom_loop", "skill")
SWITCHES = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # no models.dev catalogue download
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",  # no language-server downloads from GitHub
}


class OpenCode(NpmHarness):
    name = "opencode"
    package, binary, default_version = PACKAGE, BINARY, DEFAULT_VERSION


    def config(self, context: HarnessContext) -> dict[str, Any]:
        """The content of ``opencode.json``."""
        settings = self.spec.settings
        model = context.model
        limit = {"context": int(settings.get("context_window", DEFAULT_CONTEXT)),
                 "output": int(settings.get("max_tokens", DEFAULT_OUTPUT))}
        return {
            "autoupdate": False,
            "share": "disabled",
            "model": f"{PROVIDER}/{model}",
            "small_model": f"{PROVIDER}/{model}",
            "permission": {key: "allow" for key in PERMISSIONS},
            "provider": {PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Local",
                "options": {"baseURL": f"{context.proxy_url.rstrip('/')}/v1", "apiKey": f"{{env:{KEY_ENV}}}"},
                "models": {model: {"name": model, "limit": limit}},
            }},
        }

    def setup(self, runtime, context: HarnessContext) -> None:
        target = PurePosixPath(context.home) / ".config" / "opencode" / "opencode.json"
        _upload_text(runtime, json.dumps(self.config(context), indent=2) + "\n", str(target))

    def env(self, context: HarnessContext) -> dict[str, str]:
        return {**provider_env(context), **SWITCHES, KEY_ENV: context.api_key, **self.spec.env}

    def command(self, instruction: str) -> str:
        """``opencode run -- <words>``: the words re-join (with single spaces) into exactly the instruction."""
        words = " ".join(shlex.quote(word) for word in instruction.split(" "))
        return f"{shlex.quote(str(self.install()))} run -- {words} < /dev/null"


def _upload_text(runtime, text: str, remote: str) -> None:
    """A text file into the runtime at an absolute path (through ``upload``, so containers work too)."""
    with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8", suffix=".json") as handle:
        handle.write(text)
    try:
        runtime.upload(Path(handle.name), remote)
    finally:
        Path(handle.name).unlink(missing_ok=True)
