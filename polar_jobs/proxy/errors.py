"""Proxy errors and their shape in each provider's own error format (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ProxyError(Exception):
    """An error answered to the harness: HTTP status, message, and optional OpenAI-style param/code."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    retryable: bool = False

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ProxyError:
    return ProxyError(400, message, param=param, code=code)


def overloaded(message: str) -> ProxyError:
    """Upstream down, refused or timed out: every provider's retryable 'try again' answer."""
    return ProxyError(503, message, code="overloaded", retryable=True)


_ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
    415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
    500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "api_error", 529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    405: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}


def anthropic_error(error: ProxyError) -> tuple[int, dict[str, Any]]:
    status = 529 if error.retryable else error.status
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = error.message
    if error.code == "context_length_exceeded" and not message.startswith("prompt is too long"):
        message = f"prompt is too long: {message}"  # the phrase Claude Code reacts to by compacting
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def openai_error(error: ProxyError) -> tuple[int, dict[str, Any]]:
    status = 503 if error.retryable else error.status
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": error.message, "type": kind, "param": error.param, "code": error.code}}


def google_error(error: ProxyError) -> tuple[int, dict[str, Any]]:
    status = 503 if error.retryable else error.status
    code = _GOOGLE_STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return status, {"error": {"code": status, "message": error.message, "status": code}}
