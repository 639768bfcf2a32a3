"""Server-sent event framing (pure)."""

from __future__ import annotations

from polar_jobs import jsonio
from typing import Any


def named_event(event: str, data: dict[str, Any]) -> bytes:
    """``event: <type>`` + ``data: <json>`` (Anthropic Messages, OpenAI Responses)."""
    return f"event: {event}\ndata: {_json(data)}\n\n".encode()


def data_event(data: dict[str, Any] | str) -> bytes:
    """``data: <json>`` only (OpenAI Chat, Gemini)."""
    payload = data if isinstance(data, str) else _json(data)
    return f"data: {payload}\n\n".encode()


def _json(data: dict[str, Any]) -> str:
    return jsonio.dumps(data).decode()
