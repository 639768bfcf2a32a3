"""Which provider API a call speaks: path first, then headers, then body shape (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

ANTHROPIC = "anthropic"
OPENAI_CHAT = "openai_chat"
RESPONSES = "responses"
GEMINI = "gemini"

_GEMINI_PATH = re.compile(r"/models/(?P<model>[^/:]+):(?P<verb>[A-Za-z]+)$")
_GEMINI_VERBS = {"generatecontent": "generate", "streamgeneratecontent": "generate", "counttokens": "count_tokens"}
_OTHER_OPENAI = re.compile(r"/(embeddings|completions|moderations|images/\w+|audio/\w+|files|batches)$")

GENERATE = "generate"
COUNT_TOKENS = "count_tokens"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Detected:
    provider: str
    path_model: str | None = None
    path_stream: bool = False
    operation: str = GENERATE  # generate | count_tokens | unsupported (an endpoint the proxy does not serve)


def detect(path: str, headers: Mapping[str, str], body: Any = None) -> Detected:
    """The provider of a call; ``path`` may carry a query string, which is ignored."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/messages/count_tokens"):
        return Detected(ANTHROPIC, operation=COUNT_TOKENS)
    if path.endswith("/v1/messages") or path == "/messages":
        return Detected(ANTHROPIC)
    if path.endswith("/chat/completions"):
        return Detected(OPENAI_CHAT)
    if path.endswith("/responses"):
        return Detected(RESPONSES)
    match = _GEMINI_PATH.search(path)
    if match:
        verb = match.group("verb").lower()
        return Detected(GEMINI, match.group("model"), verb == "streamgeneratecontent",
                        _GEMINI_VERBS.get(verb, UNSUPPORTED))
    if _OTHER_OPENAI.search(path):
        return Detected(OPENAI_CHAT, operation=UNSUPPORTED)
    if any(key.lower() == "anthropic-version" for key in headers.keys()):  # werkzeug Headers iterate as pairs
        return Detected(ANTHROPIC)
    if isinstance(body, dict):
        if "contents" in body:
            return Detected(GEMINI)
        if "input" in body and "instructions" in body:
            return Detected(RESPONSES)
    return Detected(OPENAI_CHAT)


def provider_hint(path: str, headers: Mapping[str, str]) -> str:
    """The provider whose error format to use before the body is known (malformed JSON, auth)."""
    return detect(path, headers).provider
