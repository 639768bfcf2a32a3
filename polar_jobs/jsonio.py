"""JSON on the hot path (orjson: strict RFC 8259 parsing, compact UTF-8 output, several times faster).

Use it for transport and storage. Text that a model sees (tool arguments, tool results) keeps the
standard library's formatting, since its exact spelling changes the tokens.
"""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError  # a ValueError
JSONEncodeError = orjson.JSONEncodeError  # a TypeError


def loads(data: bytes | str) -> Any:
    """Parse strict JSON: NaN/Infinity, invalid UTF-8, lone surrogates and >1024 levels are errors."""
    return orjson.loads(data)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON bytes."""
    return orjson.dumps(value)
