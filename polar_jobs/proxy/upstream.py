"""The upstream engine client: one vLLM-style server spoken to over OpenAI Chat, never streaming.

Every failure becomes a ``ProxyError``: 4xx pass through with the engine's message, and 5xx,
refused connections and timeouts become the retryable overloaded error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import urllib3

from polar_jobs import jsonio
from polar_jobs.proxy import engines
from polar_jobs.proxy.errors import ProxyError, overloaded

_CONTEXT_MARKERS = ("maximum context length", "context length", "too long", "max_model_len")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    max_model_len: int | None


class UpstreamClient:
    """Thread-safe client with a pooled session; the model list is read once and cached."""

    def __init__(self, base_url: str, *, served_model: str | None = None, connect_timeout: float = 5.0,
                 read_timeout: float = 600.0, pool_size: int = 64):
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self._served_model = served_model
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        # urllib3 directly: requests' per-call machinery costs ~0.6 ms on the proxy's hot path
        self._http = urllib3.PoolManager(maxsize=pool_size, retries=False)
        self._info: ModelInfo | None = None
        self._engine: engines.Engine | None = None
        self._lock = threading.Lock()

    def model_info(self) -> ModelInfo:
        if self._info is None:
            with self._lock:
                if self._info is None:
                    self._info = self._fetch_model_info()
        return self._info

    def _fetch_model_info(self) -> ModelInfo:
        models = self._request("GET", "/v1/models").get("data") or []
        if self._served_model:
            entry = next((m for m in models if m.get("id") == self._served_model), {"id": self._served_model})
        elif models:
            entry = models[0]
        else:
            raise overloaded("the upstream serves no model yet")
        limit = entry.get("max_model_len")
        return ModelInfo(name=entry["id"], max_model_len=int(limit) if isinstance(limit, int) else None)

    def engine(self) -> engines.Engine:
        """The serving engine and how it returns token ids; detected once (``/get_server_info``, ``/version``)."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = engines.detect_engine(self._probe)
        return self._engine

    def chat(self, body: bytes) -> dict[str, Any]:
        """POST an already-serialized chat request; the parsed JSON response, in vLLM's token-id shape."""
        engine = self.engine()
        if engine.capture == engines.TOKEN_IDS:  # the hot path: the bytes go out unchanged
            return self._request("POST", "/v1/chat/completions", data=body)
        chat = jsonio.loads(body)
        response = self._request("POST", "/v1/chat/completions", data=jsonio.dumps(engines.adapt_request(engine, chat)))
        return engines.adapt_response(engine, response, tokenize=lambda: self.tokenize_chat(chat))

    def tokenize_chat(self, chat: dict[str, Any]) -> list[int]:
        """Prompt ids of a chat request by the engine's own ``/tokenize`` (chat form)."""
        return [int(i) for i in self._request("POST", "/tokenize", data=jsonio.dumps(_tokenize_body(chat)))["tokens"]]

    def count_prompt_tokens(self, chat: dict[str, Any]) -> int:
        """The exact prompt length, from the engine's own ``/tokenize`` (chat form)."""
        result = self._request("POST", "/tokenize", data=jsonio.dumps(_tokenize_body(chat)))
        return int(result["count"])

    def detokenize(self, ids: list[int]) -> str:
        """Text of token ids by the engine's own tokenizer (``/detokenize``)."""
        info = self.model_info()
        return str(self._request("POST", "/detokenize", data=jsonio.dumps({"model": info.name, "tokens": ids}))["prompt"])

    def _probe(self, path: str) -> Any:
        """The JSON body of ``GET path`` when it answers 200, else None (detection only; never raises)."""
        try:
            response = self._http.request("GET", self.base_url + path, timeout=self._timeout)
            return jsonio.loads(response.data) if response.status == 200 else None
        except (urllib3.exceptions.HTTPError, jsonio.JSONDecodeError, ValueError):
            return None

    def _request(self, method: str, path: str, data: bytes | None = None) -> dict[str, Any]:
        try:
            response = self._http.request(method, self.base_url + path, body=data, timeout=self._timeout,
                                          headers={"Content-Type": "application/json"} if data else None)
        except urllib3.exceptions.ReadTimeoutError:
            raise overloaded(f"the upstream did not answer {path} within {self._timeout.read_timeout:.0f} s") from None
        except urllib3.exceptions.HTTPError as exc:
            raise overloaded(f"the upstream at {self.base_url} is unreachable ({type(exc).__name__})") from None
        if response.status >= 500:
            raise overloaded(f"the upstream failed with HTTP {response.status}: {_message(response)}")
        if response.status >= 400:
            message = _message(response)
            code = "context_length_exceeded" if any(m in message.lower() for m in _CONTEXT_MARKERS) else None
            raise ProxyError(response.status, message, code=code)
        try:
            return jsonio.loads(response.data)
        except jsonio.JSONDecodeError:
            raise ProxyError(502, f"the upstream answered {path} with a body that is not JSON") from None

def _tokenize_body(chat: dict[str, Any]) -> dict[str, Any]:
    body = {"model": chat["model"], "messages": chat["messages"], "add_generation_prompt": True}
    for key in ("tools", "chat_template_kwargs"):
        if chat.get(key):
            body[key] = chat[key]
    return body


def _message(response: urllib3.BaseHTTPResponse) -> str:
    try:
        body = jsonio.loads(response.data)
    except jsonio.JSONDecodeError:
        return response.data[:500].decode("utf-8", "replace") or response.reason or ""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
