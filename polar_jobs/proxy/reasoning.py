"""Reasoning round trips: signatures the proxy issues and can decode on the next request (pure).

Anthropic ``signature``, Gemini ``thoughtSignature`` and Responses ``encrypted_content`` all carry
``polar:`` + urlsafe-base64(zlib(text)), so an echoed signature alone restores the reasoning text.
"""

from __future__ import annotations

import base64
import binascii
import zlib

PREFIX = "polar:"


def encode(text: str) -> str:
    return PREFIX + base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def decode(signature: object) -> str | None:
    """The reasoning text inside a signature this proxy issued; None for anything else."""
    if not isinstance(signature, str) or not signature.startswith(PREFIX):
        return None
    try:
        return zlib.decompress(base64.urlsafe_b64decode(signature[len(PREFIX):].encode("ascii"))).decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        return None
