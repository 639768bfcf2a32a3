"""Which engine serves upstream, and how to get token ids out of it (pure, no engine imports).

Detected once per ``UpstreamClient`` from the server's own routes:

* SGLang (``GET /get_server_info``): request ``return_prompt_token_ids`` + ``return_meta_info``; the
  sampled ids come from ``meta_info.output_token_logprobs[i][1]``.
* vLLM >= 0.10.2 (``GET /version``): ``return_token_ids`` gives ``prompt_token_ids`` and ``token_ids``.
* older vLLM: ``return_tokens_as_token_ids`` (logprob tokens read ``token_id:N``) for the sampled ids,
  and the prompt ids from ``/tokenize`` of the same request.
* anything else (no ``/version``): treated as vLLM-compatible; a reply without ids is then refused by
  the proxy unless it runs with ``--allow-untokenized``.

``adapt_request`` / ``adapt_response`` rewrite the one chat request and its answer so that the rest of
the proxy always sees vLLM's current shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

VLLM = "vllm"
SGLANG = "sglang"
COMPATIBLE = "openai-compatible"

TOKEN_IDS = "return_token_ids"          # vLLM >= 0.10.2 (and the sim)
TOKENS_AS_IDS = "return_tokens_as_token_ids"  # older vLLM
SGLANG_META = "sglang_meta_info"

RETURN_TOKEN_IDS_SINCE = (0, 10, 2)
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


@dataclass(frozen=True)
class Engine:
    kind: str
    version: str | None
    capture: str

    def describe(self) -> str:
        return f"{self.kind} {self.version or '(version unknown)'} (token ids via {self.capture})"


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.10.1.dev3+cpu"`` → ``(0, 10, 1)``; unparsable parts stop the tuple."""
    parts = []
    for piece in re.split(r"[.+-]", version.lstrip("v")):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def detect_engine(get_json: Callable[[str], Any]) -> Engine:
    """Identify the engine; ``get_json(path)`` returns the parsed body of a 200 or None otherwise."""
    info = get_json("/get_server_info")
    if isinstance(info, dict) and ("version" in info or "server_args" in info or "model_path" in info):
        return Engine(SGLANG, str(info.get("version") or "") or None, SGLANG_META)
    version = get_json("/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        text = version["version"]
        parsed = version_tuple(text)
        capture = TOKEN_IDS if not parsed or parsed >= RETURN_TOKEN_IDS_SINCE else TOKENS_AS_IDS
        return Engine(VLLM, text, capture)
    return Engine(COMPATIBLE, None, TOKEN_IDS)


def adapt_request(engine: Engine, chat: dict[str, Any]) -> dict[str, Any]:
    """The chat request with this engine's capture fields."""
    if engine.capture == TOKEN_IDS:
        return chat
    chat = dict(chat)
    chat.pop("return_token_ids", None)
    if engine.capture == TOKENS_AS_IDS:
        chat["return_tokens_as_token_ids"] = True
        chat["logprobs"] = True
        chat.setdefault("top_logprobs", 0)
    elif engine.capture == SGLANG_META:
        chat["return_prompt_token_ids"] = True
        chat["return_meta_info"] = True
    return chat


def adapt_response(engine: Engine, response: Any, tokenize: Callable[[], list[int]] | None = None) -> Any:
    """The engine's answer in vLLM's shape: top-level ``prompt_token_ids``, ``choices[i].token_ids``."""
    if engine.capture == TOKEN_IDS or not isinstance(response, dict):
        return response
    choices = response.get("choices")
    if not isinstance(choices, list):
        return response
    if engine.capture == TOKENS_AS_IDS:
        for choice in choices:
            content = (choice.get("logprobs") or {}).get("content") or []
            ids = [_token_id(entry.get("token")) for entry in content]
            if content and all(i is not None for i in ids) and not choice.get("token_ids"):
                choice["token_ids"] = ids
        if not response.get("prompt_token_ids") and tokenize is not None and any(c.get("token_ids") for c in choices):
            response["prompt_token_ids"] = tokenize()
    elif engine.capture == SGLANG_META:
        for choice in choices:
            meta = choice.pop("meta_info", None) or response.get("meta_info") or {}
            if choice.get("prompt_token_ids") and not response.get("prompt_token_ids"):
                response["prompt_token_ids"] = choice["prompt_token_ids"]
            pairs = meta.get("output_token_logprobs") or []
            if pairs and not choice.get("token_ids"):
                choice["token_ids"] = [int(p[1]) for p in pairs]
                content = (choice.get("logprobs") or {}).get("content")
                if not content or len(content) != len(pairs):
                    choice["logprobs"] = {"content": [
                        {"token": p[2] if len(p) > 2 and p[2] is not None else "", "logprob": float(p[0]),
                         "bytes": None, "top_logprobs": []} for p in pairs]}
        response.pop("meta_info", None)
    return response


def _token_id(token: Any) -> int | None:
    match = _TOKEN_ID.match(token) if isinstance(token, str) else None
    return int(match.group(1)) if match else None
