"""Reasoning round trips: signatures the proxy issues and can decode on the next request (pure).

Anthropic ``signature``, Gemini ``thoughtSignature`` and Responses ``encrypted_content`` all carry
standard base64 of a magic prefix + zlib(text): valid base64 (Gemini's SDK decodes it as bytes),
and an echoed signature alone restores the reasoning text.
"""

from __future__ import annotations

import base64
import binascii
import zlib

MAGIC = b"PJR1"


def encode(text: str) -> str:
    return base64.b64encode(MAGIC + zlib.compress(text.encode("utf-8"))).decode("ascii")


def decode(signature: object) -> str | None:
    """The reasoning text inside a signature this proxy issued; None for anything else."""
    if not isinstance(signature, str) or not signature:
        return None
    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
        if not raw.startswith(MAGIC):
            return None
        return zlib.decompress(raw[len(MAGIC):]).decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeError, ValueError):
        return None
